"""What the rounds do under a JSON Schema, counted without timing noise (issue 43, part 3).

Two steps. ``--record OUT`` writes each task's constrained greedy answer with ``draft=None``
(prompt ids and answer ids). ``--replay IN`` then runs the real loop of the defaults
(``Engine(draft="ngram")``, memory off: the grammar's forced and likely tokens, prompt lookup
cut to what the schema allows, the learned policy, the stop-loss) and constrained plain on a
stand-in target: a verify row's greedy token is the recorded answer's token at that place, and
a decode of n tokens sleeps c(n) times a step (``--cost``: the c(1..16) the host is said to
have; default the AMD host's Q4_K_M row). So every round is what the real run would do on
the recorded answer, and its cost is counted in target steps, which a busy machine does not
change (``--whole-match``: the defaults before issue 43's fix, ``verify.beyond_forced`` off).
Per task: rounds, tokens per step, the grammar's drafts kept, prompt lookup's kept
(split by whether the lookup followed the grammar's tokens in the same round), verify sizes.

The tasks are the DEV tasks of ``prompts/structured_tasks.py`` and the extraction prompts of
``prompts/structured.py`` (``old-`` before their ids): tuning and diagnosis material. Never
replay the held-out tasks to choose anything.

    python -m benchmarks.structured_rounds --record /tmp/answers.json --threads 1
    python -m benchmarks.structured_rounds --replay /tmp/answers.json
    python -m benchmarks.structured_rounds --replay /tmp/answers.json --t1 0.065 --cost "$XEON"

where XEON=1,1.38,1.74,1.48,1.95,2.2,2.6,2.5,2.85,3,3.2,3,3.3,3.5,3.7,3.85 (the Xeon host's first-use
figures, docs/results.md, with the sizes between them filled in).
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter

import numpy as np

from benchmarks.prompts.structured import PROMPTS
from benchmarks.prompts.structured_tasks import DEV, StructuredTask
from edgespec import Engine
from edgespec.catalog import resolve_model
from edgespec.costmodel.costs import CPU_VERIFY_PRIOR
from edgespec.costmodel.drafting import DraftingOptions
from edgespec.decoding import speculative

TASKS = {t.id: t for t in DEV} | {
    f"old-{p.id}": StructuredTask(f"old-{p.id}", p.kind, p.instruction, p.document, p.schema)
    for p in PROMPTS
    if p.kind == "extraction"
}


def record(path: str, ids: list[str], threads: int, max_tokens: int) -> None:
    eng = Engine(resolve_model("qwen2.5-coder-1.5b"), n_threads=threads, drafting=DraftingOptions(memory=False))
    out = {}
    for tid in ids:
        t = TASKS[tid]
        eng.reset()
        prep = eng.prepare(t.prompt, max_tokens=max_tokens, temperature=0.0, response_format=t.response_format)
        r = eng.generate(t.prompt, max_tokens=max_tokens, temperature=0.0, response_format=t.response_format)
        out[tid] = {"prompt": list(prep.ids), "output": list(r.token_ids), "text": r.text, "finish": r.finish_reason}
        print(tid, len(r.token_ids), r.finish_reason, flush=True)
        with open(path, "w") as f:
            json.dump(out, f)
    eng.close()


class Replay:
    """The stand-in target and the per-round log (the loop's methods wrapped, not changed)."""

    def __init__(self, cost: list[float], t1: float) -> None:
        self.cost, self.t1 = cost, t1
        self.answer: list[int] = []
        self.gen = 0
        self.log: list[dict] = []
        self.cur: dict = {}

    def c(self, n: int) -> float:
        return self.cost[n - 1] if n <= len(self.cost) else self.cost[-1] * n / len(self.cost)

    def install(self, eng: Engine) -> None:
        ctx, n_vocab = eng.ctx, eng.target_model.n_vocab
        eog = eng.target_model.eog_ids[0]
        rp = self

        def decode(tokens, rows=None):
            rows = list(rows) if rows is not None else [len(tokens) - 1]
            n = len(tokens) - rows[0]  # the verify batch (x_last and the drafts), after any prefill
            t0 = time.perf_counter()
            time.sleep(rp.c(n) * rp.t1)
            logits = np.zeros((len(rows), n_vocab), dtype=np.float32)
            for j in range(len(rows)):
                g = rp.gen + j
                logits[j, rp.answer[g] if g < len(rp.answer) else eog] = 30.0
            ctx.tokens.extend(int(t) for t in tokens)
            ctx.t_decode += time.perf_counter() - t0
            rp.cur["batch"] = n
            return logits

        def rollback(n_keep):
            del ctx.tokens[n_keep:]

        ctx.decode, ctx.rollback = decode, rollback
        ctx.reuse_chunks = lambda prompt, min_chunk=0: 0
        ctx.clear = lambda *a, **k: ctx.tokens.clear()
        loop = speculative.SpeculativeLoop
        orig_round, orig_propose = loop.round, loop.propose

        def round_(self, budget):
            rp.gen, rp.cur = len(self.committed) - self.n_prompt, {}
            res = orig_round(self, budget)
            rp.cur.update(committed=len(res.tokens), acc=res.info.accepted, forced=res.info.forced)
            rp.log.append(rp.cur)
            return res

        def propose(self, budget):
            p, s = orig_propose(self, budget)
            rp.cur.update(prop_forced=p.forced, match_len=p.match_len)
            return p, s

        loop.round, loop.propose = round_, propose

    def summary(self) -> dict:
        log = self.log[1:]  # the first round carries the prompt
        tokens = sum(r["committed"] for r in log)
        steps = sum(self.c(r["batch"]) for r in log)
        kinds: dict = {"alone": [0, 0], "after grammar": [0, 0]}
        for r in log:
            look = r["batch"] - 1 - r["forced"]
            if look > 0:
                k = kinds["after grammar" if r["forced"] else "alone"]
                k[0] += max(0, r["acc"] - r["forced"]) if r["acc"] >= r["forced"] else 0
                k[1] += look
        g = [sum(min(r["acc"], r["forced"]) for r in log), sum(r["forced"] for r in log)]
        return {
            "rounds": len(log),
            "tokens": tokens,
            "tokens_per_step": round(tokens / steps, 3),
            "grammar_kept": g,
            "lookup_kept": kinds,
            "verify_sizes": dict(sorted(Counter(r["batch"] for r in log).items())),
        }


def replay(path: str, ids: list[str] | None, cost: list[float], t1: float, passes: int, whole: bool) -> None:
    answers = json.load(open(path))
    if whole:  # as before issue 43's fix: lookup after the grammar's tokens judged by its whole match
        speculative.beyond_forced = lambda p, f: p
    rp = Replay(cost, t1)
    eng = Engine(resolve_model("qwen2.5-coder-1.5b"), draft="ngram", drafting=DraftingOptions(memory=False))
    rp.install(eng)
    for p in range(passes):
        for tid in ids or list(answers):
            t, rp.answer = TASKS[tid], answers[tid]["output"]
            eng.set_drafter("ngram")
            eng.reset()
            rp.log = []
            r = eng.generate(
                t.prompt, max_tokens=len(rp.answer) + 8, temperature=0.0, response_format=t.response_format
            )
            print(
                json.dumps({"pass": p, "task": tid, "same": list(r.token_ids) == rp.answer, **rp.summary()}), flush=True
            )
    eng.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--record", metavar="OUT")
    ap.add_argument("--replay", metavar="IN")
    ap.add_argument("--tasks", default=None, help=f"comma-separated, of: {', '.join(TASKS)}")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--max-tokens", type=int, default=700)
    ap.add_argument("--cost", default=None, help="c(1..16), comma-separated (default: the AMD host's Q4_K_M row)")
    ap.add_argument("--t1", type=float, default=0.03, help="the stand-in's plain step in seconds")
    ap.add_argument("--passes", type=int, default=1)
    ap.add_argument("--whole-match", action="store_true", help="the defaults before issue 43's fix")
    args = ap.parse_args()
    ids = args.tasks.split(",") if args.tasks else None
    if args.record:
        record(args.record, ids or list(TASKS), args.threads, args.max_tokens)
    if args.replay:
        cost = [float(x) for x in args.cost.split(",")] if args.cost else [CPU_VERIFY_PRIOR(n) for n in range(1, 17)]
        replay(args.replay, ids, cost, args.t1, args.passes, args.whole_match)


if __name__ == "__main__":
    main()
