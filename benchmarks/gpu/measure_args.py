"""The command line of ``measure.py`` (benchmarks/gpu/): its options, checked and turned
into the models, pairs, k values and skipped phases the run uses, and the settings record
the results file keeps. Knows nothing of how the phases measure.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path


def parse_args(argv: list[str] | None, description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
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


def settings(args: argparse.Namespace) -> dict:
    """What the run was asked for, as the results file records it."""
    return {
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
