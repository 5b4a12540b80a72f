"""The batch figure of ``benchmarks/repeat_workloads.py``: a workload's requests through
``generate_many(parallel=N)`` once per engine per pass, in a rotated order, against the
plain engine's batch; and the schema side of a request (the ``response_format`` a
workload asks for, whether a reply is a valid record), which the one-at-a-time runners
share. It runs the engines it is handed; it loads none.
"""

from __future__ import annotations

import json
import statistics
import sys
import time

from benchmarks.common import geomean
from benchmarks.prompts.repeat import Request, Workload
from benchmarks.repeat_memory import fresh_memory, memory_report
from benchmarks.repeat_summary import sum_counts
from edgespec import Engine


def response_format(wl: Workload) -> dict | None:
    if wl.schema is None:
        return None
    return {"type": "json_schema", "json_schema": {"name": wl.name, "schema": wl.schema, "strict": True}}


def valid_json(text: str, schema: dict | None) -> bool | None:
    if schema is None:
        return None
    import jsonschema

    try:
        jsonschema.validate(json.loads(text), schema)
    except (ValueError, jsonschema.ValidationError):
        return False
    return True


def run_batch(
    engines: dict, wl: Workload, rendered: dict, reqs: list[Request], max_tokens: int, parallel: int, passes: int = 1
) -> dict:
    """The requests through ``generate_many`` once per engine per pass, the engines in a
    rotated order each pass (so none always runs first or last on a drifting machine).
    Per engine: the median pass, the geometric mean of its per-pass ratio to plain, the
    counts over all passes, and the batch cost C(n) its engine learned by the end (one
    estimate across its batches: ``Engine.batch_cost``)."""
    prompts = [rendered[r.id][1] for r in reqs]
    opts: dict = {"max_tokens": max_tokens, "temperature": 0.0}
    if wl.schema is not None:
        opts["response_format"] = response_format(wl)
    names = list(engines)
    per: dict = {m: [] for m in names}
    for p in range(max(1, passes)):
        for m in names[p % len(names) :] + names[: p % len(names)]:
            per[m].append(_batch_pass(engines[m], m, wl, prompts, opts, parallel, p))
    out: dict = {}
    plain = per.get("plain")
    for m, recs in per.items():
        tps = sorted(r["tokens_per_second"] for r in recs)
        rec = {
            "passes": recs,
            "requests": len(prompts),
            "tokens_per_second": statistics.median(tps),
            "errors": [e for r in recs for e in r["errors"]],
            "drafted": sum(r["drafted"] for r in recs),
            "accepted": sum(r["accepted"] for r in recs),
            "valid": sum(r["valid"] for r in recs) if wl.schema else None,
            "batch_cost": [round(c, 3) for c in engines[m].batch_cost().table[1:17]],
        }
        if plain and m != "plain":
            rec["x_plain"] = round(
                geomean(
                    r["tokens_per_second"] / b["tokens_per_second"]
                    for r, b in zip(recs, plain)
                    if b["tokens_per_second"] > 0
                )
                or 0,
                3,
            )
        by = [r["accepted_by_source"] for r in recs if r.get("accepted_by_source")]
        if by:
            rec["accepted_by_source"] = sum_counts(by)
            rec["drafted_by_source"] = sum_counts(r["drafted_by_source"] for r in recs if r.get("drafted_by_source"))
        if m == "suffix":
            rec["memory_after"] = recs[-1].get("memory_after")
        out[m] = rec
    return out


def _batch_pass(eng: Engine, m: str, wl: Workload, prompts: list, opts: dict, parallel: int, p: int) -> dict:
    if m == "suffix":
        fresh_memory(eng)  # the batch's sequences draft from each other, not from the last pass
    t0 = time.perf_counter()
    results = list(eng.generate_many(prompts, parallel=parallel, **opts))
    wall = time.perf_counter() - t0
    errors = [str(o.error) for o in results if o.error is not None]
    stats = [o.result.stats for o in results if o.result is not None]
    tokens = sum(s.generated_tokens for s in stats)
    rec = {
        "pass": p,
        "errors": errors,
        "tokens": tokens,
        "wall": wall,
        "tokens_per_second": tokens / wall if wall > 0 else 0.0,
        "drafted": sum(s.drafted for s in stats),
        "accepted": sum(s.accepted for s in stats),
        "valid": sum(bool(valid_json(o.result.text, wl.schema)) for o in results if o.result is not None)
        if wl.schema
        else None,
    }
    for key in ("accepted_by_source", "drafted_by_source"):
        by = [getattr(s, key, None) for s in stats]
        if any(by):
            rec[key] = sum_counts(b for b in by if b)
    if m == "suffix":
        rec["memory_after"] = memory_report(eng)
    print(
        f"[batch {wl.name} parallel={parallel} pass {p}] {m:7} {tokens} tok in {wall:.1f} s: "
        f"{rec['tokens_per_second']:.2f} tok/s, acc {rec['accepted']}/{rec['drafted']}, errors {len(errors)}",
        file=sys.stderr,
        flush=True,
    )
    return rec
