"""c(n) per weight type on this machine: the rows of ``edgespec.costmodel.priors``' CPU table.

Requantizes the embedded target (Qwen2.5-Coder-1.5B Q4_K_M) to each weight type asked
for with llama.cpp's own quantize API (``llama_model_quantize``, through llama_cpp's
low-level binding; ``allow_requantize``: timing only, the weights' quality is not the
point) into a scratch folder, then times ``llama_decode`` of n = 1..16 tokens with
logits at every row against 1 on llama.cpp's default kernels (``exact=False``), with
``measuring.tune.time_decodes`` (sweeps alternating direction, each n decoded, timed
and rolled back at the same KV position), and prints c(n) = median(n) / median(1) per
type, with the weight mix ``catalog.gguf.weight_mix`` reads from each file.

    python -m benchmarks.verify_curve --types Q4_K_M Q4_0 IQ4_NL Q8_0 --repeats 12 --out /tmp/vc

The quantized copies are kept in ``--out`` (about 1 GB each) and reused when present.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import llama_cpp

from edgespec.catalog import resolve_model
from edgespec.catalog.gguf import weight_mix
from edgespec.catalog.table import DEFAULT_TARGET
from edgespec.llama.context import Context
from edgespec.llama.model import Model
from edgespec.measuring.tune import time_decodes

FTYPES = {"Q4_0": 2, "Q8_0": 7, "Q4_K_M": 15, "IQ4_NL": 25}
PROMPT = (
    'def merge_intervals(intervals):\n    """Merge overlapping intervals and return them sorted."""\n'
    "    intervals = sorted(intervals)\n    out = []\n    for start, end in intervals:\n"
)


def quantize(src: Path, kind: str, out: Path, threads: int) -> Path:
    """``src`` requantized to ``kind`` in ``out`` (kept; reused when there)."""
    dst = out / f"{src.stem}.{kind}.gguf"
    if dst.exists():
        return dst
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = FTYPES[kind]
    params.nthread = threads
    params.allow_requantize = True
    t0 = time.perf_counter()
    rc = llama_cpp.llama_model_quantize(str(src).encode(), str(dst).encode(), params)
    if rc != 0:
        raise SystemExit(f"llama_model_quantize to {kind} failed ({rc})")
    print(f"quantized {kind} in {time.perf_counter() - t0:.0f} s: {dst}", flush=True)
    return dst


def curve(path: Path, *, repeats: int, threads: int, n_max: int) -> dict:
    model = Model(path, exact=False)
    ctx = Context(model, n_ctx=512, n_batch=64, n_threads=threads)
    prefix = model.tokenize(PROMPT)
    times = time_decodes(ctx, prefix, n_max=n_max, repeats=repeats)
    ms = times.target_ms
    ctx.close()
    model.close()
    return {"step_ms": round(ms[1], 2), "c": {n: round(ms[n] / ms[1], 3) for n in sorted(ms)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--types", nargs="+", default=["Q4_K_M", "Q4_0", "IQ4_NL", "Q8_0"])
    ap.add_argument("--repeats", type=int, default=12)
    ap.add_argument("--n-max", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=Path("/tmp/verify_curve"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    src = resolve_model(DEFAULT_TARGET)
    results = {}
    for kind in args.types:
        path = src if kind == "Q4_K_M" else quantize(src, kind, args.out, args.threads)
        r = curve(path, repeats=args.repeats, threads=args.threads, n_max=args.n_max)
        r["mix"] = weight_mix(path)
        results[kind] = r
        cs = " ".join(f"{r['c'][n]:.2f}" for n in sorted(r["c"]))
        print(f"{kind:7} mix {r['mix']:7} step {r['step_ms']:.1f} ms  c(1..{args.n_max}): {cs}", flush=True)
    summary = {k: {"mix": r["mix"], "step_ms": r["step_ms"], "c": r["c"]} for k, r in results.items()}
    (args.out / "verify_curve.json").write_text(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
