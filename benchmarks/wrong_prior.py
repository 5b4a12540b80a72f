"""A wrong c(n) prior on this machine: what it costs before the learned cost corrects it.

Prompt lookup (``draft="ngram"``, the memory off) starts from a deliberately wrong
verify-cost curve, on the real model and on its ``models optimize`` copy:

* ``gpu``: the CUDA table's curve for the file's weight type (``costmodel.priors``):
  verifying 8 tokens for about 2 steps, where this CPU pays 3-5;
* ``q4km-on-q4_0`` (the copy only): the Q4_K_M curve on a Q4_0 file, which calls the
  lengths that Q4_0's tiles make cheap (4, 8) dear.

against the right prior (the CPU table's row for the file's type) and plain decoding.
Every generation runs on an engine built for it, so each one starts from its prior
with nothing learned: the first use of a device. Per generation, the rate over its
first ``--split`` tokens and over the rest (from the first token's arrival), each
against plain decoding's in the same pass, order rotated. Issue 37's goal: never
below 0.9x plain in the first 64 tokens, and within 5% of the right prior's speed after.

The prompts: the grounded ones of ``benchmarks/prompts/weights.py`` (held out).

    python -m benchmarks.wrong_prior --passes 2 --out benchmarks/results/wrong-prior-DATE.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from benchmarks.common import commit, geomean, machine_info
from benchmarks.prompts.weights import PROMPTS
from benchmarks.weight_types import run_one
from edgespec import Engine
from edgespec.catalog import read_header, resolve_model
from edgespec.catalog.optimized import optimized_copy_for
from edgespec.costmodel import priors
from edgespec.costmodel.drafting import DraftingOptions


def curves(mix: str) -> dict:
    """The priors each engine of a file of weight type ``mix`` starts from (None: plain)."""
    out = {
        "plain": None,
        "right": priors.verify_prior("cpu", mix),
        "gpu": priors.verify_prior("cuda", mix),
    }
    if priors.mix_key(mix) == "Q4_0":
        out["q4km-on-q4_0"] = priors.CPU_Q4_K_M
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--copy", default=None, help="the Q4_0 copy (default: the one models optimize wrote)")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--split", type=int, default=64)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)

    target = Path(resolve_model(args.target))
    copy = Path(args.copy) if args.copy else optimized_copy_for(target)
    files = [target] + ([copy] if copy else [])
    prompts = [p for p in PROMPTS if p[2]]
    runs: dict = {}
    for path in files:
        mix = read_header(path).quant
        for name in curves(mix):
            runs[(mix, name)] = {p[0]: [] for p in prompts}

    def engine(path: Path, prior) -> Engine:
        if prior is None:
            return Engine(path, n_threads=args.threads)
        opts = DraftingOptions(memory=False, verify_cost=prior)
        return Engine(path, draft="ngram", drafting=opts, n_threads=args.threads)

    for path in files:  # warm-up: the page cache and thread pools
        with engine(path, None) as eng:
            run_one(eng, prompts[0][3], 16)
    for rep in range(args.passes):
        for i, (pname, _kind, _g, text) in enumerate(prompts):
            for path in files:
                mix = read_header(path).quant
                names = list(curves(mix).items())
                shift = (rep + i) % len(names)
                for name, prior in names[shift:] + names[:shift]:
                    with engine(path, prior) as eng:
                        r = run_one(eng, text, args.max_tokens, split=args.split)
                    runs[(mix, name)][pname].append(r)
                    print(
                        f"[{rep + 1}/{args.passes}] {pname} {mix} {name}: first {r['early_tps'] or 0:.1f}, "
                        f"rest {r['late_tps'] or 0:.1f} tok/s",
                        file=sys.stderr,
                    )

    def ratio(mix: str, name: str, base: str, key: str) -> float | None:
        per_prompt = []
        for p in prompts:
            pairs = [
                (a[key], b[key]) for a, b in zip(runs[(mix, name)][p[0]], runs[(mix, base)][p[0]]) if a[key] and b[key]
            ]
            if pairs:
                per_prompt.append(statistics.median(x / y for x, y in pairs))
        return geomean(per_prompt, 3)

    summary: dict = {}
    for mix, name in runs:
        if name == "plain":
            continue
        summary[f"{mix} {name}"] = {
            "first_vs_plain": ratio(mix, name, "plain", "early_tps"),
            "rest_vs_plain": ratio(mix, name, "plain", "late_tps"),
            "rest_vs_right": ratio(mix, name, "right", "late_tps") if name != "right" else 1.0,
        }
    print(f"\n{'prior':26} {'first ' + str(args.split) + ' vs plain':>18} {'rest vs plain':>14} {'rest vs right':>14}")
    for key, s in summary.items():
        print(f"{key:26} {s['first_vs_plain']!s:>18} {s['rest_vs_plain']!s:>14} {s['rest_vs_right']!s:>14}")
    if args.out:
        rows = {
            f"{mix} {name}": {
                p: [{k: r[k] for k in ("early_tps", "late_tps", "tps", "tokens", "drafted", "accepted")} for r in rs]
                for p, rs in by_prompt.items()
            }
            for (mix, name), by_prompt in runs.items()
        }
        out = {
            "commit": commit(),
            "machine": machine_info(),
            "files": [str(f) for f in files],
            "max_tokens": args.max_tokens,
            "split": args.split,
            "passes": args.passes,
            "summary": summary,
            "runs": rows,
        }
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
