"""Does ``edgespec bench`` agree with itself? The same command twice on one held-out prompt.

Issue 43: on one held-out free-form prompt (a short fable), the same ``edgespec bench``
on the same quiet VM read auto = 0.94x plain and, 50 minutes later, 1.20x. This runs
``edgespec bench --prompt-file PROMPT --json --quiet`` ``--runs`` times (two by
default), each its own process one after the other, as a user would run it, with
bench's own defaults for ``--repeat`` and ``--max-tokens`` unless given. It prints, per
run, the automatic choice, its ratio against plain (the median of per-pass ratios), the
per-pass spread and the verdict bench gave, and then whether the runs' auto ratios
agree within ``--tolerance`` (±5%: the highest over the lowest at most 1.05).

The automatic choice is planned in each process; where the runs chose differently (for
example the first run's first use measured the target's c(n) and the second planned
from that measurement) the script says so: their ratios then measure different
configurations, and the first run should be repeated. The prompt, ``FABLE``, was written
for this check and never tuned on (``--prompt-file`` gives another).

    flock /tmp/edgespec-bench.lock python -m benchmarks.bench_agreement --out out.json
    python -m benchmarks.bench_agreement --repeat 7 --max-tokens 160 -- -d ngram
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import git_info, machine_info

FABLE = (
    "Write a short fable about a tortoise who lends his shell to a cold snail for one winter "
    "night, and what the other animals of the pond say about it in the morning. End with "
    "its moral in one sentence."
)
TOLERANCE = 0.05


def bench_command(prompt_file: Path, args: argparse.Namespace, extra: list[str]) -> list[str]:
    """The ``edgespec bench`` command line one run executes."""
    cmd = [*args.edgespec.split(), "bench", "--prompt-file", str(prompt_file), "--json", "--quiet"]
    cmd += ["--target", args.target]
    if args.draft:
        cmd += ["--draft", args.draft]
    if args.k_grid:
        cmd += ["--k-grid", args.k_grid]
    if args.repeat is not None:
        cmd += ["--repeat", str(args.repeat)]
    if args.max_tokens is not None:
        cmd += ["--max-tokens", str(args.max_tokens)]
    if args.threads is not None:
        cmd += ["--threads", str(args.threads)]
    return cmd + extra


def auto_of(data: dict) -> dict:
    """One run's automatic choice from bench's JSON: its configuration, ratio and spread."""
    a = data["auto"]
    spread = a.get("per_pass") or {}
    return {
        "config": "plain decoding" if a.get("planned_drafter") == "none" else a["config"],
        "speedup": a["speedup"],
        "per_pass": spread.get("ratios", []),
        "verdict": spread.get("verdict", "plain"),
        "words": spread.get("words", "the automatic choice is plain decoding: 1.00x by definition"),
        "plain_tokens_per_second": data["plain"]["tokens_per_second"],
    }


def agreement(ratios: list[float], tolerance: float = TOLERANCE) -> dict:
    """Whether ``ratios`` agree within ±``tolerance``: the highest over the lowest."""
    spread = max(ratios) / min(ratios) - 1.0 if ratios and min(ratios) > 0 else float("inf")
    return {"ratios": ratios, "spread": round(spread, 4), "tolerance": tolerance, "agree": spread <= tolerance}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b", help="GGUF path or catalog name")
    ap.add_argument("--draft", default=None, help="bench's --draft (default: bench's, the pair's draft and ngram)")
    ap.add_argument("--k-grid", default=None, help="bench's --k-grid (default: bench's)")
    ap.add_argument("--repeat", type=int, default=None, help="bench's --repeat (default: bench's)")
    ap.add_argument("--max-tokens", type=int, default=None, help="bench's --max-tokens (default: bench's)")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--runs", type=int, default=2, help="bench runs, one after the other")
    ap.add_argument("--tolerance", type=float, default=TOLERANCE, help="agreement wanted, as a fraction")
    ap.add_argument("--prompt-file", type=Path, default=None, help="a text prompt instead of FABLE")
    ap.add_argument("--edgespec", default=f"{sys.executable} -m edgespec", help="how to run edgespec")
    ap.add_argument("--out", type=Path, default=None, help="write the runs and the verdict here (JSON)")
    ap.add_argument("extra", nargs="*", help="after --: more options for edgespec bench")
    args = ap.parse_args()
    if args.runs < 2:
        ap.error("--runs: at least 2")

    with tempfile.TemporaryDirectory() as tmp:
        prompt_file = args.prompt_file
        if prompt_file is None:
            prompt_file = Path(tmp) / "fable.txt"
            prompt_file.write_text(FABLE, encoding="utf-8")
        runs = []
        for i in range(args.runs):
            cmd = bench_command(prompt_file, args, args.extra)
            print(f"run {i + 1}/{args.runs}: {' '.join(cmd)}", flush=True)
            t0 = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                print(proc.stderr, file=sys.stderr)
                return proc.returncode
            data = json.loads(proc.stdout)
            a = auto_of(data)
            runs.append({"started": t0, "seconds": round(time.time() - t0, 1), "auto": a, "bench": data})
            print(
                f"run {i + 1}: auto = {a['config']} → {a['speedup']:.3f}x plain "
                f"({a['words']}; plain {a['plain_tokens_per_second']:.2f} tok/s), {runs[-1]['seconds']:.0f} s",
                flush=True,
            )

    ratios = [r["auto"]["speedup"] for r in runs]
    verdict = agreement(ratios, args.tolerance)
    choices = sorted({r["auto"]["config"] for r in runs})
    print(f"auto ratios: {', '.join(f'{x:.3f}x' for x in ratios)}")
    print(
        f"agree within ±{args.tolerance:.0%}: {'yes' if verdict['agree'] else 'NO'} "
        f"(the highest over the lowest: +{verdict['spread']:.1%})"
    )
    if len(choices) > 1:
        print(f"note: the automatic choice differed between runs ({' / '.join(choices)}): different configurations")
    if args.out is not None:
        settings = runs[0]["bench"]["settings"]
        result = {
            "date": datetime.date.today().isoformat(),
            "git": git_info(),
            "machine": machine_info(),
            "prompt": FABLE if args.prompt_file is None else str(args.prompt_file),
            "repeat": settings["repeat"],
            "max_tokens": settings["max_tokens"],
            "agreement": verdict,
            "same_choice": len(choices) == 1,
            "runs": runs,
        }
        args.out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    return 0 if verdict["agree"] and len(choices) == 1 else 1


if __name__ == "__main__":
    sys.exit(main())
