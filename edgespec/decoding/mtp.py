"""The target's own multi-token-prediction (MTP, "nextn") head as a drafter: ``--draft mtp``.

A model with nextn layers (Qwen3.5/3.6, GLM, DeepSeek, ...) drafts for itself: at position
p its head reads the token x_p and the target's hidden row h_(p-1) and predicts x_(p+1)
(``llama.MtpContext``). Its KV cache must hold, at every position p it keeps, the pair
(x_p, h_(p-1)) with the TARGET's row (the first position pairs with zeros).

The rows come through the protocol's one door (``decoding.drafters``): after each target
decode the loop hands ``observe_verify(tokens, rows)``, the target's rows of the positions
its cache kept (the prompt's prefill; x_last and the accepted drafts after a verify).
``HiddenStore`` keeps them by position, valid as long as the tokens up to that position
are unchanged, and drops those the head has consumed (but a window behind, for the next
prompt's rollback).

A round (``propose``, with committed tokens x_0..x_(L-1), x_(L-1) not yet decoded by the
target): the head's cache is cut to what it shares with them (at most L-1 positions), the
rest is decoded in one batch, (x_j, h_(j-1)) for j up to L-1, whose last row is the first
draft's distribution; then each draft d_i is decoded with the head's OWN hidden row of the
position before (its output for d_(i-1)), the next draft's distribution. Afterwards the
head's cache is cut back to L positions: the drafts' entries paired with its own rows are
not what a verified token pairs with, x_(L-1)'s (with the target's h_(L-2)) is. The next
round decodes the accepted drafts and the bonus token with the target's rows of this
round's verify, so the head catches up and drafts in one decode, as llama.cpp's
``common_speculative_impl_draft_mtp`` (common/speculative.cpp) does in two.

Greedy at temperature 0; above it the drafts are sampled from the head's probabilities q,
handed back for the rejection test (``decoding.verify.accept``): lossless, as a draft
model. A row the store lacks (a prompt edited far behind what it keeps, shifted KV
reuse) is zeros: the drafts get worse, the output never changes.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..llama import MtpContext, common_prefix_len
from .drafters import BaseDrafter, KeepDrafting, Pick, Proposal
from .model_drafter import draft_tokens
from .params import SamplingParams

# rows kept behind the head's last position, for a next prompt that rolls back into them
KEEP_BEHIND = 256


class HiddenStore:
    """The target's hidden rows by position, valid for the tokens they were computed on."""

    def __init__(self, n_embd: int) -> None:
        self.n_embd = n_embd
        self._tokens: list[int] = []  # the target's tokens when the last rows came
        self._rows: dict[int, np.ndarray] = {}

    def add(self, tokens: Sequence[int], rows: np.ndarray) -> None:
        """The rows of the last ``len(rows)`` of ``tokens``; rows of positions whose
        tokens (or earlier ones) changed since are dropped."""
        valid = common_prefix_len(self._tokens, tokens)
        start = len(tokens) - len(rows)
        cut = min(valid, start)
        for p in [p for p in self._rows if p >= cut]:
            del self._rows[p]
        for i, row in enumerate(rows):
            self._rows[start + i] = row
        self._tokens = list(tokens)

    def rows(self, tokens: Sequence[int], first: int, last: int) -> np.ndarray:
        """The rows of positions ``first..last-1`` for ``tokens`` (zeros where none is
        kept, or the position is -1: the first token pairs with nothing)."""
        valid = common_prefix_len(self._tokens, tokens)
        out = np.zeros((max(0, last - first), self.n_embd), dtype=np.float32)
        for i, p in enumerate(range(first, last)):
            row = self._rows.get(p) if 0 <= p < valid else None
            if row is not None:
                out[i] = row
        return out

    def forget_before(self, pos: int) -> None:
        for p in [p for p in self._rows if p < pos]:
            del self._rows[p]


class HiddenReader(BaseDrafter):
    """A drafter that reads the target's hidden rows (the protocol's one door,
    ``observe_verify``) into a ``HiddenStore``, on a context of its own ``ctx`` (an
    ``MtpContext`` or an ``AssistantContext``): what the MTP head and a Gemma 4 assistant
    share."""

    reads_hidden = True

    def __init__(self, ctx, *, p_min: float = 0.0) -> None:
        self.ctx = ctx
        self.p_min = p_min
        self.store = HiddenStore(ctx.n_embd)
        self._params = SamplingParams()
        self._rng = np.random.default_rng(0)

    @property
    def t_decode(self) -> float:
        return self.ctx.t_decode

    def begin(self, tokens: Sequence[int], params: SamplingParams, rng: np.random.Generator) -> None:
        self._params, self._rng = params, rng

    def observe_verify(self, tokens: Sequence[int], rows: np.ndarray) -> None:
        if len(rows):
            self.store.add(tokens, rows)

    def close(self) -> None:
        self.ctx.close()


class MtpDrafter(HiddenReader):
    """Drafts with the MTP head of the target's model (its own ``MtpContext``)."""

    name = "mtp"
    ctx: MtpContext

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        keep_drafting: KeepDrafting | None = None,
        guide=None,
        pick: Pick | None = None,
    ) -> Proposal:
        ctx, L = self.ctx, len(tokens)
        k = min(k, ctx.n_ctx - L)
        if k <= 0 or L == 0:
            return Proposal([])
        keep = min(common_prefix_len(ctx.tokens, tokens), L - 1)
        ctx.rollback(keep)
        logits, h = ctx.decode(tokens[keep:], self.store.rows(tokens, keep - 1, L - 1))
        self.store.forget_before(L - 1 - KEEP_BEHIND)
        own = [h]

        def step(tok: int) -> np.ndarray:
            row, own[0] = ctx.decode([tok], own[0][None, :])
            return row

        try:
            return draft_tokens(
                logits,
                step,
                k,
                self._params,
                self._rng,
                guide=guide,
                keep_drafting=keep_drafting,
                is_eog=ctx.model.is_eog,
                p_min=self.p_min,
                source="mtp",
            )
        finally:
            ctx.rollback(L)  # the drafts paired with the head's own rows go; x_(L-1)'s stays
