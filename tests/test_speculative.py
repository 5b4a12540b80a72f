"""The acceptance rules on their own (``decoding.verify.accept``): greedy accept,
reject and bonus; a fixed proposal under sampling; q-based acceptance; an end of
generation among the drafts; the cut draft's residual; and that the committed first
token follows p. No model, no KV cache, no policy: rows are made-up logits.

Also the proposal helpers the round builds its proposals with (``cut_proposal``,
``with_forced``: ``dataclasses.replace`` on the drafter's own record).
"""

from __future__ import annotations

import numpy as np

from edgespec.decoding import sampling
from edgespec.decoding.drafters import Proposal
from edgespec.decoding.params import SamplingParams
from edgespec.decoding.verify import accept, cut_proposal, with_forced
from test_exact_sampling import chi_square_rejects

GREEDY = SamplingParams(temperature=0.0)
SAMPLED = SamplingParams(temperature=1.0)
NEVER_EOG = lambda t: False  # noqa: E731


def peaked(*top: int, n_vocab: int = 8) -> np.ndarray:
    """Logit rows whose argmax is each of ``top`` in turn."""
    rows = np.zeros((len(top), n_vocab), dtype=np.float32)
    for i, t in enumerate(top):
        rows[i, t] = 5.0
    return rows


class Reader:
    """A row reader over fixed rows that records which rows it was asked for, and with
    what this round had committed before each."""

    def __init__(self, rows: np.ndarray):
        self.rows, self.calls = rows, []

    def __call__(self, i, out):
        self.calls.append((i, list(out)))
        return self.rows[i]


# -- greedy ---------------------------------------------------------------------------


def test_greedy_keeps_every_matching_draft_and_adds_the_bonus_token():
    row = Reader(peaked(2, 5, 1, 7))
    assert accept([2, 5, 1], row, None, GREEDY, np.random.default_rng(0), NEVER_EOG) == (
        [2, 5, 1, 7],
        [True, True, True, False],
        3,
    )
    # each row is read once, in order, knowing this round's tokens before it (penalties)
    assert row.calls == [(0, []), (1, [2]), (2, [2, 5]), (3, [2, 5, 1])]


def test_greedy_replaces_the_first_mismatch_and_reads_no_row_after_it():
    row = Reader(peaked(2, 4, 1, 7))
    assert accept([2, 5, 1], row, None, GREEDY, np.random.default_rng(0), NEVER_EOG) == ([2, 4], [True, False], 1)
    assert [i for i, _ in row.calls] == [0, 1]


def test_no_drafts_is_one_plain_step():
    assert accept([], Reader(peaked(6)), None, GREEDY, np.random.default_rng(0), NEVER_EOG) == ([6], [False], 0)


def test_an_accepted_end_of_generation_draft_ends_the_round():
    row = Reader(peaked(3, 6, 4, 1))
    out = accept([3, 6, 4], row, None, GREEDY, np.random.default_rng(0), lambda t: t == 6)
    assert out == ([3, 6], [True, True], 2)  # no bonus, and the draft after it is no candidate
    assert [i for i, _ in row.calls] == [0, 1]


def test_a_rejected_end_of_generation_draft_is_an_ordinary_rejection():
    out = accept([3, 6], Reader(peaked(3, 2, 4)), None, GREEDY, np.random.default_rng(0), lambda t: t == 6)
    assert out == ([3, 2], [True, False], 1)


# -- sampling -------------------------------------------------------------------------


def test_a_fixed_proposal_is_kept_exactly_when_the_targets_own_sample_matches():
    logits = np.log(np.array([[0.2, 0.5, 0.3], [0.6, 0.1, 0.3], [0.3, 0.3, 0.4]]))
    drafts = [1, 2]
    for seed in range(20):
        got = accept(drafts, Reader(logits), None, SAMPLED, np.random.default_rng(seed), NEVER_EOG)
        rng = np.random.default_rng(seed)  # the same draws, by hand
        want, flags = [], []
        for i, d in enumerate([*drafts, None]):
            x = sampling.sample(sampling.probs_from_logits(logits[i], SAMPLED), rng)
            if d is not None and x == d:
                want.append(d), flags.append(True)
                continue
            want.append(x), flags.append(False)
            break
        assert got == (want, flags, sum(flags))


def test_a_fixed_proposal_the_row_forces_is_kept_for_sure():
    # only the draft is allowed (a grammar's forced token): kept whatever the rng says
    row = np.full((2, 4), -np.inf, dtype=np.float32)
    row[0, 3] = 0.0
    row[1, 1] = 0.0
    for seed in range(5):
        assert accept([3], Reader(row), None, SAMPLED, np.random.default_rng(seed), NEVER_EOG) == (
            [3, 1],
            [True, False],
            1,
        )


def test_q_acceptance_follows_min_1_p_over_q_with_the_seeded_rng():
    p = np.array([0.1, 0.6, 0.3])
    q = np.array([[0.5, 0.2, 0.3]])
    for d in range(3):
        for seed in range(10):
            got = accept([d], Reader(np.log(np.stack([p, p]))), q, SAMPLED, np.random.default_rng(seed), NEVER_EOG)
            rng = np.random.default_rng(seed)
            if rng.random() < min(1.0, p[d] / q[0, d]):
                want = ([d, sampling.sample(p, rng)], [True, False], 1)
            else:
                want = ([sampling.sample(sampling.residual(p, q[0]), rng)], [False], 0)
            assert got == want, (d, seed)


def test_q_acceptance_keeps_a_draft_p_likes_more_and_never_resamples_one_p_rules_out():
    p = np.array([0.0, 0.7, 0.3])
    q = np.array([[0.5, 0.2, 0.3]])
    with np.errstate(divide="ignore"):
        rows = np.log(np.stack([p, p]))
    for seed in range(20):
        rng = np.random.default_rng(seed)
        kept = accept([1], Reader(rows), q, SAMPLED, rng, NEVER_EOG)
        assert kept[1:] == ([True, False], 1)  # p(1) >= q(1): always kept
        out, flags, n = accept([0], Reader(rows), q, SAMPLED, rng, NEVER_EOG)
        assert (flags, n) == ([False], 0) and out[0] != 0  # p(0) = 0: rejected, resampled elsewhere


def test_a_fixed_row_among_q_rows_is_verified_by_matching():
    # forced tokens lead a model drafter's proposal: their rows of q are None
    rows = np.full((3, 3), -np.inf, dtype=np.float32)
    rows[0, 2] = rows[1, 0] = rows[2, 1] = 0.0
    q = [None, np.array([0.9, 0.05, 0.05])]
    assert accept([2, 0], Reader(rows), q, SAMPLED, np.random.default_rng(0), NEVER_EOG) == (
        [2, 0, 1],
        [True, True, False],
        2,
    )


def test_the_cut_drafts_token_comes_from_the_residual():
    # the draft sampled id 3, which the target lacks: cut before verification, so no
    # drafts remain and the token is drawn from max(0, p - q), here all on id 2
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([[0.6, 0.3, 0.1, 0.0]])
    for seed in range(10):
        assert accept([], Reader(np.log(p)[None, :]), q, SAMPLED, np.random.default_rng(seed), NEVER_EOG, cut=0) == (
            [2],
            [False],
            0,
        )


def test_a_cut_after_kept_drafts_uses_its_own_row_of_q():
    p = np.array([0.5, 0.3, 0.2])
    rows = np.log(np.stack([np.array([0.0, 1.0, 0.0]) + 1e-12, p]))
    q = np.array([[0.0, 1.0, 0.0, 0.0], [0.6, 0.3, 0.1, 0.0]])
    for seed in range(10):
        assert accept([1], Reader(rows), q, SAMPLED, np.random.default_rng(seed), NEVER_EOG, cut=1) == (
            [1, 2],
            [True, False],
            1,
        )


def test_greedy_ignores_q_and_the_cut():
    q = np.array([[0.6, 0.3, 0.1, 0.0]])
    assert accept([], Reader(peaked(1, n_vocab=3)), q, GREEDY, np.random.default_rng(0), NEVER_EOG, cut=0) == (
        [1],
        [False],
        0,
    )


# -- the committed token follows p ----------------------------------------------------

P = np.array([0.5, 0.3, 0.15, 0.05])  # the target, over 4 ids
Q = np.array([0.1, 0.2, 0.3, 0.1, 0.3])  # the draft's, with a 5th id the target lacks


def first_tokens(n: int, seed: int, *, cut_rule: bool = True) -> np.ndarray:
    """Counts of the first committed token over ``n`` rounds drafting one token from Q
    (cut before verification when the target lacks it, as ``SpeculativeLoop.drafts`` does)."""
    rng = np.random.default_rng(seed)
    rows = np.log(np.stack([P, P]))
    counts = np.zeros(len(P))
    for _ in range(n):
        d = sampling.sample(Q, rng)
        drafts, cut = ([d], None) if d < len(P) else ([], 0)
        out, _, _ = accept(drafts, Reader(rows), Q[None, :], SAMPLED, rng, NEVER_EOG, cut=cut if cut_rule else None)
        counts[out[0]] += 1
    return counts


def test_the_first_committed_token_follows_p():
    rejected, stat, crit = chi_square_rejects(first_tokens(6000, 1), P)
    assert not rejected, f"chi2 {stat:.1f} > {crit:.1f}"


def test_the_check_tells_a_broken_cut_rule_apart():
    # sampling the cut draft's token from p instead of the residual skews it (the test
    # above can fail)
    rejected, stat, crit = chi_square_rejects(first_tokens(6000, 1, cut_rule=False), P)
    assert rejected, f"chi2 {stat:.1f} <= {crit:.1f}"


# -- proposals ------------------------------------------------------------------------


def test_with_forced_leads_with_the_grammars_tokens_as_a_fixed_proposal():
    q = np.array([[0.2, 0.8]])
    p = with_forced(Proposal([5], q, match_len=0, confidence=(0.8,), after_break=(True,)), [1, 2])
    assert p.ids == [1, 2, 5] and p.forced == 2
    assert p.q[0] is None and p.q[1] is None and np.array_equal(p.q[2], q[0])
    assert p.confidence == (1.0, 1.0, 0.8) and p.after_break == (False, False, True)
    empty = with_forced(Proposal([]), [4])
    assert (empty.ids, empty.q, empty.forced, empty.confidence, empty.after_break) == ([4], None, 1, (1.0,), ())


def test_cut_proposal_keeps_the_first_ids_and_what_goes_with_them():
    p = cut_proposal(Proposal([3, 4, 5], match_len=7, after_break=(False, True, False)), 2)
    assert (p.ids, p.match_len, p.after_break, p.q) == ([3, 4], 7, (False, True), None)
    q = np.eye(3)
    m = cut_proposal(Proposal([0, 1, 2], q, confidence=(0.9, 0.8, 0.7)), 1)
    assert m.ids == [0] and m.q.shape == (1, 3) and m.confidence == (0.9,)


def test_the_helpers_keep_a_memory_proposals_source_and_path_probabilities():
    p = Proposal([3, 4], match_len=2, probs=(0.5, 0.25), source="memory")
    cut = cut_proposal(p, 1)
    assert (cut.ids, cut.probs, cut.source) == ([3], (0.5,), "memory")
    led = with_forced(p, [9])  # probs stay the drafter's own ids' (after the forced ones)
    assert (led.ids, led.forced, led.probs, led.source) == ([9, 3, 4], 1, (0.5, 0.25), "memory")
