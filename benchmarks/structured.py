"""Structured output: what a JSON Schema costs and what speculation under it buys.

Five configurations on the same held-out prompts (``benchmarks/prompts/structured.py``: extraction,
classification and tool calls, each with a schema written for this benchmark and never
tuned on), greedy, in ONE process, alternating per prompt with the order rotated every
pass, after a discarded warm-up of each:

* ``a``  edgespec with the schema and its automatic drafting (``Engine(target,
         draft="ngram")``: forced tokens and prompt lookup, both cut to what the schema
         allows, under the learned drafting policy);
* ``b``  edgespec with the schema and ``draft=None`` (one token per step, masked);
* ``c``  edgespec unconstrained and plain (no schema, ``draft=None``);
* ``d``  llama-cpp-python's ``Llama.create_chat_completion(response_format={"type":
         "json_object", "schema": ...})``, what a Python user has today (GBNF grammar
         sampling, one token per step);
* ``e``  llama.cpp's ``llama-server`` with ``json_schema`` and ``--spec-type
         ngram-simple`` (its prompt lookup, which does not constrain its drafts), built
         by ``build_peer_tools.sh`` (see ``benchmarks/peers/llama_server.py``).

With ``--peer-repeat N`` the peers run in the first N passes only (they are several times
slower; the edgespec configurations keep alternating in every pass).

Speed is generation throughput, prompt processing excluded: edgespec's
``stats.generated_tokens / stats.t_generate``; for ``d`` the tokens after the first over
the wall time from the first sampled token to the last (its ``sample`` calls are timed);
for ``e`` the server's own ``timings.predicted_per_second``. Per prompt the median over
passes; ``paired`` ratios are the median of each pass's own ratio (the runs of a pass
are adjacent in time). Validity is checked with ``jsonschema`` on the whole reply
(``c`` too: does free text parse as the record?). For ``a`` and ``b`` the engine's own
counters give the tokens the schema forced, the drafted and accepted tokens, and the
time spent computing masks (its share of round time).

The models are the same GGUF for every configuration, 2 threads, llama.cpp's fast
kernels (edgespec's default ``exact=False``). One caveat of running in one process:
importing edgespec sets ``GGML_CPU_TILED_MM=0`` (see ``edgespec.llama.kernels``), which
touches only batches of 8+ rows, i.e. ``d``'s prompt processing, which is not timed.

    python -m benchmarks.structured --repeat 3 --json benchmarks/results/structured-2core.json
    python -m benchmarks.structured --configs a,b --limit 2 --max-tokens 64   # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import jsonschema

from benchmarks.common import geomean
from benchmarks.peers.llama_cpp_python import LlamaCppPython
from benchmarks.prompts.structured import PROMPTS, StructuredPrompt
from edgespec import Engine
from edgespec.catalog import resolve_model

CONFIGS = ("a", "b", "c", "d", "e")
LABELS = {
    "a": "edgespec, schema, automatic drafting",
    "b": "edgespec, schema, draft=None",
    "c": "edgespec, no schema, plain",
    "d": "llama-cpp-python create_chat_completion, schema",
    "e": "llama-server json_schema, ngram-simple",
}


def json_schema_format(p: StructuredPrompt) -> dict:
    """OpenAI's ``response_format`` for the prompt's schema."""
    return {"type": "json_schema", "json_schema": {"name": p.id.replace("-", "_"), "schema": p.schema, "strict": True}}


def validity(text: str, schema: dict) -> tuple[bool, bool]:
    """(parses as JSON, validates against the schema), on the whole reply."""
    try:
        value = json.loads(text)
    except ValueError:
        return False, False
    try:
        jsonschema.validate(value, schema)
    except jsonschema.ValidationError:
        return True, False
    return True, True


# -- the runners: one reply each, a record ------------------------------------------------


def run_edgespec(eng: Engine, p: StructuredPrompt, config: str, max_tokens: int) -> dict:
    """``a``, ``b`` or ``c`` on the one engine (the drafter switched, the cache cleared)."""
    eng.set_drafter("ngram" if config == "a" else None)
    eng.reset()
    options = {"max_tokens": max_tokens, "temperature": 0.0}
    if config in ("a", "b"):
        options["response_format"] = json_schema_format(p)
    r = eng.generate(p.prompt, **options)
    s = r.stats
    return {
        "text": r.text,
        "finish_reason": r.finish_reason,
        "tokens": s.generated_tokens,
        "seconds": s.t_generate,
        "tokens_per_second": s.tokens_per_second,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "rounds": s.rounds,
        "forced": s.forced,
        "forced_accepted": s.forced_accepted,
        "t_mask": s.t_mask,
        "complete": r.structured_complete,
    }


def run_server(server, eng: Engine, p: StructuredPrompt, max_tokens: int) -> dict:
    """``e``: the same templated prompt text, with ``json_schema``."""
    text = eng.apply_chat_template([{"role": "user", "content": p.prompt}])
    return server.complete(text, max_tokens, json_schema=p.schema)


# -- the summary ----------------------------------------------------------------------------


def summarize(runs: dict, prompts: list[StructuredPrompt], configs: list[str]) -> dict:
    """Per-prompt rows (medians, ratios, counters, validity) and the goals of issue 20."""
    rows = []
    for p in prompts:
        row: dict = {"prompt": p.id, "kind": p.kind}
        for c in configs:
            rs = runs[(p.id, c)]
            row[c] = {
                "tokens_per_second": round(statistics.median(r["tokens_per_second"] for r in rs), 3),
                "tokens": rs[-1]["tokens"],
                "seconds": round(statistics.median(r["seconds"] for r in rs), 3),
                "valid": sum(r["valid"] for r in rs),
                "parsed": sum(r["parsed"] for r in rs),
                "runs": len(rs),
                "finish_reason": rs[-1]["finish_reason"],
            }
            row.setdefault("passes", {})[c] = [(r["tokens_per_second"], r["seconds"]) for r in rs]
            for key in ("forced", "drafted", "accepted", "rounds"):
                if key in rs[-1]:
                    row[c][key] = rs[-1][key]
            if c in ("a", "b"):
                t_gen = sum(r["seconds"] for r in rs)
                row[c]["mask_share"] = round(sum(r["t_mask"] for r in rs) / t_gen, 4) if t_gen else None
        for num, den in (x.split("/") for x in RATIOS):
            if num in configs and den in configs:
                row[f"{num}/{den}"] = (
                    round(row[num]["tokens_per_second"] / row[den]["tokens_per_second"], 3)
                    if row[den]["tokens_per_second"]
                    else None
                )
        rows.append(row)

    return {"rows": rows, **conclude(rows, configs)}


RATIOS = ("a/b", "a/c", "a/d", "a/e", "b/d", "d/c")


def conclude(rows: list[dict], configs: list[str]) -> dict:
    """The summary (geometric means of the per-prompt ratios, by kind) and the goals of
    issue 20, from the rows alone (so a saved result can be rendered again). Beside the
    tokens/s ratios, ``X/Y time`` compares the time to the whole answer (Y's seconds over
    X's): the layouts differ, so the same record can take different token counts."""
    for r in rows:
        for ratio in RATIOS:
            num, den = ratio.split("/")
            if num in r and den in r and r[num]["seconds"]:
                r[f"{ratio} time"] = round(r[den]["seconds"] / r[num]["seconds"], 3)
            # per pass (the runs of a pass are adjacent in time): what the summary uses
            xs, ys = r.get("passes", {}).get(num), r.get("passes", {}).get(den)
            if xs and ys:
                pairs = list(zip(xs, ys))
                r[f"{ratio} paired"] = round(statistics.median(x[0] / y[0] for x, y in pairs), 3)
                r[f"{ratio} time paired"] = round(statistics.median(y[1] / x[1] for x, y in pairs), 3)
    summary: dict = {}
    for ratio in (x + t for x in RATIOS for t in ("", " time")):
        key = f"{ratio} paired" if all(r.get(f"{ratio} paired") for r in rows) else ratio
        if all(r.get(key) for r in rows):
            summary[ratio] = {
                "from": "per-pass ratios" if key.endswith("paired") else "medians",
                "geomean": geomean([r[key] for r in rows], 3),
                "min": round(min(r[key] for r in rows), 3),
                **{
                    f"geomean {kind}": geomean([r[key] for r in rows if r["kind"] == kind], 3)
                    for kind in sorted({r["kind"] for r in rows})
                },
            }
    goals: dict = {}
    constrained = [c for c in configs if c != "c"]
    n_valid = sum(r[c]["valid"] for r in rows for c in constrained)
    n_runs = sum(r[c]["runs"] for r in rows for c in constrained)
    if "a" in configs:
        own = [c for c in ("a", "b") if c in configs]
        valid_own = sum(r[c]["valid"] for r in rows for c in own)
        runs_own = sum(r[c]["runs"] for r in rows for c in own)
        goals["100% valid (edgespec a, b)"] = {"value": f"{valid_own}/{runs_own}", "met": valid_own == runs_own}
        goals["valid, every constrained config"] = {"value": f"{n_valid}/{n_runs}", "met": n_valid == n_runs}
        # mask time over round time, all of (a)'s runs (rows keep each prompt's share)
        weight = [r["a"]["seconds"] * r["a"]["runs"] for r in rows]
        share = sum((r["a"].get("mask_share") or 0) * w for r, w in zip(rows, weight)) / max(sum(weight), 1e-9)
        goals["mask work < 5% of round time (a)"] = {"value": round(share, 4), "met": share < 0.05}
    if "a/b" in summary:
        v = summary["a/b"].get("geomean extraction", float("nan"))
        goals["(a)/(b) >= 1.5x geomean on extraction"] = {"value": v, "met": v >= 1.5}
    if "a/d" in summary:
        v = summary["a/d"]["geomean"]
        goals["(a)/(d) >= 2x"] = {
            "value": v,
            "min": summary["a/d"]["min"],
            "met": v >= 2.0,
            "every prompt": summary["a/d"]["min"] >= 2.0,
        }
    if "a/e" in summary:
        behind = [r["prompt"] for r in rows if (r.get("a/e paired") or r["a/e"] or 2.0) <= 1.0]
        goals["(a) ahead of (e) on every prompt"] = {
            "value": summary["a/e"]["min"],
            "behind": behind,
            "met": not behind,
        }
    return {"summary": summary, "goals": goals}


def print_table(result: dict, configs: list[str]) -> None:
    cols = [c for c in configs]
    print(
        f"{'prompt':18} {'kind':14} "
        + " ".join(f"{c + ' tok/s':>8}" for c in cols)
        + "   a/b   a/d   a/e  forced drafted accepted  mask  valid"
    )
    for r in result["rows"]:
        a = r.get("a", {})
        ratios = " ".join(f"{r[x]:5.2f}" if r.get(x) else "    -" for x in ("a/b", "a/d", "a/e"))
        valid = " ".join(f"{c}{r[c]['valid']}/{r[c]['runs']}" for c in cols)
        print(
            f"{r['prompt']:18} {r['kind']:14} "
            + " ".join(f"{r[c]['tokens_per_second']:8.2f}" for c in cols)
            + f" {ratios} {a.get('forced', 0):6} {a.get('drafted', 0):7} {a.get('accepted', 0):8}"
            + f" {100 * (a.get('mask_share') or 0):4.1f}%  {valid}"
        )
    for name, s in result["summary"].items():
        print(f"{name}: " + ", ".join(f"{k} {v}" for k, v in s.items()))
    for name, g in result["goals"].items():
        print(f"goal {name}: {'MET' if g['met'] else 'NOT MET'} ({g['value']})")


def markdown(result: dict, configs: list[str]) -> str:
    """The per-prompt table and the goals, as Markdown (for docs/structured-output.md)."""
    head = ["prompt", "kind", *(f"({c}) tok/s" for c in configs)]
    ratios = [r for r in ("a/b", "a/d", "a/e", "a/b time", "a/d time", "a/e time") if r in result["rows"][0]]
    head += [f"({r[0]}) vs ({r[2]}), answer time" if r.endswith("time") else f"({r[0]})/({r[2]})" for r in ratios]
    if "a" in configs:
        head += ["(a) forced / drafted / accepted of tokens", "(a) mask share"]
    head += ["valid"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["rows"]:
        cells = [r["prompt"], r["kind"], *(f"{r[c]['tokens_per_second']:.2f}" for c in configs)]
        cells += [f"{r.get(x + ' paired') or r[x]:.2f}x" if r.get(x) else "-" for x in ratios]
        if "a" in configs:
            a = r["a"]
            cells += [
                f"{a.get('forced', 0)} / {a.get('drafted', 0)} / {a.get('accepted', 0)} of {a['tokens']}",
                f"{100 * (a.get('mask_share') or 0):.1f}%",
            ]
        cells += [" ".join(f"{c}:{r[c]['valid']}/{r[c]['runs']}" for c in configs)]
        lines.append("| " + " | ".join(cells) + " |")
    lines.append("")
    for name, s in result["summary"].items():
        lines.append(
            f"- {name} ({s.get('from', 'medians')}): " + ", ".join(f"{k} {v}x" for k, v in s.items() if k != "from")
        )
    lines.append("")
    for name, g in result["goals"].items():
        extra = f", behind on {', '.join(g['behind'])}" if g.get("behind") else ""
        lines.append(f"- goal {name}: **{'met' if g['met'] else 'not met'}** ({g['value']}{extra})")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--peer-repeat",
        type=int,
        default=None,
        help="passes that include the peers d and e (default: all; they run at a "
        "fraction of edgespec's speed, so fewer passes keep a run short)",
    )
    ap.add_argument("--configs", default=",".join(CONFIGS), help="comma-separated subset of a,b,c,d,e")
    ap.add_argument("--prompts", default=None, help="comma-separated prompt ids only")
    ap.add_argument("--limit", type=int, default=None, help="first N prompts only")
    ap.add_argument("--peer-bin", default=None, help="bin dir of build_peer_tools.sh (default: build/find it)")
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--markdown", default=None, help="write the table as Markdown here")
    ap.add_argument(
        "--render",
        default=None,
        metavar="JSON",
        help="measure nothing: recompute the summary and goals of a saved result "
        "(updated in place) and print/write its tables",
    )
    args = ap.parse_args()

    if args.render:
        saved = json.loads(Path(args.render).read_text())
        configs = list(saved["settings"]["configs"])
        for r in saved["rows"]:  # each pass's (tokens/s, seconds), from the runs kept
            r["passes"] = {
                c: [(x["tokens_per_second"], x["seconds"]) for x in saved["runs"][f"{r['prompt']} {c}"]]
                for c in configs
                if f"{r['prompt']} {c}" in saved.get("runs", {})
            }
        saved.update(conclude(saved["rows"], configs))
        Path(args.render).write_text(json.dumps(saved, indent=2) + "\n")
        print_table(saved, configs)
        if args.markdown:
            Path(args.markdown).write_text(markdown(saved, configs))
        return
    configs = [c for c in args.configs.split(",") if c]
    if set(configs) - set(CONFIGS):
        ap.error(f"unknown config(s): {', '.join(sorted(set(configs) - set(CONFIGS)))}")
    prompts = list(PROMPTS)
    if args.prompts:
        wanted = args.prompts.split(",")
        unknown = set(wanted) - {p.id for p in PROMPTS}
        if unknown:
            ap.error(f"unknown prompt(s): {', '.join(sorted(unknown))}")
        prompts = [p for p in prompts if p.id in wanted]
    prompts = prompts[: args.limit] if args.limit else prompts

    target = resolve_model(args.target)
    eng = Engine(target, draft="ngram", n_threads=args.threads, n_ctx=args.n_ctx)
    lcp = LlamaCppPython(target, args.threads, args.n_ctx) if "d" in configs else None
    server = None
    if "e" in configs:
        from benchmarks.peers.cpp import tools_dir
        from benchmarks.peers.llama_server import LlamaServer

        server = LlamaServer(tools_dir(args.peer_bin), target, args.threads, spec="ngram-simple", n_ctx=args.n_ctx)
    load_before = os.getloadavg()[0]

    def one(config: str, p: StructuredPrompt, max_tokens: int) -> dict:
        if config in ("a", "b", "c"):
            rec = run_edgespec(eng, p, config, max_tokens)
        elif config == "d":
            rec = lcp.run(p.prompt, max_tokens, schema=p.schema)
        else:
            rec = run_server(server, eng, p, max_tokens)
        rec["parsed"], rec["valid"] = validity(rec["text"], p.schema)
        return rec

    runs: dict = {(p.id, c): [] for p in prompts for c in configs}
    try:
        for c in configs:  # warm-up, discarded
            one(c, prompts[0], 16)
        slot = 0
        peer_passes = args.repeat if args.peer_repeat is None else args.peer_repeat
        for rep in range(args.repeat):
            here = [c for c in configs if rep < peer_passes or c not in ("d", "e")]
            for p in prompts:
                k = slot % len(here)
                for c in here[k:] + here[:k]:
                    rec = one(c, p, args.max_tokens)
                    runs[(p.id, c)].append(rec)
                    print(
                        f"[{rep + 1}/{args.repeat}] {p.id:18} {c} {rec['tokens']:4d} tok "
                        f"{rec['tokens_per_second']:6.2f} tok/s valid={rec['valid']} "
                        f"{rec['finish_reason']}",
                        file=sys.stderr,
                    )
                slot += 1
    finally:
        if server is not None:
            server.close()

    result = summarize(runs, prompts, configs)
    print_table(result, configs)
    if args.markdown:
        Path(args.markdown).write_text(markdown(result, configs))
    if args.json:
        import llama_cpp

        report = {
            "settings": {
                "target": str(target),
                "threads": args.threads,
                "max_tokens": args.max_tokens,
                "repeat": args.repeat,
                "peer_repeat": args.peer_repeat,
                "configs": {c: LABELS[c] for c in configs},
                "prompts": [p.id for p in prompts],
                "llama_cpp_python": llama_cpp.__version__,
                "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
            },
            **result,
            "outputs": {f"{pid} {c}": rs[-1]["text"] for (pid, c), rs in runs.items()},
            "runs": {
                f"{pid} {c}": [
                    {
                        k: (round(v, 4) if isinstance(v, float) else v)
                        for k, v in r.items()
                        if k
                        in (
                            "tokens",
                            "tokens_per_second",
                            "seconds",
                            "forced",
                            "drafted",
                            "accepted",
                            "rounds",
                            "t_mask",
                            "valid",
                        )
                    }
                    for r in rs
                ]
                for (pid, c), rs in runs.items()
            },
        }
        Path(args.json).write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
