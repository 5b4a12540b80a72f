"""Drafters: cheap proposers of the next few tokens. A drafter proposes, the loop decides.

The protocol is what the loop needs, four calls (the idea of transformers'
CandidateGenerator, without its config copying): ``begin(tokens, params, rng)`` once per
generation, then per round ``propose(tokens, k, keep_drafting, guide, pick) ->
Proposal(ids, q, ...)`` where ``tokens`` is everything committed so far (prompt +
generated), ``k`` the most ids wanted, ``keep_drafting`` the drafting policy's say, token
by token, for drafters that pay per token, and ``pick`` the loop's choice among several
proposals, for a drafter that has more than one (the memory drafter: prompt lookup's and
the memory's, ``decoding.memory``); then ``accepted(proposal, n)`` with the proposal as
verified and how many of its ids the target kept; ``end(tokens)`` when the generation
ends, with everything it committed (the memory drafter writes the answer's last tokens
then). How many
of the proposed ids are verified is the policy's choice (``edgespec.decoding.policy``), from the
proposal's ``match_len`` or ``confidence``. ``q`` holds the draft's probability rows for the proposed ids when the
drafter sampled them from a distribution; ``q is None`` means a fixed proposal that the
loop verifies by matching against the target's own choice, which is exact at every
temperature.

Under a constraint ``propose`` also gets a ``guide`` (an ``edgespec.constraints.Matcher``
already advanced over the committed tokens): a drafter that samples (the model drafter)
masks its distribution with ``guide.allowed()`` before each draft and advances the
guide with ``guide.consume([id])``, so its q is the masked q'; the loop rolls the guide
back afterwards. Prompt lookup ignores it (the loop keeps its valid prefix).

Drafters know nothing about the target, the KV of the target, or acceptance rules, with
one explicit exception, a door of the protocol: a drafter whose ``reads_hidden`` is True
(the model's own multi-token-prediction head, ``decoding.mtp``; a Gemma 4 assistant,
``decoding.assistant``) is handed the target's hidden rows after every target decode of
the loop, ``observe_verify(tokens, rows)``: the rows of the last ``len(rows)`` of
``tokens``, what the target's cache holds after the round's rollback (the prompt's
prefill, x_last and the accepted drafts). The loop asks the target for those rows only
when such a drafter runs (``decoding.speculative``); for every other drafter the door
stays shut. (A Gemma 4 assistant also attends to the target's KV cache, but that is
llama.cpp's binding of its context to the target's, made when the engine opens it:
``llama.AssistantContext``; the drafter itself is handed nothing else.)

This module: the protocol, ``BaseDrafter`` (its defaults), ``NoDrafter`` and prompt lookup
(``NgramDrafter``); a draft model's drafter is ``decoding.model_drafter``'s, the MTP head's
``decoding.mtp``'s, a Gemma 4 assistant's ``decoding.assistant``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from ..llama import Model, common_prefix_len
from .params import SamplingParams


@dataclass(frozen=True)
class Proposal:
    ids: list[int]
    q: np.ndarray | None = None  # (len(ids), n_vocab_draft) draft probabilities, or None
    # what the drafting policy judges a proposal by (see edgespec.decoding.policy):
    match_len: int = 0  # prompt lookup: length of the context match the ids continue
    confidence: tuple[float, ...] = ()  # model drafter: its top probability at each id
    # prompt lookup: whether the token before each id ends a sentence or a line (for the
    # first id, the last committed token): where a copied span is likely to end
    after_break: tuple[bool, ...] = ()
    forced: int = 0  # leading ids the grammar forced (set by the loop, never by a drafter)
    # where the non-forced ids come from: "prompt" (prompt lookup), "memory" (earlier
    # answers, decoding.memory), "model" (a draft model), "mtp" (the target's MTP head),
    # "assistant" (a Gemma 4 assistant); the readout counts accepted drafts by it
    source: str = ""
    probs: tuple[float, ...] = ()  # memory: each id's path probability (decoding.suffix)


# Called by a drafter that drafts token by token, after draft j (1-based) with the
# drafter's confidence in it: True to draft another (DraftPolicy.keep_drafting).
KeepDrafting = Callable[[int, float], bool]


# The loop's choice among a drafter's several proposals, best guess first: each cut to
# what fits, the one the drafting policy rates highest (DraftPolicy.rank); empty: none fits.
Pick = Callable[[list[Proposal]], Proposal]


class Drafter(Protocol):
    name: str
    reads_hidden: bool  # handed the target's hidden rows (observe_verify): the MTP head, an assistant

    def begin(self, tokens: Sequence[int], params: SamplingParams, rng: np.random.Generator) -> None: ...

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        keep_drafting: KeepDrafting | None = None,
        guide=None,
        pick: Pick | None = None,
    ) -> Proposal: ...

    def accepted(self, proposal: Proposal, n: int) -> None: ...

    def end(self, tokens: Sequence[int]) -> None: ...

    def observe_verify(self, tokens: Sequence[int], rows: np.ndarray) -> None: ...


class BaseDrafter:
    """The protocol's defaults, for a drafter with one proposal a round and nothing to
    remember: ``accepted``, ``end`` and ``close`` (its owner's, not the loop's) do nothing."""

    name = "none"
    reads_hidden = False

    def begin(self, tokens: Sequence[int], params: SamplingParams | None = None, rng=None) -> None:
        pass

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        keep_drafting: KeepDrafting | None = None,
        guide=None,
        pick: Pick | None = None,
    ) -> Proposal:
        return Proposal([])

    def accepted(self, proposal: Proposal, n: int) -> None:
        """The target kept ``n`` of ``proposal``'s ids (it holds the ids verified, the
        grammar's forced ones first)."""

    def end(self, tokens: Sequence[int]) -> None:
        pass

    def observe_verify(self, tokens: Sequence[int], rows: np.ndarray) -> None:
        """The target's hidden rows of the last ``len(rows)`` of ``tokens`` (what its cache
        holds now); called only on a drafter whose ``reads_hidden`` is True."""

    def close(self) -> None:
        pass


class NoDrafter(BaseDrafter):
    """Plain decoding through the same loop: proposes nothing, so every round is one
    target step. The baseline every speedup is measured against."""

    name = "none"


_BREAK_BYTES = (b".", b"!", b"?", b";", b"\n")


def sentence_breaks(model: Model) -> Callable[[int], bool]:
    """A predicate: does this token of ``model`` end a sentence or a line (its text holds
    one of ``. ! ? ; newline``)? Cached, so llama.cpp is asked once per token id."""
    cache: dict[int, bool] = {}
    token_bytes = model.token_to_bytes

    def is_break(token: int) -> bool:
        v = cache.get(token)
        if v is None:
            text = token_bytes(token)
            v = cache[token] = any(b in text for b in _BREAK_BYTES)
        return v

    return is_break


class NgramDrafter(BaseDrafter):
    """Prompt lookup: if the last few tokens occurred earlier in the context, propose
    what followed them there. Code edits, refactors and answers grounded in a given text
    copy long spans of their input, which this drafts for free.

    An index maps every n-gram (n_min..n_max) of the context to the positions right
    after its occurrences; it is extended with each newly committed token instead of
    rescanning the context. Among the candidate occurrences, the one whose match extends
    furthest back (the most context agreeing) wins; ties go to the most recent. It
    proposes up to k tokens of what followed, with the match length, when that match is
    at least ``min_match`` tokens long; how many of them are worth verifying is the
    drafting policy's call, which learns how often matches of each length are right.
    With ``is_break`` (``sentence_breaks``) it also marks the ids that follow the end of
    a sentence or line, where quoted spans end.
    """

    name = "ngram"

    def __init__(
        self,
        n_min: int = 2,
        n_max: int = 6,
        max_candidates: int = 8,
        min_match: int = 2,
        is_break: Callable[[int], bool] | None = None,
    ) -> None:
        if not 1 <= n_min <= n_max:
            raise ValueError("need 1 <= n_min <= n_max")
        self.min_match = max(n_min, min_match)
        self.n_min = n_min
        self.n_max = n_max
        self.max_candidates = max_candidates
        self.is_break = is_break
        self._tokens: list[int] = []
        self._index: dict[tuple[int, ...], list[int]] = {}

    # -- index --------------------------------------------------------------------
    def _sync(self, tokens: Sequence[int]) -> None:
        """Bring the index up to ``tokens``: extend it, or rebuild after divergence."""
        have = len(self._tokens)
        if (
            have > len(tokens)
            or (have and self._tokens[have - 1] != tokens[have - 1])
            or (have and common_prefix_len(self._tokens, tokens[:have]) != have)
        ):
            keep = common_prefix_len(self._tokens, tokens)
            if have - keep <= 32:  # a few drafted ids the target did not keep (grammar drafts)
                self._truncate(keep)
            else:
                self._tokens = []
                self._index = {}
            have = len(self._tokens)
        toks = self._tokens
        index = self._index
        for t in tokens[have:]:
            toks.append(int(t))
            end = len(toks)
            # register the n-grams that end at the token before the new one, with the
            # new token's position as their continuation
            for n in range(self.n_min, self.n_max + 1):
                start = end - 1 - n
                if start < 0:
                    break
                index.setdefault(tuple(toks[start : end - 1]), []).append(end - 1)

    def _truncate(self, keep: int) -> None:
        """Forget the tokens from ``keep`` on: the index entries each registered (its
        n-grams' continuation, the last entry of their lists) go, newest first."""
        toks, index = self._tokens, self._index
        for p in range(len(toks) - 1, keep - 1, -1):
            for n in range(self.n_min, self.n_max + 1):
                if p - n < 0:
                    break
                key = tuple(toks[p - n : p])
                positions = index[key]
                positions.pop()
                if not positions:
                    del index[key]
            toks.pop()

    def begin(self, tokens, params, rng) -> None:
        self._sync(tokens)

    def lookup(self, tokens: Sequence[int], k: int) -> tuple[list[int], int]:
        """Up to ``k`` tokens that followed the longest earlier match of the suffix, and
        the length of that match (``[], 0`` when there is none long enough)."""
        self._sync(tokens)
        toks = self._tokens
        L = len(toks)
        if k <= 0 or L < self.n_min + 1:
            return [], 0
        for n in range(min(self.n_max, L - 1), self.n_min - 1, -1):
            positions = self._index.get(tuple(toks[L - n :]))
            if not positions:
                continue
            best_pos, best_len = -1, -1
            for pos in reversed(positions[-self.max_candidates :]):
                # pos is where the continuation starts; measure how far back the match goes
                m = n
                while m < pos and m < 64 and toks[pos - 1 - m] == toks[L - 1 - m]:
                    m += 1
                if m > best_len:
                    best_pos, best_len = pos, m
            if best_len < self.min_match:
                return [], 0
            return toks[best_pos : best_pos + k], best_len
        return [], 0

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        keep_drafting: KeepDrafting | None = None,
        guide=None,
        pick: Pick | None = None,
    ) -> Proposal:
        ids, m = self.lookup(tokens, k)
        if not ids or self.is_break is None:
            return Proposal(ids, match_len=m, source="prompt")
        brk = self.is_break
        return Proposal(ids, match_len=m, after_break=(brk(tokens[-1]), *(brk(t) for t in ids[:-1])), source="prompt")

    def close(self) -> None:  # (end: nothing; the next begin syncs the index to its prompt)
        self._tokens, self._index = [], {}
