"""``--exact``: speculation gives the tokens plain decoding gives, on the real model pair.

Runs the CLI as a user would — ``edgespec generate --exact --temperature 0 --json`` —
with ``--draft none``, with the 0.5B draft model and with prompt lookup (``ngram``), on
three prompts written for this check (``benchmarks/prompts/exact.py``, never used for tuning), and compares
``token_ids``. Any difference fails the run (exit 1). Each drafter runs twice: as users
get it (the learned policy, which on a CPU often finds the 0.5B drafter does not pay and
drafts little) and with ``--k 4`` (four drafted tokens every round, so rejections and
rollbacks happen all along). Drafted and accepted counts are reported, so the check is
not vacuous.

    python -m benchmarks.exact_identity --json benchmarks/results/exact-identity-2core.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

from benchmarks.prompts.exact import PROMPTS


def generate(target: str, draft: str, prompt: str, max_tokens: int, threads: int, extra: tuple[str, ...] = ()) -> dict:
    cmd = [
        sys.executable,
        "-m",
        "edgespec",
        "generate",
        prompt,
        "--target",
        target,
        "--draft",
        draft,
        "--exact",
        "--temperature",
        "0",
        "--max-tokens",
        str(max_tokens),
        "--threads",
        str(threads),
        "--json",
        *extra,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[3:])} failed ({out.returncode}):\n{out.stderr[-1500:]}")
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft-model", default="qwen2.5-coder-0.5b")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows, failed = [], False
    for name, prompt in PROMPTS.items():
        plain = generate(args.target, "none", prompt, args.max_tokens, args.threads)
        row = {"prompt": name, "tokens": len(plain["token_ids"])}
        for label, draft, extra in (
            ("model", args.draft_model, ()),
            ("model k=4", args.draft_model, ("--k", "4")),
            ("ngram", "ngram", ()),
            ("ngram k=4", "ngram", ("--k", "4")),
        ):
            res = generate(args.target, draft, prompt, args.max_tokens, args.threads, extra)
            st = res.get("stats", {})
            same = res["token_ids"] == plain["token_ids"]
            failed |= not same
            row[label] = {"identical": same, "drafted": st.get("drafted"), "accepted": st.get("accepted")}
        rows.append(row)
        print(json.dumps(row))
    report = {
        "target": args.target,
        "draft_model": args.draft_model,
        "max_tokens": args.max_tokens,
        "rows": rows,
        "all_identical": not failed,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    if failed:
        raise SystemExit("--exact: a speculative run differed from plain decoding")


if __name__ == "__main__":
    main()
