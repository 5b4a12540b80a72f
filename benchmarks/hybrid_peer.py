"""edgespec and llama-server on the same tiny hybrid models, prompt lookup on both: the
same greedy tokens (issue 44).

llama-server (built from the llama.cpp that llama-cpp-python 0.3.36 vendors, by
benchmarks/peers/build_peer_tools.sh) runs with ``--spec-type ngram-simple``; edgespec
with prompt lookup under its learned policy, on llama.cpp's own kernels as the server
does; llama-server's lookup is set to 2-token n-grams and 8-token drafts, edgespec's own
lookup matching 2+ tokens. Both get the same prompt token ids (``/completion`` takes a token list) and decode
48 tokens greedily; the script prints, per model and prompt, whether the tokens are the
same and how many drafts each verified and kept. The models are the test fixtures'
(tests/tiny_hybrid.py: ``lfm2`` with short convolutions, ``qwen35`` with Gated DeltaNet),
written to a temporary folder. Usage:
``python -m benchmarks.hybrid_peer --out benchmarks/results/hybrid-peer-DATE.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from benchmarks.common import ROOT, commit, machine_info
from benchmarks.peers.llama_server import LlamaServer
from edgespec import Engine

sys.path.insert(0, str(ROOT / "tests"))
from tiny_hybrid import make_tiny_lfm2, make_tiny_qwen35  # noqa: E402  (the test fixtures' writers)

PROMPTS = [  # held-out for this check: text that repeats, so prompt lookup has something to find
    "the river ran past the mill, the river ran past the mill, and the river",
    "for i in range(10):\n    total += i\nfor j in range(10):\n    total +=",
    "red green blue red green blue red green",
    "alpha beta gamma delta alpha beta gamma",
]
N = 48


def server_tokens(server: LlamaServer, ids: list[int]) -> dict:
    body = {"prompt": ids, "n_predict": N, "temperature": 0.0, "cache_prompt": True, "return_tokens": True}
    req = urllib.request.Request(
        f"{server.url}/completion",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        out = json.loads(r.read())
    t = out.get("timings", {})
    return {"tokens": out["tokens"], "drafted": int(t.get("draft_n", 0)), "accepted": int(t.get("draft_n_accepted", 0))}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin", type=Path, help="llama.cpp's bin folder (default: build_peer_tools.sh's)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    bin_dir = args.bin or Path(
        subprocess.run(
            ["bash", str(ROOT / "benchmarks/peers/build_peer_tools.sh")], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    folder = Path(tempfile.mkdtemp())
    models = {"lfm2": make_tiny_lfm2(folder / "lfm2.gguf"), "qwen35": make_tiny_qwen35(folder / "qwen35.gguf")}
    rows = []
    for arch, path in models.items():
        with Engine(path, "ngram", n_ctx=1024, n_threads=args.threads) as engine:
            ours = []
            for prompt in PROMPTS:
                ids = engine.tokenize(prompt)
                r = engine.generate(ids, max_tokens=N)
                ours.append((ids, r))
        # llama-server's ngram-simple looks up 12-grams by default: short ones here, as edgespec's
        # prompt lookup (matches of 2+ tokens), so that both draft on these short prompts
        short = ("--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "8")
        with LlamaServer(bin_dir, path, args.threads, spec="ngram-simple", n_ctx=1024, extra=short) as server:
            for prompt, (ids, r) in zip(PROMPTS, ours):
                theirs = server_tokens(server, ids)
                row = {
                    "arch": arch,
                    "prompt": prompt,
                    "same_tokens": theirs["tokens"][: len(r.token_ids)] == r.token_ids,
                    "edgespec": {"drafted": r.stats.drafted, "accepted": r.stats.accepted},
                    "llama_server": {"drafted": theirs["drafted"], "accepted": theirs["accepted"]},
                }
                rows.append(row)
                print(json.dumps(row))
    result = {"machine": machine_info(), "commit": commit(), "n": N, "rows": rows}
    result["all_same"] = all(r["same_tokens"] for r in rows)
    print(f"same greedy tokens: {sum(r['same_tokens'] for r in rows)} of {len(rows)}")
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
