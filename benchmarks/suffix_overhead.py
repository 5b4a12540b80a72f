"""Micro-benchmark: what the suffix memory costs beside a decode step (issue 27: < 2%).

Measures, on one token stream, for ``edgespec.decoding.suffix``:

- append: microseconds per token while the global index fills to its cap, and at the
  cap (every append evicts the oldest token);
- propose: microseconds per ``SuffixIndex.propose`` at the cap, for contexts taken from
  held-out documents (mean, p50, p99 of the least of three calls each: the call's cost
  without the preemptions of a shared 2-core machine);
- a drafter round: ``MemoryDrafter.propose`` (writing the newly committed tokens into the
  global index, then asking prompt lookup and the index) while it "generates" held-out documents:
  each round commits the accepted prefix of its draft plus one token (what the target
  would do at greedy), so the cost is per round, as a decode step is (timed once, noise
  and all; ``begin``, once per request, apart);
- memory at the cap: the index's own count (``nbytes``) and what tracemalloc sees
  allocated while it is built, in bytes per token;
- the store (``suffix_store``): saving the index at the cap and loading it back (the
  warm start of a later run: its arrays), and loading it with another cap (rebuilt by
  replaying the window), milliseconds (the least of three) and the file's size;
  ``--store-only`` measures just this and replaces the ``store_at_cap`` entry of the
  ``--json`` file (dated and with its commit);
- the alternative we did not pick: a depth-limited suffix trie with counts (dict nodes,
  depth 16, the SuffixDecoding structure without path compression), append cost and
  memory per token, built on the first ``--trie-tokens`` tokens.

The stream: this repository's text (docs, code, tests) tokenized with the
Qwen2.5-Coder-0.5B tokenizer when it can be loaded (``--source model``), else split
into words and punctuation, one id per distinct word (``--source words``), cut into
documents of 200-400 tokens (an answer's length). The decode step is the 0.5B's,
measured here with 2 threads (``--source model``), or ``--step-ms`` when the model
cannot be loaded. Times are CPU time of the calling thread (``time.thread_time``: the
work itself, which the other processes of a shared 2-core machine do not inflate) and,
beside them, wall time. The overhead is a drafter round's CPU time over the step of a
quiet machine (``--step-ms``, 20 ms: the low end of the issue's 20-40 ms) and over the
least step measured here.

    flock /tmp/edgespec-bench.lock python -m benchmarks.suffix_overhead \\
        --json benchmarks/results/suffix-overhead-2core.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import random
import re
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

from benchmarks.common import ROOT, commit, git
from edgespec.decoding.drafters import NgramDrafter
from edgespec.decoding.memory import MemoryDrafter
from edgespec.decoding.suffix import DEFAULT_CAP, SuffixIndex


def repo_text() -> str:
    files = git("ls-files", "*.py", "*.md", "*.toml").split()
    return "".join((ROOT / f).read_text(encoding="utf-8", errors="replace") for f in sorted(files))


def word_ids(text: str) -> list[int]:
    vocab: dict[str, int] = {}
    return [vocab.setdefault(w, len(vocab)) for w in re.findall(r"\w+|[^\w\s]|\s+", text)]


def load_model():
    from edgespec.catalog import resolve_model
    from edgespec.llama import Model

    return Model(resolve_model("qwen2.5-coder-0.5b"))


def model_ids(model, text: str) -> list[int]:
    out: list[int] = []
    for i in range(0, len(text), 20000):  # in pieces: a tokenizer call per ~20k chars
        out.extend(model.tokenize(text[i : i + 20000], add_special=False, parse_special=False))
    return out


def step_ms(model, n: int = 48) -> dict[str, float]:
    """The least and the median wall time of a single-token decode of the 0.5B with 2
    threads (the least: the step on a quiet machine, as near as a shared one gets)."""
    from edgespec.llama import Context

    ctx = Context(model, n_ctx=512, n_threads=2)
    ctx.decode(model.tokenize("def fibonacci(n):\n", add_special=False))
    times = []
    for t in model.tokenize(" return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n" * 4, add_special=False)[:n]:
        t0 = time.perf_counter()
        ctx.decode([t])
        times.append(time.perf_counter() - t0)
    ctx.close()
    return {"min": 1000 * min(times[8:]), "median": 1000 * statistics.median(times[8:])}


def documents(ids: list[int], rng: random.Random) -> list[list[int]]:
    docs, i = [], 0
    while i < len(ids):
        n = rng.randint(200, 400)
        docs.append(ids[i : i + n])
        i += n
    return docs


def us(seconds: float, n: int) -> float:
    return round(1e6 * seconds / max(n, 1), 3)


def bench_append(docs: list[list[int]], cap: int) -> tuple[SuffixIndex, dict]:
    ix = SuffixIndex(cap)
    filling = at_cap = 0
    t_fill = t_cap = c_fill = c_cap = 0.0
    for toks in docs:
        d = ix.open()
        t0, c0 = time.perf_counter(), time.thread_time()
        ix.extend(d, toks)
        dt, dc = time.perf_counter() - t0, time.thread_time() - c0
        ix.close(d)
        if ix._next <= cap:
            filling, t_fill, c_fill = filling + len(toks), t_fill + dt, c_fill + dc
        else:
            at_cap, t_cap, c_cap = at_cap + len(toks), t_cap + dt, c_cap + dc
    return ix, {
        "tokens_filling": filling,
        "append_cpu_us_filling": us(c_fill, filling),
        "append_wall_us_filling": us(t_fill, filling),
        "tokens_at_cap": at_cap,
        "append_cpu_us_at_cap": us(c_cap, at_cap),
        "append_wall_us_at_cap": us(t_cap, at_cap),
    }


def bench_propose(ix: SuffixIndex, held_out: list[list[int]], rng: random.Random, n: int = 3000) -> dict:
    times, cpu, hits, lengths, expected = [], [], 0, [], []
    for _ in range(n):
        doc = rng.choice(held_out)
        cut = rng.randint(8, len(doc) - 1)
        context = doc[:cut]
        p = ix.propose(context, 16)
        best = best_cpu = float("inf")
        for _ in range(3):  # the least of three: what the call costs, not the machine's neighbours
            t0, c0 = time.perf_counter(), time.thread_time()
            ix.propose(context, 16)
            best, best_cpu = min(best, time.perf_counter() - t0), min(best_cpu, time.thread_time() - c0)
        times.append(best)
        cpu.append(best_cpu)
        if p.ids:
            hits += 1
            lengths.append(len(p.ids))
            expected.append(sum(p.probs))
    times.sort()
    cpu.sort()
    return {
        "propose_cpu_us_mean": round(1e6 * statistics.fmean(cpu), 3),
        "propose_cpu_us_p99": round(1e6 * cpu[int(len(cpu) * 0.99)], 3),
        "propose_wall_us_mean": round(1e6 * statistics.fmean(times), 3),
        "propose_wall_us_p50": round(1e6 * times[len(times) // 2], 3),
        "propose_wall_us_p99": round(1e6 * times[int(len(times) * 0.99)], 3),
        "hit_rate": round(hits / n, 3),
        "draft_len_mean": round(statistics.fmean(lengths or [0]), 2),
        "expected_accepted_mean": round(statistics.fmean(expected or [0]), 2),
    }


def bench_rounds(memory: SuffixIndex, held_out: list[list[int]], k: int = 16) -> dict:
    """The drafter generating each held-out document from its first 64 tokens."""
    drafter = MemoryDrafter(NgramDrafter(), memory)
    times, cpu, begins, rounds, committed, accepted, drafted, expected = [], [], [], 0, 0, 0, 0, 0.0
    for doc in held_out:
        prompt, rest = doc[:64], doc[64:]
        t0 = time.perf_counter()
        drafter.begin(prompt)
        begins.append(time.perf_counter() - t0)
        tokens = list(prompt)
        while rest:
            t0, c0 = time.perf_counter(), time.thread_time()
            p = drafter.propose(tokens, k)
            times.append(time.perf_counter() - t0)
            cpu.append(time.thread_time() - c0)
            n = 0
            while n < len(p.ids) and n < len(rest) and p.ids[n] == rest[n]:
                n += 1
            drafter.accepted(p, n)
            step = rest[: n + 1]  # the accepted prefix and the target's own next token
            tokens.extend(step)
            rest = rest[len(step) :]
            rounds += 1
            committed += len(step)
            accepted += n
            drafted += len(p.ids)
            expected += sum(p.probs)
        drafter.end(tokens)
    times.sort()
    cpu.sort()
    return {
        "rounds": rounds,
        "begin_wall_us_mean": round(1e6 * statistics.fmean(begins), 3),
        "round_cpu_us_mean": round(1e6 * statistics.fmean(cpu), 3),
        "round_cpu_us_p99": round(1e6 * cpu[int(len(cpu) * 0.99)], 3),
        "round_wall_us_mean": round(1e6 * statistics.fmean(times), 3),
        "round_wall_us_p50": round(1e6 * times[len(times) // 2], 3),
        "round_wall_us_p99": round(1e6 * times[int(len(times) * 0.99)], 3),
        "tokens_per_round": round(committed / rounds, 3),
        "accepted_of_drafted": round(accepted / max(drafted, 1), 3),
        "expected_of_drafted": round(expected / max(drafted, 1), 3),
    }


def memory_at_cap(docs: list[list[int]], cap: int) -> dict:
    gc.collect()
    tracemalloc.start()
    ix = SuffixIndex(cap)
    for toks in docs:
        d = ix.open()
        ix.extend(d, toks)
        ix.close(d)
        if ix._next >= cap:
            break
    current, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "tokens": len(ix),
        "nbytes_per_token": round(ix.nbytes() / len(ix), 1),
        "traced_bytes_per_token": round(current / len(ix), 1),
        "traced_mib": round(current / 2**20, 1),
        "chain_heads": ix.chain_heads(),
    }


def timed(fn, repeat: int = 3) -> tuple[object, float, float]:
    """``fn()``'s result and the least CPU and wall milliseconds of ``repeat`` calls (the
    least: the work without a shared machine's preemptions)."""
    cpu, wall, out = [], [], None
    for _ in range(repeat):
        gc.collect()
        t0, c0 = time.perf_counter(), time.thread_time()
        out = fn()
        wall.append(1000 * (time.perf_counter() - t0))
        cpu.append(1000 * (time.thread_time() - c0))
    return out, round(min(cpu), 1), round(min(wall), 1)


def bench_store(ix: SuffixIndex) -> dict:
    """Saving the index at the cap, loading it back as it was saved (the warm start of a
    later run: its arrays), and loading it with another cap (the rebuild by replay)."""
    import tempfile

    from edgespec.decoding import suffix_store

    with tempfile.TemporaryDirectory() as d:
        out: dict = {"tokens": len(ix), "format_version": suffix_store.FORMAT_VERSION}
        path, out["save_cpu_ms"], out["save_wall_ms"] = timed(lambda: suffix_store.save(ix, "bench", Path(d)))
        out["file_mib"] = round(path.stat().st_size / 2**20, 2)
        back, out["load_cpu_ms"], out["load_wall_ms"] = timed(lambda: suffix_store.load("bench", directory=Path(d)))
        assert len(back) == len(ix) and back.chain_heads() == ix.chain_heads()
        _, out["replay_load_cpu_ms"], out["replay_load_wall_ms"] = timed(
            lambda: suffix_store.load("bench", cap=ix.cap + 1, directory=Path(d)), repeat=1
        )
        return out


class Trie:
    """A depth-limited suffix trie with counts: node = [count, {token: node}]. Each token
    extends the open suffixes of its document by one level (at most ``depth``)."""

    def __init__(self, depth: int = 16) -> None:
        self.depth = depth
        self.root: list = [0, {}]

    def add(self, toks: list[int]) -> None:
        active: list[list] = []
        for t in toks:
            nxt = []
            for node in [self.root, *active[: self.depth - 1]]:
                child = node[1].get(t)
                if child is None:
                    child = node[1][t] = [0, {}]
                child[0] += 1
                nxt.append(child)
            active = nxt


def bench_trie(docs: list[list[int]], n_tokens: int) -> dict:
    gc.collect()
    tracemalloc.start()
    trie, n, t = Trie(), 0, 0.0
    for toks in docs:
        t0 = time.perf_counter()
        trie.add(toks)
        t += time.perf_counter() - t0
        n += len(toks)
        if n >= n_tokens:
            break
    current, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    del trie
    gc.collect()
    return {"depth": 16, "tokens": n, "append_us_traced": us(t, n), "traced_bytes_per_token": round(current / n, 1)}


def bench_trie_speed(docs: list[list[int]], n_tokens: int) -> float:
    trie, n, t = Trie(), 0, 0.0
    for toks in docs:
        t0 = time.thread_time()
        trie.add(toks)
        t += time.thread_time() - t0
        n += len(toks)
        if n >= n_tokens:
            break
    return us(t, n)


def update_store(path: Path | None, store: dict, source: str) -> None:
    store = {
        **store,
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit(),
        "stream": source,
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(store, indent=2))
    if path is not None:
        data = json.loads(path.read_text()) if path.exists() else {}
        data["store_at_cap"] = store
        path.write_text(json.dumps(data, indent=2) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cap", type=int, default=DEFAULT_CAP)
    ap.add_argument("--source", choices=["auto", "model", "words"], default="auto")
    ap.add_argument(
        "--step-ms",
        type=float,
        default=20.0,
        help="the 0.5B's decode step on a quiet 2-core machine, ms (the issue's 20-40 ms: "
        "its low end, so the overhead is not flattered)",
    )
    ap.add_argument("--trie-tokens", type=int, default=60000)
    ap.add_argument("--held-out", type=int, default=60, help="held-out documents to generate")
    ap.add_argument("--json", type=Path)
    ap.add_argument(
        "--store-only",
        action="store_true",
        help="measure the store alone and update the --json file's store_at_cap entry",
    )
    args = ap.parse_args()
    rng = random.Random(27)
    text = repo_text()
    model, source, step_source = None, "words", "not measured: no model"
    step = {"min": args.step_ms, "median": args.step_ms}
    if args.source in ("auto", "model"):
        try:
            model = load_model()
        except Exception as e:  # noqa: BLE001 - a benchmark falls back to word ids, and says so
            if args.source == "model":
                raise
            print(f"the 0.5B could not be loaded ({e}); using word ids", file=sys.stderr)
    if model is not None:
        ids, source = model_ids(model, text), "qwen2.5-coder-0.5b tokenizer"
        if not args.store_only:
            step, step_source = step_ms(model), "measured: qwen2.5-coder-0.5b Q4_K_M, 2 threads, 1-token decode"
    else:
        ids = word_ids(text)
    docs = documents(ids, rng)
    rng.shuffle(docs)
    held_out, train = docs[: args.held_out], docs[args.held_out :]
    print(f"{len(ids)} tokens ({source}), {len(train)} documents to index, cap {args.cap}", file=sys.stderr)

    ix, append = bench_append(train, args.cap)
    if args.store_only:
        return update_store(args.json, bench_store(ix), source)
    propose = bench_propose(ix, held_out, rng)
    rounds = bench_rounds(ix, held_out)
    store = bench_store(ix)
    memory = memory_at_cap(train, args.cap)
    trie = bench_trie(train, args.trie_tokens)
    trie["append_cpu_us"] = bench_trie_speed(train, args.trie_tokens)
    round_ms = rounds["round_cpu_us_mean"] / 1000
    out = {
        "what": "suffix memory overhead (edgespec.decoding.suffix) beside a 0.5B decode step",
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "commit": commit(),
        "machine": {"cpu": platform.processor() or platform.machine(), "python": platform.python_version()},
        "stream": {"source": source, "tokens": len(ids), "documents": len(docs), "held_out": len(held_out)},
        "cap": args.cap,
        "append": append,
        "propose_at_cap": propose,
        "drafter_round": rounds,
        "memory_at_cap": memory,
        "store_at_cap": store,
        "trie_depth16": trie,
        "decode_step_ms": {k: round(v, 2) for k, v in step.items()},
        "decode_step_source": step_source,
        "overhead_pct_of_quiet_step": round(100 * round_ms / args.step_ms, 3),
        "overhead_pct_of_measured_min_step": round(100 * round_ms / step["min"], 3),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
