"""Turn a ``measure.py`` results JSON into a device profile (TOML) of measured figures.

    python benchmarks/gpu/to_profile.py gpu_results.json --name h200 --out edgespec/profile_data/h200.toml

What the run measured on the device is written ``status = "measured"`` with its source:
the step-time model (``overhead_ms`` and ``decode_gbs``, fitted over the three models'
steps), c(n) (the 7B's, device-wide; the 1.5B's for its pairs), γ and the target step of
each catalog pair with the measured shapes, and ``exact_slowdown`` (plain decoding on the
batch-invariant kernels against llama.cpp's). Memory comes from nvidia-smi. What synthetic
models cannot measure — acceptance, the n-gram drafter's figures — is taken over from a
base profile (``--base``, default rtx4090) with its own status and source, and the pair α
measured on the development CPU with the real models (cpu-small) is carried over marked
``estimated``, since acceptance is a property of the models rather than of the device.

The TOML is checked by loading it with ``edgespec.profiles.load_profile`` (as a user profile
in a temporary folder) before it is written.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from edgespec import profiles
from edgespec.profiles.store import dump_toml

# (catalog pair, target model name, draft model name) in measure.py's results
PAIRS = (
    ("qwen2.5-coder-7b+0.5b", "qwen2.5-7b", "qwen2.5-0.5b"),
    ("qwen2.5-7b+0.5b", "qwen2.5-7b", "qwen2.5-0.5b"),
    ("qwen2.5-coder-1.5b+0.5b", "qwen2.5-1.5b", "qwen2.5-0.5b"),
    ("qwen2.5-1.5b+0.5b", "qwen2.5-1.5b", "qwen2.5-0.5b"),
)
DEVICE_VERIFY_MODEL = "qwen2.5-7b"
# published peak memory bandwidth, GB/s, for the datacenter GPUs this may run on
DATASHEET_GBS = {"H200": 4800, "H100": 3350, "A100": 2039}
GAMMA_MAX = 10.0  # the profile schema's range for a pair's γ


def _fig(value: float, status: str, source: str, date: _dt.date | None = None, nd: int = 4) -> dict:
    d: dict[str, Any] = {"value": round(float(value), nd), "status": status, "source": source}
    if date is not None and status == "measured":
        d["date"] = date
    return d


def _verify(c: dict[str, float], status: str, source: str, date: _dt.date) -> dict:
    ns = sorted(int(n) for n in c if int(n) >= 2)
    return {
        "n": ns,
        "c": [round(max(1.0, float(c[str(n)])), 4) for n in ns],
        "status": status,
        "source": source,
        "date": date,
    }


def fit_step_model(models: dict[str, dict]) -> tuple[float, float] | None:
    """(overhead_ms, decode_gbs): least squares of step_ms = overhead + bytes / gbs over
    the models; None when the sizes do not determine it or the fit is not physical."""
    pts = [(float(m["model_size_bytes"]), float(m["step_ms"])) for m in models.values()]
    xs = sorted({x for x, _ in pts})
    if len(xs) < 2:
        return None
    n = len(pts)
    mx = sum(x for x, _ in pts) / n
    my = sum(y for _, y in pts) / n
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx  # ms per byte
    overhead = my - slope * mx
    if slope <= 0 or overhead < 0:
        return None
    gbs = 1e-9 / (slope * 1e-3)  # bytes per second / 1e9
    return overhead, gbs


def _device_name(res: dict) -> str:
    return (res.get("device") or {}).get("name") or "unknown device"


def _gpu_key(name: str) -> str:
    """A substring of nvidia-smi's name to match on: "NVIDIA H200" -> "H200"."""
    return re.sub(r"^(NVIDIA|Tesla)\s+", "", name).strip() or name


def build(res: dict, *, name: str, base: str = "rtx4090", alpha_from: str = "cpu-small") -> dict:
    """The profile's TOML data from a results dictionary."""
    dev = res.get("device") or {}
    steps = res.get("steps") or {}
    models = steps.get("models") or {}
    if not models:
        raise ValueError("the results hold no step times (the 'steps' phase did not run)")
    date = _dt.date.fromisoformat(str(res.get("started", _dt.date.today().isoformat()))[:10])
    gpus = dev.get("gpus") or []
    dev_name = _device_name(res)
    on_gpu = bool(gpus) and bool(dev.get("gpu_offload"))
    settings = res.get("settings") or {}
    where = (
        f"benchmarks/gpu/measure.py on {dev_name}"
        + (f" (driver {gpus[0].get('driver')})" if gpus else "")
        + f", llama-cpp-python {dev.get('llama_cpp_python', '?')}, synthetic Qwen2.5 of the real Q4_K_M "
        "shapes (random weights)"
    )
    kernels = "llama.cpp's kernels (exact=False)"
    sweeps = (
        f"one decode of n tokens with logits at every row at KV {settings.get('position', '?')}, "
        f"medians of {settings.get('repeats', '?')} sweeps (tune.time_decodes)"
    )
    b = profiles.load_profile(base)
    a = profiles.load_profile(alpha_from)

    # memory
    if on_gpu:
        mib = float(gpus[0]["memory_mib"])
        models_gb = _fig(
            mib * 1.048576 / 1000 - 1.0,
            "measured",
            f"nvidia-smi memory.total {mib:.0f} MiB on {dev_name}, less 1 GB for the CUDA context",
            date,
            1,
        )
        key = next((k for k in DATASHEET_GBS if k in dev_name), None)
        bandwidth = (
            _fig(DATASHEET_GBS[key], "estimated", f"NVIDIA's published memory bandwidth for the {key}")
            if key
            else b.bandwidth_gbs.to_dict()
        )
    else:
        ram = float(dev.get("ram_bytes") or 8e9)
        models_gb = _fig(
            ram / 1e9 * 0.75, "measured", f"RAM reported by psutil on {dev_name}, three quarters of it", date, 1
        )
        bandwidth = a.bandwidth_gbs.to_dict()  # a CPU run (the tests): the CPU profile's figure

    cost: dict[str, Any] = {}
    fit = fit_step_model(models)
    sizes = ", ".join(f"{n} {m['model_size_bytes'] / 1e9:.2f} GB {m['step_ms']:.3f} ms" for n, m in models.items())
    if fit is not None:
        cost["overhead_ms"] = _fig(
            fit[0], "measured", f"{where}: step = overhead + bytes / rate, least squares over {sizes}; {kernels}", date
        )
        cost["decode_gbs"] = _fig(
            fit[1], "measured", f"{where}: fitted with overhead_ms over {sizes}; {kernels}", date, 1
        )
    else:
        best = max(models.values(), key=lambda m: m["model_size_bytes"] / m["step_ms"])
        cost["overhead_ms"] = _fig(
            0.0,
            "estimated",
            f"{where}: the step times ({sizes}) do not fit overhead + bytes / rate, so no overhead is assumed",
        )
        cost["decode_gbs"] = _fig(
            best["model_size_bytes"] / (best["step_ms"] * 1e-3) / 1e9,
            "measured",
            f"{where}: bytes read per second in the fastest-per-byte step ({sizes})",
            date,
            1,
        )
    vmodel = DEVICE_VERIFY_MODEL if DEVICE_VERIFY_MODEL in models else max(models, key=lambda n: models[n]["bytes"])
    cost["verify"] = _verify(
        models[vmodel]["verify_cost"],
        "measured",
        f"{where}: c(n) of {vmodel}, {sweeps}, fitted non-decreasing; {kernels}",
        date,
    )
    for key in ("alpha_model", "alpha_ngram", "ngram_hit", "gamma_ngram"):
        f = getattr(b, key).to_dict()
        f["source"] = f"taken over from the {base} profile (synthetic models cannot measure it): {f['source']}"
        cost[key] = f

    # exact_slowdown: plain generations on both kinds of kernels, else single steps
    sp, spx = res.get("speculation") or {}, res.get("speculation_exact") or {}
    stx = ((res.get("steps_exact") or {}).get("models")) or {}
    if sp.get("plain_tokens_per_second") and spx.get("plain_tokens_per_second"):
        r = sp["plain_tokens_per_second"] / spx["plain_tokens_per_second"]
        cost["exact_slowdown"] = _fig(
            min(5.0, max(0.5, r)),
            "measured",
            f"{where}: plain decoding of {Path(sp['model']).name}, llama.cpp's kernels "
            f"{sp['plain_tokens_per_second']:.1f} tok/s vs batch-invariant (exact=True) "
            f"{spx['plain_tokens_per_second']:.1f} tok/s",
            date,
            3,
        )
    elif stx:
        n = next(iter(stx))
        r = stx[n]["step_ms"] / models[n]["step_ms"]
        cost["exact_slowdown"] = _fig(
            min(5.0, max(0.5, r)),
            "measured",
            f"{where}: single-token step of {n}, exact=True {stx[n]['step_ms']:.3f} ms vs "
            f"exact=False {models[n]['step_ms']:.3f} ms",
            date,
            3,
        )
    else:
        cost["exact_slowdown"] = b.exact_slowdown.to_dict()

    gammas = {(g["draft"], g["target"]): g for g in steps.get("gamma") or []}
    left_out: list[str] = []
    pair_tables: dict[str, Any] = {}
    for pair, target, draft in PAIRS:
        if target not in models:
            continue
        t: dict[str, Any] = {}
        g = gammas.get((draft, target))
        if g is not None and g.get("gamma") is not None and not 0 < g["gamma"] <= GAMMA_MAX:
            left_out.append(f"{pair} gamma {g['gamma']} (outside the schema's 0..{GAMMA_MAX}: a noisy run)")
        elif g is not None and g.get("gamma") is not None:
            t["gamma"] = _fig(
                g["gamma"],
                "measured",
                f"{where}: {draft} step {g['draft_ms']:.3f} ms / {target} step "
                f"{g['target_ms']:.3f} ms, timed in the same sweeps; {kernels}",
                date,
            )
        t["target_step_ms"] = _fig(
            models[target]["step_ms"],
            "measured",
            f"{where}: {target} single-token step at KV {models[target]['position']}; {kernels}",
            date,
            3,
        )
        if target != vmodel:
            t["verify"] = _verify(
                models[target]["verify_cost"],
                "measured",
                f"{where}: c(n) of {target}, {sweeps}, fitted non-decreasing; {kernels}",
                date,
            )
        pa = a.pair_cost(pair).alpha
        if pa is not None:
            t["alpha"] = _fig(
                pa.value,
                "estimated",
                f"acceptance is the models', not the device's: {pa.status} on "
                f"the development CPU ({alpha_from} profile): {pa.source}",
            )
        pair_tables[pair] = t
    if pair_tables:
        cost["pair"] = pair_tables

    gamma_note = "; ".join(f"γ {d} -> {t_} = {g['gamma']}" for (d, t_), g in gammas.items())
    return {
        "_comment": [
            f"edgespec device profile: {dev_name}, measured by benchmarks/gpu ({res.get('started', '?')}).",
            "Figures marked measured come from that run; the rest say where they come from.",
            *([f"All measured γ: {gamma_note}."] if gamma_note else []),
            *[f"Not written: {x}." for x in left_out],
        ],
        "schema": 1,
        "name": name,
        "description": f"{dev_name}"
        + (f", {float(gpus[0]['memory_mib']) / 1024:.0f} GiB" if on_gpu else "")
        + " (figures measured by benchmarks/gpu)",
        "backend": "cuda" if on_gpu else "cpu",
        "match": {"kind": "nvidia", "gpus": [_gpu_key(dev_name)]} if on_gpu else {"kind": "cpu"},
        "memory": {"models_gb": models_gb, "bandwidth_gbs": bandwidth, "headroom_gb": 1.5 if on_gpu else 0.75},
        "run": {"n_threads": "physical", "n_gpu_layers": -1 if on_gpu else 0, "n_ctx": 4096},
        "choice": {
            "pairs": list(b.pairs),
            "drafters": list(b.drafters),
            "k_min": b.k_min,
            "k_max": b.k_max,
            "p_min": b.p_min,
            "min_gain": b.min_gain,
        },
        "cost": cost,
    }


# --------------------------------------------------------------------------------------
# TOML
# --------------------------------------------------------------------------------------


def to_toml(data: dict) -> str:
    """The profile as TOML, written by edgespec's own writer (``profiles.store.dump_toml``);
    ``_comment`` lines become the file's header and other ``_`` keys are left out."""
    header = "".join(f"# {c}\n" for c in data.get("_comment", []))
    return header + dump_toml({k: v for k, v in data.items() if not k.startswith("_")})


def check(text: str, name: str) -> profiles.Profile:
    """Load ``text`` as the user profile ``name`` with edgespec's own loader."""
    old = os.environ.get("XDG_CONFIG_HOME")
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "edgespec" / "profiles"
        d.mkdir(parents=True)
        (d / f"{name}.toml").write_text(text, encoding="utf-8")
        os.environ["XDG_CONFIG_HOME"] = tmp
        try:
            return profiles.load_profile(name)
        finally:
            if old is None:
                os.environ.pop("XDG_CONFIG_HOME", None)
            else:
                os.environ["XDG_CONFIG_HOME"] = old


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path)
    ap.add_argument("--name", default="h200")
    ap.add_argument("--base", default="rtx4090", help="profile the unmeasurable figures come from")
    ap.add_argument("--alpha-from", default="cpu-small", help="profile whose measured pair α is carried over")
    ap.add_argument("--out", type=Path, help="write here (default: stdout)")
    args = ap.parse_args(argv)
    res = json.loads(args.results.read_text(encoding="utf-8"))
    text = to_toml(build(res, name=args.name, base=args.base, alpha_from=args.alpha_from))
    prof = check(text, args.name)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}: profile {prof.name}, {len(prof.figures())} figures", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
