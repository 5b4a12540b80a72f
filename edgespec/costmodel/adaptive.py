"""The cost model of speculative decoding, and the choice of drafter and k it implies.

One round drafts up to k tokens, verifies them with the k+1-token batch, and keeps the
accepted prefix plus the target's own next token. Measured in target decode steps of
one token, with α the probability that a drafted token is accepted (independent per
position, the usual simplification of Leviathan et al. 2023):

    tokens per round   E(α, k) = 1 + α + … + α^k = (1 - α^(k+1)) / (1 - α)
    cost of a round    c(k+1) + k·γ
    speedup            S(k) = E(α, k) / (c(k+1) + k·γ)

``c(n)`` is the cost of decoding a batch of n tokens relative to one token (≈1 while the
device is memory-bound, growing towards n when it is compute-bound), and γ the cost of
one draft step relative to one target step. The n-gram drafter costs almost nothing
(γ ≈ 0) but only proposes when the recent tokens occurred before; with ``hit`` the share
of rounds where it proposes, a round without a proposal is a plain step:

    S(k) = (hit·E(α, k) + (1 - hit)) / (hit·(c(k+1) + k·γ) + (1 - hit))

Speculation needs batch-invariant kernels on the target (see ``edgespec.llama``), which on
CPUs are slower per token than llama.cpp's defaults that plain decoding uses. With
``slowdown`` = (plain tokens/s on llama.cpp's kernels) / (plain tokens/s on exact ones),
the speedup a user sees over plain decoding is S(k) / slowdown (1 on GPUs).

Over a network (the target's layers on llama.cpp RPC servers) every target decode also
pays R ms of round trips and transfers, whatever its batch size, while the drafter runs
locally. With t the target's compute step in ms, the figures in target steps become

    c_net(n) = (c(n)·t + R) / (t + R)        γ_net = γ·t / (t + R)

so c_net(n) → 1 and γ_net → 0 as R grows: verifying k + 1 tokens costs little more
than one, and a local drafter pays once R is large enough (``over_network``).

This module is pure arithmetic: it knows nothing about devices (``profiles`` supplies
the figures) or models.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left
from dataclasses import dataclass
from typing import Callable, Sequence


def expected_tokens(alpha: float, k: int) -> float:
    """E[accepted + 1]: tokens committed per round with k drafted at acceptance α."""
    if k <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(k + 1)
    alpha = max(0.0, alpha)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


@dataclass(frozen=True)
class VerifyCost:
    """c(n): cost of decoding n tokens in one batch, relative to one token.

    Given at a few batch sizes; in between it is interpolated linearly, beyond the last
    point it grows with the steeper of the last two points' slope and the mean slope
    from c(1) (batches only get more compute-bound: a dip at the last point, as the
    repacked GEMM tiles give at 16 on a CPU, must not extrapolate into a falling, and
    then negative, cost), and c(1) is 1 by definition.
    """

    n: tuple[int, ...]
    c: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.n) != len(self.c) or not self.n:
            raise ValueError("verify cost needs as many costs as batch sizes, at least one")
        if list(self.n) != sorted(set(self.n)) or self.n[0] < 1:
            raise ValueError("verify cost batch sizes must be increasing integers ≥ 1")

    def __call__(self, n: int) -> float:
        if n <= 1:
            return 1.0
        xs, ys = list(self.n), list(self.c)
        if xs[0] != 1:
            xs, ys = [1, *xs], [1.0, *ys]
        if n >= xs[-1]:
            if len(xs) == 1:
                return ys[-1]
            slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), (ys[-1] - ys[0]) / (xs[-1] - xs[0]), 0.0)
            return ys[-1] + slope * (n - xs[-1])
        i = bisect_left(xs, n)
        if xs[i] == n:
            return ys[i]
        x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
        return y0 + (y1 - y0) * (n - x0) / (x1 - x0)


def speedup(alpha: float, k: int, c: VerifyCost, gamma: float, hit: float = 1.0, slowdown: float = 1.0) -> float:
    """Predicted speedup over plain decoding (see the module docstring)."""
    if k <= 0:
        return 1.0
    tokens = hit * expected_tokens(alpha, k) + (1.0 - hit)
    cost = hit * (c(k + 1) + k * gamma) + (1.0 - hit)
    return tokens / cost / slowdown


def best_k(
    alpha: float,
    c: VerifyCost,
    gamma: float,
    *,
    k_min: int = 1,
    k_max: int = 8,
    hit: float = 1.0,
    slowdown: float = 1.0,
) -> tuple[int, float]:
    """The k in [k_min, k_max] with the highest predicted speedup, and that speedup.
    Ties go to the smaller k (less work wasted when α is overestimated)."""
    best = (k_min, speedup(alpha, k_min, c, gamma, hit, slowdown))
    for k in range(k_min + 1, k_max + 1):
        s = speedup(alpha, k, c, gamma, hit, slowdown)
        if s > best[1] + 1e-9:
            best = (k, s)
    return best


@dataclass(frozen=True)
class DrafterOption:
    """One drafter as the cost model sees it. ``floor`` is the least speedup the
    drafter's policy guarantees whatever the text: prompt lookup under the learned policy
    (``edgespec.decoding.policy``) drafts only where it pays and costs nothing to look, so it
    never falls below plain decoding (1.0); 0 where no such guarantee holds."""

    drafter: str  # "model" | "ngram" | "mtp"
    alpha: float
    gamma: float
    hit: float = 1.0
    floor: float = 0.0
    # the longest draft worth weighing for this drafter (None: the caller's bound); an MTP
    # head's later drafts, fed its own rows, fall off fast
    k_max: int | None = None

    def bound(self, k_max: int) -> int:
        """The longest draft to weigh under the caller's ``k_max``."""
        return min(k_max, self.k_max) if self.k_max is not None else k_max


# The names that ask for no drafter (plain decoding), wherever a drafter is named: the
# command line, the planner, the engine. "none" is the one a Choice carries.
NO_DRAFT_ALIASES = ("none", "off", "plain")


def is_no_draft(name: object) -> bool:
    """Whether ``name`` (a ``--draft`` value, ``/draft`` in chat, ...) asks for plain
    decoding: one of ``NO_DRAFT_ALIASES``, in any case, around any spaces."""
    return name is not None and str(name).strip().lower() in NO_DRAFT_ALIASES


def normalize_draft(draft: str | None) -> str | None:
    """A drafter as a user names it, in the one form the planner and the engine take:
    None or "auto" (choose), "none" (any of ``NO_DRAFT_ALIASES``), "ngram", "model" (the
    pair's draft model), "mtp" (the target's own multi-token-prediction head), "assistant"
    (a Gemma 4 target's assistant), or a catalog name or path as given (spaces stripped). Applied
    once, where a name comes in: ``cli.plan_options`` and ``edgespec.load``."""
    if draft is None:
        return None
    d = str(draft).strip()
    if is_no_draft(d):
        return "none"
    low = d.lower()
    return low if low in ("ngram", "model", "mtp", "assistant", "auto") else d


@dataclass(frozen=True)
class Choice:
    drafter: str  # "model" | "ngram" | "mtp" | "none"
    k: int
    speedup: float  # predicted; 1.0 for "none"
    # predicted (k, speedup) of every option considered, for the explanation
    options: tuple[tuple[str, int, float], ...] = ()


def choose(
    options: Sequence[DrafterOption],
    c: VerifyCost,
    *,
    k_min: int = 1,
    k_max: int = 8,
    min_gain: float = 0.05,
    slowdown: float = 1.0,
) -> Choice:
    """The option with the best predicted speedup, or plain decoding ("none") when no
    option beats it by at least ``min_gain`` (edgespec must never make a user slower,
    and a prediction within a few percent of 1 is within its own error) — unless an
    option's policy guarantees it never loses (``floor`` ≥ 1): that one is chosen over
    plain decoding, since it can only help."""
    scored = []
    for opt in options:
        k, s = best_k(opt.alpha, c, opt.gamma, k_min=k_min, k_max=opt.bound(k_max), hit=opt.hit, slowdown=slowdown)
        scored.append((opt.drafter, k, max(s, opt.floor / slowdown)))
    if not scored:
        return Choice("none", 0, 1.0)
    drafter, k, s = max(scored, key=lambda t: t[2])
    if s < 1.0 + min_gain:
        safe = [t for t, o in zip(scored, options) if o.floor / slowdown >= 1.0]
        if safe:
            drafter, k, s = max(safe, key=lambda t: t[2])
            return Choice(drafter, k, s, tuple(scored))
        return Choice("none", 0, 1.0, tuple(scored))
    return Choice(drafter, k, s, tuple(scored))


def estimate_alpha(accepted: int, drafted: int, rounds_rejected: int) -> float | None:
    """α from observed rounds: a round that drafted k and kept a < k saw a successes and
    one rejection; tokens drafted after the first rejection were never tested. The
    maximum-likelihood α is accepted / (accepted + rounds with a rejection). ``drafted``
    only guards the empty case. None when nothing was drafted."""
    if drafted <= 0:
        return None
    trials = accepted + rounds_rejected
    return accepted / trials if trials else None


# The step-time model's figures where no profile gives them (an engine built by hand):
# a laptop CPU's, as in profile_data/cpu-laptop.toml.
DEFAULT_OVERHEAD_MS = 2.0
DEFAULT_DECODE_GBS = 35.0


def draft_cost_ratio(draft_bytes: int, target_bytes: int, *, overhead_ms: float, gbs: float) -> float:
    """γ estimated from sizes: a decode step costs a fixed overhead plus reading the
    weights at the device's effective rate (``gbs``, GB/s). Used when no measured γ is
    known for the pair: the one γ formula, for the planner and the engine alike."""
    return step_ms(draft_bytes, overhead_ms=overhead_ms, gbs=gbs) / step_ms(
        target_bytes, overhead_ms=overhead_ms, gbs=gbs
    )


def step_ms(weights_bytes: int, *, overhead_ms: float, gbs: float) -> float:
    """Estimated time of one single-token decode step in milliseconds."""
    return overhead_ms + weights_bytes / (gbs * 1e9) * 1e3


def choose_parallel(
    cost: VerifyCost, n_requests: int, max_by_memory: int, *, n_max: int = 32, within: float = 0.95
) -> int:
    """Sequences per decode for a batch job of ``n_requests``: the smallest N up to the
    cap (the requests, what the KV memory holds, ``n_max``) whose job throughput comes
    within 5% of the best. C(N) is the cost of one decode of N sequences relative to
    one. Replies of similar length run in waves: N slots take ceil(R / N) waves of
    C(N)-cost steps, so the job runs at R / (ceil(R / N)·C(N)) — 64 requests go better
    as 2 waves of 32 than as 24 + 24 + 16. Fewer sequences for nearly the same
    throughput keep memory and the latency of each step down."""
    cap = max(1, min(n_requests, max_by_memory, n_max))
    r = max(n_requests, 1)
    throughput = [r / (-(-r // n) * max(cost(n), 1e-9)) for n in range(1, cap + 1)]
    best = max(throughput)
    return next(n for n, t in enumerate(throughput, start=1) if t >= within * best)


def batch_draft_lengths(
    curves: Sequence[Sequence[float] | None],
    lengths: list[int],
    cost: Callable[[int], float],
    *,
    max_rows: int | None = None,
) -> list[int]:
    """Draft lengths for one decode of several sequences. ``curves[i][n]`` is sequence
    i's expected committed tokens if it drafts n (None: its length is fixed in
    ``lengths``); a decode of T rows costs ``cost(T)``. Starting from ``lengths``, take
    the one longer draft that most raises expected tokens per unit of the batch's cost,
    while any does and the batch stays within ``max_rows`` rows (None: no bound).

    Lengthening some draft by d rows costs the same whichever sequence it is, so the
    best such move is the sequence whose curve gains most over its next d positions: a
    heap of those marginal gains per d (a sequence's entries renewed when its length
    changes, stale ones dropped as they surface) makes each pick cost D heap tops for
    drafts up to D long, instead of a scan of every sequence's curve. The picks, ties
    included (the lowest sequence, then the shortest move), are those of that scan
    (tests/test_adaptive.py checks it against the scan on random curves)."""
    lengths = list(lengths)
    rows = len(curves) + sum(lengths)
    gain = float(len(curves))
    best = gain / cost(rows)
    span = max((len(c) for c in curves if c), default=1)  # moves of d = 1 .. span - 1 rows
    heaps: list[list[tuple[float, int, int]]] = [[] for _ in range(span)]
    version = [0] * len(curves)

    def offer(i: int, add: Callable = heapq.heappush) -> None:  # i's moves from its length
        c, n0 = curves[i], lengths[i]
        for d in range(1, len(c) - n0):
            add(heaps[d], (c[n0] - c[n0 + d], i, version[i]))

    for i, curve in enumerate(curves):
        if curve:
            offer(i, list.append)
    for h in heaps:
        heapq.heapify(h)
    while True:
        pick, top = None, best
        reach = span - 1 if max_rows is None else min(span - 1, max_rows - rows)
        for d in range(1, reach + 1):
            h = heaps[d]
            while h and h[0][2] != version[h[0][1]]:
                heapq.heappop(h)
            if not h:
                continue
            i = h[0][1]
            c, n0 = curves[i], lengths[i]
            r = (gain + c[n0 + d] - c[n0]) / cost(rows + d)
            if r > top or (pick is not None and r == top and i < pick[0]):
                top, pick = r, (i, d)
        if pick is None:
            return lengths
        i, d = pick
        best = top
        gain += curves[i][lengths[i] + d] - curves[i][lengths[i]]
        rows += d
        lengths[i] += d
        version[i] += 1
        offer(i)


def fit_drafts(lengths: Sequence[int], room: int) -> list[int]:
    """Draft lengths cut to sum to at most ``room`` (the rows one decode has left for
    drafts): the longest are cut first, down to a common cap, and what room the cap
    leaves goes one row each to the first of them. Lengths that fit come back as they are."""
    out, room = list(lengths), max(0, room)
    if sum(out) <= room:
        return out
    lo, hi = 0, max(out)
    while lo < hi:  # the largest cap whose cut lengths fit
        mid = (lo + hi + 1) // 2
        if sum(min(n, mid) for n in out) <= room:
            lo = mid
        else:
            hi = mid - 1
    left = room - sum(min(n, lo) for n in out)
    for i, n in enumerate(out):
        out[i] = min(n, lo)
        if n > lo and left > 0:
            out[i] += 1
            left -= 1
    return out


def over_network(
    c: VerifyCost, gamma: float | None, *, step_ms: float, round_trip_ms: float, n_max: int = 16
) -> tuple[VerifyCost, float | None]:
    """c(n) and γ when each target decode also pays ``round_trip_ms`` on the network
    (formulas in the module docstring); ``step_ms`` is the target's compute step."""
    t, r = max(step_ms, 1e-9), max(round_trip_ms, 0.0)
    ns = tuple(range(2, n_max + 1))
    c_net = VerifyCost(ns, tuple((c(n) * t + r) / (t + r) for n in ns))
    return c_net, (None if gamma is None else gamma * t / (t + r))
