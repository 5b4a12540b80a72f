"""The profile schema as frozen dataclasses: ``Profile``, its ``Match`` rules, and every
figure with its provenance (``Figure``, ``VerifyFigure``, ``PairCost``).

Data only: reading and validating TOML is ``validate``/``store``'s, the choice made
from a profile is ``edgespec.planning.planner``'s.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
from dataclasses import dataclass
from typing import Any

from ..costmodel import adaptive

SCHEMA_VERSION = 1
BACKENDS = ("metal", "cuda", "cpu")
DRAFTERS = ("model", "ngram")
STATUSES = ("measured", "estimated")
KINDS = ("apple", "nvidia", "jetson", "raspberry-pi", "cpu")
GB = 1_000_000_000


# --------------------------------------------------------------------------------------
# The dataclasses
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """A number with its provenance."""

    value: float
    status: str  # "measured" | "estimated"
    source: str
    date: _dt.date | None = None

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"value": self.value, "status": self.status, "source": self.source}
        if self.date is not None:
            d["date"] = self.date.isoformat()
        return d


@dataclass(frozen=True)
class VerifyFigure:
    """c(n) with its provenance."""

    cost: adaptive.VerifyCost
    status: str
    source: str
    date: _dt.date | None = None

    def __call__(self, n: int) -> float:
        return self.cost(n)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "n": list(self.cost.n),
            "c": list(self.cost.c),
            "status": self.status,
            "source": self.source,
        }
        if self.date is not None:
            d["date"] = self.date.isoformat()
        return d


@dataclass(frozen=True)
class PairCost:
    """Figures for one model pair on this device; each overrides the device-wide one."""

    alpha: Figure | None = None
    gamma: Figure | None = None
    target_step_ms: Figure | None = None
    verify: VerifyFigure | None = None


@dataclass(frozen=True)
class Match:
    kind: str
    chips: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    boards: tuple[str, ...] = ()
    cores: tuple[int, int] | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    backend: str
    match: Match
    models_gb: Figure
    bandwidth_gbs: Figure
    headroom_gb: float
    n_threads: int | None  # None: one per physical core
    n_gpu_layers: int
    n_ctx: int
    pairs: tuple[str, ...]
    drafters: tuple[str, ...]
    k_min: int
    k_max: int
    p_min: float
    min_gain: float
    overhead_ms: Figure
    decode_gbs: Figure
    verify: VerifyFigure
    alpha_model: Figure
    alpha_ngram: Figure
    ngram_hit: Figure
    gamma_ngram: Figure
    exact_slowdown: Figure
    pair_costs: tuple[tuple[str, PairCost], ...] = ()
    # what one target decode pays for the network when its layers sit on RPC servers
    # (round trips and transfers, ms); None: not measured, the planner estimates it
    rpc_round_trip_ms: Figure | None = None
    origin: str = "shipped"  # "shipped" | "user" | "user over shipped"
    path: str = ""
    notes: tuple[str, ...] = ()  # e.g. how detection scaled it to this machine
    # C(n): one decode of n sequences (one token each) relative to one; picks --parallel
    batch: VerifyFigure | None = None

    def pair_cost(self, pair: str | None) -> PairCost:
        for name, pc in self.pair_costs:
            if name == pair:
                return pc
        return PairCost()

    def figures(self) -> list[tuple[str, Figure | VerifyFigure]]:
        """Every figure with its dotted key, for display."""
        out: list[tuple[str, Figure | VerifyFigure]] = [
            ("memory.models_gb", self.models_gb),
            ("memory.bandwidth_gbs", self.bandwidth_gbs),
            ("cost.overhead_ms", self.overhead_ms),
            ("cost.decode_gbs", self.decode_gbs),
            ("cost.verify", self.verify),
            ("cost.alpha_model", self.alpha_model),
            ("cost.alpha_ngram", self.alpha_ngram),
            ("cost.ngram_hit", self.ngram_hit),
            ("cost.gamma_ngram", self.gamma_ngram),
            ("cost.exact_slowdown", self.exact_slowdown),
        ]
        if self.batch is not None:
            out.append(("cost.batch", self.batch))
        if self.rpc_round_trip_ms is not None:
            out.append(("cost.rpc_round_trip_ms", self.rpc_round_trip_ms))
        for name, pc in self.pair_costs:
            for f in dataclasses.fields(pc):
                value = getattr(pc, f.name)
                if value is not None:
                    out.append((f'cost.pair."{name}".{f.name}', value))
        return out

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "backend": self.backend,
            "origin": self.origin,
            "path": self.path,
            "match": {
                "kind": self.match.kind,
                "chips": list(self.match.chips),
                "gpus": list(self.match.gpus),
                "boards": list(self.match.boards),
                "cores": list(self.match.cores) if self.match.cores else None,
            },
            "memory": {
                "models_gb": self.models_gb.to_dict(),
                "bandwidth_gbs": self.bandwidth_gbs.to_dict(),
                "headroom_gb": self.headroom_gb,
            },
            "run": {"n_threads": self.n_threads, "n_gpu_layers": self.n_gpu_layers, "n_ctx": self.n_ctx},
            "choice": {
                "pairs": list(self.pairs),
                "drafters": list(self.drafters),
                "k_min": self.k_min,
                "k_max": self.k_max,
                "p_min": self.p_min,
                "min_gain": self.min_gain,
            },
            "cost": {
                "overhead_ms": self.overhead_ms.to_dict(),
                "decode_gbs": self.decode_gbs.to_dict(),
                "verify": self.verify.to_dict(),
                "alpha_model": self.alpha_model.to_dict(),
                "alpha_ngram": self.alpha_ngram.to_dict(),
                "ngram_hit": self.ngram_hit.to_dict(),
                "gamma_ngram": self.gamma_ngram.to_dict(),
                "exact_slowdown": self.exact_slowdown.to_dict(),
                **({"batch": self.batch.to_dict()} if self.batch is not None else {}),
                **({"rpc_round_trip_ms": self.rpc_round_trip_ms.to_dict()} if self.rpc_round_trip_ms else {}),
                "pair": {
                    name: {
                        f.name: getattr(pc, f.name).to_dict()
                        for f in dataclasses.fields(pc)
                        if getattr(pc, f.name) is not None
                    }
                    for name, pc in self.pair_costs
                },
            },
            "notes": list(self.notes),
        }

