"""Prompt lookup as a user gets it, against plain decoding, on held-out prompts.

``Engine(target, draft="ngram")`` with no other arguments (llama.cpp's kernels, the
learned drafting policy) against ``Engine(target)`` decoding plainly on the same
kernels: two engines in ONE process, alternating per prompt with the order flipped each
repeat, after a discarded warm-up, greedy, ``--max-tokens`` tokens. Speedup is the ratio
of generation throughput (tokens/s after the prompt is processed), median over repeats;
``speedup`` divides the two medians, ``speedup_paired`` is the median of each pass's own
ratio (the two runs of a pass are adjacent in time and share the machine's state, so a
burst of load on a shared VM upsets one pass, not the estimate).

Beside it, per prompt:

* the **oracle bound** of prompt lookup on this machine: a drafter that knows the plain
  output and drafts, at every position, exactly the longest run of it that occurs
  earlier in the context (prompt + output so far), with the length of every round chosen
  by dynamic programming over the measured verify costs c(n) (``measuring.tune.time_decodes`` on
  the plain engine, same kernels). No prompt-lookup drafter can beat it;
* llama.cpp's own C++ prompt lookup, ``llama-speculative-simple --spec-type ngram-simple``
  and ``ngram-mod``, against C++ plain decoding (``llama-completion``) on the same
  prompt tokens, same model and threads (build them with
  ``benchmarks/peers/build_peer_tools.sh``; skipped with ``--no-cpp``).

The prompts (``benchmarks/prompts/heldout.py``) were written for this check and never tuned on.

    python -m benchmarks.ngram_policy --target qwen2.5-coder-1.5b --repeat 3 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

from benchmarks.common import commit, geomean
from benchmarks.peers.cpp import SPEC_TYPES, run_cpp, tools_dir
from benchmarks.prompts.heldout import PROMPTS
from edgespec import Engine
from edgespec.catalog import resolve_model
from edgespec.measuring.tune import time_decodes


def oracle_speedup(context: list[int], output: list[int], c: dict[int, float], l_max: int = 15) -> float:
    """Plain steps over the cheapest schedule of rounds an all-knowing prompt-lookup
    drafter could run (see the module docstring). ``c`` maps batch size n to its cost."""
    n_out = len(output)
    # run[i]: longest prefix of output[i:] (at most l_max) found in context + output[:i]
    run = [0] * n_out
    for i in range(n_out):
        hay = context + output[:i]
        best = 0
        for length in range(1, min(l_max, n_out - i) + 1):
            needle = output[i : i + length]
            if _contains(hay, needle):
                best = length
            else:
                break
        run[i] = best
    # cost[i]: cheapest way to commit output[i:]; a round at i verifies L drafts and
    # commits L + 1 tokens (the drafts and the target's own next token)
    cost = [0.0] * (n_out + 1)
    for i in range(n_out - 1, -1, -1):
        best = c[1] + cost[i + 1]
        for L in range(1, run[i] + 1):
            j = min(n_out, i + L + 1)
            best = min(best, c[L + 1] + cost[j])
        cost[i] = best
    return n_out / cost[0] if cost[0] else 1.0


def _contains(hay: list[int], needle: list[int]) -> bool:
    n = len(needle)
    first = needle[0]
    for p in range(len(hay) - n + 1):
        if hay[p] == first and hay[p : p + n] == needle:
            return True
    return False


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--limit", type=int, default=None, help="first N prompts only")
    ap.add_argument("--prompts", default=None, help="comma-separated prompt names only")
    ap.add_argument("--no-cpp", action="store_true", help="skip llama.cpp's C++ tools")
    ap.add_argument("--peer-bin", default=None, help="bin dir of build_peer_tools.sh")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    target = resolve_model(args.target)
    prompts = PROMPTS[: args.limit] if args.limit else PROMPTS
    if args.prompts:
        wanted = args.prompts.split(",")
        unknown = set(wanted) - {p[0] for p in PROMPTS}
        if unknown:
            ap.error(f"unknown prompt(s): {', '.join(sorted(unknown))}")
        prompts = [p for p in prompts if p[0] in wanted]
    plain = Engine(target, n_threads=args.threads)
    spec = Engine(target, draft="ngram", n_threads=args.threads)
    threads = plain.n_threads
    n = args.max_tokens

    plain.generate(prompts[0][3], max_tokens=16)  # warm-up, discarded
    spec.generate(prompts[0][3], max_tokens=16)
    rates = {p[0]: {"plain": [], "ngram": []} for p in prompts}
    outputs, accept = {}, {}
    for rep in range(args.repeat):
        for i, (name, _kind, _g, text) in enumerate(prompts):
            order = [("plain", plain), ("ngram", spec)]
            if (rep + i) % 2:
                order.reverse()
            for label, eng in order:
                eng.reset()
                r = eng.generate(text, max_tokens=n)
                rates[name][label].append(r.stats.generated_tokens / r.stats.t_generate)
                outputs[(name, label)] = r.token_ids
                if label == "ngram":
                    accept[name] = (r.stats.accepted, r.stats.drafted, r.stats.rounds)
            print(
                f"[{rep + 1}/{args.repeat}] {name}: plain {rates[name]['plain'][-1]:.1f} tok/s, "
                f"ngram {rates[name]['ngram'][-1]:.1f} tok/s",
                file=sys.stderr,
            )

    # the verify cost c(n) on this machine, for the oracle
    ids0 = plain.prompt_tokens(prompts[0][3])
    times = time_decodes(plain.ctx, ids0[:-1], n_max=16, repeats=3)
    c = times.relative

    cpp = {}
    if not args.no_cpp:
        bin_dir = tools_dir(args.peer_bin)
        with tempfile.TemporaryDirectory() as tmp:
            for name, _kind, _g, text in prompts:
                pf = Path(tmp) / f"{name}.txt"
                pf.write_text(spec.apply_chat_template([{"role": "user", "content": text}]))
                runs = {"plain": [], **{t: [] for t in SPEC_TYPES}}
                for rep in range(args.repeat):
                    labels = list(runs) if rep % 2 == 0 else list(reversed(runs))
                    for label in labels:
                        runs[label].append(
                            run_cpp(bin_dir, target, pf, n, threads, None if label == "plain" else label)
                        )
                cpp[name] = {k: statistics.median(v) for k, v in runs.items()}
                print(f"C++ {name}: {cpp[name]}", file=sys.stderr)

    rows = []
    for name, kind, grounded, text in prompts:
        p, s = statistics.median(rates[name]["plain"]), statistics.median(rates[name]["ngram"])
        paired = [b / a for a, b in zip(rates[name]["plain"], rates[name]["ngram"])]  # per pass
        ctx_ids = plain.prompt_tokens(text)
        out_plain = outputs[(name, "plain")]
        acc, drafted, rounds = accept[name]
        row = {
            "prompt": name,
            "kind": kind,
            "grounded": grounded,
            "plain_tps": round(p, 2),
            "ngram_tps": round(s, 2),
            "speedup": round(s / p, 3),
            "passes": [round(x, 3) for x in paired],
            "speedup_paired": round(statistics.median(paired), 3),
            "oracle": round(oracle_speedup(ctx_ids, out_plain, c), 3),
            "accepted": acc,
            "drafted": drafted,
            "rounds": rounds,
            "identical": outputs[(name, "ngram")] == out_plain,
        }
        if name in cpp:
            row["cpp_plain_tps"] = round(cpp[name]["plain"], 2)
            row["cpp_ngram_simple"] = round(cpp[name]["ngram-simple"] / cpp[name]["plain"], 3)
            row["cpp_ngram_mod"] = round(cpp[name]["ngram-mod"] / cpp[name]["plain"], 3)
        rows.append(row)

    summary = {}
    for label, sel in (("grounded", True), ("free", False)):
        sub = [r for r in rows if r["grounded"] == sel]
        summary[label] = {
            "geomean_speedup": geomean([r["speedup"] for r in sub], 3),
            "geomean_speedup_paired": geomean([r["speedup_paired"] for r in sub], 3),
            "geomean_oracle": geomean([r["oracle"] for r in sub], 3),
        }
        if cpp:
            summary[label]["geomean_cpp_ngram_simple"] = geomean([r["cpp_ngram_simple"] for r in sub], 3)
            summary[label]["geomean_cpp_ngram_mod"] = geomean([r["cpp_ngram_mod"] for r in sub], 3)

    hdr = (
        f"{'prompt':22} {'kind':9} {'plain t/s':>9} {'edgespec':>8} {'oracle':>7} {'C++ simple':>10} "
        f"{'C++ mod':>8} {'acc':>9} same"
    )
    print(hdr)
    for r in rows:
        print(
            f"{r['prompt']:22} {r['kind']:9} {r['plain_tps']:9.1f} {r['speedup']:7.2f}x {r['oracle']:6.2f}x "
            f"{r.get('cpp_ngram_simple', float('nan')):9.2f}x {r.get('cpp_ngram_mod', float('nan')):7.2f}x "
            f"{r['accepted']:4}/{r['drafted']:<4} {'yes' if r['identical'] else 'no'}"
        )
    for label, s in summary.items():
        print(f"{label}: " + ", ".join(f"{k} {v}" for k, v in s.items()))
    result = {
        "commit": commit(),
        "target": str(target),
        "threads": threads,
        "max_tokens": n,
        "repeat": args.repeat,
        "verify_cost": {str(k): round(v, 3) for k, v in sorted(c.items())},
        "rows": rows,
        "summary": summary,
    }
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
