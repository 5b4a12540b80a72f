"""Measuring decoding configurations against plain decoding, side by side, in one process.

A configuration is a drafter ("none", "ngram", the loaded draft "model" or the target's
own MTP head "mtp", for an engine built with it), a draft length k, and whether the loop
may adapt k. ``measure`` runs every configuration on the
same prompts with ONE engine (drafters are switched with ``set_drafter``/``set_k``, no
model is reloaded), interleaved: for each prompt, every configuration runs once before
the next prompt starts, in an order that rotates from prompt to prompt. Drift on a
shared, noisy machine (another process waking up, thermal throttling) then lands on all
configurations alike instead of on whichever happened to run last. Before that, every
configuration runs once on the first prompt as a warm-up that is thrown away (page
cache, thread pools, the draft context's first allocation). Each configuration drafts
from a memory of earlier answers of its own, emptied at every pass: from its answers to
the pass's earlier prompts, never from another one's answer to this prompt.

Time is the loop's own wall time from the first round to the end (``Stats.t_generate``):
prompt processing is the same for every configuration and is left out. A pass's ratio
is a configuration's tokens per second over plain decoding's in the same pass; speedup
is the median of those ratios, and ``measuring.bench_stats`` says whether their spread
leaves the difference within noise (``Summary``, ``summarize``, ``rate`` live there and
are imported here as before). At temperature 0 every configuration must reproduce plain
decoding token for token; ``identical`` says whether it did.

``bench_report`` adds the automatic choice and turns the runs into the numbers ``edgespec
bench`` prints (``measuring.batches``: a batch job's throughput). This module never
prints; ``tune`` reuses ``measure``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

from ..errors import InputError
from ..events import Done, Round
from .batches import fresh_memory
from .bench_stats import Summary, summarize
from .bench_stats import pooled_alpha as pooled_alpha  # re-exported: tune and benchmarks use bench.*
from .bench_stats import rate as rate
from .prompts import BenchPrompt


@dataclass(frozen=True)
class Config:
    """One way to decode. ``k_max`` bounds an adaptive k (None: the engine's default
    for the drafter); with ``adaptive_k`` False the loop drafts exactly k per round."""

    drafter: str  # "none" | "ngram" | "model" | "mtp"
    k: int = 1
    adaptive_k: bool = False
    k_max: int | None = None
    p_min: float = 0.0
    label: str = ""
    kernels: str = "exact"  # "fast": plain decoding on llama.cpp's own kernels (``fast_engine``)

    @property
    def name(self) -> str:
        if self.label:
            return self.label
        if self.drafter == "none":
            return "plain"
        return f"{self.drafter} k={self.k}" + (" adaptive" if self.adaptive_k else "")

    def to_dict(self) -> dict:
        return {
            "config": self.name,
            "drafter": self.drafter,
            "k": self.k if self.drafter != "none" else 0,
            "adaptive_k": self.adaptive_k,
            "k_max": self.k_max,
            "p_min": self.p_min,
        }


PLAIN = Config("none", label="plain")
# With a second, plain engine on llama.cpp's kernels (CPUs, see edgespec.llama): that is
# the plain decoding a user gets, and the baseline; the exact-kernel plain run is the
# reference speculation must reproduce token for token.
PLAIN_FAST = Config("none", label="plain", kernels="fast")
PLAIN_EXACT = Config("none", label="plain, exact kernels")


def grid(drafters: Iterable[str], ks: Iterable[int], *, p_min: float = 0.0) -> list[Config]:
    """Every drafter × k at a fixed k (what a k grid measures)."""
    ks = sorted(set(int(k) for k in ks))
    if not ks or ks[0] < 1:
        raise InputError(f"the k grid needs integers ≥ 1 (got {ks})")
    out = []
    for d in drafters:
        if d not in ("ngram", "model", "mtp"):
            raise InputError(f"unknown drafter {d!r}: use 'ngram', 'mtp' or a draft model")
        out += [Config(d, k, p_min=p_min if d == "model" else 0.0) for k in ks]
    return out


def configure(engine: Any, cfg: Config) -> None:
    """Put ``engine`` in the state ``cfg`` describes, without reloading anything."""
    engine.set_drafter(cfg.drafter)  # "model" = the draft model already loaded
    engine.set_k(max(1, cfg.k))
    engine.adaptive_k = cfg.adaptive_k
    # k_max bounds what the drafting policy may draft (None: the drafter's default); a
    # fixed k above that default would otherwise be clamped
    if cfg.adaptive_k or cfg.drafter == "none":
        engine.set_k_max(cfg.k_max)
    else:
        engine.set_k_max(max(cfg.k_max or 0, cfg.k))
    if cfg.drafter == "model":
        engine.set_p_min(cfg.p_min)


@dataclass(frozen=True)
class Run:
    """One measured generation."""

    config: str
    prompt_id: str
    kind: str
    token_ids: tuple[int, ...]
    seconds: float  # the loop's wall time (Stats.t_generate)
    rounds: int
    drafted: int
    accepted: int
    rounds_drafting: int  # rounds in which the drafter proposed something
    rounds_rejected: int  # rounds that ended in a rejected draft
    t_draft: float  # seconds inside the drafter's propose()
    pass_index: int = 0  # the measured pass it ran in (-1: the warm-up)

    @property
    def tokens(self) -> int:
        return len(self.token_ids)


ProgressFn = Callable[[int, int, str, str], None]  # (done, total, config name, prompt id)


def run_once(
    engine: Any,
    prompt: BenchPrompt,
    cfg: Config,
    *,
    max_tokens: int,
    temperature: float = 0.0,
    seed: int | None = None,
    memory: Any = True,
    pass_index: int = 0,
) -> Run:
    """Generate once from ``prompt`` with ``cfg`` and record what happened (``memory``:
    the memory of earlier answers it drafts from, as ``Engine.prepare`` takes it;
    ``pass_index``: the pass it belongs to)."""
    configure(engine, cfg)
    if cfg.drafter == "mtp":
        # the head drafts from the target's hidden rows of the prompt, which a prompt
        # cached by another configuration's run never handed it: decode it again (prompt
        # time, outside the loop's time measured here)
        engine.reset()
    drafting = rejected = 0
    done: Done | None = None
    for ev in engine.stream(prompt.prompt, max_tokens=max_tokens, temperature=temperature, seed=seed, memory=memory):
        if isinstance(ev, Round):
            drafting += ev.drafted > 0
            rejected += ev.rejected > 0
        elif isinstance(ev, Done):
            done = ev
    assert done is not None
    s = done.stats
    return Run(
        cfg.name,
        prompt.id,
        prompt.kind,
        tuple(done.token_ids),
        s.t_generate,
        s.rounds,
        s.drafted,
        s.accepted,
        drafting,
        rejected,
        s.t_draft,
        pass_index,
    )


def measure(
    engine: Any,
    configs: Sequence[Config],
    prompts: Sequence[BenchPrompt],
    *,
    max_tokens: int = 128,
    repeat: int = 1,
    temperature: float = 0.0,
    seed: int | None = None,
    warmup: bool = True,
    progress: ProgressFn | None = None,
    fast_engine: Any = None,
) -> dict[str, list[Run]]:
    """Run every config on every prompt ``repeat`` times, interleaved; the measured runs
    of each config by name, in order, each with its ``pass_index`` (warm-up runs are not
    included). Configs with ``kernels="fast"`` run on ``fast_engine``."""
    names = [c.name for c in configs]
    if len(set(names)) != len(names):
        raise InputError(f"two configurations have the same name: {names}")
    if not prompts:
        raise InputError("no prompts to run")
    if repeat < 1 or max_tokens < 1:
        raise InputError("repeat and max_tokens must be at least 1")
    if fast_engine is None and any(c.kernels == "fast" for c in configs):
        raise InputError("a configuration on llama.cpp's kernels needs fast_engine")
    runs: dict[str, list[Run]] = {c.name: [] for c in configs}
    total = len(configs) * (len(prompts) * repeat + (1 if warmup else 0))
    done = 0
    memories: dict[str, Any] = {}

    def forget() -> None:  # each config starts a pass with an empty memory of its own
        for c in configs:
            memories[c.name] = fresh_memory(engine)

    def one(prompt: BenchPrompt, cfg: Config, pass_index: int) -> Run:
        nonlocal done
        # temperature > 0: the same seed for every config, so all see the same draws
        eng = fast_engine if cfg.kernels == "fast" else engine
        mem = memories[cfg.name]
        run = run_once(
            eng,
            prompt,
            cfg,
            max_tokens=max_tokens,
            temperature=temperature,
            seed=seed,
            memory=mem,
            pass_index=pass_index,
        )
        done += 1
        if progress is not None:
            progress(done, total, cfg.name, prompt.id)
        return run

    forget()
    if warmup:
        for cfg in configs:
            one(prompts[0], cfg, -1)
    slot = 0
    for p in range(repeat):
        forget()
        for prompt in prompts:
            # rotate the order so no config is always first (or last) on a prompt
            r = slot % len(configs)
            for cfg in list(configs[r:]) + list(configs[:r]):
                runs[cfg.name].append(one(prompt, cfg, p))
            slot += 1
    return runs


@dataclass(frozen=True)
class BenchReport:
    plain: Summary
    results: tuple[Summary, ...]  # the candidate grid
    auto: Summary  # the automatic choice (plain's own runs if it is plain)
    auto_plan: dict  # drafter, k, predicted_speedup, reason of the choice
    settings: dict

    @property
    def best(self) -> Summary:
        return max((self.plain, *self.results), key=lambda s: s.speedup)

    def to_dict(self) -> dict:
        best = self.best
        return {
            "plain": self.plain.to_dict(),
            "results": [s.to_dict() for s in self.results],
            "auto": {**self.auto.to_dict(), **{f"planned_{k}": v for k, v in self.auto_plan.items()}},
            "best": {
                "config": best.config.name,
                "speedup": round(best.speedup, 4),
                "verdict": best.spread.verdict if best.spread is not None else None,
            },
            "auto_vs_best": round(self.auto.speedup / best.speedup, 4) if best.speedup else None,
            "settings": self.settings,
        }


def load_average() -> float | None:
    try:
        return round(os.getloadavg()[0], 2)
    except (OSError, AttributeError):  # pragma: no cover - not on every platform
        return None


def bench_report(
    engine: Any,
    candidates: Sequence[Config],
    auto: Config,
    prompts: Sequence[BenchPrompt],
    *,
    auto_plan: dict | None = None,
    max_tokens: int = 128,
    repeat: int = 1,
    temperature: float = 0.0,
    seed: int | None = None,
    progress: ProgressFn | None = None,
    fast_engine: Any = None,
) -> BenchReport:
    """Measure plain decoding, every candidate and the automatic choice ``auto``.

    With ``fast_engine`` (the target on llama.cpp's own kernels, decoding plainly),
    "plain" runs there — it is what a user who does not speculate gets — and plain
    decoding on ``engine``'s batch-invariant kernels runs too, as the reference every
    speculative configuration must reproduce. When the automatic choice is plain
    decoding it is not run twice: its figures are plain's. Otherwise it runs as its own
    configuration (adaptive k, as a user would run it) in the same interleaving.
    """
    plain_cfg = PLAIN_FAST if fast_engine is not None else PLAIN
    ref_cfg = PLAIN_EXACT if fast_engine is not None else PLAIN
    auto_is_plain = auto.drafter == "none"
    auto_cfg = (
        auto
        if auto.label
        else Config(auto.drafter, auto.k, auto.adaptive_k, auto.k_max, auto.p_min, label=f"auto: {auto.name}")
    )
    configs = list(dict.fromkeys([plain_cfg, ref_cfg, *candidates] + ([] if auto_is_plain else [auto_cfg])))
    load_before = load_average()
    runs = measure(
        engine,
        configs,
        prompts,
        max_tokens=max_tokens,
        repeat=repeat,
        temperature=temperature,
        seed=seed,
        progress=progress,
        fast_engine=fast_engine,
    )
    greedy = temperature == 0.0
    plain_runs, ref_runs = runs[plain_cfg.name], runs[ref_cfg.name]

    def summ(cfg: Config) -> Summary:
        return summarize(cfg, runs[cfg.name], plain_runs, greedy=greedy and cfg.kernels == "exact", reference=ref_runs)

    plain = summ(plain_cfg)
    extra = (summ(ref_cfg),) if ref_cfg is not plain_cfg else ()
    results = extra + tuple(summ(c) for c in candidates)
    auto_sum = plain if auto_is_plain else summ(auto_cfg)
    settings = {
        "max_tokens": max_tokens,
        "repeat": repeat,
        "temperature": temperature,
        "seed": seed,
        "prompts": [p.id for p in prompts],
        "target": str(engine.target_path),
        "draft": str(engine.draft_path) if engine.draft_path else None,
        "n_threads": engine.n_threads,
        "plain_kernels": "llama.cpp"
        if fast_engine is not None
        else ("batch-invariant" if engine.exact_kernels else "llama.cpp"),
        "load_average": {"before": load_before, "after": load_average()},
    }
    if fast_engine is not None and greedy:
        ref = {r.prompt_id: r.token_ids for r in ref_runs}
        settings["plain_kernels_identical"] = all(ref[r.prompt_id] == r.token_ids for r in plain_runs)
    return BenchReport(plain, results, auto_sum, dict(auto_plan or {}), settings)
