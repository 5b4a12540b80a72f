"""Throughput of many requests at once: a batch job against the same prompts one at a time,
and the cost of one decode of n sequences (what ``tune`` saves for ``--parallel auto``).

This module never prints.
"""

from __future__ import annotations

import statistics
import time
from typing import Any, Sequence

from ..decoding.suffix import SuffixIndex
from .prompts import BenchPrompt


def fresh_memory(engine: Any) -> SuffixIndex | bool:
    """An empty memory of earlier answers like the engine's (False: it has none), so
    that a measured run drafts only from what it wrote itself."""
    cap = getattr(getattr(engine, "memory", None), "cap", None)
    return SuffixIndex(cap) if cap else False


def batch_throughput(engine: Any, prompts: Sequence[BenchPrompt], parallel: int | str, *, max_tokens: int) -> dict:
    """The prompts one at a time (``engine.generate``) against all of them through
    ``engine.generate_many(parallel=...)``, side by side on one engine: generated tokens
    over wall time, prompt processing included (a batch job's throughput). Each side
    drafts from an empty memory of its own: never from the other's answers."""
    texts = [p.prompt for p in prompts]
    memory = fresh_memory(engine)
    t0 = time.perf_counter()
    seq_tokens = sum(len(engine.generate(t, max_tokens=max_tokens, memory=memory).token_ids) for t in texts)
    seq_s = time.perf_counter() - t0
    run = engine.generate_many(texts, parallel=parallel, max_tokens=max_tokens, memory=fresh_memory(engine))
    t0 = time.perf_counter()
    par_tokens = 0
    for outcome in run:
        if outcome.error is not None:
            raise outcome.error
        par_tokens += len(outcome.result.token_ids)
    par_s = time.perf_counter() - t0
    seq_rate, par_rate = seq_tokens / seq_s, par_tokens / par_s
    return {
        "n_parallel": run.n_parallel,
        "reason": run.parallel_reason,
        "sequential_tokens_per_second": round(seq_rate, 3),
        "parallel_tokens_per_second": round(par_rate, 3),
        "speedup": round(par_rate / seq_rate, 3) if seq_rate else None,
        "mean_running": round(run.stats.mean_running, 2),
        "drafted": run.stats.drafted,
        "accepted": run.stats.accepted,
    }


BATCH_SIZES = (1, 2, 4, 8, 16, 32)


def time_batches(
    model: Any, n_threads: int, ns: Sequence[int] = BATCH_SIZES, *, context: int = 100, repeats: int = 3
) -> dict[int, float]:
    """Seconds of one decode of n sequences, one new token each (logits at every row),
    each sequence holding ``context`` tokens: what a step of ``generate --parallel n``
    costs. Median of ``repeats`` after a discarded first decode."""
    from ..llama import MultiContext

    out: dict[int, float] = {}
    span = max(1, min(1000, model.n_vocab - 10))  # ordinary ids of any vocabulary
    prefix = [(i * 37) % span + 5 for i in range(context)]
    for n in ns:
        ctx = MultiContext(model, n_seq=n, n_ctx=n * (context + repeats + 8), n_batch=max(512, n), n_threads=n_threads)
        try:
            for s in range(n):
                ctx.decode([(s, prefix, ())])
            times = []
            for r in range(repeats + 1):
                t0 = time.perf_counter()
                ctx.decode([(s, [5 + r], [0]) for s in range(n)])
                times.append(time.perf_counter() - t0)
            out[n] = statistics.median(times[1:])
        finally:
            ctx.close()
    return out
