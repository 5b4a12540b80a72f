"""The phases of ``measure.py`` (benchmarks/gpu/) that time and compare models directly through
``llama.Model``/``llama.Context``: the device, each model's step and c(n) and each pair's γ
(phases 2 and 6), and the batch invariance of the logits (phase 3); with the helpers the
engine phases share (seeded prompts, the timing record). Knows nothing of the ``Engine``.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import platform
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import numpy as np
from measure_report import rnd, say

import edgespec
from edgespec import llama
from edgespec.measuring import tune

N_SPECIAL = 3  # the synthetic vocabularies end with three control tokens (synth_gguf.py)


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
        "step_ms": rnd(t.step_ms),
        "verify_ms": {str(n): rnd(ms) for n, ms in sorted(t.target_ms.items())},
        "verify_cost_measured": {str(n): rnd(c) for n, c in sorted(t.relative.items())},
        "verify_cost": {str(n): rnd(fit(n)) for n in sorted(t.target_ms)},
        "draft_ms": rnd(t.draft_ms),
        "gamma": rnd(t.gamma),
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
                say(f"  {name}: {out['errors'][name]}")
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
                "load_s": rnd(lm.load_s, 2),
                "batch_invariant_context": lm.ctx.batch_invariant,
                **times_dict(t),
            }
            say(
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
                    "gamma": rnd(t.gamma),
                    "draft_ms": rnd(t.draft_ms),
                    "target_ms": rnd(t.step_ms),
                    "verify_cost": times_dict(t)["verify_cost"],
                }
            )
            say(f"  γ {draft} -> {target}: {t.gamma:.4f} ({t.draft_ms:.3f} / {t.step_ms:.3f} ms)")
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
                            "max_abs_diff": rnd(float(diff.max()), 6),
                            "argmax_same": bool(np.array_equal(batch.argmax(1), single[:n].argmax(1))),
                        }
                    )
                per_pos.append(
                    {
                        "position": pos,
                        "single_rerun_identical": bool(np.array_equal(single, again)),
                        "single_rerun_max_abs_diff": rnd(float(np.abs(single - again).max()), 6),
                        "logit_std": rnd(float(single.std()), 3),
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
            say(
                f"  exact={exact}: bit-identical for every n: {out['kernels'][f'exact={exact}']['all_bit_identical']}, "
                f"max |Δlogit| {out['kernels'][f'exact={exact}']['max_abs_diff']}"
            )
        finally:
            lm.close()
    return out
