"""Measuring this machine: the figures of the cost model, and the choice they imply.

``costmodel.adaptive`` predicts the speedup of a drafter from four figures; ``tune``
measures each of them on the real machine instead of estimating it:

* the target's single-token step time, and the verify cost c(n) (kept per model file and
  machine in ``catalog.verify_cache`` for the planner): the wall time of one
  ``Context.decode`` of n tokens with logits at every row (exactly what a verify batch
  asks for), n = 1..16, relative to n = 1. Each n is timed several times at the same
  KV position — the batch is decoded, timed, and rolled back — in sweeps that alternate
  direction so slow drift does not tilt the curve; medians are taken as they are: a
  CPU's tiled GEMM really does decode 8 or 16 tokens for less than 7 or 15, and the
  drafting policy uses such dips (a noisy one is corrected by the engine's own timings);
* γ, the draft model's single-token step over the target's, timed in the same sweeps;
* α (and, for the n-gram drafter, the share of rounds in which it proposes) of each
  drafter on the calibration prompts, from real generations at fixed k, which also give
  the measured speedup at each k to hold the prediction against;
* on CPUs, the slowdown of the batch-invariant kernels speculation needs against the
  llama.cpp kernels plain decoding uses: plain generations on a second, plain engine,
  interleaved with the others (a timed single step understates it, so generations it is).

From these it picks k per drafter and the best configuration with ``costmodel.adaptive.choose``
(plain decoding when nothing is predicted to gain), and a ``p_min`` for the model
drafter. ``save`` writes the figures into the user's profile through
``profiles.record_measurements``. Nothing here prints.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .. import catalog, profiles
from ..catalog import verify_cache
from ..costmodel import adaptive
from ..errors import InputError
from ..llama import Context, common_prefix_len
from . import batches, bench
from .prompts import CALIBRATION, BenchPrompt

N_MAX = 16
P_MIN_CAP = 0.95


# --------------------------------------------------------------------------------------
# Step times and c(n)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecodeTimes:
    """Median wall times of decoding batches at one KV position."""

    position: int  # KV length the batches were decoded after
    repeats: int
    target_ms: dict[int, float]  # n -> ms to decode n tokens with logits at all n rows
    draft_ms: float | None  # ms of one draft-model token, or None

    @property
    def step_ms(self) -> float:
        return self.target_ms[1]

    @property
    def relative(self) -> dict[int, float]:
        """c(n) as measured: time(n) / time(1)."""
        return {n: t / self.step_ms for n, t in self.target_ms.items()}

    @property
    def gamma(self) -> float | None:
        return self.draft_ms / self.step_ms if self.draft_ms is not None else None


def _hold(ctx: Context, tokens: Sequence[int]) -> None:
    """Make ``ctx`` hold exactly ``tokens`` (reusing what it already has)."""
    keep = common_prefix_len(ctx.tokens, tokens)
    ctx.rollback(keep)
    if len(tokens) > keep:
        ctx.decode(tokens[keep:], rows=())


def time_decodes(
    target: Context,
    prefix: Sequence[int],
    *,
    n_max: int = N_MAX,
    repeats: int = 5,
    draft: Context | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> DecodeTimes:
    """Time decoding n = 1..n_max tokens after ``prefix`` (and one draft token).

    The first sweep warms up and is discarded; then ``repeats`` sweeps, alternately
    n = n_max..1 and 1..n_max. The draft model's single step is timed four times per
    sweep, spread through it, so both models see the same load. Both contexts are left
    holding ``prefix``.
    """
    if len(prefix) < 1 or repeats < 1 or n_max < 1:
        raise InputError("time_decodes needs a non-empty prefix, repeats ≥ 1 and n_max ≥ 1")
    if len(prefix) + n_max > target.n_ctx:
        raise InputError(f"the context ({target.n_ctx}) cannot hold the prefix plus {n_max} tokens")
    _hold(target, prefix)
    if draft is not None:
        _hold(draft, prefix)
    pos = len(prefix)
    batch = [prefix[i % pos] for i in range(n_max)]  # real tokens of the prompt
    samples: dict[int, list[float]] = {n: [] for n in range(1, n_max + 1)}
    draft_samples: list[float] = []
    draft_at = {1, n_max, max(1, n_max // 3), max(1, 2 * n_max // 3)}
    for sweep in range(repeats + 1):
        order = range(1, n_max + 1) if sweep % 2 else range(n_max, 0, -1)
        for n in order:
            t0 = clock()
            target.decode(batch[:n], rows=range(n))
            dt = clock() - t0
            target.rollback(pos)
            if sweep:
                samples[n].append(dt)
            if draft is not None and n in draft_at:
                t0 = clock()
                draft.decode(batch[:1])
                dt = clock() - t0
                draft.rollback(pos)
                if sweep:
                    draft_samples.append(dt)
    return DecodeTimes(
        position=pos,
        repeats=repeats,
        target_ms={n: statistics.median(v) * 1e3 for n, v in samples.items()},
        draft_ms=statistics.median(draft_samples) * 1e3 if draft_samples else None,
    )


def fit_verify_cost(relative: dict[int, float]) -> adaptive.VerifyCost:
    """c(n) from measured ratios: c(1) = 1 and never below 1; dips are kept (a tiled
    GEMM's batches of 8 and 16 cost less than 7 and 15, which the policy exploits)."""
    ns = sorted(n for n in relative if n >= 2)
    return adaptive.VerifyCost((1, *ns), (1.0, *(max(1.0, relative[n]) for n in ns)))


def step_model(target_ms: float, draft_ms: float, target_bytes: int, draft_bytes: int) -> tuple[float, float] | None:
    """(overhead_ms, decode_gbs) such that ``costmodel.adaptive.step_ms`` reproduces both measured
    steps, or None when the two do not determine a sensible pair (two models of about
    one size, or a draft slower per byte than the target)."""
    db = target_bytes - draft_bytes
    dt = target_ms - draft_ms
    if db <= 0 or dt <= 0:
        return None
    gbs = db / (dt * 1e-3) / 1e9
    overhead = target_ms - target_bytes / (gbs * 1e9) * 1e3
    return (overhead, gbs) if overhead >= 0 else None


def p_min_for(gamma: float, c: adaptive.VerifyCost, k: int) -> float:
    """The draft confidence below which the model drafter should stop.

    One more drafted token costs a draft step and a wider verify batch — about
    γ + (c(k+1) − 1)/k target steps — and saves one target step if it is accepted. A
    token whose draft probability is below that cost loses on average. Capped at 0.95
    (above it the drafter would almost never draft; the choice then is plain decoding
    anyway)."""
    k = max(1, k)
    return round(min(P_MIN_CAP, max(0.0, gamma + (c(k + 1) - 1.0) / k)), 2)


# --------------------------------------------------------------------------------------
# The whole measurement
# --------------------------------------------------------------------------------------


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

    def option(self) -> adaptive.DrafterOption:
        return adaptive.DrafterOption(self.drafter, self.alpha, self.gamma, self.hit)


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


def tune(
    engine: Any,
    *,
    drafters: Sequence[str] = ("model", "ngram"),
    ks: Sequence[int] = (1, 2, 4, 8),
    prompts: Sequence[BenchPrompt] = CALIBRATION,
    max_tokens: int = 64,
    repeats: int = 5,
    n_max: int = N_MAX,
    k_min: int = 1,
    k_max: int = 8,
    min_gain: float = 0.05,
    progress: bench.ProgressFn | None = None,
    phase: Callable[[str], None] | None = None,
    fast_engine: Any = None,
) -> TuneResult:
    """Measure step times, c(n), γ and each drafter's α on ``engine``; choose.

    ``drafters`` may hold "model" (the engine's loaded draft model) and "ngram". The
    generations run at temperature 0 with a fixed k (the cost model's assumption) and
    the model drafter at p_min = 0, so α is the plain per-token acceptance.
    ``fast_engine`` (the target on llama.cpp's kernels, plain) measures how much slower
    the exact kernels are; speedups are then predicted and measured against it.
    """
    drafters = list(dict.fromkeys(drafters))
    if "model" in drafters and engine.draft_ctx is None:
        raise InputError("tuning the model drafter needs a draft model: pass --draft PATH")
    say = phase or (lambda _msg: None)

    say(f"timing decode batches of 1..{n_max} tokens ({repeats} sweeps)")
    prefix = engine.prompt_tokens(prompts[0].prompt)
    draft_ctx = engine.draft_ctx if "model" in drafters else None
    times = time_decodes(engine.ctx, prefix, n_max=n_max, repeats=repeats, draft=draft_ctx)
    c = fit_verify_cost(times.relative)
    if not engine.target_model.rpc:  # this file's c(n) on this machine, for the planner (over RPC: the link's)
        verify_cache.record(
            engine.target_model.path,
            c,
            step_ms=times.step_ms,
            threads=engine.n_threads,
            exact=engine.target_model.exact,
            source="edgespec tune",
        )
    say(f"timing decodes of {', '.join(map(str, batches.BATCH_SIZES))} sequences at once (batch throughput)")
    batch_model = (fast_engine or engine).target_model
    batch_seconds = batches.time_batches(batch_model, engine.n_threads)

    say(
        f"generating on {len(prompts)} calibration prompts: plain and {', '.join(drafters)} at k = "
        f"{', '.join(map(str, sorted(set(ks))))}"
    )
    fast = fast_engine is not None
    plain_cfg, ref_cfg = (bench.PLAIN_FAST, bench.PLAIN_EXACT) if fast else (bench.PLAIN, bench.PLAIN)
    configs = list(dict.fromkeys([plain_cfg, ref_cfg, *bench.grid(drafters, ks)]))
    runs = bench.measure(
        engine, configs, prompts, max_tokens=max_tokens, repeat=1, progress=progress, fast_engine=fast_engine
    )
    plain, ref = runs[plain_cfg.name], runs[ref_cfg.name]
    slowdown = bench.rate(plain) / bench.rate(ref) if fast and bench.rate(ref) > 0 else 1.0

    fits: list[DrafterFit] = []
    points: list[KPoint] = []
    for d in drafters:
        cfgs = [cfg for cfg in configs if cfg.drafter == d]
        pooled = [r for cfg in cfgs for r in runs[cfg.name]]
        alpha, hit = bench.pooled_alpha(pooled)
        alpha, hit = alpha or 0.0, hit or 0.0
        drafted = sum(r.drafted for r in pooled)
        if d == "model":
            gamma = times.gamma or 0.0
        else:
            # the n-gram lookup's own time per drafted token, in target steps
            gamma = (sum(r.t_draft for r in pooled) / drafted) / (times.step_ms * 1e-3) if drafted else 0.0
        k, s = adaptive.best_k(alpha, c, gamma, k_min=k_min, k_max=k_max, hit=hit, slowdown=slowdown)
        fits.append(
            DrafterFit(
                drafter=d,
                alpha=alpha,
                hit=hit,
                gamma=gamma,
                acceptance_rate=sum(r.accepted for r in pooled) / drafted if drafted else 0.0,
                k=k,
                predicted_speedup=s,
                p_min=p_min_for(gamma, c, k) if d == "model" else None,
            )
        )
        for cfg in cfgs:
            summ = bench.summarize(cfg, runs[cfg.name], plain, greedy=True, reference=ref)
            points.append(
                KPoint(
                    d,
                    cfg.k,
                    adaptive.speedup(alpha, cfg.k, c, gamma, hit, slowdown),
                    summ.speedup,
                    summ.acceptance_rate,
                )
            )

    choice = adaptive.choose(
        [f.option() for f in fits], c, k_min=k_min, k_max=k_max, min_gain=min_gain, slowdown=slowdown
    )
    settings = {
        "target": str(engine.target_path),
        "draft": str(engine.draft_path) if engine.draft_path else None,
        "n_threads": engine.n_threads,
        "prompts": [p.id for p in prompts],
        "max_tokens": max_tokens,
        "k_grid": sorted(set(int(k) for k in ks)),
        "repeats": repeats,
        "k_min": k_min,
        "k_max": k_max,
        "min_gain": min_gain,
        "load_average": bench.load_average(),
    }
    return TuneResult(
        times,
        c,
        tuple(fits),
        tuple(points),
        choice,
        bench.rate(plain),
        settings,
        exact_slowdown=slowdown,
        exact_tokens_per_second=bench.rate(ref) if fast else None,
        batch_seconds=batch_seconds,
    )


# --------------------------------------------------------------------------------------
# Saving
# --------------------------------------------------------------------------------------


def pair_of(target: str, draft: str | None) -> str | None:
    """The catalog pair of a target and draft given as catalog names, catalog file
    names or paths to files named like the catalog's."""
    if not draft:
        return None
    for t, d in ((target, draft), (Path(target).name, Path(draft).name)):
        p = catalog.find_pair(t, d)
        if p is not None:
            return p.name
    return None


def save_network(
    result: TuneResult, profile: str, *, local_step_ms: float, extends: str | None = None, when: Any = None
) -> tuple[Path, float, list[str]]:
    """After a tune over RPC: write the network's cost per target decode (the step over
    RPC less the local compute step ``local_step_ms``) as ``cost.rpc_round_trip_ms``; the
    path, that cost, and what was not saved."""
    r = max(0.0, result.times.step_ms - local_step_ms)
    source = (
        f"edgespec tune --rpc: {result.times.step_ms:.1f} ms step over RPC less "
        f"{local_step_ms:.1f} ms local, {Path(result.settings['target']).name}"
    )
    path = profiles.record_measurements(profile, rpc_round_trip_ms=r, source=source, when=when, extends=extends)
    return (
        path,
        r,
        [
            "c(n), step time and γ measured over RPC: they describe this link; the planner derives "
            "them from the local figures and the network cost"
        ],
    )


def save(
    result: TuneResult, profile: str, *, pair: str | None, extends: str | None = None, when: Any = None
) -> tuple[Path, list[str]]:
    """Write the measured figures into the user profile ``profile``; return its path and
    what could not be saved (figures of a model pair need a catalog pair)."""
    s = result.settings
    source = (
        f"edgespec tune: {Path(s['target']).name}, {s['n_threads']} threads, "
        f"{len(s['prompts'])} calibration prompts x {s['max_tokens']} tokens, "
        f"load {s['load_average']}"
    )
    verify = {n: result.verify(n) for n in sorted(result.times.target_ms) if n >= 2}
    model, ngram = result.drafter("model"), result.drafter("ngram")
    skipped: list[str] = []
    kwargs: dict[str, Any] = {"verify": verify}
    if result.batch_cost:
        kwargs["batch"] = {n: c for n, c in result.batch_cost.items() if n >= 2}
    if result.exact_tokens_per_second is not None:
        kwargs["exact_slowdown"] = min(5.0, max(0.5, result.exact_slowdown))
    if ngram is not None:
        kwargs.update(alpha_ngram=min(ngram.alpha, 0.99), ngram_hit=ngram.hit)
    if pair is not None:
        kwargs["target_step_ms"] = result.times.step_ms
        if model is not None:
            kwargs.update(alpha=min(model.alpha, 0.99), gamma=model.gamma)
            try:
                pc = catalog.get_pair(pair)
                sizes = catalog.model_info(pc.target).size_bytes, catalog.model_info(pc.draft).size_bytes
            except Exception:  # noqa: BLE001 - sizes are only needed for the device fit
                sizes = None
            fitted = step_model(result.times.step_ms, result.times.draft_ms or 0.0, *sizes) if sizes else None
            # the profile schema's ranges; outside them the two steps did not determine a
            # sensible fit (noise, or models far from the catalog's sizes)
            if fitted is not None and 0 <= fitted[0] <= 10_000 and 0.01 <= fitted[1] <= 100_000:
                kwargs.update(overhead_ms=fitted[0], decode_gbs=fitted[1])
            else:
                skipped.append("the step-time model (overhead_ms, decode_gbs): the measured steps do not fit it")
    else:
        if model is not None and s.get("draft"):  # α (and γ here) per pair, for the next automatic choice
            t, d = catalog.describe_file(s["target"]), catalog.describe_file(s["draft"])
            catalog.measured.record(
                t, d, alpha=model.alpha, gamma=model.gamma, profile=profile, source=source, when=when
            )
        skipped.append(
            "target step time and c(n) per pair: the models are not a catalog pair, so c(n) is "
            "saved for the device"
            + (
                " and α, γ for the pair in " + str(catalog.measured.store_path())
                if model is not None and s.get("draft")
                else ""
            )
        )
    path = profiles.record_measurements(profile, pair=pair, source=source, when=when, extends=extends, **kwargs)
    return path, skipped
