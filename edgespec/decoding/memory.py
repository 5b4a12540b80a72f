"""The memory drafter: prompt lookup, plus everything already written in earlier requests.

``MemoryDrafter`` holds two indexes. The request's own is prompt lookup
(``drafters.NgramDrafter``: the prompt and the answer so far, synced to exactly the
committed text at every ``begin``, so nothing of a finished request's context stays in
it). The global one is a ``suffix.SuffixIndex`` the engine holds across ``generate``
calls, chat turns, server requests and the lines of a batch (``Engine.memory``; one per
API key in ``serve``): every answer is written into it, as its tokens are committed,
into a document of its own, seeded with the prompt's last ``seed_len`` tokens (the chat
template's assistant header) so that an answer's first ids can be drafted from earlier
answers. Sequences of one batch write into the one index at once, so they draft from
each other.

Each round it has both indexes' proposals (``candidates``, each with its ``source``:
"prompt" or "memory"), and ``propose`` hands them to the loop's ``pick``: the drafting
policy keeps the one with the most expected tokens per unit of cost (``DraftPolicy.rank``),
from what it has learned of each source. Ids
are fixed proposals (``q is None``), verified by match: exact at any temperature, and
under a grammar the loop keeps each candidate's valid prefix before ranking.

Writing: ``propose`` writes what is new in the text it is handed; under a grammar that
text ends with the round's forced and likely tokens, so those the target did not keep
are taken back (``SuffixIndex.pop``) when the text next differs within the last
``TAKE_BACK`` tokens. If another sequence wrote after them (a batch), the answer goes on
in a new document. ``end`` writes the answer's last tokens and closes its document.
"""

from __future__ import annotations

from typing import Sequence

from .drafters import BaseDrafter, KeepDrafting, NgramDrafter, Pick, Proposal
from .suffix import SuffixIndex

TAKE_BACK = 32  # the most uncommitted tokens (grammar drafts) the drafter takes back


class MemoryDrafter(BaseDrafter):
    """Prompt lookup (``lookup``) and the global ``memory`` (None: prompt lookup alone),
    built for one request (``decoding.drafting.Drafting.for_request``): the memory is the
    request's (the engine's, one API key's in ``serve``, or none)."""

    name = "ngram"  # the planner's kind: drafting without a model

    def __init__(self, lookup: NgramDrafter, memory: SuffixIndex | None = None, *, seed_len: int = 6) -> None:
        self.lookup = lookup
        self.memory = memory
        self.seed_len = seed_len
        self._doc: int | None = None  # this answer's document in ``memory``
        self._seen: list[int] = []  # the text written so far (prompt + answer)
        self._n_prompt = 0

    # -- the drafter protocol -----------------------------------------------------------
    def begin(self, tokens: Sequence[int], params=None, rng=None) -> None:
        self._close_doc()
        self.lookup.begin(tokens, params, rng)
        self._seen = list(tokens)
        self._n_prompt = len(tokens)

    def candidates(
        self, tokens: Sequence[int], k: int, keep_drafting: KeepDrafting | None = None, guide=None
    ) -> list[Proposal]:
        """Every index's proposal for continuing ``tokens`` (the empty ones left out),
        prompt lookup's first. (Fixed proposals: the loop keeps each one's valid prefix.)"""
        self._write(tokens)
        out = [self.lookup.propose(tokens, k)]
        if self.memory is not None:
            out.append(self.memory.propose(tokens, k))
        return [p for p in out if p.ids]

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        keep_drafting: KeepDrafting | None = None,
        guide=None,
        pick: Pick | None = None,
    ) -> Proposal:
        """The proposal the loop's ``pick`` keeps among ``candidates``; without one (a
        caller that does not rank), the one whose match reaches furthest back (prompt
        lookup's on a tie)."""
        cands = self.candidates(tokens, k)
        if pick is not None:
            return pick(cands)
        return max(cands, key=lambda p: p.match_len, default=Proposal([], source="prompt"))

    def accepted(self, proposal: Proposal, n: int) -> None:
        """The target kept ``n`` of the verified ``proposal``'s ids, the grammar's forced
        ones first: the memory counts the ids it drafted and those kept."""
        if proposal.source == "memory" and self.memory is not None:
            self.memory.proposed += max(0, len(proposal.ids) - proposal.forced)
            self.memory.accepted_ids += max(0, n - proposal.forced)

    def end(self, tokens: Sequence[int]) -> None:
        """The answer ended with ``tokens`` committed: write its last ones, close it."""
        if self.memory is not None:
            self._write(tokens)
        self._close_doc()

    def close(self) -> None:
        self._close_doc()
        self.lookup.close()

    # -- writing the answer into the memory ----------------------------------------------
    def _close_doc(self) -> None:
        if self._doc is not None and self.memory is not None:
            self.memory.close(self._doc)
        self._doc = None

    def _write(self, tokens: Sequence[int]) -> None:
        """Write what is new in ``tokens`` (the committed text, perhaps followed by the
        round's grammar drafts) into this answer's document; take back what the target
        did not keep, within the last ``TAKE_BACK`` tokens written. A text that differs
        further back (or in the prompt) is not this answer's: nothing more is written."""
        memory = self.memory
        if memory is None:
            return
        seen = self._seen
        have = len(seen)
        if have and (len(tokens) < have or tokens[have - 1] != seen[-1]):
            lo = max(self._n_prompt, have - TAKE_BACK)
            keep = lo
            while keep < min(have, len(tokens)) and tokens[keep] == seen[keep]:
                keep += 1
            if len(tokens) < lo or (keep == lo and lo and tokens[lo - 1] != seen[lo - 1]):
                self._close_doc()  # the text changed under us (a new prompt without begin)
                self._seen, self._n_prompt = list(tokens), len(tokens)
                return
            if self._doc is not None:
                try:
                    memory.pop(self._doc, have - keep)
                except ValueError:  # another sequence wrote after it: go on in a new document
                    self._close_doc()
            del seen[keep:]
            have = keep
        if self._doc is None:
            self._doc = memory.open()
            memory.extend(self._doc, tokens[max(0, have - self.seed_len) : have])
        memory.extend(self._doc, tokens[have:])
        seen.extend(tokens[have:])
