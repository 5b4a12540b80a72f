"""Replay the prompt-lookup drafting policy on recorded greedy outputs (from
``record_traces.py``: TUNING prompts only) against this machine's measured c(n).

Each round runs the real ``NgramDrafter`` and ``DraftPolicy`` on the committed tokens;
a draft is accepted while it equals the recorded output; the round costs c(n) target
steps (n = drafts + 1), and the policy is told it took c(n)·t1 seconds with a little
noise. One ``OnlineCost`` is shared by all prompts and passes, as in one engine's life;
the last pass is reported. Speedup = tokens / cost (plain decoding costs 1 a token).

    python -m benchmarks.replay_policy /tmp/traces.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from benchmarks.common import geomean
from edgespec.costmodel.costs import CPU_VERIFY_PRIOR, OnlineCost
from edgespec.decoding.drafters import NgramDrafter
from edgespec.decoding.policy import DraftPolicy

T1 = 0.04
SHADOW = True
BREAKS = True


def replay_one(trace, policy, c_true, rng, overhead=0.0, drafter=None):
    prompt, output = list(trace["prompt"]), list(trace["output"])
    pieces = trace["pieces"]
    is_break = (lambda t: any(b in pieces[str(t)] for b in ".!?;\n")) if BREAKS else None
    drafter = drafter or NgramDrafter(is_break=is_break)
    committed = list(prompt)
    drafter.begin(committed, None, None)
    policy.begin(None)
    produced, cost, drafted, accepted, rounds = 0, 0.0, 0, 0, 0
    while produced < len(output):
        budget = len(output) - produced
        l_max = policy.limit(budget - 1)
        prop = drafter.propose(committed, l_max) if l_max > 0 else None
        ids = list(prop.ids[:l_max]) if prop else []
        brk = tuple(prop.after_break[:l_max]) if prop else ()
        n = policy.choose(ids, prop.match_len if prop else 0, (), brk)
        drafts = ids[:n]
        acc = 0
        while acc < n and drafts[acc] == output[produced + acc]:
            acc += 1
        new = output[produced : produced + acc + 1]
        c = c_true[n + 1] if n + 1 in c_true else c_true[16] * (n + 1) / 16
        cost += c + overhead
        policy.observe(
            batch=n + 1,
            tested=n,
            accepted=acc,
            verify_seconds=c * T1 * float(rng.lognormal(0.0, 0.05)),
            drafted=len(ids),
            match_len=prop.match_len if prop else 0,
            next_ok=(ids[n] == new[-1]) if SHADOW and acc == n and len(ids) > n and len(new) == n + 1 else None,
            after_break=brk,
        )
        committed.extend(new)
        produced += len(new)
        drafted += n
        accepted += acc
        rounds += 1
    return produced / cost, accepted, drafted, rounds


def run(data, passes=2, seeds=(0, 1, 2), overhead=0.0, make_policy=None, names=None, verbose=True):
    c_true = {int(k): v for k, v in data["c"].items()}
    traces = [t for t in data["traces"] if not names or t["name"] in names]
    res = {t["name"]: [] for t in traces}
    for seed in seeds:
        rng = np.random.default_rng(100 + seed)
        cost = OnlineCost(CPU_VERIFY_PRIOR)
        pol = (make_policy or (lambda c: DraftPolicy("ngram", c)))(cost)
        pol._seed = seed
        for p in range(passes):
            for t in traces:
                r = replay_one(t, pol, c_true, rng, overhead)
                if p == passes - 1:
                    res[t["name"]].append(r)
    out = {}
    for t in traces:
        rs = res[t["name"]]
        sp = geomean(r[0] for r in rs)
        out[t["name"]] = (t["kind"], sp, rs[-1][1:])
        if verbose:
            print(f"{t['name']:20} {t['kind']:9} {sp:5.3f}x  acc/drafted/rounds {rs[-1][1:]}")
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces")
    ap.add_argument("--overhead", type=float, default=0.0)
    a = ap.parse_args()
    data = json.loads(Path(a.traces).read_text())
    out = run(data, overhead=a.overhead)
    g = [v[1] for v in out.values() if v[0] in ("edit", "qa", "summarize")]
    f = [v[1] for v in out.values() if v[0] not in ("edit", "qa", "summarize")]
    least = min(v[1] for v in out.values())
    print(f"grounded geomean {geomean(g):.3f}  free geomean {geomean(f):.3f}  min {least:.3f}")


if __name__ == "__main__":
    main()
