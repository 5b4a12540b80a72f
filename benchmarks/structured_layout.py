"""Which JSON layout gives valid, right answers, and at what cost?

The held-out tasks of ``benchmarks/prompts/layout.py`` (written for this check, never tuned on; most
have an array without ``maxItems``), each generated greedily under its schema in every
layout with a real target and prompt lookup (``draft="ngram"``), as a user runs it. The
layout is asked for the way a user asks for it, through the schema's ``x-guidance``
(``edgespec.constraints.with_layout``), so the default is not patched.

Reported per model and layout, side by side from one process (the layouts alternate per
task, their order rotated, so the machine's drift spreads over all of them):

- valid: ended on ``stop`` with a complete structure that parses and follows the schema;
- length: ended on ``max_tokens`` inside the structure (a loop, mostly);
- score: the share of each task's expected facts that the answer states;
- tokens, rounds (target decodes) and tokens/s of generation;
- time: the geometric mean, over the tasks both layouts answered validly, of the time to
  the whole answer relative to the spaced layout.

    nohup flock /tmp/edgespec-bench.lock python -m benchmarks.structured_layout --threads 1 \\
        --json benchmarks/results/structured-layout-2026-12-01.json \\
        > benchmarks/results/structured-layout-2026-12-01.log 2>&1 &
"""

from __future__ import annotations

import argparse
import datetime
import json
from contextlib import ExitStack
from pathlib import Path

import jsonschema

from benchmarks.common import commit, geomean
from benchmarks.prompts.layout import TASKS, LayoutTask, score
from edgespec.catalog import resolve_model
from edgespec.constraints import JSON_LAYOUTS, with_layout

BASE = "spaced"


def valid(text: str, finish: str, complete: bool | None, schema: dict) -> tuple[bool, object]:
    if finish != "stop" or not complete:
        return False, None
    try:
        value = json.loads(text)
        jsonschema.validate(value, schema)
    except (ValueError, jsonschema.ValidationError):
        return False, None
    return True, value


def run_one(engine, task: LayoutTask, layout: str, max_tokens: int) -> dict:
    rf = {"type": "json_schema", "json_schema": {"name": task.id, "schema": with_layout(task.schema, layout)}}
    r = engine.generate(task.prompt, max_tokens=max_tokens, response_format=rf)
    s = r.stats
    ok, value = valid(r.text, r.finish_reason, r.structured_complete, task.schema)
    return {
        "task": task.id,
        "layout": layout,
        "finish": r.finish_reason,
        "valid": ok,
        "score": round(score(task, value), 3),
        "tokens": s.generated_tokens,
        "rounds": s.rounds,
        "forced_accepted": s.forced_accepted,
        "accepted": s.accepted,
        "t_generate": round(s.t_generate, 4),
        "t_mask": round(s.t_mask, 4),
        "text": r.text,
    }


def summarize(runs: list[dict], layouts: list[str]) -> dict:
    by = {(r["task"], r["layout"]): r for r in runs}
    # only the tasks measured in every layout (a run cut short may end inside one)
    tasks = [t.id for t in TASKS if all((t.id, lay) in by for lay in layouts)]
    out = {}
    for lay in layouts:
        rows = [by[t, lay] for t in tasks]
        t_gen = sum(r["t_generate"] for r in rows)
        both = [
            by[t, lay]["t_generate"] / by[t, BASE]["t_generate"]
            for t in tasks
            if (t, BASE) in by and by[t, lay]["valid"] and by[t, BASE]["valid"]
        ]
        if not rows:
            continue
        out[lay] = {
            "valid": sum(r["valid"] for r in rows),
            "n": len(rows),
            "length": sum(r["finish"] == "length" for r in rows),
            "score": round(sum(r["score"] for r in rows) / len(rows), 3),
            "tokens": sum(r["tokens"] for r in rows),
            "rounds": sum(r["rounds"] for r in rows),
            "forced_accepted": sum(r["forced_accepted"] for r in rows),
            "tok_s": round(sum(r["tokens"] for r in rows) / t_gen, 2) if t_gen else None,
            f"time_vs_{BASE}": geomean(both, 3),
            "time_pairs": len(both),
            "mask_share": round(sum(r["t_mask"] for r in rows) / t_gen, 4) if t_gen else None,
        }
    return out


def print_model(name: str, runs: list[dict], summary: dict) -> None:
    print(f"\n== {name}")
    print(f"{'task':16} " + " ".join(f"{lay:>24}" for lay in summary))
    by = {(r["task"], r["layout"]): r for r in runs}
    for t in dict.fromkeys(r["task"] for r in runs):
        if not all((t, lay) in by for lay in summary):
            continue
        cells = []
        for lay in summary:
            r = by[t, lay]
            cells.append(f"{r['finish']:>6} {r['tokens']:4d}t {'ok ' if r['valid'] else 'BAD'} {r['score']:.2f}")
        print(f"{t:16} " + " ".join(f"{c:>24}" for c in cells))
    print(
        f"{'layout':10} {'valid':>6} {'length':>6} {'score':>6} {'tokens':>6} {'rounds':>6} {'forced':>6} "
        f"{'tok/s':>6} {'time vs ' + BASE:>15} {'mask':>6}"
    )
    for lay, s in summary.items():
        ratio = "-" if s[f"time_vs_{BASE}"] is None else f"{s[f'time_vs_{BASE}']:.3f}x ({s['time_pairs']})"
        print(
            f"{lay:10} {s['valid']:3d}/{s['n']:<2} {s['length']:6d} {s['score']:6.3f} {s['tokens']:6d} "
            f"{s['rounds']:6d} {s['forced_accepted']:6d} {s['tok_s']:6.2f} {ratio:>15} "
            f"{100 * s['mask_share']:5.2f}%"
        )


def markdown(report: dict) -> str:
    """The summary of a saved run as a Markdown table (for docs/structured-output.md)."""
    lines = [
        "| model | layout | valid | ended on length | score | tokens | rounds | tok/s | "
        f"time to the answer vs {BASE} |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, m in report["models"].items():
        for lay, s in m["summary"].items():
            ratio = "-" if s[f"time_vs_{BASE}"] is None else f"{s[f'time_vs_{BASE}']:.2f}x ({s['time_pairs']} tasks)"
            lines.append(
                f"| {name} | {lay} | {s['valid']}/{s['n']} | {s['length']} | {s['score']:.2f} | "
                f"{s['tokens']} | {s['rounds']} | {s['tok_s']:.2f} | {ratio} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="qwen2.5-coder-0.5b,qwen2.5-coder-1.5b")
    ap.add_argument("--layouts", default=",".join(JSON_LAYOUTS))
    ap.add_argument("--tasks", default=None, help="comma-separated task ids (default: all)")
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", default=None, help="write the runs and the summary here")
    ap.add_argument("--render", default=None, help="print a saved run's summary as Markdown, and exit")
    args = ap.parse_args()
    if args.render:
        print(markdown(json.loads(Path(args.render).read_text())))
        return
    from edgespec import Engine

    layouts = args.layouts.split(",")
    tasks = [t for t in TASKS if args.tasks is None or t.id in args.tasks.split(",")]
    report = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "commit": commit(),
        "max_tokens": args.max_tokens,
        "threads": args.threads,
        "layouts": layouts,
        "tasks": [t.id for t in tasks],
        "models": {},
    }
    names = args.targets.split(",")
    runs: dict[str, list[dict]] = {name: [] for name in names}
    with ExitStack() as stack:
        engines = {
            name: stack.enter_context(Engine(resolve_model(name), draft="ngram", n_ctx=2048, n_threads=args.threads))
            for name in names
        }
        # task by task, every model and layout, so that a run cut short has measured all
        # of them on the same tasks; the layouts' order rotates per task
        for i, task in enumerate(tasks):
            order = layouts[i % len(layouts) :] + layouts[: i % len(layouts)]
            for name, e in engines.items():
                for lay in order:
                    r = run_one(e, task, lay, args.max_tokens)
                    runs[name].append(r)
                    print(
                        f"[{name}] {task.id} {lay}: {r['finish']} {r['tokens']} tokens in {r['t_generate']:.1f} s "
                        f"{'valid' if r['valid'] else 'INVALID'} score {r['score']}",
                        flush=True,
                    )
                    if args.json:  # after every run, so a cut run keeps what it measured
                        save(args.json, report, runs, layouts)
    for name in names:
        print_model(name, runs[name], summarize(runs[name], layouts))
    if args.json:
        save(args.json, report, runs, layouts)


def save(path: str, report: dict, runs: dict, layouts: list[str]) -> None:
    report["models"] = {name: {"summary": summarize(rs, layouts), "runs": rs} for name, rs in runs.items() if rs}
    Path(path).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
