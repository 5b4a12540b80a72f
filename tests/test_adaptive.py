"""The cost model: expected tokens per round, c(n), speedup, the choice of drafter and k."""

from __future__ import annotations

import pytest

from edgespec import adaptive
from edgespec.adaptive import DrafterOption, VerifyCost

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
    from edgespec.drafters import NgramDrafter

    text = [10, 11, 12, 13, 14, 15, 16, 17, 99, 10, 11, 12]
    # the whole continuation, with the match length for the drafting policy to judge
    assert NgramDrafter(min_match=2).lookup(text, 8) == ([13, 14, 15, 16, 17, 99, 10, 11], 3)
    assert NgramDrafter(min_match=4).lookup(text, 8) == ([], 0)
    assert NgramDrafter(min_match=3).lookup(text + [13], 2) == ([14, 15], 4)
    assert NgramDrafter().propose(text, 3).match_len == 3


def test_a_drafter_that_cannot_lose_is_chosen_over_plain_decoding():
    from edgespec.adaptive import DrafterOption, VerifyCost, choose

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
    never = [1.0] * 16                           # drafts never accepted
    # a memory-bound device: rows are nearly free, so the copying sequence drafts long
    flat = adaptive.batch_draft_lengths([sure, never, None], [0, 0, 3], lambda t: 1.0 + 0.01 * t)
    assert flat[0] == 15 and flat[1] == 0 and flat[2] == 3  # a fixed length stays as given
    # compute-bound: every row costs as much as a step, and nothing pays
    assert adaptive.batch_draft_lengths([sure, sure], [0, 0], lambda t: float(t)) == [0, 0]
    # a CPU-like line: a lone sequence's decode is mostly fixed cost, so it drafts; in a
    # crowded batch a row costs more than a typical draft returns, so it drafts less
    line = lambda t: 0.75 + 0.25 * t  # noqa: E731
    decaying = [sum(0.7 ** j for j in range(n + 1)) for n in range(16)]
    alone = adaptive.batch_draft_lengths([decaying], [0], line)[0]
    crowded = adaptive.batch_draft_lengths([decaying] * 8, [0] * 8, line)
    assert alone == 2 and crowded == [0] * 8
