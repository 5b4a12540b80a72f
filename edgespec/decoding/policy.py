"""The drafting policy: how many drafted tokens each round verifies, learned while it runs.

A round that verifies L drafted tokens commits, in expectation,

    E(L) = 1 + a_1 + a_1·a_2 + … + a_1·…·a_L

tokens, where a_j is the probability that draft j is accepted given that drafts 1..j-1
were. It costs c(L + 1) target steps for the verify batch plus, for a model drafter,
γ·L for drafting. Each round picks the L in [0, L_max] with the most committed tokens
per unit of cost, E(L) / (c(L + 1) + γ·L); L = 0 is a plain step (E = 1, cost 1), so a
round drafts only when drafting is expected to beat plain decoding.

Both factors are learned online:

* **c(n)** (``OnlineCost``): every round times its own verify (the target's decode plus
  the acceptance test), so every round measures c at one n. Measurements refine the
  prior from the profile or ``tune``, n by n, so a CPU's tiled GEMM — where verifying 8
  or 16 tokens costs less than 7 or 15 — is seen and used: the table keeps its dips.
* **a_j** (``decoding.acceptance``: ``MatchAcceptance``, ``MemoryAcceptance``,
  ``ConfidenceAcceptance``): Beta-distributed acceptance rates per feature bucket, with
  counts that decay so the estimate follows the text.
  Prompt lookup's feature is the length of the context match behind the drafted token
  (match length m for the first draft, m + j - 1 for the j-th, because accepted drafts
  extend the match): long matches are copied spans; and whether the draft follows a
  sentence or line break, where a quoted span ends (one learned rate for all breaks).
  The model drafter's features are the draft position and the draft model's own
  confidence (its top probability), which replaces a fixed cut-off. The memory of
  earlier answers (``decoding.memory``) is judged by the index's count ratio and match
  length, rates the memory keeps (``SuffixIndex.rates``); when it and prompt lookup both propose, the
  loop verifies the proposal ``rank`` rates higher (more tokens per unit of cost).

Under a constraint a proposal may start with ``forced`` tokens, the grammar's own (see
``decoding/speculative.py``): they cost no drafting and are near-certain (``FORCED_RATE``; a single
allowed token cannot be rejected), so they enter E(L) at that rate, are not learned from,
and a fixed-length policy verifies them on top of its k.

A request whose rounds measure slower than plain decoding for a while (its estimates
were wrong, or the drafter's own look costs more than its drafts bring) stops drafting
for a pause that doubles at each trip (``decoding.stoploss``, counted in plain steps
against a plain step it measures itself).

When nothing pays the round drafts nothing. Prompt lookup still learns then: its
proposal is free, and the round's own token tells whether the first proposed id was
right (likewise the id after a fully accepted draft), so it sees when the text starts
copying again. The rates are drawn from their posteriors (Thompson sampling) instead of
using their means: an uncertain bucket is sometimes tried, one known to fail is not.
Draws come from the policy's own generator, never from the sampling one, so the
committed tokens do not depend on the policy.

Pure arithmetic over numbers handed in: no llama.cpp, no timing of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from ..costmodel.costs import OnlineCost
from .acceptance import FORCED_RATE, ConfidenceAcceptance, MatchAcceptance, MemoryAcceptance
from .stoploss import StopLoss


def best_length(rates: Sequence[float], cost: OnlineCost, gamma: float = 0.0, sunk: float = 0.0) -> tuple[int, float]:
    """The L maximising E(L) / (c(L+1) + γ·L + sunk) over L = 0..len(rates), and that
    ratio. ``sunk`` is draft work already paid whatever L is (it still counts, so that
    the ratio is comparable with a plain step's 1 / (1 + sunk))."""
    best_l, best_r = 0, 1.0 / (1.0 + sunk)
    e = p = 1.0
    table = cost.table
    n_max = cost.n_max
    for j, a in enumerate(rates, start=1):
        p *= a
        e += p
        c = table[j + 1] if j + 1 <= n_max else cost(j + 1)
        r = e / (c + gamma * j + sunk)
        if r > best_r:
            best_l, best_r = j, r
    return best_l, best_r


# Explorations (rounds the posterior draws draft where the means would not) may lose at
# most this share of the steps the engine's rounds spent, plus a fixed allowance in steps
# (so that a new engine can explore at all): the price of learning where drafts pay.
EXPLORE_SHARE = 0.01
EXPLORE_ALLOWANCE = 4.0


@dataclass
class PolicyStats:
    """What the policy did, for the readout and the tests."""

    rounds: int = 0
    drafted_rounds: int = 0
    explored_rounds: int = 0  # drafted although the posterior means said not to
    probed_rounds: int = 0  # verified another length to measure its cost again
    stopped_rounds: int = 0  # did not draft: the request's drafting measured slower than plain (``stoploss``)
    stop_trips: int = 0  # times the stop-loss paused drafting


class DraftPolicy:
    """The per-round choice of draft length, for one drafter over one engine's life.

    Use per round: ``limit(L_max)`` (how many tokens to ask the drafter for; 0 skips
    drafting), then ``keep_drafting(j, conf)`` after each token a model drafter drafts,
    then ``choose(proposal)`` (how many of the proposed ids to verify), and after the
    verify ``observe(...)``. ``begin()`` at the start of each generation resets what was
    learned about the text (acceptance); what was learned about the machine (c(n), γ)
    stays.
    """

    def __init__(self, kind: str, cost: OnlineCost, *, gamma: float = 0.0, l_max: int = 15, seed: int = 0) -> None:
        # "mtp" (the target's own head) and "assistant" (a Gemma 4 assistant): judged as a draft model
        if kind not in ("ngram", "model", "mtp", "assistant"):
            raise ValueError(f"no drafting policy for drafter {kind!r}")
        self.kind = kind
        # what it learns of the memory's drafts outlives a generation: it is the memory's
        # own (SuffixIndex.rates, handed to begin), shared by everyone drafting from it
        self.mem = MemoryAcceptance()
        self.cost = cost
        self.gamma = gamma  # draft cost per token in target steps (model drafter)
        self._gamma_w = 2.0  # the prior counts as two measurements
        self.l_max = max(0, l_max)
        self._seed = seed
        self.stats = PolicyStats()
        self.stop_loss = StopLoss()
        self._explore_steps = 0.0  # what explorations were expected to lose, in steps (``_explore``)
        self.begin()

    # -- per generation ------------------------------------------------------------
    def begin(self, seed: int | None = None, memory=None) -> None:
        """Start a generation: acceptance learned afresh, draws from ``seed``. ``memory``
        (a ``SuffixIndex``; None: none of its drafts come, the last rates stay): judge its
        drafts by what it has learned of them (``memory.rates``), and teach it what this
        generation learns."""
        if memory is not None:
            self.mem = memory.rates
        self.rng = np.random.default_rng(self._seed if seed is None else seed)
        self._probe_rng = np.random.default_rng((self._seed if seed is None else seed, 1))  # its own draws
        self.acc = MatchAcceptance() if self.kind == "ngram" else ConfidenceAcceptance()
        self._draws: np.ndarray | None = None
        self._mem_draws: np.ndarray | None = None
        self._conf: list[float] = []
        self._rates: list[float] = []
        self.stop_loss.begin()

    @property
    def bound(self) -> int:
        """The most tokens a round may draft (what a round reports as its k)."""
        return self.l_max

    # -- per round -------------------------------------------------------------------
    def limit(self, l_max: int) -> int:
        """How many tokens to ask the drafter for this round (0: do not draft)."""
        self.stats.rounds += 1
        l_max = min(l_max, self.l_max)
        if l_max <= 0:
            return 0
        if not self.stop_loss.allows():  # drafting measured slower than plain, or a plain step is due
            self.stats.stopped_rounds += 1
            self._draws = None  # forced tokens only, if a grammar forces any
            return 0
        self._draws = self.acc.beta.draw(self.rng)
        self._mem_draws = None  # drawn when a memory proposal is first judged this round
        self._conf, self._rates = [], []
        self._e = self._p = self._best = 1.0  # E(j), a_1·…·a_j and the best ratio so far
        if self.kind != "ngram":
            # Even a draft accepted for sure must pay for its draft step and its row.
            best = float(self._draws[self.acc.bucket(1, 1.0)])
            if (1.0 + best) / (self.cost(2) + self.gamma) <= 1.0:
                return 0
        return l_max

    def keep_drafting(self, j: int, conf: float) -> bool:
        """After the model drafter drafted token j with top probability ``conf``:
        draft another? Yes while one more token like this one could raise the ratio."""
        a = float(self._draws[self.acc.bucket(j, conf)])
        self._conf.append(conf)
        self._rates.append(a)
        self._p *= a
        self._e += self._p
        self._best = max(self._best, self._e / (self.cost(j + 1) + self.gamma * j))
        nxt = (self._e + self._p * a) / (self.cost(j + 2) + self.gamma * (j + 1))
        return j < self.l_max and nxt > self._best

    def _lookup_rates(
        self,
        match_len: int,
        rest: int,
        after_break: Sequence[bool],
        source: str,
        probs: Sequence[float],
        means: bool = False,
    ) -> list[float]:
        """a_1..a_rest for a lookup proposal of ``source`` ("memory": the memory's rates;
        else prompt lookup's), from this round's draws or (``means``) the posterior means."""
        if source == "memory":
            if means:
                draws = self.mem.beta.mean()
            else:
                if self._mem_draws is None:
                    self._mem_draws = self.mem.beta.draw(self.rng)
                draws = self._mem_draws
            return self.mem.rates(match_len, probs, rest, draws)
        draws = self.acc.beta.mean() if means else self._draws
        return self.acc.rates(match_len, rest, draws, after_break)

    def rank(
        self,
        ids: Sequence[int],
        match_len: int = 0,
        after_break: Sequence[bool] = (),
        forced: int = 0,
        source: str = "",
        probs: Sequence[float] = (),
    ) -> float:
        """The most committed tokens per unit of cost a round verifying some of these
        lookup ids could expect (``best_length``'s ratio): how the loop picks among the
        memory drafter's candidates."""
        if self._draws is None or self.kind != "ngram":
            return 0.0
        rest = len(ids) - forced
        rates = [FORCED_RATE] * forced + self._lookup_rates(match_len, rest, tuple(after_break[forced:]), source, probs)
        return best_length(rates, self.cost)[1]

    def choose(
        self,
        ids: Sequence[int],
        match_len: int = 0,
        confidence: Sequence[float] = (),
        after_break: Sequence[bool] = (),
        forced: int = 0,
        source: str = "",
        probs: Sequence[float] = (),
    ) -> int:
        """How many of the proposed ``ids`` to verify (the first ``forced`` of them are
        the grammar's forced tokens; ``source`` and ``probs`` as on ``Proposal``)."""
        if not ids:
            return 0
        if self._draws is None:  # the drafter was not asked this round: forced tokens only
            n, _ = best_length([FORCED_RATE] * forced, self.cost)
            return n
        head = [FORCED_RATE] * forced
        rest = len(ids) - forced
        if self.kind == "ngram":
            brk = tuple(after_break[forced:])
            rates = head + self._lookup_rates(match_len, rest, brk, source, probs)
            n, _ = best_length(rates, self.cost)
            if n > forced:
                means = head + self._lookup_rates(match_len, rest, brk, source, probs, means=True)
                if best_length(means, self.cost)[0] <= forced:
                    n = self._explore(n, means, forced)
        else:
            if len(self._rates) < rest:  # a drafter that did not call keep_drafting
                self._conf = list(confidence[forced:])
                self._rates = [float(self._draws[self.acc.bucket(j + 1, c)]) for j, c in enumerate(self._conf)]
            # the draft work is done whatever we verify: it is sunk
            n, _ = best_length(head + self._rates[:rest], self.cost, 0.0, sunk=self.gamma * rest)
        # now and then a verify size no round chose for long is measured again (within a
        # 1% budget, OnlineCost.probe), so c(n) follows the machine at every n
        p = self.cost.probe(n + 1, len(ids) + 1, self._probe_rng, n_min=forced + 1)
        if p is not None:
            n = p - 1
            self.stats.probed_rounds += 1
        if n > forced:
            self.stats.drafted_rounds += 1
        return n

    def _explore(self, n: int, means: Sequence[float], forced: int) -> int:
        """A round whose draws say draft ``n`` where the means say not to: an exploration.
        What it is expected to lose against a plain step (c(n + 1) steps for E(n) tokens by
        the means) is charged to a budget of ``EXPLORE_SHARE`` of the steps the engine's
        rounds have spent (plus ``EXPLORE_ALLOWANCE``); past it the round keeps to the
        means' choice. Where verifying is dear (a CPU, Q4_K_M: c(2) ~ 1.7-1.9), drafts
        right half the time were tried in 60% of the rounds that drafted, and the
        explorations cost more than the policy's other rounds gained."""
        e = p = 1.0
        for a in means[:n]:
            p *= a
            e += p
        loss = max(0.0, self.cost(n + 1) - e)
        if self._explore_steps + loss > EXPLORE_SHARE * self.cost.observed_steps + EXPLORE_ALLOWANCE:
            return forced
        self._explore_steps += loss
        self.stats.explored_rounds += 1
        return n

    def expected_tokens(
        self,
        ids: Sequence[int],
        match_len: int = 0,
        after_break: Sequence[bool] = (),
        forced: int = 0,
        source: str = "",
        probs: Sequence[float] = (),
    ) -> list[float]:
        """E(L) for L = 0..len(ids): the tokens a round verifying the first L proposed ids
        is expected to commit (this round's Thompson draws; E(0) = 1, the plain step).
        The first ``forced`` ids are the grammar's (``FORCED_RATE`` each); the rest
        prompt lookup's or the memory's (``source``). What a batch weighs against the
        batch's cost."""
        curve, p = [1.0], 1.0
        rates = [FORCED_RATE] * min(forced, len(ids))
        rest = len(ids) - len(rates)
        if rest > 0 and self._draws is not None and self.kind == "ngram":
            rates += self._lookup_rates(match_len, rest, tuple(after_break[forced:]), source, probs)
        for a in rates:
            p *= a
            curve.append(curve[-1] + p)
        return curve

    def note_choice(self, n: int) -> None:
        """A batch chose to verify ``n`` of this round's ids (``choose``'s bookkeeping)."""
        if n:
            self.stats.drafted_rounds += 1

    def observe(
        self,
        *,
        batch: int,
        tested: int,
        accepted: int,
        verify_seconds: float,
        draft_seconds: float = 0.0,
        drafted: int = 0,
        match_len: int = 0,
        next_ok: bool | None = None,
        after_break: Sequence[bool] = (),
        forced: int = 0,
        source: str = "",
        probs: Sequence[float] = (),
    ) -> None:
        """The round verified a batch of ``batch`` tokens (the last committed one and
        the drafts) in ``verify_seconds`` (target decode + acceptance test); of the
        ``tested`` drafts (fewer when one was end-of-generation) it kept ``accepted``;
        ``next_ok`` and ``after_break`` as in ``MatchAcceptance.record``; ``source`` and
        ``probs`` as on ``Proposal`` (the memory's drafts teach ``MemoryAcceptance``).
        The drafter spent ``draft_seconds`` drafting ``drafted`` tokens. The first
        ``forced`` tested tokens were the grammar's: acceptance is learned after them."""
        self.cost.observe(batch, verify_seconds)
        if verify_seconds > 0.0:
            # an untimed round (a batch's sequence: the batch times its decodes; a first
            # round decoded behind the prompt) is none of the ledger's business: counted
            # by its drafting seconds alone it would mark the ledger timed and wait
            # forever for a plain step, and no sequence of a batch would draft again
            trips = self.stop_loss.trips
            self.stop_loss.record(
                seconds=verify_seconds + draft_seconds,
                committed=accepted + 1,
                drafted=batch > 1,
                plain_step=verify_seconds if batch == 1 else None,
            )
            self.stats.stop_trips += self.stop_loss.trips - trips
        if forced:
            if accepted < forced:  # a forced token lost: the drafter's were never tested
                tested = accepted = 0
                next_ok = None
            else:
                tested, accepted = tested - forced, accepted - forced
            after_break = tuple(after_break[forced:])
        if tested or next_ok is not None:
            if self.kind == "ngram" and source == "memory":
                self.mem.record(match_len, probs, tested, accepted, next_ok)
            elif self.kind == "ngram":
                self.acc.record(match_len, tested, accepted, next_ok, after_break)
            else:
                self.acc.record(self._conf, tested, accepted)
        if drafted and draft_seconds > 0.0:
            t1 = self.cost.step_seconds
            if t1:
                g = draft_seconds / drafted / t1
                w = self._gamma_w
                self.gamma = (self.gamma * w + g) / (w + 1.0)
                self._gamma_w = min(w + 1.0, 20.0)


class FixedPolicy:
    """A fixed draft length every round (``adaptive_k=False``): for benchmarks sweeping
    k and for comparing against the learned policy."""

    def __init__(self, k: int) -> None:
        self.k = max(0, k)
        self.stats = PolicyStats()

    def begin(self, seed: int | None = None, memory=None) -> None:
        """Learns nothing (a fixed length)."""

    @property
    def bound(self) -> int:
        return self.k

    def limit(self, l_max: int) -> int:
        self.stats.rounds += 1
        return min(self.k, l_max)

    def keep_drafting(self, j: int, conf: float) -> bool:
        return j < self.k

    def choose(
        self,
        ids: Sequence[int],
        match_len: int = 0,
        confidence: Sequence[float] = (),
        after_break: Sequence[bool] = (),
        forced: int = 0,
        source: str = "",
        probs: Sequence[float] = (),
    ) -> int:
        n = min(len(ids), self.k + forced)
        if n > forced:
            self.stats.drafted_rounds += 1
        return n

    def rank(
        self,
        ids: Sequence[int],
        match_len: int = 0,
        after_break: Sequence[bool] = (),
        forced: int = 0,
        source: str = "",
        probs: Sequence[float] = (),
    ) -> float:
        """Every candidate alike: the drafter's first one is verified."""
        return 0.0

    def note_choice(self, n: int) -> None:
        """``choose`` has counted the round already."""

    def observe(self, **_: float) -> None:
        pass
