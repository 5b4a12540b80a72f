"""What a verify or a batch costs, in target steps: the priors and their online refinement.

c(n) is the time of one target decode of n tokens relative to a one-token step. The
drafting policy (``edgespec.decoding.policy``) weighs expected committed tokens against it, and a
batch of sequences (``edgespec.batching.runner``) weighs its drafts against the batch's c(n).
``OnlineCost`` starts from a prior (the profile's or ``tune``'s figures, else one of the
measured curves below) and refines it from the timings of the rounds themselves.

A laptop is a busy machine (a browser, an editor), so a round's wall time is the cost of
its size times the machine's speed at that moment, plus now and then a slow outlier: load
only ever slows a round down. ``OnlineCost`` estimates the first factor, c(n), as the
ratio of *quiet* times measured close together:

* observations are cut into blocks of 12 in arrival order; in each, a size's quiet time
  is its fastest round there, and its block ratio is that over the block's fastest
  plain (one-row) step (the larger sample read at the rank where the fastest of as many
  rounds as the smaller has would fall: the fastest of ten is fast by luck). Both come
  from the same few seconds, so a uniform slowdown (everything 2x slower for a while)
  divides out, and a slowed round is not the fastest unless all its size's rounds in
  the block were slowed;
* a block without plain steps (drafting rounds dominate, or a batch of sequences)
  measures each size against the block's main size, c(n)/c(m);
* c is fitted to all of them at once: per pair of sizes the median of its last 9 block
  ratios, weighted by their count, in a least-squares fit of log c with c(1) = 1. One
  10x outlier changes one ratio and moves its pair by at most one order statistic; a
  persistent change (c(8) doubling) takes over after 5 blocks with that size. Sizes
  never measured against a plain step keep the shape their ratios say at the prior's
  level, and cannot climb on each other's noise;
* the prior counts as two measurements and fades with each measurement of n; a size not
  measured follows the prior's shape scaled like its measured neighbours;
* a size no longer verified is not measured again by itself, so ``stale`` names the
  least recently measured size (1 after 16 rounds without a plain step, others after
  128 rounds or never) and ``probe`` lets the policy verify it now and then, within a
  budget (1% of the observed rounds' cost, in steps).

The quiet ratio is what a round costs relative to a plain step when the machine is not
interrupted; it assumes load slows one-row and many-row decodes alike (a hog that slows
batches more than single rows is seen only as far as it lasts through a whole block).
``step_seconds``, the scale the policy divides drafting times by, is the latest one:
the median of the last three plain steps when recent, else of the last rounds' times
through the table.

Pure arithmetic over numbers handed in: no llama.cpp, no timing of its own.
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from collections.abc import Sequence

import numpy as np

from . import priors
from .adaptive import VerifyCost

# c(n) of Qwen2.5-Coder-1.5B Q4_K_M on llama.cpp's kernels, 2-core AVX2 VM (tune), used
# as the prior on a CPU when no profile figure is given. Note the dips at 8 and 16. It is
# the CPU table's Q4_K_M row (``priors.VERIFY_PRIORS``, with the other weight types).
CPU_VERIFY_PRIOR = priors.CPU_Q4_K_M
# The same on the batch-invariant kernels (``exact``): no tiles, so no dips.
CPU_EXACT_VERIFY_PRIOR = priors.CPU_EXACT
# One decode of n sequences, one new token each (100-token contexts), relative to one:
# measured with llama.cpp's low-level API on the 2-core dev VM, 1.5B Q4_K_M, llama.cpp's
# kernels (issue 14's table). The weights are read once for all of them.
CPU_BATCH_PRIOR = VerifyCost((1, 4, 8, 16, 32), (1.0, 2.67, 4.54, 5.27, 9.13))
# A GPU decodes dozens of sequences for little more than one (memory-bound).
GPU_BATCH_PRIOR = VerifyCost((1, 16, 64), (1.0, 1.3, 2.2))
BATCH_COST_SIZES = 128  # batch sizes whose cost is tracked one by one (linear beyond)
EARLY_PROBES = 512  # observations over which the probe budget fades from 3x to 1x


def _quantile(values: Sequence[float], q: float) -> float:
    """The q-quantile of ``values`` (not empty), interpolated between order statistics."""
    xs = sorted(values)
    pos = q * (len(xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (pos - lo) * (xs[hi] - xs[lo])


# A size's pull towards its prior in the joint fit, in measurements: enough to give a
# level to sizes never measured against a plain step, too little to move any other.
_PIN = 1e-3


def _fastest_of(values: Sequence[float], k: int) -> float:
    """Where in ``values`` the fastest of ``k`` draws from the same spread is expected:
    the order statistic whose expected quantile is 1/(k+1), i.e. 0-based rank
    (len + 1)/(k + 1) - 1, interpolated (the minimum when ``k`` >= len)."""
    n = len(values)
    pos = max(0.0, (n + 1) / (max(1, k) + 1) - 1.0)
    return _quantile(values, min(1.0, pos / (n - 1)) if n > 1 else 0.0)


class OnlineCost:
    """c(n) for n = 1..n_max: a prior refined by timed rounds, robust to a busy machine.

    Observations are cut into blocks of ``block`` in arrival order. When a block is
    full, each size n >= 2 in it gets one block ratio: the ``low`` quantile of its times
    there (0: like order statistics, ``_ratio``) over that of the block's one-row times.
    A block without one-row steps gives each size but its main one (the best measured,
    then the most rounds) a relative ratio c(n)/c(main). ``measured(n)`` is the joint
    fit of every size's last ``window`` ratios of either kind (``_solve``). The table
    blends it with the prior, which
    counts as ``prior_weight`` measurements at first and fades by ``decay`` per
    measurement of n, after scaling the prior by the measured/prior ratio of n's nearest
    measured neighbours (so an n not measured yet follows them). The table is refreshed
    when a block closes. ``stale`` and ``probe`` say which size to measure again.
    """

    def __init__(
        self,
        prior: VerifyCost,
        n_max: int = 16,
        *,
        prior_weight: float = 1.0,
        decay: float = 0.97,
        block: int = 12,
        window: int = 9,
        low: float = 0.0,
        anchors: int = 3,
        horizon: int = 32,
        neighbours: int = 8,
        plain_after: int = 16,
        stale_after: int = 128,
        probe_budget: float = 0.01,
        probe_rate: float = 0.25,
    ) -> None:
        self.n_max = max(1, n_max)
        self.prior = [prior(n) for n in range(self.n_max + 1)]  # index 0 unused
        self.prior_w = [prior_weight] * (self.n_max + 1)
        self.decay = decay
        self.block = max(1, block)
        self.low = low
        self.anchors = max(1, anchors)
        self.horizon = max(1, horizon)
        self.plain_after = max(1, plain_after)
        self.stale_after = max(1, stale_after)
        self.probe_budget = probe_budget
        self.probe_rate = probe_rate
        self.count = 0  # observations taken
        self.weight = [0.0] * (self.n_max + 1)  # decayed count of n's measurements
        self.last = [-1] * (self.n_max + 1)  # index of n's last measurement
        w = max(1, window)
        self._anchored = [deque(maxlen=w) for _ in range(self.n_max + 1)]
        # (x, m): c(n) / c(m) = x, measured in a block without plain steps, mostly of m
        self._relative: list[deque[tuple[float, int]]] = [deque(maxlen=w) for _ in range(self.n_max + 1)]
        self._sizes: set[int] = set()  # sizes in block ratios (either side)
        self._measured: dict[int, float] = {}  # their joint estimate (_solve)
        self._block: list[tuple[int, float]] = []
        self._ones: deque[tuple[int, float]] = deque(maxlen=self.anchors)
        self._recent: deque[tuple[int, float]] = deque(maxlen=max(1, neighbours))
        self._scale: float | None = None
        self.observed_steps = 0.0  # what all observed rounds cost, in steps
        self.probe_steps = 0.0  # what probes cost on top of the policy's choice, in steps
        self.table = list(self.prior)  # c(n) by index; table[1] == 1 (read only)
        self.table[0] = 0.0

    # -- measurements ------------------------------------------------------------------
    def observe(self, n: int, seconds: float) -> None:
        """One verify of n tokens took ``seconds``."""
        if not 1 <= n <= self.n_max or not seconds > 0.0 or not math.isfinite(seconds):
            return
        idx = self.count
        self.count += 1
        if n == 1:
            self._ones.append((idx, seconds))
        self._scale = self._local_scale(idx, n, seconds)
        self._recent.append((n, seconds))
        self.observed_steps += seconds / self._scale
        self.weight[n] = self.weight[n] * self.decay + 1.0
        self.prior_w[n] *= self.decay
        self.last[n] = idx
        self._block.append((n, seconds))
        if len(self._block) >= self._block_len():
            self._close_block()

    def _block_len(self) -> int:
        """The length of the block being filled: the first ones short (4, then 8), so
        that a prior far from this machine is corrected within a few rounds, then
        ``block``."""
        closed = self.count - len(self._block)
        return min(self.block, 4 if closed < 4 else 8 if closed < 12 else self.block)

    def _close_block(self) -> None:
        by_n: dict[int, list[float]] = {}
        for m, s in self._block:
            by_n.setdefault(m, []).append(s)
        self._block = []
        ones = by_n.pop(1, None)
        if ones:
            for m, times in by_n.items():
                self._anchored[m].append(self._ratio(times, ones))
                self._sizes.add(m)
        elif len(by_n) > 1:
            # no plain step: measure each size against the block's main one (the best
            # measured against plain steps, then the most rounds)
            main = max(by_n, key=lambda m: (len(self._anchored[m]), len(by_n[m]), -m))
            self._sizes.add(main)
            for m, times in by_n.items():
                if m != main:
                    self._relative[m].append((self._ratio(times, by_n[main]), main))
                    self._sizes.add(m)
        self._refresh()

    def _ratio(self, times: Sequence[float], base: Sequence[float]) -> float:
        """One block's ratio of ``times`` to ``base``: their ``low`` quantiles; at ``low``
        0, like order statistics. The fastest of 10 rounds is faster than the fastest of
        one by luck alone (by ~25% at a 15% spread), so the larger sample is read at the
        rank where the fastest of as many rounds as the smaller one has would fall."""
        if self.low > 0.0:
            return _quantile(times, self.low) / _quantile(base, self.low)
        k = min(len(times), len(base))
        return _fastest_of(times, k) / _fastest_of(base, k)

    def _local_scale(self, idx: int, n: int, seconds: float) -> float:
        """Seconds of a one-row step at observation ``idx``: the median of the last
        ``anchors`` one-row steps if they all lie within ``horizon`` observations, else
        the median over the last ``neighbours`` observations (this one included) of
        seconds / c(n), through the table as it stands."""
        ones = [s for i, s in self._ones if idx - i <= self.horizon]
        if len(ones) >= self.anchors:
            return _quantile(ones, 0.5)
        table = self.table
        implied = [s / table[m] for m, s in self._recent]
        implied.append(seconds / table[n])
        return _quantile(implied, 0.5)

    @property
    def step_seconds(self) -> float | None:
        """Estimated seconds of a one-token step now, i.e. at the latest observation
        (None before any measurement)."""
        return self._scale

    # -- the table -----------------------------------------------------------------------
    def measured(self, n: int) -> float | None:
        """n's own measured c (before the prior's blending), None if not measured yet:
        the joint estimate of every size's block ratios (``_solve``), as of the last
        closed block."""
        return self._measured.get(n)

    def _solve(self) -> dict[int, float]:
        """Every measured size's c, from all block ratios at once. A ratio of n to m says
        log c(n) - log c(m) = log x; per pair (m = 1: a plain step) the median of its
        window's ratios counts as that many measurements, and c is the weighted least
        squares fit of the logs with c(1) = 1. Each size is also pinned to its prior with
        a weight of ``_PIN`` (far below one measurement): sizes tied to plain steps go
        by their ratios, and a group of sizes measured only against each other keeps
        the shape its ratios say at the prior's level. Each pair counts once however the
        ratios chain: reading n against m's *estimate* instead (one size's relative
        ratio times the table's value of the other, in turn) let two sizes feed on each
        other's noise, and a batch's table climbed to C(4) = 58."""
        sizes = sorted(self._sizes)
        if not sizes:
            return {}
        col = {n: i for i, n in enumerate(sizes)}
        rows: list[tuple[int, int, float, float]] = []  # (n, m, log ratio, weight)
        for n in sizes:
            if self._anchored[n]:
                rows.append((n, 1, math.log(_quantile(self._anchored[n], 0.5)), len(self._anchored[n])))
            by_m: dict[int, list[float]] = {}
            for x, m in self._relative[n]:
                by_m.setdefault(m, []).append(x)
            for m, xs in by_m.items():
                rows.append((n, m, math.log(_quantile(xs, 0.5)), len(xs)))
        a = np.zeros((len(rows) + len(sizes), len(sizes)))
        b = np.zeros(len(rows) + len(sizes))
        for r, (n, m, y, w) in enumerate(rows):
            sw = math.sqrt(w)
            a[r, col[n]] = sw
            if m != 1:
                a[r, col[m]] = -sw
            b[r] = sw * y
        pin = math.sqrt(_PIN)
        for i, n in enumerate(sizes):
            a[len(rows) + i, i] = pin
            b[len(rows) + i] = pin * math.log(max(self.prior[n], 1e-9))
        sol = np.linalg.lstsq(a, b, rcond=None)[0]
        return {n: float(math.exp(sol[col[n]])) for n in sizes}

    def _refresh(self) -> None:
        self._measured = measured = self._solve()
        # The prior's shape, scaled by what was measured around each n: an n's prior is
        # multiplied by the measured/prior ratio interpolated between its nearest measured
        # neighbours (n = 1 has ratio 1), so a machine slower or faster at batches than
        # the prior is seen at every n, not only where the policy happened to verify.
        xs, ratio = [1], [1.0]
        for n, q in measured.items():
            xs.append(n)
            ratio.append(q / self.prior[n])
        table = self.table
        for n in range(2, self.n_max + 1):
            i = bisect.bisect_left(xs, n)
            lo = i - 1
            hi = i + 1 if i < len(xs) and xs[i] == n else i  # leave n's own measurement out
            if hi < len(xs):
                f = (n - xs[lo]) / (xs[hi] - xs[lo])
                scale = ratio[lo] + f * (ratio[hi] - ratio[lo])
            else:
                scale = ratio[lo]
            base = self.prior[n] * scale
            q = measured.get(n)
            if q is None:
                table[n] = max(1.0, base)
            else:
                w, w0 = self.weight[n], self.prior_w[n]
                table[n] = max(1.0, (w * q + w0 * base) / (w + w0))

    def __call__(self, n: int) -> float:
        table = self.table
        if n <= self.n_max:
            return table[max(n, 1)]
        return table[self.n_max] * n / self.n_max

    def as_verify_cost(self) -> VerifyCost:
        return VerifyCost(tuple(range(1, self.n_max + 1)), tuple(self.table[1:]))

    # -- measuring again ---------------------------------------------------------------
    def _age(self, n: int) -> float:
        """How old n's last measurement is, relative to when it counts as stale (> 1)."""
        if self.last[n] < 0:
            return math.inf
        return (self.count - 1 - self.last[n]) / (self.plain_after if n == 1 else self.stale_after)

    def stale(self, n_max_allowed: int, n_min: int = 1) -> int | None:
        """The verify size in [n_min, n_max_allowed] whose estimate is the least supported
        now, or None when all are fresh. A size n >= 2 is stale when it was never measured
        or not in the last ``stale_after`` observations; 1 (a plain step, which anchors
        the ratios) when not in the last ``plain_after``. Never measured comes first, then
        the oldest relative to its threshold; ties go to the smaller (cheaper) size."""
        best, best_age = None, 1.0
        for n in range(max(1, n_min), min(n_max_allowed, self.n_max) + 1):
            age = self._age(n)
            if age > best_age:
                best, best_age = n, age
        return best

    def _probe_share(self) -> float:
        """The share of the observed rounds' cost probes may take: ``probe_budget``, and up
        to three times it over the first ``EARLY_PROBES`` observations, fading linearly, while
        the prior (another device's, another weight type's) may still hide cheaper sizes."""
        early = max(0.0, 1.0 - self.count / EARLY_PROBES)
        return self.probe_budget * (1.0 + 2.0 * early)

    def probe(self, rows: int, n_max_allowed: int, rng, n_min: int = 1) -> int | None:
        """Now and then, a stale size to verify instead of the ``rows`` chosen; None: keep
        them. ``n_max_allowed``: the most rows this round can verify (its proposal's ids
        + 1). A probe is taken with probability ``probe_rate`` (``rng.random()``, drawn
        only when a stale size exists and fits the budget) while what probes cost stays
        within ``probe_budget`` of all observed rounds' cost, in steps: a larger size
        costs c(p) - c(rows) on top, a smaller one is charged c(p) (it loses the drafts
        it does not verify: at most that). Deterministic given ``rng``'s state."""
        p = self.stale(n_max_allowed, n_min)
        if p is None or p == rows:
            return None
        extra = self(p) - self(rows) if p > rows else self(p)
        if self.probe_steps + extra > self._probe_share() * self.observed_steps:
            return None
        if rng.random() >= self.probe_rate:
            return None
        self.probe_steps += extra
        return p
