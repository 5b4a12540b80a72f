"""Repeated workloads: drafting from earlier answers across requests, against plain
decoding, today's prompt lookup and llama.cpp's ``ngram-mod`` (issue 27 item 8).

Four held-out workloads (``benchmarks/prompts/repeat.py``), each a sequence of 32 different requests
whose answers share one shape: tickets into one JSON schema, pytest tests, edits in an
agent loop with tool calls, SQL over one schema. Modes, side by side in ONE run,
interleaved per request (request i runs in every mode, in an order rotated per request,
before request i+1), each mode on its own Engine loaded once:

* ``plain``     ``Engine(target, draft=None)``: one token per step (for ``extraction``:
                the same schema without drafting);
* ``lookup``    ``Engine(target, draft="ngram", memory=False)``: today's drafting (prompt
                lookup and the grammar's forced tokens, request-local);
* ``suffix``    ``Engine(target, draft="ngram", memory=True)``: prompt lookup plus the
                cross-request suffix memory, given a fresh (cold) index at each
                workload's first request and building up in-process;
* ``ngram-mod`` llama.cpp's ``llama-server --spec-type ngram-mod`` (its shared n-gram
                pool; its defaults, as its users get it), one slot, 2 threads, the same
                GGUF, greedy, started afresh for each workload (cold, as ``suffix``);
* ``ngram-cache`` the same with ``--spec-type ngram-cache`` (optional).

Two passes after the interleaved sequence:

* ``warm``  when request ``N - warm_requests`` of a workload is done (24 of 32), the
            ``suffix`` engine's index is saved (``suffix_store.save``); at the end a SECOND
            process (this script with ``--warm-from FILE``) loads it, sets
            ``engine.memory`` and answers the remaining requests (25-32), interleaved with
            its own ``plain`` engine. The in-process ``suffix`` engine answers the same
            requests after the same index, so both compare on the same requests; the
            goal compares the warm process's ratio to plain with the in-process ratio to
            plain over requests 9+.
* ``batch`` the extraction workload's requests through ``engine.generate_many(...,
            parallel=4)``, ``--batch-passes`` times per engine (3; the engines' order
            rotated each pass): plain, ``lookup`` (memory off) and ``suffix`` (memory
            on, a fresh index each pass: the batch's sequences draft from each other).
            Each engine keeps its learned batch cost across its passes.
            Tokens/s = generated tokens over the batch's wall time (prompts included);
            beside it the one-at-a-time figure as generated tokens over the sum of
            ``t_total`` (prompts included too).

Speeds: edgespec's ``stats.generated_tokens / stats.t_generate`` (prompt processing
excluded); the peer's own ``timings.predicted_per_second`` (its generation time, prompt
excluded; the wall time of each HTTP call is recorded beside it). That is decode steps
per second, the end-of-generation token counted: against the peer, ours is taken on the
same terms (``decode_rate``), and the answer time is prompt plus generation on both sides. Ratios are per request
(the modes of a request run adjacent in time) and summarized as geometric means over
requests 1-8 and 9+. Every engine's prompt is the same token ids: the messages (and the
tools) rendered with the target's own chat template; the peer gets the same rendered text
on ``/completion`` and its ``tokens_evaluated`` is checked against our count.

    flock /tmp/edgespec-bench.lock python -m benchmarks.repeat_workloads \\
        --out benchmarks/results/repeat-workloads-$(date +%F).json
    python -m benchmarks.repeat_workloads --target qwen2.5-coder-0.5b --requests 3 \\
        --max-tokens 12 --out /tmp/smoke.json   # a smoke test (~5 min on a quiet machine)

The markdown printed at the end (also FILE.md beside ``--out``) is for docs/results.md;
``--out`` is rewritten after every workload, so a run cut short keeps what it measured.
On 2 cores at 10-15 tok/s plain for the 1.5B the full run (4 workloads x 32 requests x
4 interleaved modes, the warm processes, the batch) takes about 1.5 h. Goals are judged
only with >= 24 requests; the memory goal is trivially met unless ``--memory-cap`` is
below what a workload writes (~2-4k tokens). Under ``json_schema`` llama-server's
grammar lets the model lay the record out with newlines and indents (more tokens than
edgespec's layout), so beside the tok/s ratio the summary gives the time to the answer.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import ROOT, git_info, machine_info
from benchmarks.peers.llama_server import LlamaServer
from benchmarks.prompts.repeat import WORKLOADS, Request, Workload, workloads
from benchmarks.repeat_batch import response_format, run_batch, valid_json
from benchmarks.repeat_memory import (
    engine_memory,
    fail,
    fresh_memory,
    has_memory_api,
    index_options,
    load_saved,
    memory_kwargs,
    memory_report,
    require_memory_api,
    store_identity,
)
from benchmarks.repeat_summary import PEER_MODES, conclude, markdown, summarize_workload
from edgespec import Engine
from edgespec.catalog import resolve_model

ENGINE_MODES = ("plain", "lookup", "suffix")
PASSES = ("warm", "batch")
ALL_MODES = ENGINE_MODES + PEER_MODES + PASSES
DEFAULT_MODES = "plain,lookup,suffix,ngram-mod,warm,batch"
SOURCES = ("prompt", "memory", "grammar", "model")
EDIT_PROMPT_LIMIT = 600
WARMUP = [{"role": "user", "content": "Count from one to five in words."}]


def make_engine(mode: str, target: Path, args) -> Engine:
    common = dict(n_threads=args.threads, n_ctx=args.n_ctx)
    if mode == "plain":
        return Engine(target, draft=None, **common, **memory_kwargs(False, None))
    if mode == "lookup":
        return Engine(target, draft="ngram", **common, **memory_kwargs(False, None))
    if mode == "suffix":
        eng = Engine(target, draft="ngram", **common, **memory_kwargs(True, args.memory_cap))
        engine_memory(eng)
        return eng
    raise ValueError(mode)


# -- prompts ---------------------------------------------------------------------------------


def render(eng: Engine, wl: Workload, req: Request) -> tuple[str, list[int]]:
    """The request as the target's chat template renders it (with the workload's tools),
    and its token ids: what every engine is given, and the peer the text of."""
    from edgespec.llama.chat_template import render as render_messages
    from edgespec.llama.chat_template import tokenize_rendered

    text = render_messages(eng.target_model, req.messages, tools=wl.tools)
    return text, tokenize_rendered(eng.target_model, text)


# -- the runners: one request each, a record ---------------------------------------------------


def _by_source(stats, name: str) -> dict | None:
    d = getattr(stats, name, None)
    return {str(k): int(v) for k, v in d.items()} if d else ({} if d is not None else None)


def run_engine(eng: Engine, wl: Workload, ids: list[int], max_tokens: int) -> dict:
    opts: dict = {"max_tokens": max_tokens, "temperature": 0.0}
    rf = response_format(wl)
    if rf is not None:
        opts["response_format"] = rf
    r = eng.generate(ids, **opts)
    s = r.stats
    return {
        "text": r.text,
        "finish_reason": r.finish_reason,
        "tokens": s.generated_tokens,
        "seconds": s.t_generate,
        "tokens_per_second": s.tokens_per_second,
        "t_total": s.t_total,
        # the target's samples, the end-of-generation one included (no stop strings here: a
        # "stop" is end-of-generation): what llama-server's predicted_n counts
        "sampled": s.generated_tokens + (r.finish_reason == "stop"),
        "t_draft": s.t_draft,
        "rounds": s.rounds,
        "drafted": s.drafted,
        "accepted": s.accepted,
        "forced": s.forced,
        "drafted_by_source": _by_source(s, "drafted_by_source"),
        "accepted_by_source": _by_source(s, "accepted_by_source"),
        "prompt_tokens": s.prompt_tokens,
    }


class Peer:
    """llama-server with one ``--spec-type``, started once per workload (its n-gram pool
    cold at the workload's first request, as ``suffix``'s index is)."""

    def __init__(self, spec: str, bin_dir: Path, target: Path, args) -> None:
        self.spec = spec
        self.server = LlamaServer(bin_dir, target, args.threads, spec=spec, n_ctx=args.n_ctx)
        self.complete(WARMUP_TEXT[0], 4, None)  # discarded: first-request costs out of the way

    def complete(self, text: str, n: int, schema: dict | None) -> dict:
        return self.server.complete(text, n, json_schema=schema)

    def close(self) -> None:
        self.server.close()


WARMUP_TEXT: list[str] = []  # the warm-up prompt rendered with the target's template (set in main)


# -- one sequence, interleaved ---------------------------------------------------------------------


def run_sequence(
    wl: Workload,
    reqs: list[Request],
    first: int,
    runners: dict,
    rendered: dict,
    max_tokens: int,
    log_prefix: str = "",
    after=None,
) -> dict:
    """Every request in every mode (order rotated per request), before the next request.
    ``first``: the 0-based number of ``reqs[0]`` in the workload; ``after(i)`` runs after
    request i (0-based, in the workload) in every mode. Returns {mode: [record, ...]}."""
    modes = list(runners)
    out: dict = {m: [] for m in modes}
    for j, req in enumerate(reqs):
        i = first + j
        text, ids = rendered[req.id]
        k = i % len(modes)
        for m in modes[k:] + modes[:k]:
            rec = runners[m](wl, text, ids, max_tokens)
            rec["request"] = req.id
            rec["valid"] = valid_json(rec["text"], wl.schema)
            out[m].append(rec)
            src = rec.get("accepted_by_source")
            src_s = (" (" + ", ".join(f"{s} {n}" for s, n in src.items() if n) + ")") if src else ""
            print(
                f"{log_prefix}[{wl.name} {i + 1:02d}] {m:11} {rec['tokens']:4d} tok "
                f"{rec['tokens_per_second']:6.2f} tok/s acc {rec['accepted']}/{rec['drafted']}{src_s} "
                f"{rec['finish_reason']}" + ("" if rec["valid"] is None else f" valid={rec['valid']}"),
                file=sys.stderr,
                flush=True,
            )
        if after is not None:
            after(i)
    return out


def engine_runner(eng: Engine):
    return lambda wl, text, ids, n: run_engine(eng, wl, ids, n)


def peer_runner(peer: Peer):
    return lambda wl, text, ids, n: peer.complete(text, n, wl.schema)


def warm_up(engines: dict) -> None:
    for eng in engines.values():
        eng.generate(WARMUP, max_tokens=8, temperature=0.0)


# -- the warm pass: a second process --------------------------------------------------------------


def worker_main(args) -> None:
    """``--warm-from FILE``: load the saved index into a fresh suffix engine and answer
    requests ``--first``.. of ``--workloads`` (one), interleaved with a plain engine."""
    require_memory_api(["warm"])
    target = resolve_model(args.target)
    wl = workloads()[args.workloads]
    engines = {"plain": make_engine("plain", target, args), "warm": make_engine("suffix", target, args)}
    warm_up(engines)  # before the saved index is set: the warm-up writes into the engine's own
    mem = engine_memory(engines["warm"])
    t0 = time.perf_counter()
    loaded = load_saved(Path(args.warm_from), mem.cap, index_options(mem))
    t_load = time.perf_counter() - t0
    engines["warm"].memory = loaded
    reqs = wl.requests[args.first : args.requests]
    rendered = {r.id: render(engines["plain"], wl, r) for r in reqs}
    runs = run_sequence(
        wl,
        reqs,
        args.first,
        {m: engine_runner(e) for m, e in engines.items()},
        rendered,
        args.max_tokens or wl.max_tokens,
        log_prefix="  warm process ",
    )
    result = {
        "loaded_tokens": len(loaded),
        "t_load": t_load,
        "runs": runs,
        "memory_after": memory_report(engines["warm"]),
    }
    Path(args.worker_out).write_text(json.dumps(result))
    for e in engines.values():
        e.close()


def run_warm_process(args, wl: str, index_file: Path, first: int, n: int, max_tokens: int) -> dict:
    out = index_file.with_suffix(".warm.json")
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.repeat_workloads",
        "--warm-from",
        str(index_file),
        "--workloads",
        wl,
        "--first",
        str(first),
        "--requests",
        str(n),
        "--max-tokens",
        str(max_tokens),
        "--target",
        args.target,
        "--threads",
        str(args.threads),
        "--n-ctx",
        str(args.n_ctx),
        "--worker-out",
        str(out),
    ]
    if args.memory_cap is not None:
        cmd += ["--memory-cap", str(args.memory_cap)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        fail(f"the warm process for {wl} failed (exit {proc.returncode}): {' '.join(cmd)}")
    result = json.loads(out.read_text())
    result["wall"] = time.perf_counter() - t0
    return result


# -- main -----------------------------------------------------------------------------------------


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__
    )
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"a subset of {','.join(WORKLOADS)}")
    ap.add_argument(
        "--requests", type=int, default=None, help="the first N requests of each workload (default all: 32)"
    )
    ap.add_argument(
        "--max-tokens",
        type=int,
        default=None,
        help="for every workload (default per workload: extraction 96, tests 128, edits 128, sql 80)",
    )
    ap.add_argument("--modes", default=DEFAULT_MODES, help=f"a subset of {','.join(ALL_MODES)}")
    ap.add_argument(
        "--memory-cap", type=int, default=None, help="the suffix index's cap in tokens (default: the engine's)"
    )
    ap.add_argument(
        "--warm-requests",
        type=int,
        default=8,
        help="the warm process answers the last K requests (the index is saved before them)",
    )
    ap.add_argument("--parallel", type=int, default=4, help="sequences per decode in the batch pass")
    ap.add_argument(
        "--batch-passes",
        type=int,
        default=3,
        help="passes of the batch per engine, their order rotated (the median pass is reported)",
    )
    ap.add_argument("--peer-bin", default=None, help="llama.cpp's bin directory (default: build_peer_tools.sh's)")
    ap.add_argument("--out", type=Path, default=None, help="the JSON result (and FILE.md with the markdown)")
    # the warm process (internal)
    ap.add_argument("--warm-from", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--first", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.warm_from:
        return worker_main(args)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(ALL_MODES)
    if unknown:
        fail(f"unknown mode(s) {', '.join(sorted(unknown))}; known: {', '.join(ALL_MODES)}")
    names = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if set(names) - set(WORKLOADS):
        fail(f"unknown workload(s) {', '.join(sorted(set(names) - set(WORKLOADS)))}; known: {', '.join(WORKLOADS)}")
    require_memory_api(modes)
    if "warm" in modes and "suffix" not in modes:
        fail("mode warm compares with the in-process suffix engine: add suffix to --modes")
    all_wl = workloads()
    n = min(args.requests or len(all_wl[names[0]].requests), *(len(all_wl[w].requests) for w in names))
    if n < 1:
        fail("--requests must be at least 1")
    if n < 24:
        print(
            f"repeat_workloads.py: {n} requests per workload; the issue's goals need >= 24 (not judged)",
            file=sys.stderr,
        )
    warm_k = min(args.warm_requests, n - 1) if "warm" in modes else 0
    if "warm" in modes and warm_k < 1:
        fail("the warm pass needs at least 2 requests per workload (one before the save, one after)")
    split = n - warm_k if warm_k else None

    target = resolve_model(args.target)
    engine_modes = [m for m in ENGINE_MODES if m in modes]
    peer_modes = [m for m in PEER_MODES if m in modes]
    print(f"loading {len(engine_modes)} engine(s) of {target.name}: {', '.join(engine_modes)}", file=sys.stderr)
    engines = {m: make_engine(m, target, args) for m in engine_modes}
    if not engines:
        fail("at least one of plain, lookup, suffix is needed (the prompts are rendered with an engine's template)")
    first_engine = next(iter(engines.values()))
    WARMUP_TEXT.append(render(first_engine, Workload("warmup", "free", 8, []), Request("warmup", WARMUP))[0])
    warm_up(engines)
    bin_dir = None
    if peer_modes:
        from benchmarks.peers.cpp import tools_dir

        bin_dir = tools_dir(args.peer_bin)

    settings = {
        "target": str(target),
        "target_name": target.name,
        "threads": args.threads,
        "n_ctx": args.n_ctx,
        "modes": modes,
        "workloads": names,
        "requests": n,
        "warm_split": split,
        "max_tokens": {w: args.max_tokens or all_wl[w].max_tokens for w in names},
        "memory_api": has_memory_api(),
        "memory_cap": args.memory_cap,
        "parallel": args.parallel,
        "peer": {p: f"llama-server --spec-type {p} (its defaults), -np 1, -t {args.threads}" for p in peer_modes},
    }
    import llama_cpp

    result: dict = {
        "date": time.strftime("%Y-%m-%d"),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "machine": machine_info(),
        "git": git_info(),
        "llama_cpp_python": llama_cpp.__version__,
        "settings": settings,
        "summary": {"workloads": {}},
        "runs": {},
        "prompt_tokens": {},
    }
    index_dir = Path(tempfile.mkdtemp(prefix="repeat-workloads-index-"))
    index_files: dict = {}
    saved_memory: dict = {}

    def checkpoint() -> None:
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1) + "\n")

    try:
        for wname in names:
            wl = all_wl[wname]
            reqs = wl.requests[:n]
            max_tokens = args.max_tokens or wl.max_tokens
            rendered = {r.id: render(first_engine, wl, r) for r in reqs}
            lengths = {rid: len(ids) for rid, (_, ids) in rendered.items()}
            result["prompt_tokens"][wname] = lengths
            if wname == "edits" and max(lengths.values()) >= EDIT_PROMPT_LIMIT:
                fail(f"an edits prompt is {max(lengths.values())} tokens (keep them under {EDIT_PROMPT_LIMIT})")
            if "suffix" in engines:
                fresh_memory(engines["suffix"])
            peers = {}
            try:
                for p in peer_modes:
                    peers[p] = Peer(p, bin_dir, target, args)
                runners = {m: engine_runner(e) for m, e in engines.items()}
                runners.update({p: peer_runner(peer) for p, peer in peers.items()})

                def after(i: int, wname=wname) -> None:
                    if split is not None and i + 1 == split:
                        from edgespec.decoding import suffix_store

                        mem = engine_memory(engines["suffix"])
                        index_files[wname] = suffix_store.save(mem, store_identity(target, wname), index_dir)
                        saved_memory[wname] = memory_report(engines["suffix"])
                        print(
                            f"[{wname}] saved the suffix index after request {split}: {len(mem)} tokens -> "
                            f"{index_files[wname]}",
                            file=sys.stderr,
                            flush=True,
                        )

                runs = run_sequence(wl, reqs, 0, runners, rendered, max_tokens, after=after)
            finally:
                for peer in peers.values():
                    peer.close()
            for p in peer_modes:
                bad = [
                    (r["request"], r["prompt_tokens"], lengths[r["request"]])
                    for r in runs[p]
                    if r["prompt_tokens"] and r["prompt_tokens"] != lengths[r["request"]]
                ]
                if bad:
                    print(
                        f"WARNING: llama-server {p} evaluated other prompt token counts than ours "
                        f"(request, theirs, ours): {bad[:3]}",
                        file=sys.stderr,
                    )
                    result.setdefault("warnings", []).append({"peer": p, "workload": wname, "prompt_tokens": bad})
            result["runs"][wname] = runs
            if "suffix" in engines:
                result["summary"].setdefault("memory", {})[wname] = memory_report(engines["suffix"])
            result["summary"]["workloads"][wname] = summarize_workload(wl, runs, None, split)
            checkpoint()

        if "warm" in modes:
            for wname in names:
                wl = all_wl[wname]
                warm = run_warm_process(args, wname, index_files[wname], split, n, args.max_tokens or wl.max_tokens)
                warm["saved"] = saved_memory[wname]
                result.setdefault("warm", {})[wname] = warm
                result["summary"]["workloads"][wname] = summarize_workload(wl, result["runs"][wname], warm, split)
                checkpoint()

        if "batch" in modes:
            wl = all_wl["extraction"]
            reqs = wl.requests[:n]
            rendered = {r.id: render(first_engine, wl, r) for r in reqs}
            max_tokens = args.max_tokens or wl.max_tokens
            batch = run_batch(engines, wl, rendered, reqs, max_tokens, args.parallel, args.batch_passes)
            seq = {}
            for m in engines:
                recs = result["runs"].get("extraction", {}).get(m)
                if recs:
                    t = sum(r["t_total"] for r in recs)
                    seq[m] = round(sum(r["tokens"] for r in recs) / t, 3) if t > 0 else None
            result["summary"]["batch"] = {
                "workload": "extraction",
                "requests": len(reqs),
                "parallel": args.parallel,
                "passes": args.batch_passes,
                "runs": batch,
                "one_at_a_time": seq,
            }
            checkpoint()
    finally:
        for e in engines.values():
            e.close()
        for f in index_dir.glob("*"):
            f.unlink()
        index_dir.rmdir()

    result["goals"] = conclude(result["summary"], n)
    result["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S")
    result["machine"]["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    checkpoint()
    md = markdown(result)
    if args.out:
        args.out.with_suffix(".md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
