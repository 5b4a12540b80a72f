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

Drafters know nothing about the target, the KV of the target, or acceptance rules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Protocol, Sequence

import numpy as np

from ..constraints import mask_logits
from ..llama import Context, Model, common_prefix_len
from . import sampling
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
    # answers, decoding.memory), "model" (a draft model); the readout counts accepted drafts by it
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


class BaseDrafter:
    """The protocol's defaults, for a drafter with one proposal a round and nothing to
    remember: ``accepted``, ``end`` and ``close`` (its owner's, not the loop's) do nothing."""

    name = "none"

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


class ModelDrafter(BaseDrafter):
    """A small GGUF model of the target's family, with its own context and KV cache.

    Its cache follows the committed text across rounds: each ``propose`` trims it to the
    longest prefix it shares with the committed tokens (dropping rejected drafts) and
    decodes only what is new — usually the last draft token it never decoded plus the
    target's bonus/correction token — then drafts one token per decode. At temperature
    0 it drafts greedily; above it samples from its own distribution q and hands q back
    for the rejection test. It stops early when its top probability falls below
    ``p_min``: a guess that unsure costs more verify time than it is likely to save.

    Its vocabulary may be up to 128 ids smaller than the target's (llama.cpp's rule;
    Qwen2.5-7B has 152,064 tokens, its 0.5B drafter 151,936), so the committed text can
    hold ids the draft model does not have, and decoding one would fail. The draft model
    never sees them: it resyncs past them, conditioning on the text after the last such
    id only (its cache then starts there, at position 0). We chose this over proposing
    nothing while such an id is in the text because an id can come with the prompt or
    early in a chat, which would silence the drafter for the rest of the session; a
    draft that sees less context is worse but still verified by the target, so output is
    unchanged either way. Right after such an id (nothing in the text after it) it
    proposes nothing. (Ids it proposes are its own; the loop cuts those the target lacks.)
    """

    name = "model"

    def __init__(
        self, model: Model, *, n_ctx: int, n_batch: int = 512, n_threads: int | None = None, p_min: float = 0.0
    ) -> None:
        self.model = model
        self.ctx = Context(model, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads)
        self.p_min = p_min
        self._params = SamplingParams()
        self._rng = np.random.default_rng(0)

    @property
    def t_decode(self) -> float:
        return self.ctx.t_decode

    def begin(self, tokens: Sequence[int], params: SamplingParams, rng: np.random.Generator) -> None:
        self._params = params
        self._rng = rng
        # prefill now (all but the last token) so the first round pays only for drafting
        self._sync(tokens[:-1], want_logits=False)

    def _sync(self, tokens: Sequence[int], want_logits: bool = True) -> np.ndarray | None:
        """Make the draft cache hold exactly ``tokens`` past the last id outside the
        draft's vocabulary; return the last row's logits. If no token is left, return
        None and leave the cache as it is (the next call trims it)."""
        ctx = self.ctx
        tokens = self._in_vocab_tail(tokens)
        if not tokens:
            return None
        keep = common_prefix_len(ctx.tokens, tokens)
        if want_logits and keep == len(tokens):
            keep -= 1  # re-decode the last token to get its logits
        if ctx.recurrent:  # its drafts were decoded one per call: back through a checkpoint
            keep = ctx.reuse_chunks(tokens[:keep], 0)
        else:
            ctx.rollback(keep)
        new = tokens[keep:]
        if not new:
            return None
        logits = ctx.decode(new, rows=(len(new) - 1,) if want_logits else ())
        ctx.checkpoint()  # a recurrent state's copy here, where the next round resumes
        return logits

    def _in_vocab_tail(self, tokens: Sequence[int]) -> Sequence[int]:
        """``tokens`` after the last id the draft model lacks (all of them if none)."""
        n_vocab = self.model.n_vocab
        if not tokens or (max(tokens) < n_vocab and min(tokens) >= 0):  # the usual case, in C
            return tokens
        for i in range(len(tokens) - 1, -1, -1):
            if not 0 <= tokens[i] < n_vocab:
                return tokens[i + 1 :]
        return tokens

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        keep_drafting: KeepDrafting | None = None,
        guide=None,
        pick: Pick | None = None,
    ) -> Proposal:
        if k <= 0:
            return Proposal([])
        # Never draft past the context: the draft cache holds len(tokens) + k - 1 tokens.
        k = min(k, self.ctx.n_ctx - len(tokens))
        if k <= 0:
            return Proposal([])
        logits = self._sync(tokens)
        if logits is None:  # the last token is one the draft model does not have
            return Proposal([])
        params = self._params
        greedy = params.greedy
        ids: list[int] = []
        confs: list[float] = []
        qs: list[np.ndarray] = []
        for i in range(k):
            row = logits[0]
            if guide is not None:
                row = _masked(row, guide.allowed())  # q': the draft's masked distribution
                if not np.isfinite(row.max()):
                    break  # every allowed token is outside the draft's vocabulary
            if greedy:
                tok = int(np.argmax(row))
                conf = _top_prob(row, tok)
            else:
                q = sampling.probs_from_logits(row, params)
                conf = float(q.max())
                tok = sampling.sample(q, self._rng)
            if conf < self.p_min:
                break  # a fixed cut-off, when one is set (the learned policy needs none)
            ids.append(tok)
            confs.append(conf)
            if not greedy:
                qs.append(q)
            if guide is not None:
                guide.consume([tok])  # the next draft's mask follows this one
            if self.model.is_eog(tok):
                break  # nothing follows the end of generation
            if keep_drafting is not None and not keep_drafting(i + 1, conf):
                break
            if i + 1 < k:
                # the last draft token is not decoded here: if it is accepted, the next
                # round's _sync decodes it together with the target's bonus token
                logits = self.ctx.decode([tok])
        q_arr = np.stack(qs) if (qs and not greedy) else None
        return Proposal(ids, q_arr, confidence=tuple(confs), source="model")

    def close(self) -> None:  # (accepted: nothing; the next _sync trims what was rejected)
        self.ctx.close()


def _masked(row: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """A draft logits row with the tokens the grammar forbids at -inf (``allowed`` is
    over the target's vocabulary, which may be up to 128 ids longer or shorter)."""
    if allowed is None:
        return row
    n = row.shape[0]
    if allowed.shape[0] < n:
        allowed = np.concatenate([allowed, np.zeros(n - allowed.shape[0], dtype=bool)])
    return mask_logits(row, allowed[:n])


def _top_prob(row: np.ndarray, tok: int) -> float:
    """Softmax probability of ``tok`` (the argmax) at temperature 1."""
    m = row[tok]
    return 1.0 / float(np.exp(row - m).sum())  # float32 is plenty for a confidence
