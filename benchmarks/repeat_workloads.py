"""Repeated workloads: drafting from earlier answers across requests, against plain
decoding, today's prompt lookup and llama.cpp's ``ngram-mod`` (issue 27 item 8).

Four held-out workloads (``repeat_prompts.py``), each a sequence of 32 different requests
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

    flock /tmp/edgespec-bench.lock python benchmarks/repeat_workloads.py \\
        --out benchmarks/results/repeat-workloads-$(date +%F).json
    python benchmarks/repeat_workloads.py --target qwen2.5-coder-0.5b --requests 3 \\
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
import inspect
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from repeat_prompts import WORKLOADS, Request, Workload, workloads  # noqa: E402

from edgespec import Engine  # noqa: E402
from edgespec.catalog import resolve_model  # noqa: E402

ENGINE_MODES = ("plain", "lookup", "suffix")
PEER_MODES = ("ngram-mod", "ngram-cache")
PASSES = ("warm", "batch")
ALL_MODES = ENGINE_MODES + PEER_MODES + PASSES
DEFAULT_MODES = "plain,lookup,suffix,ngram-mod,warm,batch"
MEMORY_MODES = ("suffix", "warm")
SOURCES = ("prompt", "memory", "grammar", "model")
EARLY = 8  # requests 1..EARLY are "the first requests"; EARLY+1.. are "9 and later"
EDIT_PROMPT_LIMIT = 600
WARMUP = [{"role": "user", "content": "Count from one to five in words."}]


def fail(message: str) -> None:
    print(f"repeat_workloads.py: {message}", file=sys.stderr)
    raise SystemExit(2)


# -- what this checkout's edgespec has ------------------------------------------------------

def has_memory_api() -> bool:
    """Whether Engine takes ``memory=`` (issue 27 item 1: the cross-request suffix memory)."""
    return "memory" in inspect.signature(Engine.__init__).parameters


def require_memory_api(modes: list[str]) -> None:
    wanted = [m for m in modes if m in MEMORY_MODES]
    if wanted and not has_memory_api():
        import edgespec.engine

        fail(f"mode(s) {', '.join(wanted)} need Engine(..., memory=True|False, memory_cap=N), the cross-request "
             f"suffix memory of issue 27 item 1; this checkout's Engine ({edgespec.engine.__file__}) has no "
             f"`memory` parameter. Run on a main that has the wiring, or leave them out: "
             f"--modes {','.join(m for m in modes if m not in MEMORY_MODES and m != 'batch') or 'plain,lookup'}")
    if "warm" in wanted:
        try:
            from edgespec.decoding import suffix_store  # noqa: F401  (there, or a clear message now)
        except ImportError as e:
            fail(f"mode warm needs edgespec.decoding.suffix_store ({e})")


def memory_kwargs(on: bool, cap: int | None) -> dict:
    """``memory=...`` (and ``memory_cap``) where the Engine has them; nothing on a main
    without (where drafting is request-local, i.e. ``memory=False``)."""
    if not has_memory_api():
        if on:
            fail("memory=True asked of an Engine without a `memory` parameter")
        return {}
    kw: dict = {"memory": on}
    if on and cap is not None:
        kw["memory_cap"] = cap
    return kw


def engine_memory(eng: Engine):
    """The engine's global index, or a loud failure if the wiring is not there."""
    from edgespec.decoding.suffix import SuffixIndex

    mem = getattr(eng, "memory", None)
    if not isinstance(mem, SuffixIndex):
        fail(f"Engine(memory=True).memory is {type(mem).__name__}, not a SuffixIndex: the memory wiring of "
             f"issue 27 is incomplete in this checkout")
    return mem


def index_options(mem) -> dict:
    return {k: getattr(mem, k) for k in ("key_lens", "max_match", "max_candidates", "alpha", "min_prob", "name")
            if hasattr(mem, k)}


def fresh_memory(eng: Engine) -> None:
    """A cold index for the suffix engine (same cap and options as the engine's own)."""
    from edgespec.decoding.suffix import SuffixIndex

    old = engine_memory(eng)
    eng.memory = SuffixIndex(old.cap, **index_options(old))


def memory_report(eng: Engine) -> dict:
    mem = engine_memory(eng)
    return {"tokens": len(mem), "cap": mem.cap, "bytes": mem.nbytes(), "proposals": mem.proposals,
            "hits": mem.hits, "proposed": mem.proposed, "accepted": mem.accepted_ids}


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
    from edgespec.llama.chat_template import render as render_messages, tokenize_rendered

    text = render_messages(eng.target_model, req.messages, tools=wl.tools)
    return text, tokenize_rendered(eng.target_model, text)


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
        "text": r.text, "finish_reason": r.finish_reason, "tokens": s.generated_tokens,
        "seconds": s.t_generate, "tokens_per_second": s.tokens_per_second, "t_total": s.t_total,
        # the target's samples, the end-of-generation one included (no stop strings here: a
        # "stop" is end-of-generation): what llama-server's predicted_n counts
        "sampled": s.generated_tokens + (r.finish_reason == "stop"),
        "t_draft": s.t_draft, "rounds": s.rounds, "drafted": s.drafted, "accepted": s.accepted,
        "forced": s.forced, "drafted_by_source": _by_source(s, "drafted_by_source"),
        "accepted_by_source": _by_source(s, "accepted_by_source"), "prompt_tokens": s.prompt_tokens,
    }


class Peer:
    """llama-server with one ``--spec-type``, started once per workload (its n-gram pool
    cold at the workload's first request, as ``suffix``'s index is)."""

    def __init__(self, spec: str, bin_dir: Path, target: Path, args) -> None:
        from cpp_peer import LlamaServer

        self.spec = spec
        self.server = LlamaServer(bin_dir, target, args.threads, spec=spec, n_ctx=args.n_ctx)
        self.complete(WARMUP_TEXT[0], 4, None)  # discarded: first-request costs out of the way

    def complete(self, text: str, n: int, schema: dict | None) -> dict:
        body: dict = {"prompt": text, "n_predict": n, "temperature": 0.0, "cache_prompt": True, "stream": False}
        if schema is not None:
            body["json_schema"] = schema
        req = urllib.request.Request(f"http://127.0.0.1:{self.server.port}/completion",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=900) as r:
            out = json.loads(r.read())
        wall = time.perf_counter() - t0
        t = out.get("timings", {})
        return {"text": out.get("content", ""),
                "finish_reason": "stop" if out.get("stop_type") in ("eos", "word") else "length",
                "tokens": int(t.get("predicted_n", 0)), "seconds": float(t.get("predicted_ms", 0.0)) / 1000,
                "prompt_seconds": float(t.get("prompt_ms", 0.0)) / 1000,
                "tokens_per_second": float(t.get("predicted_per_second", 0.0)), "wall": wall,
                "drafted": int(t.get("draft_n", 0)), "accepted": int(t.get("draft_n_accepted", 0)),
                "prompt_tokens": int(out.get("tokens_evaluated", 0)), "prompt_processed": int(t.get("prompt_n", 0))}

    def close(self) -> None:
        self.server.close()


WARMUP_TEXT: list[str] = []  # the warm-up prompt rendered with the target's template (set in main)


# -- one sequence, interleaved ---------------------------------------------------------------------

def run_sequence(wl: Workload, reqs: list[Request], first: int, runners: dict, rendered: dict,
                 max_tokens: int, log_prefix: str = "", after=None) -> dict:
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
            print(f"{log_prefix}[{wl.name} {i + 1:02d}] {m:11} {rec['tokens']:4d} tok "
                  f"{rec['tokens_per_second']:6.2f} tok/s acc {rec['accepted']}/{rec['drafted']}{src_s} "
                  f"{rec['finish_reason']}" + ("" if rec["valid"] is None else f" valid={rec['valid']}"),
                  file=sys.stderr, flush=True)
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

def store_identity(target: Path, wl: str) -> str:
    return f"{target.name}:repeat-workloads:{wl}"


def load_saved(path: Path, cap: int, options: dict):
    """The index saved at ``path`` (a ``suffix_store`` file; its identity is read from
    the file's header), all of it, or a loud failure: an unusable file must not pass as a
    cold start."""
    from edgespec.decoding import suffix_store

    path = path.resolve()
    match = [s for s in suffix_store.stats(path.parent) if s.path.resolve() == path]
    if not match or match[0].tokens == 0:
        fail(f"--warm-from {path}: no readable suffix memory there")
    with warnings.catch_warnings():
        warnings.simplefilter("error", suffix_store.SuffixStoreWarning)
        loaded = suffix_store.load(match[0].identity, cap=cap, directory=path.parent, **options)
    if len(loaded) != match[0].tokens:
        fail(f"--warm-from {path}: loaded {len(loaded)} tokens of the {match[0].tokens} saved")
    return loaded


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
    reqs = wl.requests[args.first:args.requests]
    rendered = {r.id: render(engines["plain"], wl, r) for r in reqs}
    runs = run_sequence(wl, reqs, args.first, {m: engine_runner(e) for m, e in engines.items()}, rendered,
                        args.max_tokens or wl.max_tokens, log_prefix="  warm process ")
    result = {"loaded_tokens": len(loaded), "t_load": t_load, "runs": runs,
              "memory_after": memory_report(engines["warm"])}
    Path(args.worker_out).write_text(json.dumps(result))
    for e in engines.values():
        e.close()


def run_warm_process(args, wl: str, index_file: Path, first: int, n: int, max_tokens: int) -> dict:
    out = index_file.with_suffix(".warm.json")
    cmd = [sys.executable, str(Path(__file__).resolve()), "--warm-from", str(index_file), "--workloads", wl,
           "--first", str(first), "--requests", str(n), "--max-tokens", str(max_tokens), "--target", args.target,
           "--threads", str(args.threads), "--n-ctx", str(args.n_ctx), "--worker-out", str(out)]
    if args.memory_cap is not None:
        cmd += ["--memory-cap", str(args.memory_cap)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, check=False)
    if proc.returncode != 0:
        fail(f"the warm process for {wl} failed (exit {proc.returncode}): {' '.join(cmd)}")
    result = json.loads(out.read_text())
    result["wall"] = time.perf_counter() - t0
    return result


# -- the batch figure ---------------------------------------------------------------------------------

def run_batch(engines: dict, wl: Workload, rendered: dict, reqs: list[Request], max_tokens: int,
              parallel: int, passes: int = 1) -> dict:
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
        for m in names[p % len(names):] + names[:p % len(names)]:
            per[m].append(_batch_pass(engines[m], m, wl, prompts, opts, parallel, p))
    out: dict = {}
    plain = per.get("plain")
    for m, recs in per.items():
        tps = sorted(r["tokens_per_second"] for r in recs)
        rec = {"passes": recs, "requests": len(prompts), "tokens_per_second": statistics.median(tps),
               "errors": [e for r in recs for e in r["errors"]],
               "drafted": sum(r["drafted"] for r in recs), "accepted": sum(r["accepted"] for r in recs),
               "valid": sum(r["valid"] for r in recs) if wl.schema else None,
               "batch_cost": [round(c, 3) for c in engines[m].batch_cost().table[1:17]]}
        if plain and m != "plain":
            rec["x_plain"] = round(geomean(r["tokens_per_second"] / b["tokens_per_second"]
                                           for r, b in zip(recs, plain) if b["tokens_per_second"] > 0) or 0, 3)
        by = [r["accepted_by_source"] for r in recs if r.get("accepted_by_source")]
        if by:
            rec["accepted_by_source"] = _sum_dicts(by)
            rec["drafted_by_source"] = _sum_dicts(r["drafted_by_source"] for r in recs if r.get("drafted_by_source"))
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
    rec = {"pass": p, "errors": errors, "tokens": tokens, "wall": wall,
           "tokens_per_second": tokens / wall if wall > 0 else 0.0,
           "drafted": sum(s.drafted for s in stats), "accepted": sum(s.accepted for s in stats),
           "valid": sum(bool(valid_json(o.result.text, wl.schema)) for o in results if o.result is not None)
           if wl.schema else None}
    for key in ("accepted_by_source", "drafted_by_source"):
        by = [getattr(s, key, None) for s in stats]
        if any(by):
            rec[key] = _sum_dicts(b for b in by if b)
    if m == "suffix":
        rec["memory_after"] = memory_report(eng)
    print(f"[batch {wl.name} parallel={parallel} pass {p}] {m:7} {tokens} tok in {wall:.1f} s: "
          f"{rec['tokens_per_second']:.2f} tok/s, acc {rec['accepted']}/{rec['drafted']}, errors {len(errors)}",
          file=sys.stderr, flush=True)
    return rec


# -- the summary ----------------------------------------------------------------------------------

def geomean(xs) -> float | None:
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def _sum_dicts(ds) -> dict:
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
    out = {"requests": len(recs), "tokens": tokens, "seconds": round(secs, 3),
           "tokens_per_second": round(tokens / secs, 3) if secs > 0 else None,
           "median_tokens_per_second": round(statistics.median(r["tokens_per_second"] for r in recs), 3),
           "drafted": sum(r["drafted"] for r in recs), "accepted": sum(r["accepted"] for r in recs)}
    if base is not None:
        ratios = [r["tokens_per_second"] / b["tokens_per_second"] for r, b in zip(recs, base)
                  if b["tokens_per_second"] > 0 and r["tokens_per_second"] > 0]
        g = geomean(ratios)
        out["x_plain"] = round(g, 3) if g else None
        out["x_plain_min"] = round(min(ratios), 3) if ratios else None
        out["same_text_as_plain"] = sum(r["text"] == b["text"] for r, b in zip(recs, base))
    if any(r.get("drafted_by_source") for r in recs):
        out["drafted_by_source"] = _sum_dicts(r.get("drafted_by_source") for r in recs)
        out["accepted_by_source"] = _sum_dicts(r.get("accepted_by_source") for r in recs)
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
    rates = [r / t["tokens_per_second"] for r, t in zip(map(decode_rate, mine), theirs)
             if t["tokens_per_second"] > 0 and r > 0]
    times = [(t["seconds"] + t.get("prompt_seconds", 0.0)) / m["t_total"] for m, t in zip(mine, theirs)
             if m["t_total"] > 0]
    r, a = geomean(rates), geomean(times)
    return (round(r, 3) if r else None), (round(a, 3) if a else None)


def summarize_workload(wl: Workload, runs: dict, warm: dict | None, split: int | None) -> dict:
    base = runs.get("plain")
    s: dict = {"kind": wl.kind, "requests": len(next(iter(runs.values()))), "windows": {}}
    for name, (lo, hi) in {"1-8": (0, EARLY), "9+": (EARLY, None), "all": (0, None)}.items():
        s["windows"][name] = {m: mode_stats(window(recs, lo, hi), window(base, lo, hi) if base and m != "plain"
                                            else None) for m, recs in runs.items()}
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
            "requests": f"{split + 1}-{split + len(wr['warm'])}", "loaded_tokens": warm["loaded_tokens"],
            "t_load": round(warm["t_load"], 3), "memory_after": warm.get("memory_after"),
            "warm process": mode_stats(wr["warm"], wr["plain"]),
            "warm process plain": mode_stats(wr["plain"], None),
            "first request x_plain": round(wr["warm"][0]["tokens_per_second"] / wr["plain"][0]["tokens_per_second"], 3)
            if wr["plain"] and wr["plain"][0]["tokens_per_second"] else None,
            "in-process, same requests": mode_stats(runs["suffix"][split:], base[split:]),
            "warm text = in-process text": sum(a["text"] == b["text"] for a, b in zip(wr["warm"], runs["suffix"][split:])),
        }
    return s


def conclude(summary: dict, n_requests: int) -> dict:
    """The issue's goals table, per workload, from the summaries alone."""
    goals: dict = {}
    judged = n_requests >= 24

    def put(goal: str, wl: str, value, met, note: str = "") -> None:
        goals.setdefault(goal, {})[wl] = {"value": value, "met": (bool(met) if judged else None) if value is not None
                                          else None, **({"note": note} if note else {})}

    for wl, s in summary["workloads"].items():
        late, early = s["windows"]["9+"], s["windows"]["1-8"]
        suf_late, suf_early = late.get("suffix"), early.get("suffix")
        if s["kind"] == "schema":
            v = suf_late and suf_late.get("x_plain")
            put("requests 9+, under one schema: >= 1.5x the schema without drafting", wl, v, v and v >= 1.5)
        else:
            v = suf_late and suf_late.get("x_plain")
            put("requests 9+, free text: >= 1.4x plain", wl, v, v and v >= 1.4,
                "SQL counted as free text" if wl == "sql" else "")
        v = suf_early and suf_early.get("x_plain")
        put("the first requests (1-8): never below 0.97x (geomean; min in note)", wl, v, v and v >= 0.97,
            f"min per request {suf_early.get('x_plain_min')}" if suf_early else "")
        for p, by in s.get("suffix_vs_peer", {}).items():
            v = by.get("9+")
            put(f"ahead of llama-server {p} (requests 9+, suffix/peer decode rate)", wl, v, v and v > 1.0,
                f"requests 1-8: {by.get('1-8')}; answer time 9+: {by.get('9+ answer time')}; "
                f"our plain/peer 9+: {by.get('9+ plain')}")
        if "warm" in s and suf_late and suf_late.get("x_plain"):
            w = s["warm"]["warm process"]
            if w and w.get("x_plain"):
                v = round(w["x_plain"] / suf_late["x_plain"], 3)
                same = s["warm"]["in-process, same requests"]
                put("warm start: from the first request, within 10% of in-process (warm x_plain / in-process 9+ x_plain)",
                    wl, v, v >= 0.9, f"warm x_plain {w['x_plain']} on requests {s['warm']['requests']}; in-process "
                    f"on the same requests {same and same.get('x_plain')}; first warm request "
                    f"{s['warm']['first request x_plain']}")
        d = s["windows"]["all"].get("suffix")
        if d and "draft_share" in d:
            put("the drafter's work: < 2% of generation time (suffix, t_draft / t_generate)", wl,
                d["draft_share"], d["draft_share"] < 0.02)
    mem = summary.get("memory")
    if mem:
        for wl, m in mem.items():
            put("memory: bounded by the cap in tokens", wl, f"{m['tokens']} of {m['cap']} tokens, {m['bytes']} B",
                m["tokens"] <= m["cap"], "the cap was not reached" if m["tokens"] < m["cap"] else "")
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
    return ", ".join(f"{k} {acc.get(k, 0)}/{dr.get(k, 0)}" for k in sorted(set(acc) | set(dr)) if dr.get(k) or acc.get(k)) or "0"


def markdown(result: dict) -> str:
    s = result["summary"]
    lines = [f"Repeated workloads ({result['settings']['target_name']}, {result['settings']['threads']} threads, "
             f"{result['machine']['cpu_count']} CPUs, commit {result['git']['commit']}, {result['date']}). "
             "tok/s: generated tokens over generation time (llama-server: its `timings.predicted_per_second`); "
             "× plain: geometric mean of per-request ratios (extraction: plain = the same schema without "
             "drafting); accepted/drafted by source over requests 9+.", "",
             "| workload | mode | tok/s 1-8 | tok/s 9+ | × plain 1-8 | × plain 9+ | accepted / drafted 9+ | "
             "by source 9+ (accepted/drafted) | same text as plain | valid |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for wl, ws in s["workloads"].items():
        early, late, all_ = ws["windows"]["1-8"], ws["windows"]["9+"], ws["windows"]["all"]
        for m in all_:
            e, l_, a = early.get(m), late.get(m), all_.get(m)
            lines.append("| " + " | ".join([
                wl, m, _fmt(e and e["tokens_per_second"]), _fmt(l_ and l_["tokens_per_second"]),
                _fmt(e and e.get("x_plain"), ".2f", "×"), _fmt(l_ and l_.get("x_plain"), ".2f", "×"),
                f"{l_['accepted']}/{l_['drafted']}" if l_ else "-", _sources(l_),
                f"{a['same_text_as_plain']}/{a['requests']}" if a and "same_text_as_plain" in a else "-",
                f"{a['valid']}/{a['requests']}" if a and "valid" in a else "-"]) + " |")
        if "warm" in ws:
            w, same = ws["warm"]["warm process"], ws["warm"]["in-process, same requests"]
            lines.append(f"| {wl} | warm (2nd process, requests {ws['warm']['requests']}) | - | "
                         f"{_fmt(w and w['tokens_per_second'])} | - | {_fmt(w and w.get('x_plain'), '.2f', '×')} "
                         f"(in-process on the same: {_fmt(same and same.get('x_plain'), '.2f', '×')}) | "
                         f"{w['accepted']}/{w['drafted']} | {_sources(w)} | - | - |")
    if s.get("batch"):
        b = s["batch"]
        lines += ["", f"Batch (`generate_many(parallel={b['parallel']})`, {b['workload']}, {b['requests']} requests, "
                  f"{b.get('passes', 1)} passes per engine in rotated order; tok/s = generated tokens / batch wall "
                  "time, prompts included, the median pass; × plain batch: geometric mean of the per-pass ratios; "
                  "one at a time = the same requests in the interleaved run, generated tokens / sum of t_total; "
                  "C(n): the batch cost the engine learned, n = 1..8 rows):", "",
                  "| engine | batch tok/s | × plain batch | one at a time tok/s | accepted / drafted | by source "
                  "(accepted/drafted) | C(2..8) learned | errors |",
                  "|---|---|---|---|---|---|---|---|"]
        for m, r in b["runs"].items():
            seq = b["one_at_a_time"].get(m)
            x = r.get("x_plain") if m != "plain" else 1.0
            c = r.get("batch_cost") or []
            lines.append(f"| {m} | {r['tokens_per_second']:.2f} | {_fmt(x, '.2f', '×')} | {_fmt(seq)} | "
                         f"{r['accepted']}/{r['drafted']} | {_sources(r)} | {' '.join(f'{v:.2f}' for v in c[1:8])} | "
                         f"{len(r['errors'])} |")
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
    lines.append("| under a CPU hog: auto >= 0.97x plain | not measured here (issue 27 item 6) |"
                 + " |" * (len(s["workloads"]) - 1))
    if "note" in result["goals"]:
        lines += ["", f"_{result['goals']['note']}_"]
    return "\n".join(lines) + "\n"


def git_info() -> dict:
    def git(*a) -> str:
        return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True, check=False).stdout.strip()

    return {"commit": git("rev-parse", "--short", "HEAD"), "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--untracked-files=no"))}


def machine_info() -> dict:
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(), "machine": platform.machine(),
            "processor": platform.processor(), "python": platform.python_version(),
            "load_average": [round(x, 2) for x in os.getloadavg()]}


# -- main -----------------------------------------------------------------------------------------

def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help=f"a subset of {','.join(WORKLOADS)}")
    ap.add_argument("--requests", type=int, default=None, help="the first N requests of each workload (default all: 32)")
    ap.add_argument("--max-tokens", type=int, default=None,
                    help="for every workload (default per workload: extraction 96, tests 128, edits 128, sql 80)")
    ap.add_argument("--modes", default=DEFAULT_MODES, help=f"a subset of {','.join(ALL_MODES)}")
    ap.add_argument("--memory-cap", type=int, default=None, help="the suffix index's cap in tokens (default: the engine's)")
    ap.add_argument("--warm-requests", type=int, default=8,
                    help="the warm process answers the last K requests (the index is saved before them)")
    ap.add_argument("--parallel", type=int, default=4, help="sequences per decode in the batch pass")
    ap.add_argument("--batch-passes", type=int, default=3,
                    help="passes of the batch per engine, their order rotated (the median pass is reported)")
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
        print(f"repeat_workloads.py: {n} requests per workload; the issue's goals need >= 24 (not judged)",
              file=sys.stderr)
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
        from cpp_peer import tools_dir

        bin_dir = tools_dir(args.peer_bin)

    settings = {"target": str(target), "target_name": target.name, "threads": args.threads, "n_ctx": args.n_ctx,
                "modes": modes, "workloads": names, "requests": n, "warm_split": split,
                "max_tokens": {w: args.max_tokens or all_wl[w].max_tokens for w in names},
                "memory_api": has_memory_api(), "memory_cap": args.memory_cap, "parallel": args.parallel,
                "peer": {p: f"llama-server --spec-type {p} (its defaults), -np 1, -t {args.threads}"
                         for p in peer_modes}}
    import llama_cpp

    result: dict = {"date": time.strftime("%Y-%m-%d"), "started": time.strftime("%Y-%m-%dT%H:%M:%S"),
                    "machine": machine_info(), "git": git_info(), "llama_cpp_python": llama_cpp.__version__,
                    "settings": settings, "summary": {"workloads": {}}, "runs": {}, "prompt_tokens": {}}
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
                        print(f"[{wname}] saved the suffix index after request {split}: {len(mem)} tokens -> "
                              f"{index_files[wname]}", file=sys.stderr, flush=True)

                runs = run_sequence(wl, reqs, 0, runners, rendered, max_tokens, after=after)
            finally:
                for peer in peers.values():
                    peer.close()
            for p in peer_modes:
                bad = [(r["request"], r["prompt_tokens"], lengths[r["request"]]) for r in runs[p]
                       if r["prompt_tokens"] and r["prompt_tokens"] != lengths[r["request"]]]
                if bad:
                    print(f"WARNING: llama-server {p} evaluated other prompt token counts than ours "
                          f"(request, theirs, ours): {bad[:3]}", file=sys.stderr)
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
            result["summary"]["batch"] = {"workload": "extraction", "requests": len(reqs), "parallel": args.parallel,
                                          "passes": args.batch_passes,
                                          "runs": batch, "one_at_a_time": seq}
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
