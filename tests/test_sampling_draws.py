"""Unit tests for edgespec.decoding.sampling's draws: ``sample`` and ``make_rng`` (frequencies,
seeds, zero-probability tokens), the speculative ``residual`` (and that a speculative step keeps
the target's distribution), and the rows the property tests found broken. Pure numpy, no model,
all fast; the parameters, penalties and ``probs_from_logits`` are tests/test_sampling.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgespec.decoding import sampling
from edgespec.decoding.params import SamplingParams
from edgespec.decoding.sampling import (
    make_rng,
    residual,
    sample,
)
from test_sampling import softmax

# ---------------------------------------------------------------- sample / rng


def test_sample_frequencies_match_probabilities():
    probs = np.array([0.5, 0.0, 0.2, 0.25, 0.05])
    rng = make_rng(1234)
    n = 20_000
    counts = np.bincount([sample(probs, rng) for _ in range(n)], minlength=probs.size)
    assert counts[1] == 0
    # 5 sigma of a binomial at n = 20000 is at most 0.018
    np.testing.assert_allclose(counts / n, probs, atol=0.018)
    # chi-square over the non-zero cells, 3 degrees of freedom: 0.1% critical value 16.27
    nz = probs > 0
    chi2 = (((counts[nz] - n * probs[nz]) ** 2) / (n * probs[nz])).sum()
    assert chi2 < 16.27


def test_sample_is_reproducible_with_a_seed():
    probs = softmax(np.random.default_rng(0).standard_normal(50))
    a = [sample(probs, make_rng(7)) for _ in range(3)]
    r1, r2 = make_rng(7), make_rng(7)
    assert [sample(probs, r1) for _ in range(100)] == [sample(probs, r2) for _ in range(100)]
    assert len(set(a)) == 1


def test_sample_never_picks_zero_probability_tokens():
    probs = np.zeros(1000)
    probs[[3, 999]] = [1e-300, 1.0]
    rng = make_rng(0)
    picks = {sample(probs, rng) for _ in range(2000)}
    assert picks <= {3, 999}
    one = np.zeros(10)
    one[4] = 1.0
    assert sample(one, rng) == 4


def test_sample_tolerates_unnormalised_input():
    rng = make_rng(3)
    probs = np.array([2.0, 6.0])
    counts = np.bincount([sample(probs, rng) for _ in range(4000)], minlength=2)
    assert abs(counts[1] / 4000 - 0.75) < 0.04


def test_sample_rejects_empty_distribution():
    with pytest.raises(ValueError):
        sample(np.zeros(5), make_rng(0))


def test_make_rng_seeded_and_unseeded():
    assert make_rng(5).random() == make_rng(5).random()
    assert isinstance(make_rng(None), np.random.Generator)


# ---------------------------------------------------------------- residual


def test_residual_properties():
    rng = np.random.default_rng(0)
    for _ in range(20):
        p = softmax(rng.standard_normal(40) * 2)
        q = softmax(rng.standard_normal(40) * 2)
        r = residual(p, q)
        assert r.dtype == np.float64
        assert np.all(r >= 0)
        assert math.isclose(r.sum(), 1.0, rel_tol=1e-12)
        # zero exactly where q >= p
        np.testing.assert_array_equal(r > 0, p > q)
        np.testing.assert_allclose(r, np.maximum(p - q, 0) / np.maximum(p - q, 0).sum())


def test_residual_hand_computed():
    p = np.array([0.5, 0.3, 0.2, 0.0])
    q = np.array([0.2, 0.5, 0.2, 0.1])
    np.testing.assert_allclose(residual(p, q), [1.0, 0.0, 0.0, 0.0])
    p = np.array([0.4, 0.4, 0.2])
    q = np.array([0.1, 0.3, 0.6])
    np.testing.assert_allclose(residual(p, q), [0.75, 0.25, 0.0])


def test_residual_of_equal_distributions_is_p():
    p = softmax(np.arange(6.0))
    r = residual(p, p.copy())
    np.testing.assert_array_equal(r, p)
    assert r is not p


def test_residual_with_one_hot_draft_is_p_without_that_token():
    # A deterministic drafter (q one-hot on token d) rejected: resample from p minus d.
    p = np.array([0.1, 0.6, 0.3])
    q = np.array([0.0, 1.0, 0.0])
    np.testing.assert_allclose(residual(p, q), [0.25, 0.0, 0.75])


def test_residual_shape_mismatch():
    with pytest.raises(ValueError):
        residual(np.ones(3) / 3, np.ones(4) / 4)


def test_speculative_step_preserves_target_distribution():
    """Accept x~q with prob min(1, p/q), else resample from the residual: the result is p."""
    p = np.array([0.1, 0.45, 0.05, 0.3, 0.1])
    q = np.array([0.3, 0.2, 0.3, 0.1, 0.1])
    rng = make_rng(99)
    r = residual(p, q)
    n = 20_000
    out = np.empty(n, dtype=np.int64)
    for i in range(n):
        x = sample(q, rng)
        if rng.random() < min(1.0, p[x] / q[x]):
            out[i] = x
        else:
            out[i] = sample(r, rng)
    freq = np.bincount(out, minlength=p.size) / n
    np.testing.assert_allclose(freq, p, atol=0.015)


# ---------------------------------------------------------------- found by the property tests
# (tests/test_properties.py): a temperature below ~3e-39 and an extreme ``repeat_penalty``,
# both accepted by ``SamplingParams.validate``, broke the row.


@pytest.mark.parametrize("temperature", [1e-39, 5e-324])
def test_a_temperature_too_small_for_float32_still_samples(temperature):
    # 1/T overflowed to inf and inf * 0 at the maximum made the row NaN
    row = np.array([0.5, 2.0, -1.0], dtype=np.float32)
    params = SamplingParams(temperature=temperature)
    params.validate()
    p = sampling.probs_from_logits(row, params)
    assert p.tolist() == [0.0, 1.0, 0.0]


def test_an_extreme_repeat_penalty_leaves_a_usable_row():
    # 2.0 / 1e-40 overflowed float32 to inf, and probs_from_logits called the row broken
    row = np.array([2.0, 1.0, -1.0], dtype=np.float32)
    params = SamplingParams(temperature=1.0, repeat_penalty=1e-40)
    params.validate()
    p = sampling.probs_from_logits(sampling.apply_penalties(row, [0], params), params)
    assert np.all(np.isfinite(p)) and p.argmax() == 0
