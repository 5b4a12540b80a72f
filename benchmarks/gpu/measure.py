"""Measure the cost model's figures and check exactness on one device, into one JSON.

Written for the lent NVIDIA H200 (``run.sh`` builds llama.cpp with CUDA there, makes
synthetic Qwen2.5 0.5B / 1.5B / 7B models and calls this), and run on the CPU with a tiny
synthetic model by ``tests/test_gpu_bench.py`` so it is known to work before device time is
spent. Everything is measured through edgespec's own code: ``measuring.tune.time_decodes`` and
``measuring.tune.fit_verify_cost`` for step times and c(n), ``Engine`` for generations,
``costmodel.adaptive.speedup`` for the predictions, ``llama.Model``/``llama.Context`` for the rest.

Phases, in order of importance; each one is skipped when the time budget cannot hold it,
and the JSON is rewritten after each one, so a run cut short still leaves its results:

1. ``device``: what ran (GPU name and memory from nvidia-smi, llama.cpp's system info).
2. ``steps``: each model's single-token step and c(n), n = 1..16, on llama.cpp's kernels
   (``exact=False``), and γ = draft step / target step for every pair asked for.
3. ``batch_invariance``: per kernel kind (exact False / True), whether a token's logits
   depend on how many tokens shared its batch: the logits of n tokens decoded in one batch
   against the same tokens decoded one at a time, n = 1..16, at a short and a long KV.
4. ``exactness``: greedy plain decoding against greedy speculation with a self-draft (the
   draft model is the target file), per kernel kind: token-identical or not, and where
   the first difference is.
5. ``speculation``: the self-draft at a few fixed k against plain decoding, alternating in
   one process: measured speedup against ``costmodel.adaptive.speedup``'s prediction from the c(n)
   and γ measured on the same engine and the measured acceptance. With a self-draft α = 1
   when the kernels are batch-invariant, so the prediction tests c(n), γ and the loop's
   overhead, not acceptance.
6. ``steps_exact``: step and c(n) again on the batch-invariant kernels (``exact=True``).

Prompts are seeded random token ids (synthetic models have no real vocabulary).
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

import edgespec
from edgespec import llama
from edgespec.costmodel import adaptive
from edgespec.costmodel.drafting import DraftingOptions
from edgespec.engine import Engine
from edgespec.events import Done, Round
from edgespec.measuring import tune

SCHEMA = 1
N_SPECIAL = 3  # the synthetic vocabularies end with three control tokens (synth_gguf.py)


# --------------------------------------------------------------------------------------
# Results file and time budget
# --------------------------------------------------------------------------------------


class Recorder:
    """The results dictionary, rewritten atomically to ``path`` after every phase."""

    def __init__(self, path: Path, budget_s: float) -> None:
        self.path = path
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "tool": "benchmarks/gpu/measure.py",
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "finished": None,
            "complete": False,
            "budget_s": budget_s,
            "phases": {},
        }

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=_json_default) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def phase(self, name: str, need_s: float, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` as phase ``name`` if at least ``need_s`` seconds are left; record its
        result under ``name``, its status and time under ``phases``; never raise."""
        entry: dict[str, Any] = {"status": "skipped", "seconds": 0.0}
        self.data["phases"][name] = entry
        if self.left() < need_s:
            entry["reason"] = f"{self.left():.0f} s left of the budget, the phase needs ~{need_s:.0f} s"
            _say(f"[{name}] skipped: {entry['reason']}")
            self.save()
            return None
        _say(f"[{name}] start ({self.left():.0f} s left)")
        t = time.monotonic()
        try:
            result = fn()
            self.data[name] = result
            entry["status"] = "done"
        except Exception as exc:  # noqa: BLE001 - a failed phase must not lose the others
            result = None
            entry["status"] = "error"
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()[-4000:]
            _say(f"[{name}] error: {entry['error']}")
        entry["seconds"] = round(time.monotonic() - t, 2)
        _say(f"[{name}] {entry['status']} in {entry['seconds']} s")
        self.save()
        return result


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _late(args: argparse.Namespace) -> bool:
    """Past the run's budget: long phases stop their loops and say they were cut short."""
    return time.monotonic() > getattr(args, "deadline", float("inf"))


def _r(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


# --------------------------------------------------------------------------------------
# Phase 1: the device
# --------------------------------------------------------------------------------------


def device_info() -> dict:
    info: dict[str, Any] = {
        "host": platform.node(),
        "machine": platform.machine(),
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "llama_cpp_python": llama.LLAMA_CPP_PYTHON_VERSION,
        "llama_cpp_from": getattr(importlib.util.find_spec("llama_cpp"), "origin", None),
        "edgespec_from": edgespec.__file__,
        "gpu_offload": llama.supports_gpu_offload(),
        "system_info": llama.system_info(),
        "gpus": [],
    }
    if shutil.which("nvidia-smi"):
        q = "name,memory.total,driver_version,compute_cap,clocks.max.sm,clocks.max.mem,power.limit"
        try:
            out = subprocess.run(
                ["nvidia-smi", f"--query-gpu={q}", "--format=csv,noheader,nounits"],
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout
            for line in out.strip().splitlines():
                f = [x.strip() for x in line.split(",")]
                info["gpus"].append(
                    dict(
                        zip(
                            [
                                "name",
                                "memory_mib",
                                "driver",
                                "compute_cap",
                                "max_sm_mhz",
                                "max_mem_mhz",
                                "power_limit_w",
                            ],
                            f,
                        )
                    )
                )
        except (OSError, subprocess.SubprocessError) as exc:
            info["nvidia_smi_error"] = str(exc)
    try:
        import psutil

        info["ram_bytes"] = psutil.virtual_memory().total
    except Exception:  # noqa: BLE001
        pass
    info["name"] = info["gpus"][0]["name"] if info["gpus"] else f"CPU ({platform.processor() or platform.machine()})"
    return info


# --------------------------------------------------------------------------------------
# Helpers
# --------------------------------------------------------------------------------------


def prompt_ids(n_vocab: int, length: int, seed: int) -> list[int]:
    """Seeded random ordinary token ids (no control tokens)."""
    rng = np.random.default_rng(seed)
    return [int(t) for t in rng.integers(0, n_vocab - N_SPECIAL, size=length)]


class Loaded:
    """A model and one context on it."""

    def __init__(self, path: Path, *, n_gpu_layers: int, exact: bool, n_ctx: int, n_threads: int | None) -> None:
        t = time.perf_counter()
        self.model = llama.Model(path, n_gpu_layers=n_gpu_layers, exact=exact)
        try:
            self.ctx = llama.Context(self.model, n_ctx=n_ctx, n_batch=512, n_threads=n_threads)
        except BaseException:
            self.model.close()
            raise
        self.load_s = time.perf_counter() - t

    def close(self) -> None:
        self.ctx.close()
        self.model.close()


def times_dict(t: tune.DecodeTimes) -> dict:
    fit = tune.fit_verify_cost(t.relative)
    return {
        "position": t.position,
        "repeats": t.repeats,
        "step_ms": _r(t.step_ms),
        "verify_ms": {str(n): _r(ms) for n, ms in sorted(t.target_ms.items())},
        "verify_cost_measured": {str(n): _r(c) for n, c in sorted(t.relative.items())},
        "verify_cost": {str(n): _r(fit(n)) for n in sorted(t.target_ms)},
        "draft_ms": _r(t.draft_ms),
        "gamma": _r(t.gamma),
    }


# --------------------------------------------------------------------------------------
# Phases 2 and 6: steps, c(n), γ
# --------------------------------------------------------------------------------------


def steps(models: dict[str, Path], pairs: list[tuple[str, str]], *, exact: bool, args: argparse.Namespace) -> dict:
    loaded: dict[str, Loaded] = {}
    out: dict[str, Any] = {"exact": exact, "models": {}, "gamma": []}
    try:
        for name, path in models.items():
            try:  # one model that fails to load must not lose the others' figures
                lm = loaded[name] = Loaded(
                    path, n_gpu_layers=args.n_gpu_layers, exact=exact, n_ctx=args.n_ctx, n_threads=args.threads
                )
            except Exception as exc:  # noqa: BLE001
                out.setdefault("errors", {})[name] = f"{type(exc).__name__}: {exc}"
                _say(f"  {name}: {out['errors'][name]}")
                continue
            prefix = prompt_ids(lm.model.n_vocab, args.position, seed=1)
            t = tune.time_decodes(lm.ctx, prefix, n_max=args.n_max, repeats=args.repeats)
            out["models"][name] = {
                "path": str(path),
                "bytes": path.stat().st_size,
                "model_size_bytes": lm.model.size_bytes,
                "n_params": lm.model.n_params,
                "n_layer": lm.model.n_layer,
                "n_vocab": lm.model.n_vocab,
                "load_s": _r(lm.load_s, 2),
                "batch_invariant_context": lm.ctx.batch_invariant,
                **times_dict(t),
            }
            _say(
                f"  {name}: step {t.step_ms:.3f} ms, c(2) {t.relative[2] if 2 in t.relative else float('nan'):.3f}, "
                f"c({args.n_max}) {t.relative[args.n_max]:.3f}"
            )
        for draft, target in pairs:
            if draft not in loaded or target not in loaded:
                continue
            tl, dl = loaded[target], loaded[draft]
            prefix = prompt_ids(min(tl.model.n_vocab, dl.model.n_vocab), args.position, seed=1)
            t = tune.time_decodes(tl.ctx, prefix, n_max=args.n_max, repeats=args.repeats, draft=dl.ctx)
            out["gamma"].append(
                {
                    "draft": draft,
                    "target": target,
                    "gamma": _r(t.gamma),
                    "draft_ms": _r(t.draft_ms),
                    "target_ms": _r(t.step_ms),
                    "verify_cost": times_dict(t)["verify_cost"],
                }
            )
            _say(f"  γ {draft} -> {target}: {t.gamma:.4f} ({t.draft_ms:.3f} / {t.step_ms:.3f} ms)")
    finally:
        for lm in loaded.values():
            lm.close()
    return out


# --------------------------------------------------------------------------------------
# Phase 3: batch invariance of the logits
# --------------------------------------------------------------------------------------


def batch_invariance(path: Path, *, args: argparse.Namespace) -> dict:
    out: dict[str, Any] = {"model": str(path), "n_max": args.n_max, "kernels": {}}
    for exact in (False, True):
        lm = Loaded(path, n_gpu_layers=args.n_gpu_layers, exact=exact, n_ctx=args.n_ctx, n_threads=args.threads)
        try:
            ctx = lm.ctx
            per_pos = []
            for pos in sorted({min(32, args.n_ctx // 4), min(args.long_position, args.n_ctx - args.n_max - 1)}):
                prefix = prompt_ids(lm.model.n_vocab, pos, seed=2)
                toks = prompt_ids(lm.model.n_vocab, args.n_max, seed=3)
                ctx.clear()
                ctx.decode(prefix, rows=())
                single = np.stack([ctx.decode([t]).copy()[0] for t in toks])
                ctx.rollback(pos)
                again = np.stack([ctx.decode([t]).copy()[0] for t in toks])  # run-to-run
                ctx.rollback(pos)
                rows = []
                for n in range(1, args.n_max + 1):
                    batch = ctx.decode(toks[:n], rows=range(n)).copy()
                    ctx.rollback(pos)
                    diff = np.abs(batch - single[:n])
                    rows.append(
                        {
                            "n": n,
                            "bit_identical": bool(np.array_equal(batch, single[:n])),
                            "max_abs_diff": _r(float(diff.max()), 6),
                            "argmax_same": bool(np.array_equal(batch.argmax(1), single[:n].argmax(1))),
                        }
                    )
                per_pos.append(
                    {
                        "position": pos,
                        "single_rerun_identical": bool(np.array_equal(single, again)),
                        "single_rerun_max_abs_diff": _r(float(np.abs(single - again).max()), 6),
                        "logit_std": _r(float(single.std()), 3),
                        "batches": rows,
                        "all_bit_identical": all(r["bit_identical"] for r in rows),
                        "max_abs_diff": max(r["max_abs_diff"] for r in rows),
                    }
                )
            out["kernels"][f"exact={exact}"] = {
                "batch_invariant_context": ctx.batch_invariant,
                "positions": per_pos,
                "all_bit_identical": all(p["all_bit_identical"] for p in per_pos),
                "max_abs_diff": max(p["max_abs_diff"] for p in per_pos),
            }
            _say(
                f"  exact={exact}: bit-identical for every n: {out['kernels'][f'exact={exact}']['all_bit_identical']}, "
                f"max |Δlogit| {out['kernels'][f'exact={exact}']['max_abs_diff']}"
            )
        finally:
            lm.close()
    return out


# --------------------------------------------------------------------------------------
# Phases 4 and 5: generations
# --------------------------------------------------------------------------------------


def _generate(engine: Engine, prompt: list[int], max_tokens: int) -> dict:
    """One greedy generation through ``Engine.stream``; tokens, stats and the rounds
    that saw a rejection (for the maximum-likelihood α)."""
    rounds_rejected = 0
    done = None
    for ev in engine.stream(prompt, max_tokens=max_tokens, temperature=0.0):
        if isinstance(ev, Round) and ev.rejected > 0:
            rounds_rejected += 1
        elif isinstance(ev, Done):
            done = ev
    assert done is not None
    s = done.stats
    return {"ids": list(done.token_ids), "stats": s, "rounds_rejected": rounds_rejected}


def _first_diff(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _engine(path: Path, exact: bool, k: int, args: argparse.Namespace) -> Engine:
    return Engine(
        path,
        draft=path,
        drafting=DraftingOptions(k=k, k_max=max(k, 1), p_min=0.0),
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        n_gpu_layers=args.n_gpu_layers,
        exact=exact,
    )


def exactness(path: Path, *, args: argparse.Namespace) -> dict:
    out: dict[str, Any] = {
        "model": str(path),
        "draft": "self (the same file)",
        "max_tokens": args.max_tokens,
        "ks": args.ks,
        "kernels": {},
    }
    for exact in (False, True):
        eng = _engine(path, exact, args.ks[0], args)
        try:
            n_vocab = eng.target_model.n_vocab
            cases = []
            for p in range(args.prompts):
                if _late(args) and cases:
                    out["cut_short"] = True
                    break
                prompt = prompt_ids(n_vocab, args.prompt_len, seed=100 + p)
                eng.set_drafter(None)
                plain = _generate(eng, prompt, args.max_tokens)["ids"]
                eng.set_drafter("model")
                for k in args.ks:
                    eng.set_k(k)
                    eng.set_k_max(k)
                    spec = _generate(eng, prompt, args.max_tokens)
                    fd = _first_diff(plain, spec["ids"])
                    cases.append(
                        {
                            "prompt": p,
                            "k": k,
                            "identical": fd is None,
                            "first_difference": fd,
                            "tokens": len(plain),
                            "acceptance_rate": _r(spec["stats"].acceptance_rate),
                        }
                    )
            out["kernels"][f"exact={exact}"] = {
                "exact_kernels": eng.exact_kernels,
                "cases": cases,
                "all_identical": all(c["identical"] for c in cases),
            }
            _say(f"  exact={exact}: speculation = plain in {sum(c['identical'] for c in cases)}/{len(cases)} cases")
        finally:
            eng.close()
    return out


def speculation(path: Path, *, exact: bool, args: argparse.Namespace) -> dict:
    """Self-draft speculation at fixed k against plain decoding on one engine."""
    eng = _engine(path, exact, args.ks[0], args)
    try:
        n_vocab = eng.target_model.n_vocab
        prefix = prompt_ids(n_vocab, args.position, seed=1)
        t = tune.time_decodes(eng.ctx, prefix, n_max=args.n_max, repeats=args.repeats, draft=eng.draft_ctx)
        c = tune.fit_verify_cost(t.relative)
        gamma = t.gamma or 1.0
        configs = [0, *args.ks]  # 0 = plain
        runs: dict[int, list[dict]] = {k: [] for k in configs}
        cut_short = False
        for rep in range(args.spec_repeats + 1):  # the first pass warms up and is dropped
            if rep > 1 and _late(args):
                cut_short = True
                break
            for p in range(args.prompts):
                prompt = prompt_ids(n_vocab, args.prompt_len, seed=200 + p)
                order = configs if (rep + p) % 2 == 0 else configs[::-1]
                for k in order:
                    if k == 0:
                        eng.set_drafter(None)
                    else:
                        eng.set_drafter("model")
                        eng.set_k(k)
                        eng.set_k_max(k)
                    eng.reset()  # every configuration decodes the prompt from scratch
                    g = _generate(eng, prompt, args.max_tokens)
                    if rep:
                        runs[k].append(g)

        def rate(rs: list[dict]) -> float:
            toks = sum(r["stats"].generated_tokens for r in rs)
            secs = sum(r["stats"].t_generate for r in rs)
            return toks / secs if secs > 0 else 0.0

        plain_rate = rate(runs[0])
        points = []
        for k in args.ks:
            rs = runs[k]
            st = [r["stats"] for r in rs]
            drafted = sum(s.drafted for s in st)
            accepted = sum(s.accepted for s in st)
            alpha = adaptive.estimate_alpha(accepted, drafted, sum(r["rounds_rejected"] for r in rs))
            alpha = 1.0 if alpha is None else alpha
            rounds = sum(s.rounds for s in st)
            t_gen = sum(s.t_generate for s in st)
            points.append(
                {
                    "k": k,
                    "tokens_per_second": _r(rate(rs), 3),
                    "measured_speedup": _r(rate(rs) / plain_rate if plain_rate else None),
                    "predicted_speedup": _r(adaptive.speedup(alpha, k, c, gamma)),
                    "predicted_speedup_alpha_1": _r(adaptive.speedup(1.0, k, c, gamma)),
                    "alpha": _r(alpha),
                    "acceptance_rate": _r(accepted / drafted if drafted else None),
                    "tokens_per_round": _r(sum(s.generated_tokens for s in st) / rounds if rounds else None),
                    "round_ms": _r(t_gen / rounds * 1e3 if rounds else None),
                    "verify_ms_per_round": _r(sum(s.t_verify for s in st) / rounds * 1e3 if rounds else None),
                    "draft_ms_per_round": _r(sum(s.t_decode_draft for s in st) / rounds * 1e3 if rounds else None),
                    "overhead_fraction": _r(statistics.mean(s.overhead_fraction for s in st) if st else None),
                }
            )
            _say(
                f"  k={k}: measured {points[-1]['measured_speedup']}x, predicted {points[-1]['predicted_speedup']}x "
                f"(α {points[-1]['alpha']})"
            )
        plain_st = [r["stats"] for r in runs[0]]
        plain_ms = (
            sum(s.t_generate for s in plain_st) / sum(s.generated_tokens for s in plain_st) * 1e3
            if plain_st and sum(s.generated_tokens for s in plain_st)
            else None
        )
        return {
            "model": str(path),
            "draft": "self (the same file)",
            "exact": exact,
            "exact_kernels": eng.exact_kernels,
            "max_tokens": args.max_tokens,
            "prompts": args.prompts,
            "repeats": args.spec_repeats,
            "cut_short": cut_short,
            "timing": times_dict(t),
            "plain_tokens_per_second": _r(plain_rate, 3),
            "plain_ms_per_token": _r(plain_ms),
            "plain_overhead_fraction": _r(statistics.mean(s.overhead_fraction for s in plain_st) if plain_st else None),
            "points": points,
        }
    finally:
        eng.close()


# --------------------------------------------------------------------------------------
# Main
# --------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=PATH",
        help="a model to time (repeat; the order is the order of timing)",
    )
    ap.add_argument(
        "--pair", action="append", default=[], metavar="DRAFT:TARGET", help="a γ pair of model names (repeat)"
    )
    ap.add_argument(
        "--spec-model",
        required=True,
        metavar="NAME",
        help="the model for the invariance, exactness and speculation phases",
    )
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--budget-s", type=float, default=240.0, help="stop starting phases after this")
    ap.add_argument("--n-gpu-layers", type=int, default=-1)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--n-ctx", type=int, default=2048)
    ap.add_argument("--n-max", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=7, help="timing sweeps for c(n)")
    ap.add_argument("--position", type=int, default=128, help="KV length the batches are timed at")
    ap.add_argument("--long-position", type=int, default=700, help="the long KV of the invariance check")
    ap.add_argument("--ks", default="1,2,4,8")
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--prompt-len", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--spec-repeats", type=int, default=2)
    ap.add_argument("--skip", default="", help="comma-separated phases to leave out")
    args = ap.parse_args(argv)
    args.ks = [int(k) for k in str(args.ks).split(",") if k.strip()]
    args.models = {}
    for item in args.model:
        name, _, path = item.partition("=")
        if not path:
            ap.error(f"--model wants NAME=PATH, got {item!r}")
        args.models[name] = Path(path)
    args.pairs = []
    for item in args.pair:
        d, _, t = item.partition(":")
        if d not in args.models or t not in args.models:
            ap.error(f"--pair {item}: both names must be given with --model")
        args.pairs.append((d, t))
    if args.spec_model not in args.models:
        ap.error("--spec-model must be one of the --model names")
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rec = Recorder(args.out, args.budget_s)
    args.deadline = rec.t0 + args.budget_s
    rec.data["settings"] = {
        "models": {k: str(v) for k, v in args.models.items()},
        "pairs": [list(p) for p in args.pairs],
        "spec_model": args.spec_model,
        "n_gpu_layers": args.n_gpu_layers,
        "threads": args.threads,
        "n_ctx": args.n_ctx,
        "n_max": args.n_max,
        "repeats": args.repeats,
        "position": args.position,
        "long_position": args.long_position,
        "ks": args.ks,
        "prompts": args.prompts,
        "prompt_len": args.prompt_len,
        "max_tokens": args.max_tokens,
        "spec_repeats": args.spec_repeats,
        "env": {k: os.environ[k] for k in sorted(os.environ) if k.startswith(("GGML_", "EDGESPEC_", "CUDA_"))},
    }
    spec = args.models[args.spec_model]
    # (name, seconds it needs at least on the H200, what it does); the order is the priority
    plan: list[tuple[str, float, Callable[[], Any]]] = [
        ("device", 0, device_info),
        ("steps", 20, lambda: steps(args.models, args.pairs, exact=False, args=args)),
        ("batch_invariance", 10, lambda: batch_invariance(spec, args=args)),
        ("exactness", 15, lambda: exactness(spec, args=args)),
        ("speculation", 20, lambda: speculation(spec, exact=False, args=args)),
        ("speculation_exact", 20, lambda: speculation(spec, exact=True, args=args)),
        ("steps_exact", 20, lambda: steps(args.models, args.pairs, exact=True, args=args)),
    ]
    for name, need, fn in plan:
        if name in args.skip:
            rec.data["phases"][name] = {"status": "skipped", "seconds": 0.0, "reason": "--skip"}
            continue
        rec.phase(name, need, fn)
    rec.data["finished"] = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    rec.data["complete"] = all(p["status"] == "done" for p in rec.data["phases"].values())
    rec.save()
    _say(summary(rec.data))
    return 0 if all(p["status"] != "error" for p in rec.data["phases"].values()) else 1


def summary(d: dict) -> str:
    """A short table of the results, for the end of the run's output."""
    lines = [f"device: {d.get('device', {}).get('name', '?')}"]
    st = d.get("steps") or {}
    for name, m in (st.get("models") or {}).items():
        c = m["verify_cost"]
        lines.append(
            f"{name:>14}: step {m['step_ms']:.3f} ms  c(2) {c.get('2')}  c(4) {c.get('4')}  "
            f"c(8) {c.get('8')}  c(16) {c.get('16')}"
        )
    for g in st.get("gamma") or []:
        lines.append(f"γ {g['draft']} -> {g['target']}: {g['gamma']}")
    for key in ("batch_invariance", "exactness"):
        for kern, v in ((d.get(key) or {}).get("kernels") or {}).items():
            flag = v.get("all_bit_identical", v.get("all_identical"))
            lines.append(
                f"{key} {kern}: {flag}" + (f"  max |Δlogit| {v['max_abs_diff']}" if "max_abs_diff" in v else "")
            )
    for key in ("speculation", "speculation_exact"):
        sp = d.get(key) or {}
        for p in sp.get("points") or []:
            lines.append(
                f"{key} k={p['k']}: measured {p['measured_speedup']}x  predicted {p['predicted_speedup']}x  "
                f"α {p['alpha']}  overhead {p['overhead_fraction']}"
            )
    lines.append("phases: " + ", ".join(f"{k} {v['status']}" for k, v in d.get("phases", {}).items()))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
