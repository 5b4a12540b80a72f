"""One sequence of a batch (``batching.runner.BatchRunner``): what only a batch sequence
has, around the decoding sequence that a single generation runs too.

The decoding side (drafter, policy, ``SpeculativeLoop``, ``Reply``, the budget, the
stats, ``Done`` and the structure's outcome) is ``decoding.sequence.DecodeSequence``'s,
on this sequence's own view of the batch's KV pool, so a sequence ends for the same
reasons at the same token as a single generation. What is the batch's: its KV sequence
id (``slot``), how much of its prompt is prefilled, the step's proposal, drafts and
verify-row masks, a matcher error that ends it, and the request's callback.

Under a constraint (``response_format``) it has its own ``Matcher``, which moves with ITS
cache: after every step the matcher has consumed exactly the tokens committed after its
prompt (``SpeculativeLoop.settle`` asserts it), whoever else shared the decode. The masks
of a step's rows are computed for all the batch's sequences together (``step_masks``:
``constraints.batch_masks``, llguidance's parallel fill); a matcher that enters its error
state ends its own sequence with ``ConstraintStateError`` (an error outcome), never the
batch and never going on unconstrained.
"""

from __future__ import annotations

from typing import Any, Sequence

from ..constraints import batch_masks
from ..decoding.drafters import Proposal
from ..decoding.sequence import DecodeSequence
from ..decoding.verify import Drafts
from ..errors import ConstraintStateError
from ..events import Result


class BatchSeq:
    """One running sequence of a batch: its slot, its prefill progress, this step's
    drafts and masks, and its decoding sequence (``seq``)."""

    def __init__(self, req: Any, slot: int, seq: DecodeSequence) -> None:
        self.req, self.slot, self.seq = req, slot, seq  # req: a batching.runner.Request
        self.ids = req.prepared.ids
        self.prefilled = 0  # prompt tokens (all but the last) in the KV so far
        self.proposal: Proposal | None = None  # this step's, and the seconds drafting it took
        self.t_draft = 0.0
        self.drafts: Drafts | None = None  # what this step verifies of it
        self.masks: list | None = None  # this step's verify-row masks (under a constraint)
        self.error: ConstraintStateError | None = None

    @property
    def prefilling(self) -> bool:
        return self.prefilled < len(self.ids) - 1

    @property
    def loop(self):
        return self.seq.loop

    @property
    def matcher(self):
        return self.seq.matcher

    def result(self) -> Result:
        """The finished sequence as a ``Result`` (and its ``Done`` to a streaming caller),
        wall times as the request saw them."""
        self.seq.finish_stats()
        done = self.seq.done()
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
