"""The cost model: expected tokens per round, c(n), speedup, the choice of drafter and k."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgespec.costmodel import adaptive
from edgespec.costmodel.adaptive import DrafterOption, VerifyCost

# This machine, as DESIGN.md measured it: a 5-token batch of the 1.5B costs ~3.5 steps.
CPU_2CORE = VerifyCost((5,), (3.5,))
# A memory-bound GPU: verifying a handful of tokens costs about one step.
GPU = VerifyCost((2, 4, 8, 16), (1.04, 1.1, 1.22, 1.5))


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.6, 0.8, 0.95])
@pytest.mark.parametrize("k", [0, 1, 2, 5, 8])
def test_expected_tokens_is_the_truncated_geometric_sum(alpha, k):
    assert adaptive.expected_tokens(alpha, k) == pytest.approx(sum(alpha**i for i in range(k + 1)))


def test_expected_tokens_edges():
    assert adaptive.expected_tokens(1.0, 4) == 5
    assert adaptive.expected_tokens(0.0, 4) == 1
    assert adaptive.expected_tokens(0.9, 0) == 1


def test_verify_cost_interpolates_and_extrapolates():
    assert CPU_2CORE(1) == 1.0
    assert CPU_2CORE(5) == 3.5
    assert CPU_2CORE(3) == pytest.approx(2.25)  # linear between c(1) = 1 and c(5)
    assert CPU_2CORE(7) == pytest.approx(4.75)  # the last slope continues
    assert GPU(3) == pytest.approx(1.07)
    assert GPU(32) == pytest.approx(1.5 + 16 * (0.28 / 8))


def test_verify_cost_past_a_dip_at_its_last_point_still_grows():
    """The CPU prior dips at 16 (repacked tiles): extrapolating the last slope made c(32)
    negative, and `--k 600` was 'predicted -0.01x'. Past the last point c grows at least
    with the mean slope from c(1), and is never below the last point."""
    from edgespec.costmodel.costs import CPU_VERIFY_PRIOR as c

    mean = (c(16) - 1.0) / 15
    assert c(17) == pytest.approx(c(16) + mean)
    assert all(c(n + 1) > c(n) > 0 for n in range(16, 700))
    assert adaptive.speedup(0.7, 600, c, 0.0, 0.3) > 0


def test_verify_cost_rejects_bad_tables():
    with pytest.raises(ValueError):
        VerifyCost((4, 2), (1.1, 1.2))
    with pytest.raises(ValueError):
        VerifyCost((2, 4), (1.1,))


def test_the_model_drafter_loses_on_this_machine_as_measured():
    # DESIGN.md: llama.cpp's draft-simple runs at ~0.6x plain decoding here with 80%+
    # acceptance: c(5) = 3.5, gamma = 0.55, k = 4.
    s = adaptive.speedup(0.8, 4, CPU_2CORE, 0.55)
    assert s == pytest.approx(0.59, abs=0.02)
    k, best = adaptive.best_k(0.8, CPU_2CORE, 0.55, k_min=1, k_max=8)
    assert best < 1.0


def test_the_model_drafter_wins_when_verification_is_memory_bound():
    k, s = adaptive.best_k(0.75, GPU, 0.19, k_min=1, k_max=10)
    assert 2 <= k <= 6
    assert 1.5 < s < 2.5  # DESIGN.md: 1.8-2.5x on Apple silicon / laptop GPUs


def test_ngram_without_matches_is_plain_decoding():
    assert adaptive.speedup(0.9, 4, GPU, 0.0, hit=0.0) == pytest.approx(1.0)
    # with matches on a memory-bound device it gains
    assert adaptive.speedup(0.8, 4, GPU, 0.02, hit=0.5) > 1.3


def test_best_k_prefers_the_smaller_k_on_ties():
    flat = VerifyCost((2,), (1.0,))  # verification free at any n... and acceptance 0
    assert adaptive.best_k(0.0, flat, 0.0, k_min=1, k_max=8)[0] == 1


def test_choose_picks_the_best_and_falls_back_to_plain_below_the_threshold():
    opts = [DrafterOption("model", 0.8, 0.55), DrafterOption("ngram", 0.65, 0.005, hit=0.35)]
    c = adaptive.choose(opts, CPU_2CORE, k_min=1, k_max=6, min_gain=0.05)
    assert c.drafter == "none" and c.k == 0 and c.speedup == 1.0
    assert {d for d, _, _ in c.options} == {"model", "ngram"}

    c = adaptive.choose(opts, GPU, k_min=1, k_max=10, min_gain=0.05)
    assert c.drafter in ("model", "ngram") and c.speedup > 1.05
    assert c.speedup == max(s for _, _, s in c.options)

    assert adaptive.choose([], GPU).drafter == "none"


def test_alpha_from_observed_rounds():
    # 3 rounds of k=4: kept 4 (no rejection), 2 (rejected at 3), 0 (rejected at 1)
    assert adaptive.estimate_alpha(accepted=6, drafted=12, rounds_rejected=2) == pytest.approx(6 / 8)
    assert adaptive.estimate_alpha(0, 0, 0) is None


def test_draft_cost_ratio_from_sizes():
    # memory-bound: a 10x smaller draft costs ~1/10 plus the fixed overhead
    g = adaptive.draft_cost_ratio(500_000_000, 5_000_000_000, overhead_ms=0.0, gbs=250)
    assert g == pytest.approx(0.1)
    g = adaptive.draft_cost_ratio(500_000_000, 5_000_000_000, overhead_ms=2.0, gbs=250)
    assert 0.1 < g < 0.25


def test_ngram_drafter_waits_for_a_long_enough_match():
    from edgespec.decoding.drafters import NgramDrafter

    text = [10, 11, 12, 13, 14, 15, 16, 17, 99, 10, 11, 12]
    # the whole continuation, with the match length for the drafting policy to judge
    assert NgramDrafter(min_match=2).lookup(text, 8) == ([13, 14, 15, 16, 17, 99, 10, 11], 3)
    assert NgramDrafter(min_match=4).lookup(text, 8) == ([], 0)
    assert NgramDrafter(min_match=3).lookup(text + [13], 2) == ([14, 15], 4)
    assert NgramDrafter().propose(text, 3).match_len == 3


def test_a_drafter_that_cannot_lose_is_chosen_over_plain_decoding():
    from edgespec.costmodel.adaptive import DrafterOption, VerifyCost, choose

    cpu = VerifyCost((2, 8, 16), (1.67, 4.57, 6.84))
    weak = DrafterOption("ngram", alpha=0.5, gamma=0.0, hit=0.3)
    assert choose([weak], cpu).drafter == "none"
    # the learned policy drafts only where it pays: it never loses, so it is taken
    safe = DrafterOption("ngram", alpha=0.5, gamma=0.0, hit=0.3, floor=1.0)
    got = choose([safe], cpu)
    assert got.drafter == "ngram" and got.speedup == 1.0
    # ... but not when exact kernels make every round slower than plain decoding
    assert choose([safe], cpu, slowdown=1.28).drafter == "none"
    # and a drafter predicted to win outright still wins
    strong = DrafterOption("model", alpha=0.9, gamma=0.05)
    flat = VerifyCost((2, 16), (1.02, 1.3))
    assert choose([safe, strong], flat).drafter == "model"


def test_batch_draft_lengths_follow_the_cost_of_the_whole_batch():
    sure = [1.0 + 0.95 * j for j in range(16)]  # a copying sequence: drafts nearly always accepted
    never = [1.0] * 16  # drafts never accepted
    # a memory-bound device: rows are nearly free, so the copying sequence drafts long
    flat = adaptive.batch_draft_lengths([sure, never, None], [0, 0, 3], lambda t: 1.0 + 0.01 * t)
    assert flat[0] == 15 and flat[1] == 0 and flat[2] == 3  # a fixed length stays as given
    # compute-bound: every row costs as much as a step, and nothing pays
    assert adaptive.batch_draft_lengths([sure, sure], [0, 0], lambda t: float(t)) == [0, 0]
    # a CPU-like line: a lone sequence's decode is mostly fixed cost, so it drafts; in a
    # crowded batch a row costs more than a typical draft returns, so it drafts less
    line = lambda t: 0.75 + 0.25 * t  # noqa: E731
    decaying = [sum(0.7**j for j in range(n + 1)) for n in range(16)]
    alone = adaptive.batch_draft_lengths([decaying], [0], line)[0]
    crowded = adaptive.batch_draft_lengths([decaying] * 8, [0] * 8, line)
    assert alone == 2 and crowded == [0] * 8


def _scan():
    """The scan batch_draft_lengths replaced (issue 22), kept in benchmarks/draft_lengths.py."""
    from benchmarks.draft_lengths import scan_draft_lengths

    return scan_draft_lengths


# Curve steps in eighths and costs in 64ths: every sum and difference is exact in
# floating point, so the two algorithms compare the very same numbers and must agree
# pick for pick, ties included (lowest sequence, then shortest move); coarse steps and
# flat costs make ties common.
_steps = st.lists(st.integers(0, 8).map(lambda x: x / 8), min_size=0, max_size=15)
_curve = st.one_of(st.none(), _steps.map(lambda xs: [1.0 + sum(xs[:n]) for n in range(len(xs) + 1)]))


@settings(max_examples=400, deadline=None)
@given(
    curves=st.lists(_curve, min_size=1, max_size=12),
    fixed=st.lists(st.integers(0, 6), min_size=12, max_size=12),
    base=st.integers(16, 128),
    slope=st.integers(0, 16),
    dip=st.integers(0, 15),
    every=st.integers(2, 16),
)
def test_batch_draft_lengths_pick_what_the_old_scan_picks(curves, fixed, base, slope, dip, every):
    # a CPU-like cost: a fixed part, a part per row, and cheaper tiles every few rows
    def cost(t: int) -> float:
        return (base + slope * t - (dip if t % every == 0 else 0)) / 64

    start = [0 if c is not None else fixed[i] for i, c in enumerate(curves)]
    free = adaptive.batch_draft_lengths(curves, start, cost)
    assert free == _scan()(curves, start, cost)
    # a bound on the rows is kept, and one the free choice keeps changes nothing
    rows = len(curves) + sum(free)
    assert adaptive.batch_draft_lengths(curves, start, cost, max_rows=rows) == free
    low = len(curves) + sum(start) + (rows - len(curves) - sum(start)) // 2
    assert len(curves) + sum(adaptive.batch_draft_lengths(curves, start, cost, max_rows=low)) <= low


def test_batch_draft_lengths_break_ties_as_the_scan_did():
    # one row for sequence 0 or two for sequence 1 gain the same at the same cost, and
    # after either the other no longer pays: the lower sequence wins
    curves = [[1.0, 1.5], [1.0, 1.0, 1.5]]
    step = lambda t: 1.0 if t <= 4 else 10.0  # noqa: E731
    assert adaptive.batch_draft_lengths(curves, [0, 0], step) == _scan()(curves, [0, 0], step) == [1, 0]
    # one sequence, one row or two for the same gain: the shorter move wins
    flat = [[1.0, 1.5, 1.5]]
    assert adaptive.batch_draft_lengths(flat, [0], step) == _scan()(flat, [0], step) == [1]


def test_batch_draft_lengths_stay_within_max_rows():
    sure = [1.0 + 0.95 * j for j in range(16)]
    cheap = lambda t: 1.0 + 0.01 * t  # noqa: E731 - every sequence would draft 15
    assert adaptive.batch_draft_lengths([sure] * 4, [0] * 4, cheap) == [15] * 4
    got = adaptive.batch_draft_lengths([sure] * 4, [0] * 4, cheap, max_rows=4 + 20)
    assert sum(got) <= 20 and max(got) == 15  # the best moves that fit, not an even cut


def test_fit_drafts_cuts_the_longest_first():
    assert adaptive.fit_drafts([3, 500, 400], 510) == [3, 254, 253]
    assert adaptive.fit_drafts([3, 4], 10) == [3, 4]  # they fit: unchanged
    assert adaptive.fit_drafts([600, 600], 510) == [255, 255]
    assert adaptive.fit_drafts([5, 5, 5], 0) == [0, 0, 0]
    assert sum(adaptive.fit_drafts([7, 1, 9, 9, 2], 13)) == 13


def test_the_names_for_no_drafter():
    for name in ("none", "off", "plain", " Off ", "PLAIN"):
        assert adaptive.is_no_draft(name), name
    for name in (None, "", "ngram", "model", "nonesuch", "models/off.gguf"):
        assert not adaptive.is_no_draft(name), name
