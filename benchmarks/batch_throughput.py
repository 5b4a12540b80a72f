"""Batch throughput: 64 held-out prompts one at a time against ``--parallel auto``.

Each mode runs in a fresh child process (so that its peak resident memory is its own),
one after the other in one invocation, on the same model, kernels, drafter and threads:

* ``sequential``: ``engine.generate`` per prompt, as ``edgespec generate --input
  --parallel 1`` does;
* ``parallel``: ``engine.generate_many(prompts, parallel=N)`` (default ``auto``), as
  ``edgespec generate --input`` does now: continuous batching, chunked prefill.

Throughput is generated tokens over the wall time of the whole job (model loading
excluded, prompt processing included). With ``--exact`` both modes run the
batch-invariant kernels and every output must be token-identical to the sequential one;
on llama.cpp's kernels the script counts how many are, and says so. ``--peer`` adds
llama.cpp's own ``llama-batched-bench`` (built by ``build_peer_tools.sh`` from the
vendored sources) on the same model: 128-token prompts, 128 new tokens, at 1 and N
sequences.

The prompts (``benchmarks/prompts/batch.py``) were written for this check and never tuned on.

    python -m benchmarks.batch_throughput --target qwen2.5-coder-1.5b --json out.json --peer
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.common import ROOT


def ordered_prompts() -> list[tuple[str, str, str]]:
    """The 64 prompts with their kinds interleaved (a realistic mixed queue)."""
    from benchmarks.prompts.batch import PROMPTS

    by_kind: dict[str, list] = {}
    for p in PROMPTS:
        by_kind.setdefault(p[1], []).append(p)
    return [group[i] for i in range(16) for group in by_kind.values()]


def child(args: argparse.Namespace) -> None:
    """One mode in this process; prints one JSON line."""
    import resource

    from edgespec import Engine
    from edgespec.catalog import resolve_model

    prompts = ordered_prompts()
    draft = None if args.draft == "none" else args.draft
    engine = Engine(resolve_model(args.target), draft=draft, exact=args.exact, n_threads=args.threads, n_ctx=2048)
    engine.generate("warm up", max_tokens=4)  # page the weights in, outside the timing
    outputs: dict[str, list[int]] = {}
    info: dict = {}
    t0 = time.perf_counter()
    if args.child == "sequential":
        computed = 0
        for pid, _, text in prompts:
            res = engine.generate(text, max_tokens=args.max_tokens)
            outputs[pid] = res.token_ids
            computed += res.stats.prompt_tokens_processed
        info = {"prompt_computed": computed}  # the engine reuses the previous prompt's prefix
    else:
        parallel = args.parallel if args.parallel == "auto" else int(args.parallel)
        run = engine.generate_many([text for _, _, text in prompts], parallel=parallel, max_tokens=args.max_tokens)
        for o in run:
            if o.error is not None:
                raise SystemExit(f"prompt {prompts[o.key][0]} failed: {o.error}")
            outputs[prompts[o.key][0]] = o.result.token_ids
        st = run.stats
        info = {
            "n_parallel": run.n_parallel,
            "reason": run.parallel_reason,
            "mean_running": round(st.mean_running, 2),
            "steps": st.steps,
            "drafted": st.drafted,
            "accepted": st.accepted,
            "prompt_computed": st.prompt_tokens,
            "prompt_shared": st.prompt_shared,
            "kv_mib": round(run.kv_bytes / 2**20, 1),
        }
    seconds = time.perf_counter() - t0
    tokens = sum(len(v) for v in outputs.values())
    print(
        json.dumps(
            {
                "mode": args.child,
                "tokens": tokens,
                "seconds": round(seconds, 2),
                "tok_per_s": round(tokens / seconds, 2),
                "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
                "outputs": outputs,
                **info,
            }
        )
    )


def run_child(mode: str, args: argparse.Namespace) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.batch_throughput",
        "--child",
        mode,
        "--target",
        args.target,
        "--draft",
        args.draft,
        "--max-tokens",
        str(args.max_tokens),
        "--threads",
        str(args.threads),
        "--parallel",
        args.parallel,
    ]
    if args.exact:
        cmd.append("--exact")
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{mode} run failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def peer(args: argparse.Namespace, n: int) -> dict:
    """llama-batched-bench: generation throughput at 1 and n sequences."""
    from benchmarks.peers.cpp import tools_dir
    from edgespec.catalog import resolve_model

    bench = tools_dir() / "llama-batched-bench"
    cmd = [
        str(bench),
        "-m",
        str(resolve_model(args.target)),
        "-c",
        str(max(4096, 2 * 256 * n)),
        "-b",
        "2048",
        "-ub",
        "512",
        "-npp",
        "128",
        "-ntg",
        str(args.max_tokens),
        "-npl",
        f"1,{n}",
        "-t",
        str(args.threads),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    rows = {}
    # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
    for line in out.stdout.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and re.fullmatch(r"\d+", cells[2] or ""):
            rows[int(cells[2])] = {"tg_tok_per_s": float(cells[7]), "total_tok_per_s": float(cells[9])}
    if len(rows) < 2:
        return {"error": (out.stderr or out.stdout)[-600:]}
    return {
        "cmd": " ".join(cmd[1:]),
        "by_sequences": rows,
        "tg_speedup": round(rows[n]["tg_tok_per_s"] / rows[1]["tg_tok_per_s"], 2),
        "total_speedup": round(rows[n]["total_tok_per_s"] / rows[1]["total_tok_per_s"], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default="ngram", help="ngram (what the CPU plan picks) or none")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--parallel", default="auto")
    ap.add_argument("--exact", action="store_true")
    ap.add_argument("--peer", action="store_true", help="also run llama.cpp's llama-batched-bench")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child", choices=["sequential", "parallel"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    seq = run_child("sequential", args)
    par = run_child("parallel", args)
    same = sum(seq["outputs"][k] == par["outputs"][k] for k in seq["outputs"])
    report = {
        "target": args.target,
        "draft": args.draft,
        "exact": args.exact,
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "prompts": len(seq["outputs"]),
        "speedup": round(par["tok_per_s"] / seq["tok_per_s"], 2),
        "identical_outputs": same,
        "sequential": {k: v for k, v in seq.items() if k != "outputs"},
        "parallel": {k: v for k, v in par.items() if k != "outputs"},
    }
    if args.peer:
        report["peer_llama_batched_bench"] = peer(args, par["n_parallel"])
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if args.exact and same != len(seq["outputs"]):
        raise SystemExit(f"--exact: only {same} of {len(seq['outputs'])} outputs are identical")


if __name__ == "__main__":
    main()
