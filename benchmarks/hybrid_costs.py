"""What speculation costs on a hybrid target (issue 44), on a model of Qwen3.5-0.8B's real
shape with random weights (tests/tiny_hybrid.py ``make_shape_true_qwen35``: 24 layers, 18
Gated DeltaNet and 6 attention, Q8_0), on this CPU:

* c(n) for n = 1..8 (one decode of n tokens, logits at every row, relative to one token)
  on a context without recurrent-state snapshots and on one keeping 8 (what a verify of 8
  drafts needs), timed in alternating sweeps on the same model;
* the memory the snapshots take: one plane of the recurrent state (the checkpoint size)
  times 1 + n_rs_seq, and the process's resident growth when the context is opened;
* what a chat turn's prompt reuse costs: the next turn extending the cache (decode only
  the new tokens), the cache cut back within the snapshots (a rolled-back tail), a
  checkpoint restored and the rest decoded, and the whole prompt decoded again.

Random weights give no text worth reading; the costs are the real shape's. Usage:
``python -m benchmarks.hybrid_costs --out benchmarks/results/hybrid-costs-DATE.json``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.common import ROOT, commit, machine_info
from edgespec.llama import Context, Model
from edgespec.measuring.decode_times import time_decodes

sys.path.insert(0, str(ROOT / "tests"))
from tiny_hybrid import make_shape_true_qwen35  # noqa: E402  (the test fixtures' writer)

SIZES = tuple(range(1, 9))


def ids(model: Model, values) -> list[int]:
    """Token ids of ``values`` within the model's vocabulary (past its first 5 ids)."""
    return [5 + v % (model.n_vocab - 5) for v in values]


def c_of_n(model: Model, threads: int, passes: int) -> dict:
    """c(n) with and without snapshots, the two contexts timed in alternating passes."""
    prefix = ids(model, (1000 + 7 * i for i in range(256)))
    ctxs = {rs: Context(model, n_ctx=1024, n_batch=64, n_threads=threads, rollback=rs) for rs in (0, max(SIZES))}
    ms: dict[int, dict[int, list[float]]] = {rs: {n: [] for n in SIZES} for rs in ctxs}
    for _ in range(passes):
        for rs, ctx in ctxs.items():
            t = time_decodes(ctx, prefix, repeats=2, sizes=SIZES)
            for n, v in t.target_ms.items():
                ms[rs][n].append(v)
    out = {}
    for rs, ctx in ctxs.items():
        med = {n: statistics.median(v) for n, v in ms[rs].items()}
        out[f"n_rs_seq={ctx.n_rs_seq}"] = {
            "step_ms": round(med[1], 2),
            "c": {n: round(med[n] / med[1], 3) for n in SIZES},
            "ms": {n: round(med[n], 2) for n in SIZES},
        }
        ctx.close()
    return out


def snapshot_memory(model: Model, threads: int) -> dict:
    """One recurrent-state plane (the checkpoint) and the resident growth per context."""
    proc = psutil.Process()
    out = {}
    for rs in (0, 8, 15):
        before = proc.memory_info().rss
        ctx = Context(model, n_ctx=1024, n_batch=64, n_threads=threads, rollback=rs)
        ctx.decode(ids(model, range(1000, 1016)), rows=())
        grown = proc.memory_info().rss - before
        ctx.checkpoint()
        plane = ctx.checkpoints.nbytes()
        out[f"n_rs_seq={ctx.n_rs_seq}"] = {
            "state_plane_mib": round(plane / 2**20, 2),
            "recurrent_state_mib": round(plane * (1 + ctx.n_rs_seq) / 2**20, 2),
            "rss_growth_mib": round(grown / 2**20, 1),
        }
        ctx.close()
    return out


def turn_reuse(model: Model, threads: int, repeats: int) -> dict:
    """A chat's next turn: ms to have the cache hold the new prompt, by the way it is
    reused (the previous turn: a 400-token prompt and a 100-token reply)."""
    prompt = ids(model, (2000 + (i * 13) % 5000 for i in range(400)))
    reply = ids(model, (3000 + (i * 7) % 4000 for i in range(100)))
    edit_at = len(prompt) + len(reply)  # the user edits the message after the reply
    new_turn = [*prompt, *reply, *ids(model, range(4000, 4060))]
    edited = [*prompt, *reply, *ids(model, range(4070, 4130))]
    ctx = Context(model, n_ctx=2048, n_batch=512, n_threads=threads, rollback=8)
    ways: dict[str, list[float]] = {"prefix": [], "rollback": [], "checkpoint": [], "none": []}
    decoded: dict[str, int] = {}

    def previous_turn(with_checkpoint: bool) -> None:
        ctx.clear()
        ctx.decode(prompt, rows=())
        for t in reply:  # decoded as generation does (one token a step)
            ctx.decode([t], rows=())
        if with_checkpoint:
            ctx.checkpoint()
        ctx.decode(new_turn[edit_at : edit_at + 4], rows=())  # the last verify, 4 tokens

    for _ in range(repeats):
        for way in ways:
            ctx.checkpoints.drop(0)
            previous_turn(with_checkpoint=way == "checkpoint")
            target = {"prefix": new_turn, "rollback": edited, "checkpoint": edited, "none": edited}[way]
            if way == "rollback":  # an edit within the last decode: 3 of its 4 tokens undone
                target = [*new_turn[: edit_at + 1], *edited[edit_at + 1 :]]
            t0 = time.perf_counter()
            keep = ctx.reuse_chunks(target[:-1], 0)
            ctx.decode(target[keep:-1], rows=())
            ways[way].append((time.perf_counter() - t0) * 1e3)
            decoded[way] = len(target) - 1 - keep
            assert ctx.last_reuse == way, (way, ctx.last_reuse)
    ctx.close()
    return {way: {"ms": round(statistics.median(v), 1), "tokens_decoded": decoded[way]} for way, v in ways.items()} | {
        "prompt_tokens": len(new_turn),
        "checkpoint_at": edit_at,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path, help="the shape-true GGUF (written to a temp folder if not given)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--passes", type=int, default=3)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    path = args.model
    if path is None or not path.exists():
        path = path or Path(tempfile.gettempdir()) / "qwen35-0.8b-shape-q8_0.gguf"
        if not path.exists():
            make_shape_true_qwen35(path, size="0.8b", dtype="q8_0")
    model = Model(path, exact=False)
    result = {
        "machine": machine_info(),
        "commit": commit(),
        "model": f"{path.name}: qwen35 at Qwen3.5-0.8B's shape, random weights, Q8_0",
        "threads": args.threads,
        "c_of_n": c_of_n(model, args.threads, args.passes),
        "snapshot_memory": snapshot_memory(model, args.threads),
        "turn_reuse": turn_reuse(model, args.threads, args.passes),
    }
    model.close()
    print(json.dumps(result, indent=1))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
