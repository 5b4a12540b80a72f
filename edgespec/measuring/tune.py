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
* γ, the draft model's single-token step over the target's, timed in the same sweeps; for
  the target's own MTP head ("mtp", an engine built with it), one head step over one target
  step (``decode_times.time_mtp_step``), kept beside c(n) for the file;
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

The timing and the c(n) fit live in ``decode_times``, the result records in ``tune_result``,
the saving in ``tune_save``; their public names are imported here too, so ``measuring.tune``
stays the one entry point (``tune.time_decodes``, ``tune.fit_verify_cost``, ``tune.save``, ...).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from ..catalog import verify_cache
from ..costmodel import adaptive
from ..decoding.drafting import DEFAULT_K_MAX
from ..errors import InputError
from . import batches, bench
from .decode_times import (
    N_MAX,
    P_MIN_CAP,
    DecodeTimes,
    fit_verify_cost,
    p_min_for,
    step_model,
    time_decodes,
    time_mtp_step,
)
from .prompts import CALIBRATION, BenchPrompt
from .tune_result import DrafterFit, KPoint, TuneResult
from .tune_save import pair_of, save, save_network

__all__ = [
    "N_MAX",
    "P_MIN_CAP",
    "DecodeTimes",
    "DrafterFit",
    "InputError",
    "KPoint",
    "TuneResult",
    "fit_verify_cost",
    "p_min_for",
    "pair_of",
    "save",
    "save_network",
    "step_model",
    "time_decodes",
    "tune",
]


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

    ``drafters`` may hold "model" (the engine's loaded draft model), "ngram" and "mtp"
    (the target's own MTP head, for an engine built with it). The generations run at
    temperature 0 with a fixed k (the cost model's assumption) and the model drafter at
    p_min = 0, so α is the plain per-token acceptance.
    ``fast_engine`` (the target on llama.cpp's kernels, plain) measures how much slower
    the exact kernels are; speedups are then predicted and measured against it.
    """
    drafters = list(dict.fromkeys(drafters))
    if "model" in drafters and engine.draft_model is None:
        raise InputError("tuning the model drafter needs a draft model: pass --draft PATH")
    if "mtp" in drafters and engine.drafting.mtp is None:
        raise InputError("tuning the MTP head needs an engine built with it (draft='mtp', a target with nextn layers)")
    say = phase or (lambda _msg: None)

    say(f"timing decode batches of 1..{n_max} tokens ({repeats} sweeps)")
    prefix = engine.prompt_tokens(prompts[0].prompt)
    draft_ctx = engine.drafting.model.ctx if "model" in drafters else None
    times = time_decodes(engine.ctx, prefix, n_max=n_max, repeats=repeats, draft=draft_ctx)
    c = fit_verify_cost(times.relative)
    head_gamma = None
    if "mtp" in drafters:
        say("timing the MTP head's step against the target's")
        step_ms, head_ms = time_mtp_step(engine.ctx, engine.drafting.mtp.ctx, prefix, repeats=max(3, 2 * repeats))
        head_gamma = head_ms / max(step_ms, 1e-9)
        engine.reset()  # the calibration prompts start cold: the head reads their hidden rows
    if not engine.target_model.rpc:  # this file's c(n) on this machine, for the planner (over RPC: the link's)
        verify_cache.record(
            engine.target_model.path,
            c,
            step_ms=times.step_ms,
            threads=engine.n_threads,
            exact=engine.target_model.exact,
            source="edgespec tune",
            mtp_gamma=(head_gamma, "edgespec tune (one head step against one target step)") if head_gamma else None,
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
        elif d == "mtp":
            gamma = head_gamma or 0.0
        else:
            # the n-gram lookup's own time per drafted token, in target steps
            gamma = (sum(r.t_draft for r in pooled) / drafted) / (times.step_ms * 1e-3) if drafted else 0.0
        bound = DEFAULT_K_MAX["mtp"] if d == "mtp" else None
        k, s = adaptive.best_k(
            alpha, c, gamma, k_min=k_min, k_max=min(k_max, bound or k_max), hit=hit, slowdown=slowdown
        )
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
                k_max=bound,
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
