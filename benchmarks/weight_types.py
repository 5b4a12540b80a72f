"""Prompt lookup on a model and on its `models optimize` copy, each against its own plain decoding.

Four engines in ONE process: the target (the embedded Q4_K_M by default) and the copy
``edgespec models optimize`` wrote for it (Q4_0 on a CPU), each decoding plainly
(``Engine(path)``) and with prompt lookup (``Engine(path, draft="ngram")``, the memory of
earlier answers off, so that each prompt drafts from itself alone). Every prompt-lookup
engine starts from the c(n) the planner would give it (``--prior measured``, the
default): the curve measured for its file on this machine (``models optimize`` keeps
both files' curves, a first use keeps its own), measured now as a first use does where
there is none; ``--prior table`` starts it from the row an engine built by hand gets for
its file's weight type (``costmodel.priors``: another machine's figures). Per pass,
every prompt runs on the four in an order rotated per prompt and pass, after a discarded
warm-up; greedy, ``--max-tokens`` tokens.

Reported per prompt and weight type: plain tokens/s, the speedup (median of each pass's
own ratio: the two runs of a pair are close in time, so a burst of load on a shared
machine upsets one pair, not the estimate), acceptance, and the draft lengths the policy
picked (how many rounds verified 1, 2, 3, ... drafts: on Q4_0, whose c(n) is a step
function, lengths 3 and 7 should be rare next to 4 and 8); and, per weight type, the
geometric mean over the prompts that copy their input and over those that do not, and
the c(n) each prompt-lookup engine had learned by the end.

The prompts (``benchmarks/prompts/weights.py``) were written for this check and never tuned on.

    python -m benchmarks.weight_types --passes 3 --out benchmarks/results/weight-types-DATE.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

from benchmarks.common import commit, geomean, machine_info
from benchmarks.prompts.weights import PROMPTS
from edgespec import Engine
from edgespec.catalog import read_header, resolve_model, verify_cache
from edgespec.catalog.optimized import optimized_copy_for
from edgespec.costmodel.drafting import DraftingOptions
from edgespec.events import Done, Round, Token
from edgespec.measuring.first_use import measure_first_use

CONFIGS = ("plain", "ngram")


def run_one(eng: Engine, text: str, max_tokens: int, split: int = 64) -> dict:
    """One generation from a fresh context: its rate, its rounds' draft lengths, its
    tokens, and the rates before and after its ``split``-th token (from the first
    token's arrival: the prompt and the first round are left out of both)."""
    eng.reset()
    lengths: Counter = Counter()
    done = None
    stamps: list[float] = []
    for ev in eng.stream(text, max_tokens=max_tokens):
        if isinstance(ev, Token):
            stamps.append(time.perf_counter())
        elif isinstance(ev, Round) and ev.drafted:
            lengths[ev.drafted] += 1
        elif isinstance(ev, Done):
            done = ev
    assert done is not None
    st = done.stats
    cut = min(split, len(stamps) - 1)
    early = (cut / (stamps[cut] - stamps[0])) if cut > 0 and stamps[cut] > stamps[0] else None
    late = len(stamps) - 1 - cut
    return {
        "early_tps": early,
        "late_tps": late / (stamps[-1] - stamps[cut]) if late > 0 and stamps[-1] > stamps[cut] else None,
        "tps": st.generated_tokens / st.t_generate if st.t_generate else 0.0,
        "tokens": st.generated_tokens,
        "drafted": st.drafted,
        "accepted": st.accepted,
        "rounds": st.rounds,
        "lengths": lengths,
        "ids": list(done.token_ids),
    }


def start_from(prior: str, eng: Engine) -> str:
    """Start a prompt-lookup engine's c(n) as ``--prior`` says; where it came from."""
    if prior == "table":
        return "the table's row for the file's weight type (costmodel.priors)"
    path = eng.target_model.path
    curve = verify_cache.measured_curve(path)
    if curve is not None:
        eng.drafting.start_cost_from(curve)
        return f"measured for the file on this machine ({verify_cache.measured_entry(path).get('source')})"
    line = measure_first_use(eng, even_if_off=True)  # even where the environment turns first use off
    if line:
        print(line, file=sys.stderr)
    return line or "the table's row (nothing could be measured)"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b", help="a model name or a GGUF path")
    ap.add_argument("--copy", default=None, help="the copy to compare (default: the one models optimize wrote)")
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--prompts", default=None, help="comma-separated prompt names only")
    ap.add_argument("--out", default=None, help="write the results as JSON here")
    ap.add_argument(
        "--prior",
        choices=("measured", "table"),
        default="measured",
        help="c(n) the lookup engines start from: this machine's curve for the file (as the planner), or the table's",
    )
    args = ap.parse_args(argv)

    target = Path(resolve_model(args.target))
    copy = Path(args.copy) if args.copy else optimized_copy_for(target)
    if copy is None:
        ap.error(f"no optimized copy of {target.name}: run `edgespec models optimize {args.target}` first")
    prompts = PROMPTS
    if args.prompts:
        wanted = args.prompts.split(",")
        unknown = set(wanted) - {p[0] for p in PROMPTS}
        if unknown:
            ap.error(f"unknown prompt(s): {', '.join(sorted(unknown))}")
        prompts = [p for p in PROMPTS if p[0] in wanted]

    files = {read_header(target).quant or "original": target, read_header(copy).quant or "copy": copy}
    lookup = DraftingOptions(memory=False)
    engines = {}
    for wtype, path in files.items():
        engines[(wtype, "plain")] = Engine(path, n_threads=args.threads)
        engines[(wtype, "ngram")] = Engine(path, draft="ngram", drafting=lookup, n_threads=args.threads)
    origins = {w: start_from(args.prior, engines[(w, "ngram")]) for w in files}
    priors = {w: {str(n): round(engines[(w, "ngram")].verify_cost(n), 3) for n in range(1, 17)} for w in files}
    for eng in engines.values():  # warm-up, discarded
        run_one(eng, prompts[0][3], 16)

    keys = list(engines)
    runs: dict = {(p[0], key): [] for p in prompts for key in keys}
    for rep in range(args.passes):
        for i, (name, _kind, _grounded, text) in enumerate(prompts):
            shift = (rep + i) % len(keys)
            for key in keys[shift:] + keys[:shift]:
                r = run_one(engines[key], text, args.max_tokens)
                runs[(name, key)].append(r)
                print(f"[{rep + 1}/{args.passes}] {name} {key[0]} {key[1]}: {r['tps']:.1f} tok/s", file=sys.stderr)

    rows, by_type = [], {w: {"lengths": Counter(), "grounded": [], "free": []} for w in files}
    for name, kind, grounded, _text in prompts:
        row: dict = {"prompt": name, "kind": kind, "grounded": grounded}
        for w in files:
            plain, spec = runs[(name, (w, "plain"))], runs[(name, (w, "ngram"))]
            paired = [s["tps"] / p["tps"] for p, s in zip(plain, spec) if p["tps"]]
            lengths = sum((s["lengths"] for s in spec), Counter())
            by_type[w]["lengths"] += lengths
            speedup = statistics.median(paired)
            by_type[w]["grounded" if grounded else "free"].append(speedup)
            row[w] = {
                "plain_tps": round(statistics.median(p["tps"] for p in plain), 2),
                "speedup": round(speedup, 3),
                "passes": [round(x, 3) for x in paired],
                "accepted": sum(s["accepted"] for s in spec),
                "drafted": sum(s["drafted"] for s in spec),
                "draft_lengths": {str(k): v for k, v in sorted(lengths.items())},
                "same_as_plain": spec[-1]["ids"] == plain[-1]["ids"],
            }
        rows.append(row)

    summary = {}
    for w, t in by_type.items():
        summary[w] = {
            "file": str(files[w]),
            "geomean_grounded": geomean(t["grounded"], 3),
            "geomean_free": geomean(t["free"], 3),
            "worst_free": round(min(t["free"]), 3) if t["free"] else None,
            "draft_lengths": {str(k): v for k, v in sorted(t["lengths"].items())},
            "prior": origins[w],
            "prior_c": priors[w],
            "learned_c": {str(n): round(engines[(w, "ngram")].verify_cost(n), 3) for n in range(1, 17)},
        }

    types = list(files)
    print(f"\n{'prompt':18} {'kind':10} " + " ".join(f"{w + ' plain t/s':>16} {w + ' lookup':>13}" for w in types))
    for row in rows:
        cells = " ".join(f"{row[w]['plain_tps']:16.1f} {row[w]['speedup']:12.2f}x" for w in types)
        print(f"{row['prompt']:18} {row['kind']:10} {cells}")
    for w, s in summary.items():
        print(
            f"{w}: grounded {s['geomean_grounded']}x, free {s['geomean_free']}x (worst {s['worst_free']}x); "
            f"draft lengths {s['draft_lengths']}"
        )
        print("  c(n) learned: " + ", ".join(f"{n}:{c}" for n, c in s["learned_c"].items() if int(n) <= 9))
    result = {
        "commit": commit(),
        "machine": machine_info(),
        "threads": engines[keys[0]].n_threads,
        "max_tokens": args.max_tokens,
        "passes": args.passes,
        "prior": args.prior,
        "rows": rows,
        "summary": summary,
    }
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    for eng in engines.values():
        eng.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
