"""The stop-loss (edgespec.decoding.stoploss) and a wrong c(n) prior, on a simulated machine.

A simulated round costs the TRUE c(batch) plain steps; the policy starts from a prior
that may be wrong. The loop's speed is committed tokens per plain step spent (1.0:
plain decoding's), so no test here times anything real.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.costmodel.adaptive import VerifyCost
from edgespec.costmodel.costs import OnlineCost
from edgespec.costmodel.priors import VERIFY_PRIORS
from edgespec.decoding import stoploss
from edgespec.decoding.policy import DraftPolicy
from edgespec.decoding.stoploss import FIRST_PAUSE, MIN_DRAFTED, REFERENCE_EVERY, StopLoss

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


def test_a_losing_ledger_pauses_drafting_and_each_trip_doubles_the_pause():
    s = StopLoss()
    assert s.allows()
    s.record(seconds=2.6 * T1, committed=1, drafted=True)  # not counted: no plain step to count in
    assert s.spent == 0
    s.record(seconds=T1, committed=1, drafted=False, plain_step=T1)
    for _ in range(MIN_DRAFTED):  # each drafting round: 2.6 steps for 1 token
        assert s.allows()
        s.record(seconds=2.6 * T1, committed=1, drafted=True)
    assert s.trips == 1 and s.paused == FIRST_PAUSE
    paused = [s.allows() for _ in range(FIRST_PAUSE)]
    assert not any(paused) and s.allows()
    for _ in range(MIN_DRAFTED):
        s.record(seconds=2.6 * T1, committed=1, drafted=True)
    assert s.trips == 2 and s.paused == 2 * FIRST_PAUSE
    s.begin()
    assert (s.trips, s.paused, s.rate) == (0, 0, 1.0) and s.step_seconds == T1  # the machine's step stays
    s = StopLoss()
    s.record(seconds=T1, committed=1, drafted=False, plain_step=T1)
    for _ in range(REFERENCE_EVERY - 1):
        s.record(seconds=2 * T1, committed=3, drafted=True)
    assert s.allows()
    s.record(seconds=2 * T1, committed=3, drafted=True)
    assert not s.allows()  # 64 rounds without a plain step: the next one is plain


def test_a_paying_or_noisy_ledger_never_trips():
    rng = np.random.default_rng(0)
    s = StopLoss()
    for _ in range(MIN_DRAFTED * 2):  # no plain step known yet: not counted
        s.record(seconds=5 * T1, committed=1, drafted=True)
    assert s.trips == 0 and s.spent == 0
    for _ in range(500):  # plain rounds on a noisy machine lose nothing to drafting
        t = T1 * rng.uniform(0.85, 1.15)
        s.record(seconds=t, committed=1, drafted=False, plain_step=t)
    for _ in range(500):  # drafting that pays 1.3x, with a 15% spread on every round
        s.record(seconds=2.0 * T1 * rng.uniform(0.85, 1.15), committed=3, drafted=True)
    assert s.trips == 0


def test_drafts_that_lose_stop_although_the_policy_expects_them_to_pay(monkeypatch):
    """The policy weighs verify costs, and they pay; but every round the drafter's look
    costs 0.6 of a step (a slow lookup over a large memory), which prompt lookup's policy
    does not weigh. The ledger sees the loss and pauses drafting."""
    accept = lambda r, j: j < 1  # noqa: E731 - one draft in each round is right
    pol = DraftPolicy("ngram", OnlineCost(Q4_0), seed=0)
    rounds = run(pol, Q4_0, accept, 400, draft_s=0.6 * T1)
    assert pol.stats.stop_trips >= 1 and pol.stats.stopped_rounds >= FIRST_PAUSE
    # without the stop-loss the same rounds run at ~0.86x plain; with it, near plain
    monkeypatch.setattr(stoploss, "MIN_DRAFTED", 10**9)
    unguarded = run(DraftPolicy("ngram", OnlineCost(Q4_0), seed=0), Q4_0, accept, 400, draft_s=0.6 * T1)
    assert speed(unguarded) < 0.9 and speed(rounds, skip=100) >= 0.95


@pytest.mark.parametrize("accept_rate", [0.5, 0.8])
def test_a_wrong_prior_costs_little(accept_rate):
    """Started from a deliberately wrong curve — a GPU's on this CPU, and the Q4_K_M curve
    on a Q4_0 file — the learned cost brings the speed near the right prior's after 64
    tokens, and bounds the loss before that. Issue 37's goal is within 5% after 64 tokens
    and never below 0.9x plain before: NOT MET. On this simulation a GPU prior on a CPU
    reads 0.77-0.93x over the first 64 tokens, and the Q4_K_M prior on a Q4_0 file 1.49x
    after them against the right prior's 1.61x (8% short: it rarely tries the lengths its
    prior says are dear). These bounds guard what holds; see the closing note of issue 37."""
    rng = np.random.default_rng(7)
    right_answers = rng.random((4000, 16)) < accept_rate
    accept = lambda r, j: bool(right_answers[r % 4000, j])  # noqa: E731 - the same text for both runs
    for true_c, wrong in ((Q4_K_M, GPU_ESTIMATE), (Q4_0, Q4_K_M)):
        right = run(DraftPolicy("ngram", OnlineCost(true_c), seed=1), true_c, accept, 600)
        bad = run(DraftPolicy("ngram", OnlineCost(wrong), seed=1), true_c, accept, 600)
        assert speed(bad, first=64) >= 0.75
        assert speed(bad, skip=64) >= 0.9 * speed(right, skip=64)
