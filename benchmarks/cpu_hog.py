"""The automatic choice against plain decoding with a CPU hog beside generation.

Issue 27, item 6: laptops are busy machines (a browser and an editor run beside the
model), and the online cost model must not let that load make the automatic choice
slower than plain decoding. Goal: auto >= 0.97x plain under the hog.

Two engines in ONE process on the same model and threads:

* **plain**: ``Engine(target)``, plain decoding on llama.cpp's kernels, what a user gets
  without speculation;
* **auto**: ``edgespec.load(target)``, the planner's automatic choice for this machine
  (its drafter, the learned drafting policy and its online cost model), kept for the
  whole run, so its cost model lives through the load as an engine in use would.

A separate process spins beside them (``--hog bursts``: busy for ``--on`` seconds, idle
for ``--off``, like a browser rendering; ``--hog spin``: busy all the time; ``--hog
none``: no hog, the quiet baseline). It starts before the warm-up and runs through all
passes. Each pass runs every prompt on both engines, plain first on even passes and auto
first on odd ones, so both see the same load. Throughput is generated tokens over
generation time (prompt processing excluded, it is the same work in both). The auto
engine's memory of earlier answers starts every pass empty: the prompts repeat from pass
to pass, and drafting a prompt's own earlier answer is not what this measures. Per prompt:
the median of each pass's own auto/plain ratio (``ratio_paired``) and the ratio of the
medians; overall: the geometric mean of the paired ratios and the ratio of all tokens
over all time. Greedy, ``--max-tokens`` tokens each (96 by default). Also reported: each
engine's time outside the target's ``llama_decode`` per round (what drafting, choosing
and sampling cost it), which tells a gap of the engines' own work from the load's noise.

The prompts (``benchmarks/prompts/hog.py``) were written for this check and never tuned on:
a story, a CSV, a code edit and a summary.

    python -m benchmarks.cpu_hog --passes 5                       # the 1.5B, bursts
    python -m benchmarks.cpu_hog --hog spin --passes 5
    python -m benchmarks.cpu_hog --target qwen2.5-coder-0.5b --passes 1 --max-tokens 8 --only story

Results go to ``--out`` (default ``benchmarks/results/cpu-hog-YYYY-MM-DD.json``).
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import statistics
import sys
import time
from pathlib import Path

from benchmarks.common import RESULTS, commit, geomean
from benchmarks.prompts.hog import PROMPTS


def _hog(stop, on: float, off: float, core: int | None) -> None:
    """Spin for ``on`` seconds, sleep ``off`` (0: never), until ``stop`` is set."""
    if core is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {core})
    x = 0.0
    while not stop.is_set():
        end = time.perf_counter() + on
        while time.perf_counter() < end:
            for _ in range(2000):
                x = x * 1.0000001 + 1.0
        if off > 0:
            stop.wait(off)


def start_hog(kind: str, on: float, off: float, procs: int, core: int | None):
    if kind == "none":
        return None, []
    ctx = mp.get_context("spawn")  # a clean child, nothing of llama.cpp's threads forked
    stop = ctx.Event()
    duty = (on, 0.0) if kind == "spin" else (on, off)
    workers = [ctx.Process(target=_hog, args=(stop, *duty, core), daemon=True) for _ in range(procs)]
    for w in workers:
        w.start()
    return stop, workers


def stop_hog(stop, workers) -> None:
    if stop is None:
        return
    stop.set()
    for w in workers:
        w.join(timeout=5)
        if w.is_alive():
            w.terminate()


def generate(engine, prompt: str, max_tokens: int):
    engine.reset()  # both pay the same prompt processing
    r = engine.generate(prompt, max_tokens=max_tokens, temperature=0.0)
    s = r.stats
    return r, s.generated_tokens, s.t_generate, (s.t_generate - s.t_verify, s.rounds)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b", help="GGUF path or catalog name")
    ap.add_argument("--passes", type=int, default=5, help="timed passes after one warm-up")
    ap.add_argument("--max-tokens", type=int, default=96)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--hog", choices=("bursts", "spin", "none"), default="bursts")
    ap.add_argument("--on", type=float, default=0.5, help="seconds busy per burst")
    ap.add_argument("--off", type=float, default=0.5, help="seconds idle between bursts")
    ap.add_argument("--hog-procs", type=int, default=1, help="hog processes (each spins on one core)")
    ap.add_argument("--hog-core", type=int, default=None, help="pin the hog to this core")
    ap.add_argument("--only", default=None, help="comma-separated prompt names: " + ",".join(PROMPTS))
    ap.add_argument("--out", default=None, help="results JSON (default benchmarks/results/cpu-hog-DATE.json)")
    args = ap.parse_args()

    import edgespec
    from edgespec import Engine, SuffixIndex
    from edgespec.catalog import resolve_model

    names = args.only.split(",") if args.only else list(PROMPTS)
    unknown = [n for n in names if n not in PROMPTS]
    if unknown:
        ap.error(f"unknown prompts {unknown}; known: {', '.join(PROMPTS)}")
    today = datetime.date.today().isoformat()
    out = Path(args.out) if args.out else RESULTS / f"cpu-hog-{today}.json"

    target = resolve_model(args.target)
    plain = Engine(target, n_threads=args.threads)
    auto = edgespec.load(args.target, n_threads=args.threads)
    p = auto.plan
    print(f"auto: drafter {p.drafter}, k {p.k} ({p.reason})", flush=True)
    stop, workers = start_hog(args.hog, args.on, args.off, args.hog_procs, args.hog_core)
    print(
        f"hog: {args.hog} x{args.hog_procs}" + (f" ({args.on}s on, {args.off}s off)" if args.hog == "bursts" else ""),
        flush=True,
    )
    rows = []
    try:
        for eng in (plain, auto):  # warm-up, discarded
            generate(eng, PROMPTS[names[0]], min(16, args.max_tokens))
        runs = {n: {"plain": [], "auto": []} for n in names}
        besides = {"plain": [], "auto": []}  # (seconds outside the target's llama_decode, rounds)
        last = {}
        for k in range(args.passes):
            if auto.memory is not None:  # the prompts repeat from pass to pass: no memory of the last
                auto.memory = SuffixIndex(auto.memory.cap)
            for name in names:
                order = (("plain", plain), ("auto", auto)) if k % 2 == 0 else (("auto", auto), ("plain", plain))
                for label, eng in order:
                    r, toks, secs, outside = generate(eng, PROMPTS[name], args.max_tokens)
                    runs[name][label].append((toks, secs))
                    besides[label].append(outside)
                    last[(name, label)] = r
                pr = runs[name]
                ratio = (pr["auto"][-1][0] / pr["auto"][-1][1]) / (pr["plain"][-1][0] / pr["plain"][-1][1])
                print(
                    f"pass {k + 1} {name:10s} plain {pr['plain'][-1][0] / pr['plain'][-1][1]:6.2f} tok/s  "
                    f"auto {pr['auto'][-1][0] / pr['auto'][-1][1]:6.2f} tok/s  x{ratio:.3f}",
                    flush=True,
                )
    finally:
        stop_hog(stop, workers)

    for name in names:
        pr = runs[name]
        tps = {label: [t / s for t, s in pr[label]] for label in pr}
        paired = [a / b for a, b in zip(tps["auto"], tps["plain"])]
        st = last[(name, "auto")].stats
        rows.append(
            {
                "prompt": name,
                "tokens": last[(name, "plain")].stats.generated_tokens,
                "plain_tps": tps["plain"],
                "auto_tps": tps["auto"],
                "ratio_paired": statistics.median(paired),
                "ratio_of_medians": statistics.median(tps["auto"]) / statistics.median(tps["plain"]),
                "identical_last_pass": last[(name, "auto")].token_ids == last[(name, "plain")].token_ids,
                "auto_rounds": st.rounds,
                "auto_drafted": st.drafted,
                "auto_accepted": st.accepted,
            }
        )
    geo = geomean(r["ratio_paired"] for r in rows)
    total = {
        label: sum(t for n in names for t, _ in runs[n][label]) / sum(s for n in names for _, s in runs[n][label])
        for label in ("plain", "auto")
    }
    overall = total["auto"] / total["plain"]
    # what each engine does besides decoding (drafting, choosing, sampling, bookkeeping)
    outside_ms = {label: 1e3 * sum(o for o, _ in v) / max(1, sum(n for _, n in v)) for label, v in besides.items()}
    for r in rows:
        print(
            f"{r['prompt']:10s} auto/plain x{r['ratio_paired']:.3f} paired, x{r['ratio_of_medians']:.3f} of medians  "
            f"(drafted {r['auto_drafted']}, accepted {r['auto_accepted']} in {r['auto_rounds']} rounds)"
        )
    print(
        f"overall: x{geo:.3f} geometric mean of paired ratios, x{overall:.3f} all tokens over all time "
        f"(goal >= 0.97: {'met' if min(geo, overall) >= 0.97 else 'NOT met'})"
    )
    print(f"outside llama_decode per round: plain {outside_ms['plain']:.2f} ms, auto {outside_ms['auto']:.2f} ms")
    vc = auto.verify_cost
    result = {
        "date": today,
        "commit": commit(),
        "target": args.target,
        "threads": args.threads,
        "max_tokens": args.max_tokens,
        "passes": args.passes,
        "hog": {"kind": args.hog, "on_s": args.on, "off_s": args.off, "procs": args.hog_procs, "core": args.hog_core},
        "cpus": os.cpu_count(),
        "auto_plan": {"drafter": p.drafter, "k": p.k, "reason": p.reason},
        "auto_learned_c": dict(zip(vc.n, (round(c, 3) for c in vc.c))),
        "results": rows,
        "geomean_ratio_paired": geo,
        "ratio_all_tokens": overall,
        "outside_decode_ms_per_round": outside_ms,
        "goal": 0.97,
        "goal_met": min(geo, overall) >= 0.97,
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {out}")
    plain.close()
    auto.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
