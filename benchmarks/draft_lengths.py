"""Micro-benchmark: the draft lengths of one batch step, the old scan against the heap.

``costmodel.adaptive.batch_draft_lengths`` runs once per step of every parallel batch (``generate
--input``, ``serve --parallel``). Until issue 22 it scanned every sequence's whole curve
for each pick (picks x sequences x length); it now keeps a heap of marginal gains per
move length. ``scan_draft_lengths`` below is the old code as it was, kept as the
reference that ``tests/test_adaptive.py`` checks the heap against.

The inputs are what a batch of prompt lookup sequences hands it: per sequence, the
expected-tokens curve of its proposal (0 to 15 ids; acceptance rates drawn as the policy
draws them, from Beta posteriors, high for copied spans), and the batch's ``OnlineCost``
over a CPU or a GPU batch prior. Both functions get the same inputs and must give the
same lengths; the script counts any difference.

    flock /tmp/edgespec-bench.lock python -m benchmarks.draft_lengths --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from benchmarks.common import commit
from edgespec.costmodel.adaptive import batch_draft_lengths
from edgespec.costmodel.costs import CPU_BATCH_PRIOR, GPU_BATCH_PRIOR, OnlineCost


def scan_draft_lengths(
    curves: Sequence[Sequence[float] | None], lengths: list[int], cost: Callable[[int], float]
) -> list[int]:
    """The draft lengths as ``costmodel.adaptive.batch_draft_lengths`` chose them before issue 22:
    each pick scans every sequence's curve once."""
    lengths = list(lengths)
    rows = len(curves) + sum(lengths)
    gain = float(len(curves))
    best = gain / cost(rows)
    while True:
        pick = None
        for i, curve in enumerate(curves):
            if not curve:
                continue
            base = curve[lengths[i]]
            for n in range(lengths[i] + 1, len(curve)):
                r = (gain + curve[n] - base) / cost(rows + n - lengths[i])
                if r > best:
                    best, pick = r, (i, n)
        if pick is None:
            return lengths
        i, n = pick
        gain += curves[i][n] - curves[i][lengths[i]]
        rows += n - lengths[i]
        lengths[i] = n


def batch_curves(rng: np.random.Generator, n_seq: int, copying: float) -> list[list[float]]:
    """One step's curves: a share ``copying`` of the sequences are in a copied span (long
    proposals, rates near 1); the rest propose a little or nothing, rarely accepted."""
    curves = []
    for _ in range(n_seq):
        if rng.random() < copying:
            rates = rng.beta(18.0, 2.0, size=int(rng.integers(8, 16)))
        else:
            rates = rng.beta(2.0, 6.0, size=int(rng.integers(0, 6)))
        curve, p = [1.0], 1.0
        for a in rates:
            p *= float(a)
            curve.append(curve[-1] + p)
        curves.append(curve)
    return curves


def measure(fn, cases, cost) -> list[float]:
    """Seconds per call, one per case (after one warm-up pass)."""
    for curves in cases[:5]:
        fn(curves, [0] * len(curves), cost)
    times = []
    for curves in cases:
        t0 = time.perf_counter()
        fn(curves, [0] * len(curves), cost)
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="8,32,64", help="sequences per batch, comma-separated")
    ap.add_argument("--cases", type=int, default=300, help="random batch steps per size and prior")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, help="write the results here")
    args = ap.parse_args()
    rows = []
    for prior_name, prior in (("cpu", CPU_BATCH_PRIOR), ("gpu", GPU_BATCH_PRIOR)):
        cost = OnlineCost(prior, n_max=128)
        for n_seq in (int(x) for x in args.sizes.split(",")):
            rng = np.random.default_rng(args.seed + n_seq)
            cases = [batch_curves(rng, n_seq, copying=rng.uniform(0.1, 0.9)) for _ in range(args.cases)]
            differ = sum(
                scan_draft_lengths(c, [0] * n_seq, cost) != batch_draft_lengths(c, [0] * n_seq, cost) for c in cases
            )
            old, new = measure(scan_draft_lengths, cases, cost), measure(batch_draft_lengths, cases, cost)
            drafted = statistics.mean(sum(batch_draft_lengths(c, [0] * n_seq, cost)) for c in cases)
            row = {
                "prior": prior_name,
                "sequences": n_seq,
                "cases": len(cases),
                "differ": differ,
                "mean_rows_drafted": round(drafted, 1),
                "old_ms_median": round(statistics.median(old) * 1e3, 4),
                "old_ms_p90": round(float(np.percentile(old, 90)) * 1e3, 4),
                "new_ms_median": round(statistics.median(new) * 1e3, 4),
                "new_ms_p90": round(float(np.percentile(new, 90)) * 1e3, 4),
            }
            row["speedup_median"] = round(row["old_ms_median"] / row["new_ms_median"], 1)
            rows.append(row)
            print(
                f"{prior_name} {n_seq:3d} sequences: old {row['old_ms_median']:.3f} ms "
                f"(p90 {row['old_ms_p90']:.3f}), heap {row['new_ms_median']:.3f} ms "
                f"(p90 {row['new_ms_p90']:.3f}), {row['speedup_median']}x; "
                f"{row['mean_rows_drafted']} rows drafted on average; {differ} of {len(cases)} differ"
            )
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "commit": commit(),
                    "machine": platform.machine(),
                    "python": platform.python_version(),
                    "results": rows,
                },
                indent=2,
            )
            + "\n"
        )


if __name__ == "__main__":
    main()
