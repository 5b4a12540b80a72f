"""The defaults against plain decoding on held-out workloads, as a script runs them: never slower?

Each workload is 16 requests in one JSONL file, run by ``edgespec generate --input``
at ``--parallel 1`` in a process of its own: the defaults (the plan for this machine,
prompt lookup with the memory of earlier answers) against ``--draft none``, alternating
which goes first per pass. Every process starts with a fresh edgespec configuration
(its own ``XDG_CONFIG_HOME``): no ``tune`` figures and no c(n) measured before, as on a
first use (where the defaults' process then measures c(n) when it loads, since commit
964b8fc: ``measuring.first_use``; ``EDGESPEC_FIRST_USE=0`` in the environment runs them on
the priors alone); the model cache is the user's, so a copy ``models optimize`` wrote
beside the target is run, as the planner finds it, unless ``--no-optimized``.

Reported per workload and half (requests 1-8, where the memory is nearly empty, and
9-16): the defaults' generation rate over plain's (tokens over seconds generating,
summed over the half's requests; the median of the passes), and per draft source
(``prompt``, ``memory``) how many drafted tokens were kept, and per configuration the
milliseconds a token spent outside the target's ``llama_decode``; the output file keeps
each request's counts and times too. Issue 37's goal: >= 0.97x on both halves of every
workload.

Beside the timed ratio, one that no noise moves: the defaults' committed tokens per plain
step their rounds cost on the CPU table's c(n) for the file's weight type (a round that
verified j drafts costs c(j + 1)), over plain's counted alike (a token a step, and the
round that drew the end of the text). It counts what the drafting decided (probes and
explorations included) on the table's machine, and leaves out the Python around it: a
timed ratio far under it is the machine's noise, one near it the drafting's own cost.

Workloads: the first 16 of ``prompts/repeat.py``'s ``tests`` (the test-writing workload
issue 37 found losing) and the three of ``prompts/never_slower.py``, written for this
check and never tuned on.

    python -m benchmarks.never_slower --passes 2 --out benchmarks/results/never-slower-DATE.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.common import commit, machine_info
from benchmarks.prompts.never_slower import workloads as held_out
from benchmarks.prompts.repeat import workloads as repeat_workloads
from edgespec.costmodel.priors import verify_prior

CONFIGS = {"defaults": [], "plain": ["--draft", "none"]}
HALF = 8


def all_workloads() -> dict[str, list[list[dict]]]:
    tests = repeat_workloads()["tests"]
    out = {"tests": [r.messages for r in tests.requests[:16]]}
    out.update(held_out())
    return out


def run_batch(requests: list[list[dict]], extra: list[str], args, tmp: Path) -> tuple[list[dict], str]:
    """One ``edgespec generate --input`` process over the requests; its records in request
    order and what it printed on stderr (the plan line, the summary)."""
    src, dst, cfg = tmp / "in.jsonl", tmp / "out.jsonl", tempfile.mkdtemp(dir=tmp)
    src.write_text("".join(json.dumps({"id": i, "messages": m}) + "\n" for i, m in enumerate(requests)))
    dst.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "edgespec", "generate", "--input", str(src), "--output", str(dst)]
    cmd += ["--parallel", "1", "--max-tokens", str(args.max_tokens), "--target", args.target, *extra]
    if args.threads:
        cmd += ["--threads", str(args.threads)]
    if args.no_optimized:
        cmd += ["--no-optimized"]
    env = {**os.environ, "XDG_CONFIG_HOME": cfg}
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    records = [json.loads(line) for line in dst.read_text().splitlines() if line.strip()]
    return sorted(records, key=lambda r: r["id"]), proc.stderr


def half_rate(records: list[dict], lo: int, hi: int) -> float:
    part = [r["stats"] for r in records[lo:hi]]
    seconds = sum(s["t_generate"] for s in part)
    return sum(s["generated_tokens"] for s in part) / seconds if seconds else 0.0


def step_ratio(records: list[dict], lo: int, hi: int, curve) -> float:
    """Committed tokens per plain step of the rounds' cost on ``curve`` (c(n)): from each
    request's count of rounds and of rounds that drafted at least j + 1 tokens."""
    tokens = steps = 0.0
    for r in records[lo:hi]:
        st = r["stats"]
        at_least = list(st.get("drafted_by_position", [])) + [0]
        steps += st["rounds"] - at_least[0]  # rounds that verified no draft: one step each
        for j in range(1, len(at_least)):
            steps += (at_least[j - 1] - at_least[j]) * curve(j + 1)
        tokens += st["generated_tokens"]
    return tokens / steps if steps else 0.0


def outside_ms(records: list[dict], lo: int, hi: int) -> float:
    """Milliseconds a committed token spent outside the target's ``llama_decode`` (the
    drafter, the policy, sampling, the loop), over the half's requests."""
    part = [r["stats"] for r in records[lo:hi]]
    tokens = sum(s["generated_tokens"] for s in part)
    return 1000 * sum(s["t_generate"] - s["t_verify"] for s in part) / tokens if tokens else 0.0


def paired(runs: dict[str, list], metric, *args) -> list[float]:
    """Per pass, ``metric(records, *args)`` of the defaults' records over plain's (a pass
    where plain's is 0 is left out)."""
    out = []
    for (d, _), (p, _) in zip(runs["defaults"], runs["plain"]):
        base = metric(p, *args)
        if base:
            out.append(metric(d, *args) / base)
    return out


KEPT_STATS = ("generated_tokens", "rounds", "drafted_by_position", "t_generate", "t_verify")


def sources(records: list[dict], lo: int, hi: int) -> dict[str, list[int]]:
    """Per draft source: [drafted, kept] over the requests."""
    out: dict[str, list[int]] = {}
    for r in records[lo:hi]:
        st = r["stats"]
        for src, n in st.get("drafted_by_source", {}).items():
            row = out.setdefault(src, [0, 0])
            row[0] += n
            row[1] += st.get("accepted_by_source", {}).get(src, 0)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--no-optimized", action="store_true", help="run the target itself, not its optimized copy")
    ap.add_argument("--workloads", default=None, help="comma-separated names (tests, docstrings, commits, shell)")
    ap.add_argument(
        "--weight-type",
        default=None,
        help="the c(n) row the step ratio uses (default: Q4_K_M with --no-optimized, else Q4_0, the copy's)",
    )
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    weight_type = args.weight_type or ("Q4_K_M" if args.no_optimized else "Q4_0")
    curve = verify_prior("cpu", weight_type)

    loads = all_workloads()
    if args.workloads:
        wanted = args.workloads.split(",")
        if set(wanted) - set(loads):
            ap.error(f"unknown workload(s): {', '.join(sorted(set(wanted) - set(loads)))}")
        loads = {k: v for k, v in loads.items() if k in wanted}

    results: dict = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for name, requests in loads.items():
            n = len(requests)
            halves = {"first": (0, min(HALF, n)), "rest": (HALF, n)}
            runs: dict[str, list] = {c: [] for c in CONFIGS}
            for rep in range(args.passes):
                order = list(CONFIGS) if rep % 2 == 0 else list(reversed(CONFIGS))
                for config in order:
                    records, stderr = run_batch(requests, CONFIGS[config], args, tmp)
                    runs[config].append((records, stderr))
                    rates = {h: half_rate(records, lo, hi) for h, (lo, hi) in halves.items()}
                    print(f"[{rep + 1}/{args.passes}] {name} {config}: {rates}", file=sys.stderr)
            row: dict = {"requests": n}
            for h, (lo, hi) in halves.items():
                ratios = paired(runs, half_rate, lo, hi)
                row[h] = {
                    "ratio": round(statistics.median(ratios), 3),
                    "passes": [round(x, 3) for x in ratios],
                    "plain_tps": round(statistics.median(half_rate(p, lo, hi) for p, _ in runs["plain"]), 2),
                    "steps": [round(x, 3) for x in paired(runs, step_ratio, lo, hi, curve)],
                    "outside_ms": {
                        c: round(statistics.median(outside_ms(r, lo, hi) for r, _ in runs[c]), 3) for c in CONFIGS
                    },
                    "sources": sources(runs["defaults"][-1][0], lo, hi),
                }
            # each request's counts and times, per pass: any other c(n) can be applied later
            row["records"] = {
                c: [[{k: r["stats"][k] for k in KEPT_STATS if k in r["stats"]} for r in recs] for recs, _ in runs[c]]
                for c in CONFIGS
            }
            row["plan"] = next((ln for ln in runs["defaults"][-1][1].splitlines() if ln.strip()), "")
            # what each defaults process measured when it loaded (a first use: measuring.first_use)
            row["first_use"] = [
                next((ln for ln in err.splitlines() if "measured at first use" in ln), None)
                for _, err in runs["defaults"]
            ]
            results[name] = row

    print(f"\n{'workload':12} {'1-8':>7} {'9-16':>7}  in steps ({weight_type}'s c(n)); kept/drafted (last pass)")
    for name, row in results.items():
        src = "; ".join(
            f"{h} " + ", ".join(f"{s} {k}/{d}" for s, (d, k) in row[h]["sources"].items()) for h in ("first", "rest")
        )
        steps = " ".join(f"{statistics.median(row[h]['steps']):.3f}x" for h in ("first", "rest"))
        outside = " ".join("{defaults:.2f}/{plain:.2f}".format(**row[h]["outside_ms"]) for h in ("first", "rest"))
        print(f"{name:12} {row['first']['ratio']:6.3f}x {row['rest']['ratio']:6.3f}x  {steps}; {src}")
        print(f"{'':12} ms a token outside llama_decode, defaults/plain: {outside}")
    goal = all(row[h]["ratio"] >= 0.97 for row in results.values() for h in ("first", "rest"))
    print(f"goal >= 0.97x on both halves of every workload: {'met' if goal else 'NOT met'}")
    if args.out:
        out = {
            "commit": commit(),
            "machine": machine_info(),
            "target": args.target,
            "optimized": not args.no_optimized,
            "max_tokens": args.max_tokens,
            "passes": args.passes,
            "steps_weight_type": weight_type,
            "workloads": results,
            "goal_met": goal,
        }
        Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
