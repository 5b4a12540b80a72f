"""A wrong c(n) prior and the stop-loss on a simulated machine, over many texts.

A simulated round costs the TRUE c(batch) plain steps of this CPU's table
(``costmodel.priors``); the drafting policy starts from a prior that may be wrong: a
GPU's memory-bound estimate (``GPU_ESTIMATE``, the old Apple profile's curve), the CUDA
table's row, or the Q4_K_M curve on a Q4_0 file. The drafter always proposes 15 tokens
with a 4-token match, each right with probability ``a``, independently. Speed is
committed tokens per plain step spent (1.0: plain decoding's), so nothing is timed and
the figures repeat exactly. Reported per case: the speed over the first 64 tokens, and
after them against the right prior's on the same text; the means over ``--texts``
random texts. Issue 37's goal: >= 0.9x plain before 64 tokens, within 5% after.
``benchmarks/wrong_prior.py`` measures the same on the real model; the tests
(tests/test_stoploss.py) run one text of this simulation.

    python -m benchmarks.wrong_prior_sim --texts 6
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from edgespec.costmodel.adaptive import VerifyCost
from edgespec.costmodel.costs import OnlineCost
from edgespec.costmodel.priors import VERIFY_PRIORS, verify_prior
from edgespec.decoding.policy import DraftPolicy

T1 = 0.03  # a plain step, seconds
Q4_K_M = VERIFY_PRIORS["cpu"]["Q4_K_M"].cost
Q4_0 = VERIFY_PRIORS["cpu"]["Q4_0"].cost
# what a GPU's memory-bound estimate says (the old m2max curve): verifying is nearly free
GPU_ESTIMATE = VerifyCost((1, 2, 4, 8, 16), (1.0, 1.04, 1.1, 1.22, 1.5))


def run(
    policy: DraftPolicy, true_c: VerifyCost, accept, tokens: int, draft_s: float = 0.0005
) -> list[tuple[int, float]]:
    """Simulate rounds until ``tokens`` are committed: (tokens committed, steps spent) per
    round. ``accept(r, j)``: whether the j-th draft of round r is right."""
    out: list[tuple[int, float]] = []
    done = r = 0
    while done < tokens:
        l_max = policy.limit(15)
        ids = list(range(15)) if l_max > 0 else []
        n = policy.choose(ids, match_len=4, after_break=[False] * len(ids)) if ids else 0
        acc = 0
        while acc < n and accept(r, acc):
            acc += 1
        seconds = true_c(n + 1) * T1
        drafted = draft_s if l_max > 0 else 0.0
        next_ok = accept(r, acc) if n == 0 and ids else None
        policy.observe(
            batch=n + 1,
            tested=n,
            accepted=acc,
            verify_seconds=seconds,
            draft_seconds=drafted,
            match_len=4,
            next_ok=next_ok,
            after_break=[False] * n,
        )
        out.append((acc + 1, (seconds + drafted) / T1))
        done += acc + 1
        r += 1
    return out


def speed(rounds: list[tuple[int, float]], first: int | None = None, skip: int = 0) -> float:
    """Committed tokens per plain step over the tokens [skip, first)."""
    tok = steps = 0.0
    seen = 0
    for n, s in rounds:
        if seen >= skip and (first is None or seen < first):
            tok += n
            steps += s
        seen += n
    return tok / steps


def cases() -> list[tuple[str, VerifyCost, VerifyCost]]:
    """(name, the machine's true c(n), the prior the policy starts from)."""
    cuda = verify_prior("cuda", "Q4_K_M")
    return [
        ("gpu-estimate on Q4_K_M", Q4_K_M, GPU_ESTIMATE),
        ("cuda row on Q4_K_M", Q4_K_M, cuda),
        ("Q4_K_M curve on Q4_0", Q4_0, Q4_K_M),
        ("gpu-estimate on Q4_0", Q4_0, GPU_ESTIMATE),
    ]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--texts", type=int, default=6, help="random texts per case")
    ap.add_argument("--tokens", type=int, default=400)
    ap.add_argument("--rates", default="0.3,0.5,0.8", help="acceptance rates of a draft token")
    args = ap.parse_args(argv)
    worst_first = worst_after = float("inf")
    print(f"{'a':>4} {'case':24} {'first 64: right':>16} {'wrong':>6} {'after, wrong/right':>19}")
    for a in (float(x) for x in args.rates.split(",")):
        for name, true_c, wrong in cases():
            first, after, right_first = [], [], []
            for seed in range(args.texts):
                answers = np.random.default_rng(100 + seed).random((4000, 16)) < a
                accept = lambda r, j, ans=answers: bool(ans[r % 4000, j])  # noqa: E731
                right = run(DraftPolicy("ngram", OnlineCost(true_c), seed=seed), true_c, accept, args.tokens)
                bad = run(DraftPolicy("ngram", OnlineCost(wrong), seed=seed), true_c, accept, args.tokens)
                right_first.append(speed(right, first=64))
                first.append(speed(bad, first=64))
                after.append(speed(bad, skip=64) / speed(right, skip=64))
            worst_first, worst_after = min(worst_first, float(np.mean(first))), min(worst_after, float(np.mean(after)))
            print(f"{a:4.1f} {name:24} {np.mean(right_first):16.3f} {np.mean(first):6.3f} {np.mean(after):19.3f}")
    print(
        f"worst mean over the first 64 tokens {worst_first:.3f}x plain; "
        f"after them {worst_after:.3f} of the right prior's"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
