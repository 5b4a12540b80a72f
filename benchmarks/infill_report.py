"""The report of ``infill_replay.py`` (issue 35 item 5): per-server medians of the replayed
requests' rows, the edgespec / llama-server ratios (of medians, and paired per request), and
the markdown summary. Knows the rows' fields (``infill_replay.record``), nothing of servers."""

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
    return out


def markdown(result: dict) -> str:
    s, c = result["summary"], result["compare"]
    lines = [
        f"# infill replay {result['date']} ({result['git']['commit']})",
        "",
        f"{result['settings']['requests']} requests in {len(result['settings']['sessions'])} held-out sessions, "
        f"{result['settings']['passes']} passes, {result['settings']['target_name']}, "
        f"t_max_predict_ms {result['settings']['t_max_predict_ms']}, n_predict {result['settings']['n_predict']}.",
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
    lines.append(f"\nGoal (median time to whole completion ≤ 0.8×, TTFT no worse): {result['goal']}")
    return "\n".join(lines) + "\n"
