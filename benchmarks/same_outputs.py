"""The same outputs on the same seeds: one edgespec install against another, token for token.

A refactoring that changes no behaviour must leave every output as it was. This runs
``bench``'s built-in prompts (``edgespec.measuring.prompts``, the held-out set) through
``edgespec generate --input ... --exact --parallel 1`` of the given ``--edgespec``
executable, once per configuration: plain, prompt lookup with the learned policy and
with k = 4, the draft model with k = 3, and the same three at temperature 0.8 with a
fixed seed (fixed k: a learned k would follow the machine's timings, not the code).
Under ``--exact`` (batch-invariant kernels) every greedy run must also equal plain.

    python -m benchmarks.same_outputs --edgespec /path/to/old/venv/bin/edgespec --out before.json
    python -m benchmarks.same_outputs --edgespec .venv/bin/edgespec --flag=--no-optimized --out after.json
    python -m benchmarks.same_outputs --compare before.json after.json
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

SAMPLED = ["-t", "0.8", "--seed", "11"]


def configs(draft_model: str) -> dict[str, list[str]]:
    return {
        "plain": ["--draft", "none"],
        "ngram": ["--draft", "ngram"],
        "ngram-k4": ["--draft", "ngram", "--k", "4"],
        "model-k3": ["--draft", draft_model, "--k", "3"],
        "sampled-plain": ["--draft", "none", *SAMPLED],
        "sampled-ngram-k4": ["--draft", "ngram", "--k", "4", *SAMPLED],
        "sampled-model-k3": ["--draft", draft_model, "--k", "3", *SAMPLED],
    }


def run(args) -> int:
    from edgespec.catalog import resolve_model
    from edgespec.measuring.prompts import prompt_set

    prompts = prompt_set("held-out")
    draft = str(resolve_model(args.draft))
    target = str(resolve_model(args.target))
    out: dict = {"edgespec": args.edgespec, "flags": args.flag, "max_tokens": args.max_tokens, "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "in.jsonl"
        src.write_text("".join(json.dumps({"id": p.id, "prompt": p.prompt}) + "\n" for p in prompts))
        for name, extra in configs(draft).items():
            dst = Path(tmp) / f"{name}.jsonl"
            cmd = [args.edgespec, "generate", "--input", str(src), "--output", str(dst), "--exact"]
            cmd += ["--parallel", "1", "-n", str(args.max_tokens), "--target", target, *extra, *args.flag]
            proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if proc.returncode != 0:
                raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
            records = [json.loads(line) for line in dst.read_text().splitlines() if line.strip()]
            out["runs"][name] = {r["id"]: r["text"] for r in records}
            print(f"{name}: {len(records)} outputs", file=sys.stderr)
    plain = out["runs"]["plain"]
    out["greedy_equal_plain"] = {
        n: out["runs"][n] == plain for n in configs(draft) if not n.startswith("sampled") and n != "plain"
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(out["greedy_equal_plain"]))
    return 0


def compare(a_path: str, b_path: str) -> int:
    a, b = (json.loads(Path(p).read_text()) for p in (a_path, b_path))
    differ = 0
    for name in a["runs"]:
        ra, rb = a["runs"][name], b["runs"].get(name, {})
        bad = [i for i in ra if ra[i] != rb.get(i)]
        differ += len(bad)
        print(f"{name}: {len(ra) - len(bad)}/{len(ra)} identical" + (f" (differ: {', '.join(bad)})" if bad else ""))
    print("the same outputs" if not differ else f"{differ} outputs differ")
    return 0 if not differ else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edgespec", default="edgespec", help="the edgespec executable to run")
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument(
        "--flag", action="append", default=[], help="one more generate flag for this install (e.g. --no-optimized)"
    )
    ap.add_argument("--out", default=None)
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="compare two result files")
    args = ap.parse_args(argv)
    if args.compare:
        return compare(*args.compare)
    if not args.out:
        ap.error("--out is needed to run")
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
