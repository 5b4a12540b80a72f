"""The stop-loss (edgespec.decoding.stoploss) and a wrong c(n) prior, on a simulated machine.

A simulated round costs the TRUE c(batch) plain steps; the policy starts from a prior
that may be wrong. The loop's speed is committed tokens per plain step spent (1.0:
plain decoding's), so no test here times anything real.
"""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.wrong_prior_sim import GPU_ESTIMATE, Q4_0, Q4_K_M, T1, run, speed
from edgespec.costmodel.costs import OnlineCost
from edgespec.decoding import stoploss
from edgespec.decoding.policy import DraftPolicy
from edgespec.decoding.stoploss import FIRST_PAUSE, MIN_DRAFTED, REFERENCE_EVERY, StopLoss


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
    and never below 0.9x plain before. Three things make it so: the second timed round of
    an engine is plain (the stop-loss's reference, and the cost model's first plain step),
    the cost model's first blocks close after 4 and 8 rounds instead of 12, and probes of
    sizes never measured may take up to 3% of the cost over the first 512 rounds (1%
    after). On this text a GPU's prior reads 0.87x plain over the first 64 tokens (0.77x
    before those changes) and the Q4_K_M prior on Q4_0 98% of the right prior's speed
    after them (92% before); over 6 texts and acceptance 0.3-0.8, the worst means are
    0.90x and 96% (`python -m benchmarks.wrong_prior_sim`)."""
    rng = np.random.default_rng(7)
    right_answers = rng.random((4000, 16)) < accept_rate
    accept = lambda r, j: bool(right_answers[r % 4000, j])  # noqa: E731 - the same text for both runs
    for true_c, wrong in ((Q4_K_M, GPU_ESTIMATE), (Q4_0, Q4_K_M)):
        right = run(DraftPolicy("ngram", OnlineCost(true_c), seed=1), true_c, accept, 600)
        bad = run(DraftPolicy("ngram", OnlineCost(wrong), seed=1), true_c, accept, 600)
        assert speed(bad, first=64) >= 0.85
        assert speed(bad, skip=64) >= 0.95 * speed(right, skip=64)


def test_the_first_timed_round_is_followed_by_a_plain_reference():
    """An engine's ledger has no plain step until it sees one: after its first timed
    round, the next is plain (no drafter work), so that neither the stop-loss nor the
    cost model has to count in the prior's scale; a caller that times nothing (a batch's
    sequences, timed by the batch) is never held."""
    s = StopLoss()
    assert s.allows()  # nothing timed yet: draft
    s.record(seconds=5 * T1, committed=2, drafted=True)
    assert not s.allows()  # timed, and no plain step known: the next round is plain
    s.record(seconds=T1, committed=1, drafted=False, plain_step=T1)
    assert s.allows() and s.step_seconds == T1
    s.begin()  # a new request on the same engine: the machine's plain step is kept
    assert s.allows()
    untimed = StopLoss()
    for _ in range(3 * REFERENCE_EVERY):
        assert untimed.allows()
        untimed.record(seconds=0.0, committed=3, drafted=True)


def test_a_prior_far_from_the_machine_is_corrected_within_a_few_rounds():
    """The cost model's first block closes after 4 rounds: a GPU's curve on this CPU is
    corrected at the long sizes after one plain step and three long verifies."""
    cost = OnlineCost(GPU_ESTIMATE)
    for n in (16, 1, 16, 16):
        cost.observe(n, Q4_K_M(n) * T1)
    assert cost.measured(16) == pytest.approx(Q4_K_M(16), rel=0.01)
    assert cost(16) > 2.5 * GPU_ESTIMATE(16) and cost(8) > 2 * GPU_ESTIMATE(8)
