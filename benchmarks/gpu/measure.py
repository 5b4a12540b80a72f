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

This module is the entry point and the order of the phases; the rest lives beside it:
``measure_args.py`` (the command line), ``measure_steps.py`` (phases 1-3 and 6, through
``llama.Model``/``llama.Context``), ``measure_engine.py`` (phases 4-5, through ``Engine``) and
``measure_report.py`` (the results file, the time budget and the closing summary).
"""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import Any, Callable

# run by path (run.sh, tests/test_gpu_bench.py) or with -m: its sibling modules import by name
sys.path.insert(0, str(Path(__file__).resolve().parent))

from measure_args import parse_args, settings  # noqa: E402
from measure_engine import exactness, speculation  # noqa: E402
from measure_report import Recorder, say, summary  # noqa: E402
from measure_steps import batch_invariance, device_info, steps  # noqa: E402

__all__ = ["Recorder", "main", "parse_args", "summary"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, __doc__.splitlines()[0])
    rec = Recorder(args.out, args.budget_s)
    args.deadline = rec.t0 + args.budget_s
    rec.data["settings"] = settings(args)
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
    say(summary(rec.data))
    return 0 if all(p["status"] != "error" for p in rec.data["phases"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
