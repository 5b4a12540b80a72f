"""What ``measuring.bench``'s runs say against plain decoding: per-pass ratios, their
spread, and whether a difference is bigger than that spread.

A pass runs every configuration once on every prompt, interleaved (``bench.measure``).
Its ratio for a configuration is the configuration's tokens/s over plain decoding's
*in the same pass*: the two were measured minutes apart at most, on the same machine in
the same state, so drift between passes (another process, the CPU's clock, a VM's
neighbours) cancels instead of landing on whichever configuration ran in the calm. The
headline speedup is the median of those ratios; min and max show the spread.

Whether a configuration is faster, slower or within noise is read from the passes
themselves, without assuming how the noise is distributed: the interval between the
j-th lowest and the j-th highest per-pass ratio holds the true median with a known
probability (binomial order statistics: 1 − 2·P(Bin(n, ½) < j)). With up to 7 passes it
is the whole spread, min to max (94% at 5 passes; 3 passes all on one side of 1 happen
by chance one time in four, which is how one run reads 0.94× and the next 1.20×); from 8
passes on, the widest j that keeps ``LEVEL`` (90%) narrows it, so more passes can settle
what fewer could not. "faster" and "slower" only when that interval is all on one side
of 1; otherwise "within noise", with a number of passes that would likely tell, or
"level with plain" when the interval is within ±3% from ``MIN_PASSES`` passes on.

``Summary`` and ``summarize`` (a configuration's runs against plain's) live here too.
Runs are duck-typed (``seconds``, ``tokens``, ``pass_index``, ...): this module imports
nothing of ``bench``, which imports it.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

from ..costmodel.adaptive import estimate_alpha

LEVEL = 0.90  # the confidence the verdict's interval keeps once there are passes to spare
MIN_PASSES = 5  # the fewest whose min..max holds the median with ≥ LEVEL (93.75%)
DEFAULT_REPEAT = MIN_PASSES  # `edgespec bench --repeat`'s default
LEVEL_BAND = 1.03  # an interval within [1/1.03, 1.03] across 1 reads "level with plain"
PRECISION = 1.025  # a suggested --repeat aims to pin the median within ±2.5% at least
MAX_SUGGESTED = 50  # more passes than that: the difference is below this machine's noise
_Z = 1.645  # two-sided 90% of a normal
_MEDIAN_EFFICIENCY = math.sqrt(math.pi / 2)  # a median's standard error over a mean's


def rate(runs: Iterable[Any]) -> float:
    """Tokens per second over ``runs``: all their tokens over all their time."""
    runs = list(runs)
    secs = sum(r.seconds for r in runs)
    return sum(r.tokens for r in runs) / secs if secs > 0 else 0.0


def pooled_alpha(runs: Iterable[Any]) -> tuple[float | None, float | None]:
    """(α, hit) over ``runs``: α by ``costmodel.adaptive.estimate_alpha``, hit = the share of
    rounds in which the drafter proposed anything."""
    runs = list(runs)
    drafted = sum(r.drafted for r in runs)
    rounds = sum(r.rounds for r in runs)
    alpha = estimate_alpha(sum(r.accepted for r in runs), drafted, sum(r.rounds_rejected for r in runs))
    hit = sum(r.rounds_drafting for r in runs) / rounds if rounds else None
    return alpha, hit


def by_pass(runs: Iterable[Any]) -> dict[int, list[Any]]:
    """``runs`` grouped by the pass they ran in, in pass order."""
    out: dict[int, list[Any]] = {}
    for r in runs:
        out.setdefault(getattr(r, "pass_index", 0), []).append(r)
    return dict(sorted(out.items()))


def pass_rates(runs: Iterable[Any]) -> tuple[float, ...]:
    """Tokens per second in each pass, in pass order."""
    return tuple(rate(rs) for rs in by_pass(runs).values())


def pass_ratios(runs: Iterable[Any], plain: Iterable[Any]) -> tuple[float, ...]:
    """Each pass's tokens/s over plain decoding's in the same pass, in pass order (a pass
    plain has no time in is left out)."""
    mine, base = by_pass(runs), by_pass(plain)
    out = []
    for p, rs in mine.items():
        b = rate(base.get(p, ()))
        if b > 0:
            out.append(rate(rs) / b)
    return tuple(out)


def coverage(n: int, j: int) -> float:
    """The probability that the j-th lowest and j-th highest of n draws hold their median."""
    return 1.0 - 2.0 * sum(math.comb(n, i) for i in range(j)) / 2.0**n


def median_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(low, high, confidence): the j-th lowest and highest of ``values`` for the widest j
    that keeps ``LEVEL`` (j = 1, min..max, when none does), and how often such an interval
    holds the median."""
    xs = sorted(values)
    n = len(xs)
    j = 1
    while j + 1 <= n // 2 and coverage(n, j + 1) >= LEVEL:
        j += 1
    return xs[j - 1], xs[n - j], coverage(n, j)


def suggest_repeat(ratios: Sequence[float]) -> int:
    """Passes that would likely settle ``ratios``: enough for the median's interval to
    clear 1, or to be within ±2.5% where the difference is smaller (a normal
    approximation on log ratios); at least ``MIN_PASSES`` and one more than now, at most
    ``MAX_SUGGESTED``."""
    n = len(ratios)
    if n < 2:
        return max(MIN_PASSES, n + 1)
    logs = [math.log(r) for r in ratios]
    s = statistics.stdev(logs)
    effect = max(abs(statistics.median(logs)), math.log(PRECISION))
    need = math.ceil((_Z * _MEDIAN_EFFICIENCY * s / effect) ** 2) if s > 0 else 0
    return min(max(need, MIN_PASSES, n + 1), MAX_SUGGESTED)


def _x(v: float) -> str:
    return f"{v:.2f}×"


@dataclass(frozen=True)
class Spread:
    """A configuration's per-pass ratios against plain decoding and what they tell."""

    ratios: tuple[float, ...]  # in pass order

    @property
    def passes(self) -> int:
        return len(self.ratios)

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def low(self) -> float:
        return min(self.ratios)

    @property
    def high(self) -> float:
        return max(self.ratios)

    @property
    def interval(self) -> tuple[float, float, float]:
        return median_interval(self.ratios)

    @property
    def verdict(self) -> str:
        """ "faster", "slower", "level" (with plain), "within noise" or "one pass"."""
        if self.passes < 2:
            return "one pass"
        lo, hi, _ = self.interval
        if lo > 1.0:
            return "faster"
        if hi < 1.0:
            return "slower"
        if self.passes >= MIN_PASSES and 1 / LEVEL_BAND <= lo and hi <= LEVEL_BAND:
            return "level"
        return "within noise"

    @property
    def suggested_repeat(self) -> int | None:
        """--repeat to run for a clear answer; None when this one is clear."""
        if self.verdict in ("faster", "slower", "level") and self.passes >= MIN_PASSES:
            return None
        return suggest_repeat(self.ratios)

    def words(self) -> str:
        """The verdict in words, e.g. "within noise (per-pass 0.94-1.20×): run with --repeat 27"."""
        v, n = self.verdict, self.passes
        if v == "one pass":
            return f"one pass, no spread to judge by: run with --repeat {self.suggested_repeat}"
        lo, hi, conf = self.interval
        spread = f"per-pass {self.low:.2f}-{_x(self.high)}"
        if (lo, hi) != (self.low, self.high):
            spread += f", the median within {lo:.2f}-{_x(hi)} at {conf:.0%}"
        head = {"level": "level with plain"}.get(v, v)
        text = f"{head} ({spread})"
        if v == "within noise":
            more = self.suggested_repeat
            tail = "; the difference is below this machine's noise" if more == MAX_SUGGESTED else ""
            return f"{text}: run with --repeat {more}{tail}"
        if n < MIN_PASSES:  # all passes on one side, but few of them
            return (
                f"{text}, but {n} passes agree by chance 1 time in {2 ** (n - 1)}: "
                f"run with --repeat {self.suggested_repeat}"
            )
        return text

    def to_dict(self) -> dict:
        lo, hi, conf = self.interval
        return {
            "ratios": [round(r, 4) for r in self.ratios],
            "min": round(self.low, 4),
            "median": round(self.median, 4),
            "max": round(self.high, 4),
            "interval": [round(lo, 4), round(hi, 4)],
            "confidence": round(conf, 4),
            "verdict": self.verdict,
            "suggested_repeat": self.suggested_repeat,
            "words": self.words(),
        }


# --------------------------------------------------------------------------------------
# Summaries
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Summary:
    """What one configuration (a ``bench.Config``) did over all its measured runs."""

    config: Any
    tokens: int
    seconds: float
    speedup: float  # the median over passes of tokens/s over plain decoding's in the pass
    acceptance_rate: float | None  # accepted / drafted (None: drafted nothing)
    mean_accepted_length: float | None  # accepted drafts per round
    alpha: float | None  # per-token acceptance, the cost model's α
    hit: float | None  # share of rounds in which the drafter proposed
    identical: bool | None  # same token ids as plain decoding (temperature 0 only)
    by_kind: dict[str, float] = field(default_factory=dict)  # speedup per prompt kind, the same way
    runs: tuple[Any, ...] = ()
    spread: Spread | None = None  # per-pass ratios (None: plain decoding itself, the baseline)

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        def r(x: float | None, nd: int = 4) -> float | None:
            return None if x is None else round(x, nd)

        return {
            **self.config.to_dict(),
            "tokens_per_second": r(self.tokens_per_second, 3),
            "speedup": r(self.speedup),
            "acceptance_rate": r(self.acceptance_rate),
            "mean_accepted_length": r(self.mean_accepted_length),
            "alpha": r(self.alpha),
            "hit": r(self.hit),
            "identical": self.identical,
            "tokens": self.tokens,
            "seconds": r(self.seconds),
            "by_kind": {k: r(v) for k, v in self.by_kind.items()},
            "tokens_per_second_per_pass": [round(x, 3) for x in pass_rates(self.runs)],
            "per_pass": self.spread.to_dict() if self.spread is not None else None,
        }


def speedup_of(runs: Sequence[Any], plain: Sequence[Any]) -> tuple[float, Spread | None]:
    """The median per-pass ratio of ``runs`` against ``plain``, and their spread (None when
    ``runs`` are plain's own)."""
    if list(runs) == list(plain):
        return 1.0, None
    ratios = pass_ratios(runs, plain)
    return (statistics.median(ratios), Spread(ratios)) if ratios else (0.0, None)


def summarize(
    cfg: Any, runs: Sequence[Any], plain: Sequence[Any], *, greedy: bool, reference: Sequence[Any] | None = None
) -> Summary:
    """``cfg``'s runs against plain decoding's runs on the same prompts: speed against
    ``plain`` (the median of per-pass ratios), token identity (when ``greedy``) against
    ``reference`` (default ``plain``)."""
    kinds = sorted({r.kind for r in runs}, key=lambda k: (k == "custom", k))
    by_kind = {
        kind: speedup_of([r for r in runs if r.kind == kind], [p for p in plain if p.kind == kind])[0] for kind in kinds
    }
    drafted = sum(r.drafted for r in runs)
    rounds = sum(r.rounds for r in runs)
    accepted = sum(r.accepted for r in runs)
    alpha, hit = pooled_alpha(runs) if cfg.drafter != "none" else (None, None)
    identical = None
    if greedy:
        ref = {p.prompt_id: p.token_ids for p in (plain if reference is None else reference)}
        identical = all(ref.get(r.prompt_id) == r.token_ids for r in runs)
    speedup, spread = speedup_of(runs, plain)
    return Summary(
        config=cfg,
        tokens=sum(r.tokens for r in runs),
        seconds=sum(r.seconds for r in runs),
        speedup=speedup,
        acceptance_rate=accepted / drafted if drafted else (None if cfg.drafter == "none" else 0.0),
        mean_accepted_length=accepted / rounds if rounds and cfg.drafter != "none" else None,
        alpha=alpha,
        hit=hit,
        identical=identical,
        by_kind=by_kind,
        runs=tuple(runs),
        spread=spread,
    )
