"""Acceptance models: how likely a drafted token is to be kept, learned per feature bucket.

The drafting policy (``decoding.policy``) multiplies these rates into the expected
committed tokens of a round. Each model is Beta-distributed acceptance rates over
buckets of the feature that predicts acceptance best for its drafter, with counts that
decay so that the estimate follows the text (``_BetaBuckets``):

* prompt lookup (``MatchAcceptance``): the length of the context match behind the
  drafted token, and whether it follows a sentence or line break;
* the memory of earlier answers (``MemoryAcceptance``): the index's count ratio at the
  drafted id and the match length behind it;
* a draft model (``ConfidenceAcceptance``): the draft position and the draft model's own
  top probability.

Pure arithmetic over numbers handed in.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np


class _BetaBuckets:
    """Acceptance rates per bucket as Beta(acc, rej) pseudo-counts that decay.

    ``decay`` < 1 forgets old rounds: with 0.95 a bucket's estimate rests on roughly its
    last 20 outcomes, so a collapse or a recovery shows within a few rounds.
    """

    def __init__(self, prior_mean: Sequence[float], *, prior_strength: float = 2.0, decay: float = 0.95) -> None:
        m = np.clip(np.asarray(prior_mean, dtype=np.float64), 0.01, 0.99)
        self.acc = m * prior_strength
        self.rej = (1.0 - m) * prior_strength
        self.decay = decay

    def record(self, bucket: int, accepted: bool) -> None:
        d = self.decay
        self.acc[bucket] = self.acc[bucket] * d + (1.0 if accepted else 0.0)
        self.rej[bucket] = self.rej[bucket] * d + (0.0 if accepted else 1.0)

    def mean(self) -> np.ndarray:
        return self.acc / (self.acc + self.rej)

    def draw(self, rng: np.random.Generator) -> np.ndarray:
        return rng.beta(self.acc, self.rej)

    def state(self) -> dict:
        """The counts, as plain lists (what ``restore`` takes back)."""
        return {"acc": self.acc.tolist(), "rej": self.rej.tolist()}

    def restore(self, state) -> bool:
        """Take back counts ``state`` saved, if they fit these buckets and are counts
        (finite, non-negative, not both zero); else keep these and return False."""
        try:
            acc = np.asarray(state["acc"], dtype=np.float64)
            rej = np.asarray(state["rej"], dtype=np.float64)
        except (KeyError, TypeError, ValueError):
            return False
        ok = (
            acc.shape == rej.shape == self.acc.shape
            and bool(np.isfinite(acc).all() and np.isfinite(rej).all())
            and bool((acc >= 0).all() and (rej >= 0).all() and ((acc + rej) > 0).all())
        )
        if ok:
            self.acc, self.rej = acc, rej
        return ok


# P(a grammar-drafted token is accepted): a forced token can only lose to another
# tokenization of the same forced text; the likely tokens of forced text (the rest of the
# grammar's draft) lose more often, but a verify row costs little next to a round.
FORCED_RATE = 0.98

# Match-length buckets for prompt lookup: lengths 1..5 alone, then coarser.
_MATCH_EDGES = (1, 2, 3, 4, 5, 6, 8, 11, 16, 24, 40)
# Prior P(copying goes on past a sentence or line break): the tuning prompts' edits and
# summaries copy on across breaks (~97%); a text that stops there teaches it otherwise.
BREAK_PRIOR = 0.8


def match_bucket(m: int) -> int:
    """Index of the bucket holding match length m (>= 1)."""
    i = 0
    while i + 1 < len(_MATCH_EDGES) and m >= _MATCH_EDGES[i + 1]:
        i += 1
    return i


class MatchAcceptance:
    """Prompt lookup: P(draft accepted | the context match behind it is m tokens long),
    and P(a copied span goes on past the end of a sentence or line).

    The prior is pessimistic for short matches (a 2-token match is mostly chance) and
    optimistic for long ones (a 24-token match is a copied span). A draft that follows a
    sentence or line break (``Proposal.after_break``) must also pass the break bucket,
    one rate for all breaks of this text: code edits copy on across lines, answers that
    quote a document stop at the end of the quoted sentence. Its rate is learned from
    the first breaks the text crosses, and bounds a_j from above (``min``).
    """

    def __init__(self, *, decay: float = 0.95) -> None:
        prior = [0.12 + 0.8 * (1.0 - math.exp(-(e - 1) / 10.0)) for e in _MATCH_EDGES]
        self.brk = len(prior)  # index of the break bucket
        self.beta = _BetaBuckets([*prior, BREAK_PRIOR], decay=decay)
        self._bucket = [match_bucket(m) for m in range(0, 129)]

    def bucket(self, m: int) -> int:
        return self._bucket[min(max(m, 1), 128)]

    def rates(self, match_len: int, n: int, draws: np.ndarray, after_break: Sequence[bool] = ()) -> list[float]:
        """a_1..a_n for drafts that continue a match of ``match_len`` tokens."""
        b = self._bucket
        out = [float(draws[b[min(match_len + j, 128)]]) for j in range(n)]
        if any(after_break):
            a_brk = float(draws[self.brk])
            out = [min(a, a_brk) if j < len(after_break) and after_break[j] else a for j, a in enumerate(out)]
        return out

    def record(
        self, match_len: int, drafted: int, accepted: int, next_ok: bool | None = None, after_break: Sequence[bool] = ()
    ) -> None:
        """Drafts 1..accepted were accepted; draft accepted+1 (if drafted) was rejected;
        later drafts were never tested. ``next_ok``: all were accepted and the round's
        own next token did (True) or did not (False) equal the first proposed id left
        unverified: that id's outcome, seen for free (None: not known). Each outcome
        counts for the match bucket and, after a break, for the break bucket."""
        seen = min(accepted + 1, drafted)
        if next_ok is not None and accepted == drafted:
            seen = drafted + 1
        for j in range(seen):
            ok = j < accepted or (j == drafted and bool(next_ok))
            self.beta.record(self.bucket(match_len + j), ok)
            if j < len(after_break) and after_break[j]:
                self.beta.record(self.brk, ok)


# The memory's count ratios (an id's path probability over the one before it) in buckets,
# and the match lengths behind them in groups: short, medium, long.
_RATIO_EDGES = (0.0, 0.2, 0.35, 0.5, 0.65, 0.8, 0.9, 0.97)
_MEM_MATCH_GROUPS = (0, 6, 12)


def _edge_bucket(edges: Sequence[float], x: float) -> int:
    i = 0
    while i + 1 < len(edges) and x >= edges[i + 1]:
        i += 1
    return i


class MemoryAcceptance:
    """The memory of earlier answers (``decoding.memory``): P(draft j accepted | drafts
    before it were) by the index's count ratio at j (the share of earlier occurrences
    that went on with this id) and the length of the match behind it (m + j - 1).

    The count ratio alone is overconfident: earlier answers to other questions agree on
    their shape, not on every word (0.75 predicted against 0.25-0.28 accepted per id,
    benchmarks/results/suffix-overhead-2core.json), so the prior discounts it, least for
    long matches. Unlike prompt lookup's, these rates describe the workload rather than
    one text: they belong to the index (``SuffixIndex.rates``: kept across generations,
    shared by everyone drafting from it, saved with it), and forget more slowly.
    """

    def __init__(self, *, decay: float = 0.98) -> None:
        prior = []
        for m in _MEM_MATCH_GROUPS:
            trust = 0.35 + 0.5 * (1.0 - math.exp(-max(m, 2) / 10.0))
            prior += [trust * (lo + hi) / 2 for lo, hi in zip(_RATIO_EDGES, (*_RATIO_EDGES[1:], 1.0))]
        self.beta = _BetaBuckets(prior, decay=decay)
        self.n_ratio = len(_RATIO_EDGES)

    def bucket(self, m: int, ratio: float) -> int:
        return _edge_bucket(_MEM_MATCH_GROUPS, m) * self.n_ratio + _edge_bucket(_RATIO_EDGES, ratio)

    def buckets(self, match_len: int, probs: Sequence[float], n: int) -> list[int]:
        out, before = [], 1.0
        for j in range(min(n, len(probs))):
            out.append(self.bucket(match_len + j, probs[j] / before if before > 0 else 0.0))
            before = probs[j]
        return out

    def rates(self, match_len: int, probs: Sequence[float], n: int, draws: np.ndarray) -> list[float]:
        return [float(draws[b]) for b in self.buckets(match_len, probs, n)]

    def record(
        self, match_len: int, probs: Sequence[float], drafted: int, accepted: int, next_ok: bool | None = None
    ) -> None:
        """As ``MatchAcceptance.record``: the tested drafts, and the first unverified id's
        outcome when the round's own token tells it (``next_ok``)."""
        seen = min(accepted + 1, drafted)
        if next_ok is not None and accepted == drafted:
            seen = drafted + 1
        for j, b in enumerate(self.buckets(match_len, probs, seen)):
            self.beta.record(b, j < accepted or (j == drafted and bool(next_ok)))


# Confidence (the draft model's top probability) buckets and draft-position groups.
_CONF_EDGES = (0.0, 0.3, 0.5, 0.7, 0.8, 0.9, 0.95, 0.98, 0.995)
_POS_GROUPS = 3  # positions 1, 2-3, 4+


def _conf_bucket(conf: float) -> int:
    i = 0
    while i + 1 < len(_CONF_EDGES) and conf >= _CONF_EDGES[i + 1]:
        i += 1
    return i


def _pos_group(j: int) -> int:
    return 0 if j <= 1 else (1 if j <= 3 else 2)


class ConfidenceAcceptance:
    """Model drafter: P(draft j accepted | its position j and the draft's confidence).

    The prior takes the draft model at its word, a little discounted: a token it gives
    probability 0.9 is accepted about 80% of the time when draft and target agree well.
    """

    def __init__(self, *, decay: float = 0.95) -> None:
        mids = [(lo + hi) / 2 for lo, hi in zip(_CONF_EDGES, (*_CONF_EDGES[1:], 1.0))]
        prior = [0.9 * m for m in mids] * _POS_GROUPS
        self.beta = _BetaBuckets(prior, decay=decay)
        self.n_conf = len(_CONF_EDGES)

    def bucket(self, j: int, conf: float) -> int:
        return _pos_group(j) * self.n_conf + _conf_bucket(conf)

    def record(self, confidences: Sequence[float], drafted: int, accepted: int) -> None:
        for j in range(min(accepted + 1, drafted, len(confidences))):
            self.beta.record(self.bucket(j + 1, confidences[j]), j < accepted)
