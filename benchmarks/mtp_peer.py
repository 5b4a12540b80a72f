"""edgespec's ``--draft mtp`` and llama-server's ``--spec-type draft-mtp`` on the same
shape-true file, at a chosen acceptance (issue 45).

The model is tests/tiny_hybrid.py's ``make_shape_true_qwen35(nextn=True, right_head=True,
perturb=x, tied=False)``: a qwen35 at Qwen3.5-0.8B's real dimensions (24 layers, 18 Gated
DeltaNet, n_embd 1024, vocabulary 248,320; Q8_0, 1.08 GB) whose every block's output
projection is zero, so the target's next token is a fixed random function of the current
one, and whose MTP head is that function by construction, perturbed by ``x``: its
acceptance falls smoothly as ``x`` grows. The zeros are multiplied as any weights: what
a step, a verify and a head step cost is what they cost on the real model (the random
``output.weight`` of ``tied=False`` is the same matmul as the tied file's; the tied
file's greedy output repeats one token, and its perturbed head is right or wrong on it
for good). Calibrated with edgespec's acceptance (accepted / drafted at a fixed k = 3,
greedy, 96 tokens on each prompt below; a property of the file and the prompts, not of
the machine): perturb 0.035 -> 0.782, 0.04 -> 0.744, 0.13 -> 0.418, 0.14 -> 0.390 (on
other prompts 0.025 -> 0.88, 0.12 -> 0.44, 0.15 -> 0.36). The default levels, 0.04 and
0.14, are the ones near 0.75 and 0.4.

Per level the file is written once (cached under ``--models``, by the perturb) and four
configurations run on it, greedy, ``--tokens`` tokens per prompt, the same token ids for
all (``/completion`` takes a token list), the same threads, ``-c``/``n_ctx`` and one slot:

* ``es_plain``  edgespec, ``Engine(path, None)``;
* ``es_mtp``    edgespec, ``Engine(path, "mtp")`` under the learned policy, as users run
                it: the first-use measurement of c(n) as the CLI makes it
                (``measuring.first_use.measure_first_use``), in a verify cache of this
                run's own (``XDG_CONFIG_HOME`` a temporary folder: every level measures,
                and the user's cache is left alone);
* ``ls_plain``  llama-server (built from the vendored llama.cpp by
                benchmarks/peers/build_peer_tools.sh), no ``--spec-type``;
* ``ls_mtp``    llama-server ``--spec-type draft-mtp --spec-draft-n-max 3`` (its default
                length; it loads the same file's MTP layers itself: ``load_mtp``, and an
                MTP context against the target).

All four stay loaded for the level; after one discarded warm-up request each, every pass
runs each prompt on each configuration back to back, the order rotated every pass.
Speed is generation throughput, prompt excluded: edgespec's ``stats.tokens_per_second``,
llama-server's own ``timings.predicted_per_second``; a pass's speed is its tokens over its
seconds across the prompts; a configuration's speed the median over passes, and a ratio
the median of each pass's own ratio (the runs of a pass are adjacent in time). Printed
per level: each configuration's tokens/s, its ratio to its own plain, es_mtp / ls_mtp,
each one's acceptance, whether each gave es_plain's tokens, and the issue's bar (es_mtp
>= ls_mtp and >= 0.97 x es_plain). Usage::

    python -m benchmarks.mtp_peer --passes 5 --out benchmarks/results/mtp-peer-DATE.json
    python -m benchmarks.mtp_peer --passes 1 --tokens 24          # does it run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

from benchmarks.common import ROOT, git_info, machine_info
from benchmarks.peers.llama_server import LlamaServer

sys.path.insert(0, str(ROOT / "tests"))
from tiny_hybrid import make_shape_true_qwen35  # noqa: E402  (the test fixtures' writer)

PROMPTS = [  # held out, written for this check (the model's output is a random path; what
    # differs is where it starts and how long the prompt is)
    "Draft a short note to the building manager: the hallway light on the third floor has "
    "been flickering since Monday, and",
    "import csv\n\ndef load_rows(path):\n    with open(path, newline='') as f:\n        reader = csv.DictReader(f)\n",
    "Q: A train leaves at 9:40 and the trip takes 2 hours 35 minutes. When does it arrive?\nA:",
]
CONFIGS = ("es_plain", "es_mtp", "ls_plain", "ls_mtp")
LEVELS = "0.04,0.14"  # perturb near acceptance 0.75 and 0.4 (see the module's docstring)
N_CTX = 1024
WARMUP_PROMPT = "a warm-up request, not timed:"
WARMUP_TOKENS = 8


def model_path(folder: Path, perturb: float) -> Path:
    """The level's file, written once (to a temporary name, then renamed)."""
    path = folder / f"qwen35-0.8b-q8_0-untied-mtp-right-perturb{perturb:g}.gguf"
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        part = path.with_suffix(".part")
        t0 = time.perf_counter()
        make_shape_true_qwen35(part, "0.8b", nextn=True, right_head=True, perturb=perturb, tied=False)
        part.rename(path)
        print(f"wrote {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


def server_run(server: LlamaServer, ids: list[int], n: int) -> dict:
    """One greedy completion of the token ids ``ids``: its tokens, speed and drafts."""
    body = {"prompt": ids, "n_predict": n, "temperature": 0.0, "cache_prompt": True, "return_tokens": True}
    req = urllib.request.Request(
        f"{server.url}/completion",
        data=json.dumps(body).encode(),
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=1800) as r:
        out = json.loads(r.read())
    t = out.get("timings", {})
    return {
        "tokens": list(out.get("tokens", [])),
        "n": int(t.get("predicted_n", 0)),
        "seconds": float(t.get("predicted_ms", 0.0)) / 1000,
        "drafted": int(t.get("draft_n", 0)),
        "accepted": int(t.get("draft_n_accepted", 0)),
    }


def engine_run(engine, ids: list[int], n: int) -> dict:
    r = engine.generate(ids, max_tokens=n)
    st = r.stats
    return {
        "tokens": list(r.token_ids),
        "n": st.generated_tokens,
        "seconds": st.t_generate,
        "drafted": st.drafted,
        "accepted": st.accepted,
        "rounds": st.rounds,
    }


def median_ratio(passes: list[dict], num: str, den: str) -> float | None:
    rs = [p[num] / p[den] for p in passes if p.get(num) and p.get(den)]
    return round(statistics.median(rs), 3) if rs else None


def run_level(perturb: float, path: Path, bin_dir: Path, args) -> dict:
    from edgespec import Engine
    from edgespec.measuring.first_use import measure_first_use

    runs: dict[str, Callable[[list[int]], dict]] = {}
    opened: list = []
    level: dict = {"perturb": perturb, "file": str(path)}
    try:
        t0 = time.perf_counter()
        es_plain = Engine(path, None, n_ctx=N_CTX, n_threads=args.threads)
        opened.append(es_plain)
        es_mtp = Engine(path, "mtp", n_ctx=N_CTX, n_threads=args.threads)
        opened.append(es_mtp)
        line = measure_first_use(es_mtp, even_if_off=True)  # as the CLI does at a file's first use
        level["first_use"] = line
        print(f"  es_mtp first use: {line}", file=sys.stderr)
        ls_plain = LlamaServer(bin_dir, path, args.threads, spec=None, n_ctx=N_CTX)
        opened.append(ls_plain)
        ls_mtp = LlamaServer(
            bin_dir, path, args.threads, spec="draft-mtp", n_ctx=N_CTX, extra=("--spec-draft-n-max", "3")
        )
        opened.append(ls_mtp)
        level["load_seconds"] = round(time.perf_counter() - t0, 1)
        runs = {
            "es_plain": lambda ids: engine_run(es_plain, ids, args.tokens),
            "es_mtp": lambda ids: engine_run(es_mtp, ids, args.tokens),
            "ls_plain": lambda ids: server_run(ls_plain, ids, args.tokens),
            "ls_mtp": lambda ids: server_run(ls_mtp, ids, args.tokens),
        }
        warm_up = {
            "es_plain": lambda ids: engine_run(es_plain, ids, WARMUP_TOKENS),
            "es_mtp": lambda ids: engine_run(es_mtp, ids, WARMUP_TOKENS),
            "ls_plain": lambda ids: server_run(ls_plain, ids, WARMUP_TOKENS),
            "ls_mtp": lambda ids: server_run(ls_mtp, ids, WARMUP_TOKENS),
        }
        prompts = [es_plain.tokenize(p) for p in PROMPTS]
        warm = es_plain.tokenize(WARMUP_PROMPT)
        for c in CONFIGS:  # one discarded request each: first-decode costs, pages faulted in
            warm_up[c](warm)
        records: list[dict] = []  # one per (pass, prompt, config)
        for k in range(args.passes):
            order = CONFIGS[k % len(CONFIGS) :] + CONFIGS[: k % len(CONFIGS)]
            for i, ids in enumerate(prompts):
                for c in order:
                    rec = runs[c](ids)
                    rec.update({"pass": k, "prompt": i, "config": c})
                    records.append(rec)
                    print(
                        f"  pass {k} prompt {i} {c:8s} {rec['n'] / rec['seconds'] if rec['seconds'] else 0:7.2f} tok/s"
                        f"  drafted {rec['drafted']:3d} accepted {rec['accepted']:3d}",
                        file=sys.stderr,
                    )
    finally:
        for x in reversed(opened):
            x.close()
    return summarize(level, records, len(prompts), args.passes)


def summarize(level: dict, records: list[dict], n_prompts: int, n_passes: int) -> dict:
    ref = {(r["pass"], r["prompt"]): r["tokens"] for r in records if r["config"] == "es_plain"}
    passes = []
    for k in range(n_passes):
        row = {}
        for c in CONFIGS:
            rs = [r for r in records if r["pass"] == k and r["config"] == c]
            secs = sum(r["seconds"] for r in rs)
            row[c] = sum(r["n"] for r in rs) / secs if secs else None
        passes.append(row)
    configs = {}
    for c in CONFIGS:
        rs = [r for r in records if r["config"] == c]
        drafted, accepted = sum(r["drafted"] for r in rs), sum(r["accepted"] for r in rs)
        tps = [p[c] for p in passes if p[c]]
        configs[c] = {
            "tokens_per_second": round(statistics.median(tps), 3) if tps else None,
            "passes": [round(x, 3) if x else x for x in (p[c] for p in passes)],
            "drafted": drafted,
            "accepted": accepted,
            "acceptance": round(accepted / drafted, 3) if drafted else None,
            "same_tokens": sum(r["tokens"] == ref[(r["pass"], r["prompt"])] for r in rs),
            "runs": len(rs),
        }
    ratios = {
        "es_mtp/es_plain": median_ratio(passes, "es_mtp", "es_plain"),
        "ls_mtp/ls_plain": median_ratio(passes, "ls_mtp", "ls_plain"),
        "es_mtp/ls_mtp": median_ratio(passes, "es_mtp", "ls_mtp"),
        "es_plain/ls_plain": median_ratio(passes, "es_plain", "ls_plain"),
        "es_mtp/ls_plain": median_ratio(passes, "es_mtp", "ls_plain"),
    }
    a, b = ratios["es_mtp/ls_mtp"], ratios["es_mtp/es_plain"]
    level.update(
        {
            "configs": configs,
            "ratios": ratios,
            "bar": {
                "es_mtp >= ls_mtp": a is not None and a >= 1.0,
                "es_mtp >= 0.97 x es_plain": b is not None and b >= 0.97,
            },
            "records": [{k: v for k, v in r.items() if k != "tokens"} for r in records],
        }
    )
    return level


def report(level: dict) -> None:
    cs, rs = level["configs"], level["ratios"]
    print(f"perturb {level['perturb']:g}:")
    for c in CONFIGS:
        x = cs[c]
        acc = f"acceptance {x['acceptance']:.3f} ({x['accepted']}/{x['drafted']})" if x["drafted"] else ""
        tps = x["tokens_per_second"]
        print(
            f"  {c:8s} {tps if tps is not None else float('nan'):7.2f} tok/s  {acc:32s} "
            f"es_plain's tokens {x['same_tokens']}/{x['runs']}"
        )
    print("  " + "  ".join(f"{k} {v}" for k, v in rs.items()))
    print("  bar: " + ", ".join(f"{k}: {'yes' if v else 'NO'}" for k, v in level["bar"].items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=" ".join(__doc__.split("\n\n")[0].split()),
        epilog="See the module's docstring (benchmarks/mtp_peer.py) for the model, the calibration and the timing.",
    )
    ap.add_argument("--perturb", default=LEVELS, help=f"comma-separated perturb levels (default {LEVELS})")
    ap.add_argument("--passes", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=96, help="tokens generated per prompt")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bin", type=Path, help="llama.cpp's bin folder (default: build_peer_tools.sh's)")
    ap.add_argument(
        "--models",
        type=Path,
        default=Path(tempfile.gettempdir()) / "edgespec-mtp-peer",
        help="where the levels' files are written once and kept (default: %(default)s)",
    )
    ap.add_argument("--out", type=Path, help="write the results as JSON here")
    args = ap.parse_args(argv)
    bin_dir = args.bin or Path(
        subprocess.run(
            ["bash", str(ROOT / "benchmarks/peers/build_peer_tools.sh")], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    # a verify cache of this run's own: the first use measures at every level, as on a
    # first use, and nothing is written to the user's
    config_dir = tempfile.mkdtemp(prefix="edgespec-mtp-peer-config-")
    os.environ["XDG_CONFIG_HOME"] = config_dir
    levels = [float(x) for x in args.perturb.split(",") if x.strip()]
    result = {
        "machine": machine_info(),
        "git": git_info(),
        "threads": args.threads,
        "tokens": args.tokens,
        "passes": args.passes,
        "n_ctx": N_CTX,
        "prompts": PROMPTS,
        "llama_server": {"bin": str(bin_dir), "mtp_flags": ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3"]},
        "levels": [],
    }
    for p in levels:
        print(f"perturb {p:g}: writing or reusing the file, loading 4 configurations", file=sys.stderr)
        level = run_level(p, model_path(args.models, p), bin_dir, args)
        result["levels"].append(level)
        report(level)
        if args.out:  # after every level, so that a long run keeps what it measured
            args.out.write_text(json.dumps(result, indent=1) + "\n")
    result["machine_after"] = machine_info()
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
