"""What ``tune`` measured, as records: per drafter, per k, and the whole result.

``DrafterFit`` (one drafter's α, hit rate, γ and the k the cost model picks for it),
``KPoint`` (predicted against measured speedup at one k) and ``TuneResult`` (all of it with
the ``DecodeTimes``, the fitted c(n), the choice and the settings; ``to_dict`` gives its JSON
form, which ``edgespec tune`` reports). Plain data: measures, saves and prints nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..costmodel import adaptive
from .decode_times import DecodeTimes


@dataclass(frozen=True)
class DrafterFit:
    """One drafter's measured figures and the k the cost model picks for it."""

    drafter: str
    alpha: float
    hit: float
    gamma: float
    acceptance_rate: float
    k: int
    predicted_speedup: float
    p_min: float | None = None  # model drafter only
    k_max: int | None = None  # the longest draft the cost model weighs for it (the MTP head's bound)

    def option(self) -> adaptive.DrafterOption:
        return adaptive.DrafterOption(self.drafter, self.alpha, self.gamma, self.hit, k_max=self.k_max)


@dataclass(frozen=True)
class KPoint:
    drafter: str
    k: int
    predicted: float
    measured: float
    acceptance_rate: float | None


@dataclass(frozen=True)
class TuneResult:
    times: DecodeTimes
    verify: adaptive.VerifyCost  # fitted c(n)
    drafters: tuple[DrafterFit, ...]
    points: tuple[KPoint, ...]
    choice: adaptive.Choice
    plain_tokens_per_second: float  # plain decoding as a user gets it (llama.cpp's kernels on CPUs)
    settings: dict
    exact_slowdown: float = 1.0  # plain tok/s on llama.cpp's kernels / on exact ones
    exact_tokens_per_second: float | None = None  # plain decoding on the exact kernels
    batch_seconds: dict[int, float] | None = None  # one decode of n sequences (time_batches)

    @property
    def batch_cost(self) -> dict[int, float]:
        """C(n) = one decode of n sequences relative to one."""
        b = self.batch_seconds or {}
        return {n: t / b[1] for n, t in sorted(b.items())} if b.get(1) else {}

    def drafter(self, name: str) -> DrafterFit | None:
        return next((d for d in self.drafters if d.drafter == name), None)

    @property
    def measured_choice_speedup(self) -> float | None:
        """The measured speedup at the chosen drafter and k, if that k was measured."""
        if self.choice.drafter == "none":
            return 1.0
        p = next((p for p in self.points if (p.drafter, p.k) == (self.choice.drafter, self.choice.k)), None)
        return p.measured if p else None

    def to_dict(self) -> dict:
        gamma = self.times.gamma
        fit = self.drafter(self.choice.drafter)
        measured = self.measured_choice_speedup
        return {
            "target_step_ms": round(self.times.step_ms, 3),
            "draft_step_ms": round(self.times.draft_ms, 3) if self.times.draft_ms is not None else None,
            "verify_cost": {str(n): round(self.verify(n), 4) for n in sorted(self.times.target_ms)},
            "verify_cost_measured": {str(n): round(c, 4) for n, c in sorted(self.times.relative.items())},
            "verify_ms": {str(n): round(t, 3) for n, t in sorted(self.times.target_ms.items())},
            "draft_cost_ratio": round(gamma, 4) if gamma is not None else None,
            "acceptance": {d.drafter: round(d.alpha, 4) for d in self.drafters},
            "drafters": {
                d.drafter: {
                    "alpha": round(d.alpha, 4),
                    "acceptance_rate": round(d.acceptance_rate, 4),
                    "hit": round(d.hit, 4),
                    "gamma": round(d.gamma, 4),
                    "k": d.k,
                    "predicted_speedup": round(d.predicted_speedup, 4),
                    "p_min": d.p_min,
                }
                for d in self.drafters
            },
            "points": [
                {
                    "drafter": p.drafter,
                    "k": p.k,
                    "predicted_speedup": round(p.predicted, 4),
                    "measured_speedup": round(p.measured, 4),
                    "acceptance_rate": None if p.acceptance_rate is None else round(p.acceptance_rate, 4),
                }
                for p in self.points
            ],
            "plain_tokens_per_second": round(self.plain_tokens_per_second, 3),
            "exact_plain_tokens_per_second": None
            if self.exact_tokens_per_second is None
            else round(self.exact_tokens_per_second, 3),
            "exact_slowdown": round(self.exact_slowdown, 4),
            "batch": {str(n): {"cost": round(c, 3), "throughput": round(n / c, 3)} for n, c in self.batch_cost.items()},
            "choice": {
                "drafter": self.choice.drafter,
                "k": self.choice.k,
                "predicted_speedup": round(self.choice.speedup, 4),
                "measured_speedup": None if measured is None else round(measured, 4),
                "p_min": fit.p_min if fit is not None else None,
            },
            "settings": self.settings,
        }
