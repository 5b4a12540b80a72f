"""The profile schema as frozen dataclasses: ``Profile``, its ``Match`` rules, and every
figure with its provenance (``Figure``, ``VerifyFigure``, ``PairCost``).

A profile's verify cost c(n) is one curve for any weights (``cost.verify``) and, where
the evidence differs by weight type, one curve per weight-type mix
(``cost.verify_weights.<MIX>``, the classes ``catalog.gguf.weight_mix`` reads from a
file, listed in ``WEIGHT_MIXES``). A per-mix curve may also say how far drafting pays
with those weights on this device: ``k_max`` (the longest draft worth verifying) and
``drafters`` (the drafters whose cost the evidence supports; empty: plain decoding).

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
# weight-type mixes a profile may give its own verify curve for (catalog.gguf.classify_mix)
WEIGHT_MIXES = (
    "Q4_K_M",
    "Q4_K_S",
    "Q5_K_M",
    "Q5_K_S",
    "Q6_K",
    "Q4_0",
    "Q4_1",
    "Q5_0",
    "Q5_1",
    "IQ4_NL",
    "IQ4_XS",
    "Q8_0",
    "F16",
    "BF16",
    "F32",
)
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
    """c(n) with its provenance. A per-weight-type curve may also carry what the evidence
    says drafting is worth with those weights: ``k_max`` (None: the profile's) and
    ``drafters`` (None: the profile's; empty: none pays, decode plainly)."""

    cost: adaptive.VerifyCost
    status: str
    source: str
    date: _dt.date | None = None
    k_max: int | None = None
    drafters: tuple[str, ...] | None = None

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
        if self.k_max is not None:
            d["k_max"] = self.k_max
        if self.drafters is not None:
            d["drafters"] = list(self.drafters)
        return d


@dataclass(frozen=True)
class PairCost:
    """Figures for one model pair on this device; each overrides the device-wide one."""

    alpha: Figure | None = None
    gamma: Figure | None = None
    target_step_ms: Figure | None = None
    verify: VerifyFigure | None = None


@dataclass(frozen=True)
class MtpFigures:
    """What the evidence says of a model's own multi-token-prediction head on this device
    (``cost.mtp``): α, the acceptance of its drafts; γ, one head step in target steps (as
    users' reports imply it here: the head's own decode and what a verify batch costs
    beyond the profile's c(n) on such models); ``k_max``, the longest draft worth verifying;
    ``note``, the reports in one line, quoted by the plan. Each one optional: the planner's
    prior, the cost model's formula over the head's weights and the drafter's bound otherwise."""

    alpha: Figure | None = None
    gamma: Figure | None = None
    k_max: int | None = None
    note: str = ""

    def to_dict(self) -> dict:
        d: dict[str, Any] = {}
        if self.alpha is not None:
            d["alpha"] = self.alpha.to_dict()
        if self.gamma is not None:
            d["gamma"] = self.gamma.to_dict()
        if self.k_max is not None:
            d["k_max"] = self.k_max
        if self.note:
            d["note"] = self.note
        return d


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
    # c(n) per weight-type mix (WEIGHT_MIXES), where the evidence differs from ``verify``
    verify_weights: tuple[tuple[str, VerifyFigure], ...] = ()
    # the model's own MTP head here (``--draft mtp``, a target file with nextn layers)
    mtp: MtpFigures = MtpFigures()

    def verify_for(self, mix: str | None) -> VerifyFigure:
        """This profile's c(n) for a target of weight-type mix ``mix``: its own curve for
        that mix, else the curve for any weights (``verify``)."""
        for name, fig in self.verify_weights:
            if name == mix:
                return fig
        return self.verify

    def verify_curves(self) -> dict[str, adaptive.VerifyCost]:
        """Every curve by mix, "default" for any weights: what
        ``costmodel.priors.choose_verify_prior`` takes as ``profile_verify``."""
        return {"default": self.verify.cost, **{name: fig.cost for name, fig in self.verify_weights}}

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
        out += [(f"cost.verify_weights.{name}", fig) for name, fig in self.verify_weights]
        if self.batch is not None:
            out.append(("cost.batch", self.batch))
        if self.rpc_round_trip_ms is not None:
            out.append(("cost.rpc_round_trip_ms", self.rpc_round_trip_ms))
        out += [(f"cost.mtp.{key}", fig) for key, fig in (("alpha", self.mtp.alpha), ("gamma", self.mtp.gamma)) if fig]
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
                **(
                    {"verify_weights": {name: fig.to_dict() for name, fig in self.verify_weights}}
                    if self.verify_weights
                    else {}
                ),
                "alpha_model": self.alpha_model.to_dict(),
                "alpha_ngram": self.alpha_ngram.to_dict(),
                "ngram_hit": self.ngram_hit.to_dict(),
                "gamma_ngram": self.gamma_ngram.to_dict(),
                "exact_slowdown": self.exact_slowdown.to_dict(),
                **({"batch": self.batch.to_dict()} if self.batch is not None else {}),
                **({"rpc_round_trip_ms": self.rpc_round_trip_ms.to_dict()} if self.rpc_round_trip_ms else {}),
                **({"mtp": self.mtp.to_dict()} if self.mtp.to_dict() else {}),
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
