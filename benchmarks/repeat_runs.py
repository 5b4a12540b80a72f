"""The runs of ``benchmarks/repeat_workloads.py``: an engine per mode, a request rendered with
the target's chat template, one request through an engine or through llama-server (a record
each), and a sequence of requests interleaved across the modes. Knows how one request is run
and recorded; not which modes or workloads a run asks for, the warm pass or the summary.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.peers.llama_server import LlamaServer
from benchmarks.prompts.repeat import Request, Workload
from benchmarks.repeat_batch import response_format, valid_json
from benchmarks.repeat_memory import engine_memory, memory_kwargs
from edgespec import Engine

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
