"""The summary of ``benchmarks/repeat_workloads.py``'s records: per workload and mode the
speed over the first requests and the later ones against plain decoding, the comparison
with llama-server counted alike, the issue's goals, and the Markdown table for
docs/results.md. It reads records (dicts) only, so a saved result can be summarised
again; it runs no model.
"""

from __future__ import annotations

import statistics

from benchmarks.common import geomean
from benchmarks.prompts.repeat import Workload

EARLY = 8  # requests 1..EARLY are "the first requests"; EARLY+1.. are "9 and later"
PEER_MODES = ("ngram-mod", "ngram-cache")


def sum_counts(ds) -> dict:
    """The per-key sums of count dicts (None entries skipped)."""
    out: dict = {}
    for d in ds:
        for k, v in (d or {}).items():
            out[k] = out.get(k, 0) + v
    return out


def window(recs: list[dict], lo: int, hi: int | None) -> list[dict]:
    return recs[lo:hi]


def mode_stats(recs: list[dict], base: list[dict] | None) -> dict | None:
    if not recs:
        return None
    tokens, secs = sum(r["tokens"] for r in recs), sum(r["seconds"] for r in recs)
    out = {
        "requests": len(recs),
        "tokens": tokens,
        "seconds": round(secs, 3),
        "tokens_per_second": round(tokens / secs, 3) if secs > 0 else None,
        "median_tokens_per_second": round(statistics.median(r["tokens_per_second"] for r in recs), 3),
        "drafted": sum(r["drafted"] for r in recs),
        "accepted": sum(r["accepted"] for r in recs),
    }
    if base is not None:
        ratios = [
            r["tokens_per_second"] / b["tokens_per_second"]
            for r, b in zip(recs, base)
            if b["tokens_per_second"] > 0 and r["tokens_per_second"] > 0
        ]
        g = geomean(ratios)
        out["x_plain"] = round(g, 3) if g else None
        out["x_plain_min"] = round(min(ratios), 3) if ratios else None
        out["same_text_as_plain"] = sum(r["text"] == b["text"] for r, b in zip(recs, base))
    if any(r.get("drafted_by_source") for r in recs):
        out["drafted_by_source"] = sum_counts(r.get("drafted_by_source") for r in recs)
        out["accepted_by_source"] = sum_counts(r.get("accepted_by_source") for r in recs)
    elif all(r.get("accepted_by_source") is None for r in recs) and "t_draft" in recs[0]:
        out["by_source"] = "not reported by this edgespec (Stats has no accepted_by_source)"
    if "t_draft" in recs[0] and secs > 0:
        out["draft_share"] = round(sum(r["t_draft"] for r in recs) / secs, 4)
    if recs[0].get("valid") is not None:
        out["valid"] = sum(bool(r["valid"]) for r in recs)
    if "wall" in recs[0]:
        w = sum(r["wall"] for r in recs)
        out["wall_seconds"] = round(w, 3)
    return out


def decode_rate(rec: dict) -> float:
    """Our record's speed on llama-server's terms. The peer's ``predicted_per_second`` is
    its decode steps per second: the end-of-generation token counts, and the first token
    (sampled from the prompt's last batch) costs no step. Our ``t_generate`` holds one
    decode per sampled token (the prompt's last token is decoded by the first round) and
    our ``generated_tokens`` leaves the end-of-generation token out: on a 40-token answer
    that reads 2.5% slower at the same step time. So: sampled tokens over t_generate."""
    sampled = rec.get("sampled", rec["tokens"])
    return sampled / rec["seconds"] if rec["seconds"] > 0 else 0.0


def vs_peer(mine: list[dict], theirs: list[dict]) -> tuple[float | None, float | None]:
    """(our decode rate over the peer's, the peer's answer time over ours), geometric
    means over paired requests. The answer time is prompt processing plus generation on
    both sides (each side's split between the two differs by the prompt's last token)."""
    rates = [
        r / t["tokens_per_second"]
        for r, t in zip(map(decode_rate, mine), theirs)
        if t["tokens_per_second"] > 0 and r > 0
    ]
    times = [
        (t["seconds"] + t.get("prompt_seconds", 0.0)) / m["t_total"] for m, t in zip(mine, theirs) if m["t_total"] > 0
    ]
    r, a = geomean(rates), geomean(times)
    return (round(r, 3) if r else None), (round(a, 3) if a else None)


def summarize_workload(wl: Workload, runs: dict, warm: dict | None, split: int | None) -> dict:
    base = runs.get("plain")
    s: dict = {"kind": wl.kind, "requests": len(next(iter(runs.values()))), "windows": {}}
    for name, (lo, hi) in {"1-8": (0, EARLY), "9+": (EARLY, None), "all": (0, None)}.items():
        s["windows"][name] = {
            m: mode_stats(window(recs, lo, hi), window(base, lo, hi) if base and m != "plain" else None)
            for m, recs in runs.items()
        }
    if "suffix" in runs:
        for p in PEER_MODES:
            if p in runs:
                vs = s.setdefault("suffix_vs_peer", {})[p] = {}
                for w, (lo, hi) in {"1-8": (0, EARLY), "9+": (EARLY, None)}.items():
                    # the time to the whole answer too: under a schema llama-server's grammar
                    # lets the model lay the record out otherwise (more tokens)
                    vs[w], vs[f"{w} answer time"] = vs_peer(window(runs["suffix"], lo, hi), window(runs[p], lo, hi))
                    if base:  # how far the peer's plain step is from ours, where it drafts little
                        vs[f"{w} plain"] = vs_peer(window(base, lo, hi), window(runs[p], lo, hi))[0]
    if warm is not None and split is not None and base is not None:
        wr = warm["runs"]
        s["warm"] = {
            "requests": f"{split + 1}-{split + len(wr['warm'])}",
            "loaded_tokens": warm["loaded_tokens"],
            "t_load": round(warm["t_load"], 3),
            "memory_after": warm.get("memory_after"),
            "warm process": mode_stats(wr["warm"], wr["plain"]),
            "warm process plain": mode_stats(wr["plain"], None),
            "first request x_plain": round(wr["warm"][0]["tokens_per_second"] / wr["plain"][0]["tokens_per_second"], 3)
            if wr["plain"] and wr["plain"][0]["tokens_per_second"]
            else None,
            "in-process, same requests": mode_stats(runs["suffix"][split:], base[split:]),
            "warm text = in-process text": sum(
                a["text"] == b["text"] for a, b in zip(wr["warm"], runs["suffix"][split:])
            ),
        }
    return s


def conclude(summary: dict, n_requests: int) -> dict:
    """The issue's goals table, per workload, from the summaries alone."""
    goals: dict = {}
    judged = n_requests >= 24

    def put(goal: str, wl: str, value, met, note: str = "") -> None:
        goals.setdefault(goal, {})[wl] = {
            "value": value,
            "met": (bool(met) if judged else None) if value is not None else None,
            **({"note": note} if note else {}),
        }

    for wl, s in summary["workloads"].items():
        late, early = s["windows"]["9+"], s["windows"]["1-8"]
        suf_late, suf_early = late.get("suffix"), early.get("suffix")
        if s["kind"] == "schema":
            v = suf_late and suf_late.get("x_plain")
            put("requests 9+, under one schema: >= 1.5x the schema without drafting", wl, v, v and v >= 1.5)
        else:
            v = suf_late and suf_late.get("x_plain")
            put(
                "requests 9+, free text: >= 1.4x plain",
                wl,
                v,
                v and v >= 1.4,
                "SQL counted as free text" if wl == "sql" else "",
            )
        v = suf_early and suf_early.get("x_plain")
        put(
            "the first requests (1-8): never below 0.97x (geomean; min in note)",
            wl,
            v,
            v and v >= 0.97,
            f"min per request {suf_early.get('x_plain_min')}" if suf_early else "",
        )
        for p, by in s.get("suffix_vs_peer", {}).items():
            v = by.get("9+")
            put(
                f"ahead of llama-server {p} (requests 9+, suffix/peer decode rate)",
                wl,
                v,
                v and v > 1.0,
                f"requests 1-8: {by.get('1-8')}; answer time 9+: {by.get('9+ answer time')}; "
                f"our plain/peer 9+: {by.get('9+ plain')}",
            )
        if "warm" in s and suf_late and suf_late.get("x_plain"):
            w = s["warm"]["warm process"]
            if w and w.get("x_plain"):
                v = round(w["x_plain"] / suf_late["x_plain"], 3)
                same = s["warm"]["in-process, same requests"]
                put(
                    "warm start: from the first request, within 10% of in-process "
                    "(warm x_plain / in-process 9+ x_plain)",
                    wl,
                    v,
                    v >= 0.9,
                    f"warm x_plain {w['x_plain']} on requests {s['warm']['requests']}; in-process "
                    f"on the same requests {same and same.get('x_plain')}; first warm request "
                    f"{s['warm']['first request x_plain']}",
                )
        d = s["windows"]["all"].get("suffix")
        if d and "draft_share" in d:
            put(
                "the drafter's work: < 2% of generation time (suffix, t_draft / t_generate)",
                wl,
                d["draft_share"],
                d["draft_share"] < 0.02,
            )
    mem = summary.get("memory")
    if mem:
        for wl, m in mem.items():
            put(
                "memory: bounded by the cap in tokens",
                wl,
                f"{m['tokens']} of {m['cap']} tokens, {m['bytes']} B",
                m["tokens"] <= m["cap"],
                "the cap was not reached" if m["tokens"] < m["cap"] else "",
            )
    if not judged:
        goals["note"] = f"{n_requests} requests per workload: goals are not judged below 24"
    return goals


# -- output ----------------------------------------------------------------------------------------


def _fmt(x, spec=".2f", suffix="") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def _sources(st: dict | None) -> str:
    if not st:
        return "-"
    if "accepted_by_source" not in st:
        return "n/r" if st.get("by_source") else "-"
    acc, dr = st["accepted_by_source"], st.get("drafted_by_source", {})
    keys = [k for k in sorted(set(acc) | set(dr)) if dr.get(k) or acc.get(k)]
    return ", ".join(f"{k} {acc.get(k, 0)}/{dr.get(k, 0)}" for k in keys) or "0"


def markdown(result: dict) -> str:
    s = result["summary"]
    lines = [
        f"Repeated workloads ({result['settings']['target_name']}, {result['settings']['threads']} threads, "
        f"{result['machine']['cpu_count']} CPUs, commit {result['git']['commit']}, {result['date']}). "
        "tok/s: generated tokens over generation time (llama-server: its `timings.predicted_per_second`); "
        "× plain: geometric mean of per-request ratios (extraction: plain = the same schema without "
        "drafting); accepted/drafted by source over requests 9+.",
        "",
        "| workload | mode | tok/s 1-8 | tok/s 9+ | × plain 1-8 | × plain 9+ | accepted / drafted 9+ | "
        "by source 9+ (accepted/drafted) | same text as plain | valid |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for wl, ws in s["workloads"].items():
        early, late, all_ = ws["windows"]["1-8"], ws["windows"]["9+"], ws["windows"]["all"]
        for m in all_:
            e, l_, a = early.get(m), late.get(m), all_.get(m)
            lines.append(
                "| "
                + " | ".join(
                    [
                        wl,
                        m,
                        _fmt(e and e["tokens_per_second"]),
                        _fmt(l_ and l_["tokens_per_second"]),
                        _fmt(e and e.get("x_plain"), ".2f", "×"),
                        _fmt(l_ and l_.get("x_plain"), ".2f", "×"),
                        f"{l_['accepted']}/{l_['drafted']}" if l_ else "-",
                        _sources(l_),
                        f"{a['same_text_as_plain']}/{a['requests']}" if a and "same_text_as_plain" in a else "-",
                        f"{a['valid']}/{a['requests']}" if a and "valid" in a else "-",
                    ]
                )
                + " |"
            )
        if "warm" in ws:
            w, same = ws["warm"]["warm process"], ws["warm"]["in-process, same requests"]
            lines.append(
                f"| {wl} | warm (2nd process, requests {ws['warm']['requests']}) | - | "
                f"{_fmt(w and w['tokens_per_second'])} | - | {_fmt(w and w.get('x_plain'), '.2f', '×')} "
                f"(in-process on the same: {_fmt(same and same.get('x_plain'), '.2f', '×')}) | "
                f"{w['accepted']}/{w['drafted']} | {_sources(w)} | - | - |"
            )
    if s.get("batch"):
        b = s["batch"]
        lines += [
            "",
            f"Batch (`generate_many(parallel={b['parallel']})`, {b['workload']}, {b['requests']} requests, "
            f"{b.get('passes', 1)} passes per engine in rotated order; tok/s = generated tokens / batch wall "
            "time, prompts included, the median pass; × plain batch: geometric mean of the per-pass ratios; "
            "one at a time = the same requests in the interleaved run, generated tokens / sum of t_total; "
            "C(n): the batch cost the engine learned, n = 1..8 rows):",
            "",
            "| engine | batch tok/s | × plain batch | one at a time tok/s | accepted / drafted | by source "
            "(accepted/drafted) | C(2..8) learned | errors |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for m, r in b["runs"].items():
            seq = b["one_at_a_time"].get(m)
            x = r.get("x_plain") if m != "plain" else 1.0
            c = r.get("batch_cost") or []
            lines.append(
                f"| {m} | {r['tokens_per_second']:.2f} | {_fmt(x, '.2f', '×')} | {_fmt(seq)} | "
                f"{r['accepted']}/{r['drafted']} | {_sources(r)} | {' '.join(f'{v:.2f}' for v in c[1:8])} | "
                f"{len(r['errors'])} |"
            )
    lines += ["", "| goal | " + " | ".join(s["workloads"]) + " |", "|---|" + "---|" * len(s["workloads"])]
    for goal, per in result["goals"].items():
        if goal == "note":
            continue
        cells = []
        for wl in s["workloads"]:
            g = per.get(wl)
            if g is None:
                cells.append("-")
                continue
            mark = {True: "**met**", False: "**not met**", None: "not judged"}[g["met"]]
            cells.append(f"{mark} ({g['value']}{'; ' + g['note'] if g.get('note') else ''})")
        lines.append(f"| {goal} | " + " | ".join(cells) + " |")
    lines.append(
        "| under a CPU hog: auto >= 0.97x plain | not measured here (issue 27 item 6) |"
        + " |" * (len(s["workloads"]) - 1)
    )
    if "note" in result["goals"]:
        lines += ["", f"_{result['goals']['note']}_"]
    return "\n".join(lines) + "\n"
