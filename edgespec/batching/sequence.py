"""One sequence of a batch (``batching.runner.BatchRunner``): its slot, its round machinery, its
reply, its grammar matcher, and how it ends.

A sequence runs the same round as a single generation (``SpeculativeLoop``'s
``propose`` / ``drafts`` / ``settle``) on its own view of the batch's KV pool, with its
own prompt-lookup drafter, drafting policy and ``Reply``. Under a constraint
(``response_format``) it has its own ``Matcher``, which moves with ITS cache: after
every step the matcher has consumed exactly the tokens committed after its prompt
(``SpeculativeLoop.settle`` asserts it), whoever else shared the decode. The masks of a
step's rows are computed for all the batch's sequences together
(``step_masks``: ``constraints.batch_masks``, llguidance's parallel fill); a matcher
that enters its error state ends its own sequence with ``ConstraintStateError`` (an
error outcome), never the batch and never going on unconstrained.

At the end it reports as a single generation does: ``Done`` / ``Result`` with
``structured_complete`` and the parsed JSON under a constraint.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

from ..decoding import sampling
from ..constraints import Constraint, batch_masks
from ..decoding.drafters import NgramDrafter, NoDrafter, Proposal
from ..errors import ConstraintStateError
from ..events import Done, Result, Stats
from ..decoding.reply import Reply
from ..decoding.speculative import Drafts, SpeculativeLoop


class BatchSeq:
    """One running sequence: its slot, its round machinery, its reply and its matcher."""

    def __init__(self, req: Any, slot: int, ids: list[int], params, max_tokens: int,
                 stops: list[str], reserve: int, runner: Any, constraint: Constraint | None = None,
                 logprobs: int | None = None) -> None:
        self.req, self.slot, self.ids, self.reserve = req, slot, ids, reserve
        self.t_start = time.perf_counter()
        self.t_gen: float | None = None  # when its first verify step began
        self.prefilled = 0  # prompt tokens (all but the last) in the KV so far
        # times are its share of each step it had rows in (see BatchRunner._attribute)
        self.stats = Stats(drafter=runner.drafter_name, prompt_tokens=len(ids),
                           prompt_tokens_processed=len(ids))
        rng = sampling.make_rng(params.seed)
        model = runner.engine.target_model
        drafter = NgramDrafter(min_match=runner.engine.ngram_min_match, is_break=runner.engine.is_break) \
            if runner.drafter_name == "ngram" else NoDrafter()
        drafter.begin(ids, params, rng)
        self.loop = SpeculativeLoop(
            target=runner.ctx.view(slot, reserve), drafter=drafter, committed=list(ids),
            params=params, rng=rng, policy=runner.new_policy(params.seed), stats=self.stats,
            n_vocab=model.n_vocab, is_eog=model.is_eog, eog_ids=model.eog_ids if params.bans_eog else (),
            matcher=constraint.matcher() if constraint is not None else None, logprobs=logprobs)
        self.budget = min(max_tokens, reserve - len(ids))
        self.produced = 0
        self.reply = Reply(model, stops, max_tokens, params.min_tokens, logprobs=logprobs is not None)
        self.proposal: Proposal | None = None  # this step's, and the seconds drafting it took
        self.t_draft = 0.0
        self.drafts: Drafts | None = None  # what this step verifies of it
        self.masks: list | None = None  # this step's verify-row masks (under a constraint)
        self.error: ConstraintStateError | None = None

    @property
    def prefilling(self) -> bool:
        return self.prefilled < len(self.ids) - 1

    @property
    def matcher(self):
        return self.loop.matcher

    def result(self) -> Result:
        """The finished sequence as a ``Result`` (and its ``Done`` to a streaming caller):
        wall times as the request saw them; under a constraint, whether the structure is
        complete and its parsed value, judged on the reply as it ended."""
        st = self.stats
        st.generated_tokens = len(self.reply.ids)
        now = time.perf_counter()
        st.t_total, st.t_generate = now - self.t_start, now - (self.t_gen or now)
        st.k_final = self.loop.last_k
        m = self.matcher
        done = Done(finish_reason=self.reply.finish_reason, stats=st, text=self.reply.text,
                    token_ids=tuple(self.reply.ids), logprobs=self.reply.logprobs_out(),
                    **(m.outcome(self.reply) if m is not None else {}))
        if self.req.on_event is not None:
            self.req.on_event(done)
        return Result.from_done(done)


def step_masks(gen: Sequence[BatchSeq], is_eog) -> None:
    """Every constrained sequence's verify-row masks for this step (``seq.masks``), all
    computed in one batched call. A sequence whose matcher fails gets ``seq.error``."""
    todo = [s for s in gen if s.matcher is not None and s.error is None]
    for s in gen:
        s.masks = None
    if not todo:
        return
    try:
        for s, masks in zip(todo, batch_masks([(s.matcher, s.drafts.ids) for s in todo], is_eog)):
            s.masks = masks
    except ConstraintStateError:
        for s in todo:  # find which one failed: the others still get their masks
            try:
                s.masks = s.matcher.masks(s.drafts.ids, is_eog)
            except ConstraintStateError as e:
                s.error = e
