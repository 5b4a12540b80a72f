"""The warm pass of ``benchmarks/repeat_workloads.py``: a SECOND process (the script with
``--warm-from FILE``) that loads the suffix index saved after request ``N - warm_requests``
into a fresh engine and answers the remaining requests, interleaved with its own plain
engine; and the launch of that process from the main run. Knows the process boundary; not
the in-process sequence or the summary.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import ROOT
from benchmarks.prompts.repeat import workloads
from benchmarks.repeat_memory import (
    engine_memory,
    fail,
    index_options,
    load_saved,
    memory_report,
    require_memory_api,
)
from benchmarks.repeat_runs import engine_runner, make_engine, render, run_sequence, warm_up
from edgespec.catalog import resolve_model


def worker_main(args) -> None:
    """``--warm-from FILE``: load the saved index into a fresh suffix engine and answer
    requests ``--first``.. of ``--workloads`` (one), interleaved with a plain engine."""
    require_memory_api(["warm"])
    target = resolve_model(args.target)
    wl = workloads()[args.workloads]
    engines = {"plain": make_engine("plain", target, args), "warm": make_engine("suffix", target, args)}
    warm_up(engines)  # before the saved index is set: the warm-up writes into the engine's own
    mem = engine_memory(engines["warm"])
    t0 = time.perf_counter()
    loaded = load_saved(Path(args.warm_from), mem.cap, index_options(mem))
    t_load = time.perf_counter() - t0
    engines["warm"].memory = loaded
    reqs = wl.requests[args.first : args.requests]
    rendered = {r.id: render(engines["plain"], wl, r) for r in reqs}
    runs = run_sequence(
        wl,
        reqs,
        args.first,
        {m: engine_runner(e) for m, e in engines.items()},
        rendered,
        args.max_tokens or wl.max_tokens,
        log_prefix="  warm process ",
    )
    result = {
        "loaded_tokens": len(loaded),
        "t_load": t_load,
        "runs": runs,
        "memory_after": memory_report(engines["warm"]),
    }
    Path(args.worker_out).write_text(json.dumps(result))
    for e in engines.values():
        e.close()


def run_warm_process(args, wl: str, index_file: Path, first: int, n: int, max_tokens: int) -> dict:
    out = index_file.with_suffix(".warm.json")
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.repeat_workloads",
        "--warm-from",
        str(index_file),
        "--workloads",
        wl,
        "--first",
        str(first),
        "--requests",
        str(n),
        "--max-tokens",
        str(max_tokens),
        "--target",
        args.target,
        "--threads",
        str(args.threads),
        "--n-ctx",
        str(args.n_ctx),
        "--worker-out",
        str(out),
    ]
    if args.memory_cap is not None:
        cmd += ["--memory-cap", str(args.memory_cap)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        fail(f"the warm process for {wl} failed (exit {proc.returncode}): {' '.join(cmd)}")
    result = json.loads(out.read_text())
    result["wall"] = time.perf_counter() - t0
    return result
