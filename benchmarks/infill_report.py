"""The report of ``infill_replay.py`` (issue 35 item 5): per-server medians of the replayed
requests' rows, the edgespec / llama-server ratios (of medians, and paired per request), and
the markdown summary. Knows the rows' fields (``infill_replay.record``), nothing of servers.

On a shared CPU another process can starve either server for minutes (its generation rate
falls to a tenth), which swings the medians far more than any difference between the
servers. ``compare`` therefore also reports the ``quiet`` pairs: requests where neither
server generated at under half its own 90th-percentile rate over the run (a rule on the
rows' own figures, the same for both servers). The goal is judged on the quiet pairs when
there are at least ``MIN_QUIET`` of them, else not judged."""

from __future__ import annotations

import statistics

from benchmarks.common import geomean


def _median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return round(statistics.median(vals), 4) if vals else None


def summarize(rows: list[dict]) -> dict:
    """Medians of one server's rows: all of them, and those after each session's first request."""
    later = [r for r in rows if r["request"] > 0]
    out = {"requests": len(rows), "cut": sum(r["cut"] for r in rows), "truncated": sum(r["truncated"] for r in rows)}
    for name, sel in (("all", rows), ("after_first", later)):
        out[name] = {k: _median(sel, k) for k in ("prompt_n", "ttft_s", "gen_tps", "t_total_s", "tokens")}
    return out


def _ratio(a: dict, b: dict, key: str) -> float | None:
    return round(a[key] / b[key], 3) if a[key] and b[key] else None


MIN_QUIET = 10


def _p90(rows: list[dict]) -> float:
    vals = sorted(r["gen_tps"] for r in rows)
    return vals[int(0.9 * (len(vals) - 1))] if vals else 0.0


def _pair_ratios(sel: list[tuple[dict, dict]]) -> dict:
    med = lambda k, i: statistics.median(p[i][k] for p in sel)  # noqa: E731
    return {
        "pairs": len(sel),
        "t_total_median_ratio": round(med("t_total_s", 0) / med("t_total_s", 1), 3) if sel else None,
        "ttft_median_ratio": round(med("ttft_s", 0) / med("ttft_s", 1), 3) if sel else None,
        "gen_tps_median_ratio": round(med("gen_tps", 0) / med("gen_tps", 1), 3) if sel else None,
        "t_total_paired_geomean": geomean((x["t_total_s"] / y["t_total_s"] for x, y in sel), 3),
        "ttft_paired_geomean": geomean((x["ttft_s"] / y["ttft_s"] for x, y in sel), 3),
    }


def goal(c: dict) -> str:
    """The issue's goal (median time to the whole completion <= 0.8x llama-server's, TTFT no
    worse), judged on the quiet pairs."""
    q = c["quiet"]
    if q["pairs"] < MIN_QUIET:
        return (
            f"not judged: {q['pairs']} quiet pairs (< {MIN_QUIET}); all pairs read {c['all']['t_total_median_ratio']}×"
        )
    met = q["t_total_median_ratio"] <= 0.8 and q["ttft_median_ratio"] <= 1.0
    return (
        f"{'met' if met else 'not met'} on {q['pairs']} quiet pairs: time to whole completion "
        f"{q['t_total_median_ratio']}× (paired {q['t_total_paired_geomean']}×), TTFT {q['ttft_median_ratio']}×"
    )


def compare(ours: list[dict], theirs: list[dict]) -> dict:
    """edgespec / llama-server: the ratios of medians and the paired per-request ratios
    (rows paired by session, pass and request)."""
    a, b = summarize(ours), summarize(theirs)
    key = lambda r: (r.get("session"), r.get("pass"), r["request"])  # noqa: E731
    peer = {key(r): r for r in theirs}
    pairs = [(r, peer[key(r)]) for r in ours if key(r) in peer]
    out: dict = {}
    for name in ("all", "after_first"):
        sel = [(x, y) for x, y in pairs if name == "all" or x["request"] > 0]
        out[name] = {
            "t_total_median_ratio": _ratio(a[name], b[name], "t_total_s"),
            "ttft_median_ratio": _ratio(a[name], b[name], "ttft_s"),
            "gen_tps_median_ratio": _ratio(a[name], b[name], "gen_tps"),
            "t_total_paired_geomean": geomean((x["t_total_s"] / y["t_total_s"] for x, y in sel), 3),
            "ttft_paired_geomean": geomean((x["ttft_s"] / y["ttft_s"] for x, y in sel), 3),
            "same_middle": sum(x["content"] == y["content"] for x, y in sel),
            "pairs": len(sel),
        }
    floor_a, floor_b = _p90(ours) / 2, _p90(theirs) / 2
    out["quiet"] = _pair_ratios([(x, y) for x, y in pairs if x["gen_tps"] >= floor_a and y["gen_tps"] >= floor_b])
    out["quiet"]["gen_tps_floor"] = [round(floor_a, 2), round(floor_b, 2)]
    return out


def markdown(result: dict) -> str:
    """The summary: the timed passes' table and ratios (when there were passes), the run
    without a time cut and the ``--exact`` check (when run), the goal."""
    lines = [
        f"# infill replay {result['date']} ({result['git']['commit']})",
        "",
        f"{result['settings']['requests']} requests in {len(result['settings']['sessions'])} held-out sessions, "
        f"{result['settings']['passes']} passes, {result['settings']['target_name']}, "
        f"t_max_predict_ms {result['settings']['t_max_predict_ms']}, n_predict {result['settings']['n_predict']}.",
    ]
    if result["settings"]["passes"]:
        lines += _timed(result["summary"], result["compare"])
    lines += _more(result)
    if result["settings"]["passes"]:
        lines.append(f"\nGoal (median time to whole completion ≤ 0.8×, TTFT no worse): {result['goal']}")
    return "\n".join(lines) + "\n"


def _timed(s: dict, c: dict) -> list[str]:
    lines = [
        "",
        "| server | requests | median prompt tokens processed | median TTFT s | median gen tok/s "
        "| median time to whole completion s | same, after each session's first | cut by t_max_predict_ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, v in s.items():
        lines.append(
            f"| {name} | {v['requests']} | {v['all']['prompt_n']} | {v['all']['ttft_s']} | "
            f"{v['all']['gen_tps']} | {v['all']['t_total_s']} | {v['after_first']['t_total_s']} | "
            f"{v['cut']} |"
        )
    for name in ("all", "after_first"):
        v = c[name]
        lines.append(
            f"\n{name}: edgespec / llama-server median time to whole completion "
            f"**{v['t_total_median_ratio']}×** "
            f"(paired geomean {v['t_total_paired_geomean']}×), TTFT {v['ttft_median_ratio']}× "
            f"(paired {v['ttft_paired_geomean']}×), gen rate {v['gen_tps_median_ratio']}×; "
            f"same middle {v['same_middle']}/{v['pairs']}."
        )
    q = c.get("quiet")
    if q:
        lines.append(
            f"\nquiet pairs (neither server under half its 90th-percentile generation rate, floors "
            f"{q['gen_tps_floor']} tok/s): {q['pairs']}; median time to whole completion "
            f"**{q['t_total_median_ratio']}×** (paired {q['t_total_paired_geomean']}×), TTFT {q['ttft_median_ratio']}× "
            f"(paired {q['ttft_paired_geomean']}×), gen rate {q['gen_tps_median_ratio']}×."
        )
    return lines


def _more(result: dict) -> list[str]:
    lines = []
    if "uncut" in result:
        u, v = result["uncut"], result["uncut"]["compare"]["all"]
        n = {k: x["all"]["t_total_s"] for k, x in u["summary"].items()}
        lines.append(
            f"\nNo time cut, n_predict {u['settings']['n_predict']}, one pass: median time to whole completion "
            f"{n}, edgespec / llama-server **{v['t_total_median_ratio']}×** (paired {v['t_total_paired_geomean']}×), "
            f"TTFT {v['ttft_median_ratio']}×, gen rate {v['gen_tps_median_ratio']}×; "
            f"same middle {v['same_middle']}/{v['pairs']}."
        )
    if "exact_check" in result:
        e = result["exact_check"]
        lines.append(
            f"\n`--exact`, no time cut, n_predict {e['n_predict']}: {e['identical']}/{e['requests']} middles "
            "identical to `--draft none`."
        )
    return lines
