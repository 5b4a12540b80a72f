"""Under a JSON Schema, do the defaults keep up with constrained plain decoding? (issue 43, part 3)

Two configurations of ONE engine on the held-out tasks of ``benchmarks/prompts/structured_tasks.py``
(five invoice-like extractions, three other structured tasks), greedy, the memory of earlier
answers off, alternating task by task with the order swapped every pass:

* ``plain``     ``Engine(target, draft=None)`` with the task's ``response_format``: one token a
                step, masked;
* ``defaults``  ``Engine(target, draft="ngram")`` with the same ``response_format``: the grammar's
                forced tokens and prompt lookup cut to what the schema allows, under the learned
                drafting policy (c(n) from the engine's prior, as ``Engine`` starts without the
                command line's first-use measurement; ``--first-use`` measures it first).

Per task and pass the ratio is plain's time to the whole answer over the defaults' (the
generation's wall time, prompt excluded: ``stats.t_generate``); a task's figure is the median
of its passes with their min and max, a kind's the geometric mean of its tasks' medians. Every
answer is checked against its schema with ``jsonschema``; the two configurations must give the
same answer (greedy; the kernels are not batch-invariant, so a difference is reported, not
fatal). For each defaults run the engine's own counters say what the rounds did: the tokens
the grammar drafted and kept, prompt lookup's drafted and kept, the rounds and the verify
sizes (the rounds' ``Round`` events). With ``--whole-match`` a third configuration alternates
with them: the defaults as they were before issue 43's fix (``verify.beyond_forced`` turned off,
so prompt lookup after the grammar's tokens is judged by its whole match), the "before" column.

    python -m benchmarks.structured_tasks --passes 3 --whole-match --out benchmarks/results/structured-tasks-DATE.json
    python -m benchmarks.structured_tasks --tasks hardware-receipt --passes 1   # a quick look
    python -m benchmarks.structured_tasks --dev                                 # the DEV tasks (tuning)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

import jsonschema

from benchmarks.common import geomean, git_info, machine_info
from benchmarks.prompts.structured_tasks import DEV, TASKS, StructuredTask
from edgespec import Engine
from edgespec.catalog import resolve_model
from edgespec.costmodel.drafting import DraftingOptions
from edgespec.decoding import speculative, verify
from edgespec.events import Done, Round

CONFIGS = ("plain", "defaults")
# ``--whole-match``: also the defaults as they were before issue 43's fix, prompt lookup after the
# grammar's tokens judged by its whole match, those tokens included (``verify.beyond_forced`` off)
WHOLE_MATCH = "whole-match"


def valid(text: str, schema: dict) -> bool:
    """Whether the whole reply is JSON that follows ``schema``."""
    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def run(eng: Engine, task: StructuredTask, config: str, max_tokens: int) -> dict:
    """One answer of ``config`` (the drafter switched, the cache cleared), its counters."""
    eng.set_drafter(None if config == "plain" else "ngram")
    eng.reset()
    speculative.beyond_forced = (lambda p, f: p) if config == WHOLE_MATCH else verify.beyond_forced
    sizes: Counter = Counter()
    done = None
    for ev in eng.stream(task.prompt, max_tokens=max_tokens, temperature=0.0, response_format=task.response_format):
        if isinstance(ev, Round):
            sizes[ev.drafted + 1] += 1
        elif isinstance(ev, Done):
            done = ev
    s = done.stats
    return {
        "text": done.text,
        "finish_reason": done.finish_reason,
        "valid": valid(done.text, task.schema),
        "tokens": s.generated_tokens,
        "seconds": s.t_generate,
        "rounds": s.rounds,
        "forced": s.forced,
        "forced_accepted": s.forced_accepted,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "by_source": {k: [s.accepted_by_source.get(k, 0), n] for k, n in s.drafted_by_source.items()},
        "verify_sizes": dict(sorted(sizes.items())),
        "t_mask": s.t_mask,
    }


def summarize(tasks: list[StructuredTask], runs: dict) -> dict:
    rows = []
    for t in tasks:
        plain, dflt = runs[(t.id, "plain")], runs[(t.id, "defaults")]
        ratios = [p["seconds"] / d["seconds"] for p, d in zip(plain, dflt) if d["seconds"] > 0]
        last = dflt[-1]
        whole = runs.get((t.id, WHOLE_MATCH))
        extra = {}
        if whole:
            w = [p["seconds"] / d["seconds"] for p, d in zip(plain, whole) if d["seconds"] > 0]
            extra = {
                "whole_match_ratio": round(statistics.median(w), 3),
                "whole_match_ratios": [round(r, 3) for r in w],
                "whole_match_lookup": f"{whole[-1]['accepted'] - whole[-1]['forced_accepted']}/"
                f"{whole[-1]['drafted'] - whole[-1]['forced']}",
                "whole_match_rounds": whole[-1]["rounds"],
            }
        rows.append(
            {
                "task": t.id,
                "kind": t.kind,
                "ratio": round(statistics.median(ratios), 3),
                "ratio_min": round(min(ratios), 3),
                "ratio_max": round(max(ratios), 3),
                "ratios": [round(r, 3) for r in ratios],
                "plain_tok_s": round(statistics.median(r["tokens"] / r["seconds"] for r in plain), 2),
                "defaults_tok_s": round(statistics.median(r["tokens"] / r["seconds"] for r in dflt), 2),
                "tokens": [plain[-1]["tokens"], last["tokens"]],
                "rounds": last["rounds"],
                "forced": f"{last['forced_accepted']}/{last['forced']}",
                "lookup": f"{last['accepted'] - last['forced_accepted']}/{last['drafted'] - last['forced']}",
                "verify_sizes": last["verify_sizes"],
                "valid": f"{sum(r['valid'] for r in plain)}/{len(plain)} {sum(r['valid'] for r in dflt)}/{len(dflt)}",
                "same_answer": sum(p["text"] == d["text"] for p, d in zip(plain, dflt)),
                **extra,
            }
        )
    kinds = sorted({t.kind for t in tasks})
    by_kind = {k: round(geomean(r["ratio"] for r in rows if r["kind"] == k), 3) for k in kinds}
    worst = min(rows, key=lambda r: r["ratio"])
    out = {"rows": rows, "by_kind": by_kind, "worst": {"task": worst["task"], "ratio": worst["ratio"]}}
    if any("whole_match_ratio" in r for r in rows):
        out["whole_match_by_kind"] = {
            k: round(geomean(r["whole_match_ratio"] for r in rows if r["kind"] == k), 3) for k in kinds
        }
    return out


def print_table(result: dict) -> None:
    print(
        "| task | kind | defaults / plain, median (min-max) | plain tok/s | defaults tok/s | tokens plain, defaults "
        "| rounds | grammar kept/drafted | lookup kept/drafted | valid plain, defaults |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in result["rows"]:
        print(
            f"| {r['task']} | {r['kind']} | {r['ratio']:.2f}x ({r['ratio_min']:.2f}-{r['ratio_max']:.2f}) | "
            f"{r['plain_tok_s']} | {r['defaults_tok_s']} | {r['tokens'][0]}, {r['tokens'][1]} | {r['rounds']} | "
            f"{r['forced']} | {r['lookup']} | {r['valid']} |"
        )
    print()
    for k, g in result["by_kind"].items():
        print(f"- {k}: geometric mean {g:.3f}x")
    for k, g in result.get("whole_match_by_kind", {}).items():
        print(f"- {k}, lookup judged by the whole match (before the fix): geometric mean {g:.3f}x")
    for r in result["rows"]:
        if "whole_match_ratio" in r:
            print(
                f"- {r['task']}: before the fix {r['whole_match_ratio']:.2f}x "
                f"({', '.join(map(str, r['whole_match_ratios']))}), lookup kept/drafted {r['whole_match_lookup']}; "
                f"after {r['ratio']:.2f}x ({', '.join(map(str, r['ratios']))}), {r['lookup']}"
            )
    print(f"- worst task: {result['worst']['task']} {result['worst']['ratio']:.3f}x")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=700)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--tasks", default=None, help="comma-separated task ids only")
    ap.add_argument("--dev", action="store_true", help="the DEV tasks (tuning material) instead of the held-out ones")
    ap.add_argument("--first-use", action="store_true", help="measure c(n) at load as the command line does")
    ap.add_argument(
        "--whole-match",
        action="store_true",
        help="also run the defaults as before issue 43's fix (lookup after the grammar's tokens judged by its "
        "whole match), alternating with the other two",
    )
    ap.add_argument("--out", default=None, help="write the runs and the summary here (JSON)")
    args = ap.parse_args()

    tasks = list(DEV if args.dev else TASKS)
    if args.tasks:
        wanted = args.tasks.split(",")
        unknown = set(wanted) - {t.id for t in tasks}
        if unknown:
            ap.error(f"unknown task(s): {', '.join(sorted(unknown))}")
        tasks = [t for t in tasks if t.id in wanted]

    target = resolve_model(args.target)
    eng = Engine(target, draft="ngram", n_threads=args.threads, drafting=DraftingOptions(memory=False))
    first_use = None
    if args.first_use:
        from edgespec.measuring.first_use import measure_first_use

        first_use = measure_first_use(eng, even_if_off=True)
        print(first_use, file=sys.stderr)
    load_before = os.getloadavg()
    t_start = time.time()
    git = git_info()  # the code imported now, whatever is committed while it runs
    configs = (*CONFIGS, WHOLE_MATCH) if args.whole_match else CONFIGS
    runs: dict = {(t.id, c): [] for t in tasks for c in configs}
    try:
        for c in configs:  # warm-up, discarded
            run(eng, tasks[0], c, 16)
        for p in range(args.passes):
            for i, t in enumerate(tasks):
                k = (p + i) % len(configs)  # the order rotated task by task and pass by pass
                order = configs[k:] + configs[:k]
                for c in order:
                    rec = run(eng, t, c, args.max_tokens)
                    runs[(t.id, c)].append(rec)
                    print(
                        f"[{p + 1}/{args.passes}] {t.id:22} {c:8} {rec['tokens']:4d} tok {rec['seconds']:7.2f} s "
                        f"rounds {rec['rounds']:4d} valid={rec['valid']} {rec['finish_reason']}",
                        file=sys.stderr,
                        flush=True,
                    )
        table = [round(x, 3) for x in eng.drafting.cost.table[1:17]]
    finally:
        speculative.beyond_forced = verify.beyond_forced
        eng.close()
    result = summarize(tasks, runs)
    print_table(result)
    if args.out:
        report = {
            "settings": {
                "target": str(target),
                "threads": args.threads,
                "max_tokens": args.max_tokens,
                "passes": args.passes,
                "tasks": [t.id for t in tasks],
                "memory": False,
                "first_use": first_use,
                "configs": list(configs),
                "EDGESPEC_FIRST_USE": os.environ.get("EDGESPEC_FIRST_USE"),
            },
            "git": git,
            "machine": {**machine_info(), "load_before": [round(x, 2) for x in load_before]},
            "minutes": round((time.time() - t_start) / 60, 1),
            "learned_cost_table": table,
            **result,
            "runs": {f"{k[0]} {k[1]}": v for k, v in runs.items()},
        }
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
