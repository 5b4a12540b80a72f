"""A Gemma 4 assistant as a drafter: a draft model whose context reads the target's KV cache.

The assistant (``llama.AssistantContext``) keeps no cache of its own: at the target's next
position p it reads the token x_p, the target's hidden row h_(p-1) and, through its
attention, everything the target's cache holds. A round (``propose``, with committed tokens
x_0..x_(L-1), the target's cache holding x_0..x_(L-2)): one step on (x_(L-1), h_(L-2))
gives the first draft's distribution; each further draft d_i is one step on (d_(i-1), the
assistant's own row of the step before), at the same position (llama.cpp's shared-memory
mode of ``common_speculative_impl_draft_mtp``: the drafts never enter any cache). Under a
grammar the tokens it forced ahead of the drafts (``committed + forced``) are fed the same
way before drafting. Nothing to catch up on and nothing to roll back: the target's
rollback after the verify is all there is.

The one thing it needs of the target besides its cache is h_(p-1), and that comes through
the protocol's one door (``decoding.drafters``): ``reads_hidden`` is True, so after each
target decode the loop hands ``observe_verify(tokens, rows)``, the rows of the positions
the target's cache kept (``decoding.mtp.HiddenStore`` keeps them by position, valid while
the tokens before are unchanged). A row it lacks (a prompt whose cache was reused whole
from a request further back than the store keeps) is zeros: the drafts get worse, the
output never changes.

Greedy at temperature 0; above it the drafts are sampled from the assistant's
probabilities q, handed back for the rejection test (``decoding.verify.accept``):
lossless, as any draft model (``decoding.model_drafter.draft_tokens``, the step they share).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..llama import AssistantContext
from .drafters import KeepDrafting, Pick, Proposal
from .model_drafter import draft_tokens
from .mtp import KEEP_BEHIND, HiddenReader


class AssistantDrafter(HiddenReader):
    """Drafts with a Gemma 4 assistant (its ``AssistantContext`` on the target's context)."""

    name = "assistant"
    ctx: AssistantContext

    def __init__(self, ctx: AssistantContext, *, p_min: float = 0.0) -> None:
        super().__init__(ctx, p_min=p_min)
        self.model = ctx.model

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        keep_drafting: KeepDrafting | None = None,
        guide=None,
        pick: Pick | None = None,
    ) -> Proposal:
        ctx = self.ctx
        p = ctx.n_past  # where the target's cache ends: x_p = tokens[p] is the last one it lacks
        if k <= 0 or not 0 < p < len(tokens):
            return Proposal([])
        self.store.forget_before(p - 1 - KEEP_BEHIND)
        logits, own = ctx.step(tokens[p], self.store.rows(tokens, p - 1, p)[0])
        for tok in tokens[p + 1 :]:  # the grammar's forced tokens, ahead of the drafts
            logits, own = ctx.step(tok, own)
        last = [own]

        def step(tok: int) -> np.ndarray:
            row, last[0] = ctx.step(tok, last[0])
            return row

        return draft_tokens(
            logits,
            step,
            k,
            self._params,
            self._rng,
            guide=guide,
            keep_drafting=keep_drafting,
            is_eog=self.model.is_eog,
            p_min=self.p_min,
            source="assistant",
        )
