"""Speculative sampling keeps the target's distribution exactly (temperature > 0).

On a model with a 36-token vocabulary we compute the exact distribution of the first and
second generated tokens from the target's own logits, then draw thousands of speculative
samples and run a chi-square goodness-of-fit test. The same test, run with deliberately
wrong acceptance rules, must fail: that is what shows it has the power to catch a bug.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgespec import DraftingOptions, Engine
from edgespec.decoding import sampling
from edgespec.decoding.params import SamplingParams
from edgespec.llama import Context, Model
from tiny_models import make_tiny_model

PROMPT = [5, 9, 14, 20, 9, 14]
TEMPERATURE = 1.0
N_SAMPLES = 5000


@pytest.fixture(scope="module")
def small_pair(tiny_models_dir, tiny_small_vocab):
    # a draft that agrees with the target only loosely, so rejections and residual
    # resampling happen often
    draft = make_tiny_model(
        tiny_models_dir / "small_vocab_noisy.gguf",
        vocab="small",
        seed=3,
        noise=0.35,
        noise_seed=7,
        name="edgespec-tiny-small-noisy",
    )
    return tiny_small_vocab, draft


def exact_marginals(target_path, kernels_exact: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """p(t1) and p(t2) = sum_t1 p(t1) p(t2 | t1), from the target's logits."""
    model = Model(target_path, exact=kernels_exact)
    ctx = Context(model, n_ctx=64)
    params = SamplingParams(temperature=TEMPERATURE)
    try:
        p1 = sampling.probs_from_logits(ctx.decode(PROMPT)[0].copy(), params)
        p2 = np.zeros_like(p1)
        for t1 in np.nonzero(p1 > 1e-12)[0]:
            ctx.rollback(len(PROMPT))
            p2 += p1[t1] * sampling.probs_from_logits(ctx.decode([int(t1)])[0].copy(), params)
    finally:
        ctx.close()
        model.close()
    return p1, p2


def chi_square_rejects(counts: np.ndarray, expected_p: np.ndarray, alpha: float = 1e-3) -> tuple[bool, float, float]:
    """Pearson's test with cells of expected count < 5 pooled; Wilson-Hilferty quantile."""
    n = counts.sum()
    exp = expected_p * n
    order = np.argsort(exp)
    obs_cells, exp_cells = [], []
    acc_o = acc_e = 0.0
    for i in order:
        acc_o += counts[i]
        acc_e += exp[i]
        if acc_e >= 5:
            obs_cells.append(acc_o)
            exp_cells.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 and exp_cells:
        obs_cells[-1] += acc_o
        exp_cells[-1] += acc_e
    o, e = np.array(obs_cells), np.array(exp_cells)
    stat = float(((o - e) ** 2 / e).sum())
    df = len(o) - 1
    z = {1e-3: 3.090, 1e-2: 2.326}[alpha]
    crit = df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3
    return stat > crit, stat, crit


def speculative_counts(
    target, draft, *, k: int, n: int = N_SAMPLES, kernels_exact: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    with Engine(target, draft=draft, n_ctx=64, drafting=DraftingOptions(k=k), exact=kernels_exact) as e:
        V = e.target_model.n_vocab
        c1, c2 = np.zeros(V), np.zeros(V)
        drafted = 0
        for seed in range(n):
            r = e.generate(PROMPT, max_tokens=2, temperature=TEMPERATURE, seed=seed)
            assert len(r.token_ids) == 2
            c1[r.token_ids[0]] += 1
            c2[r.token_ids[1]] += 1
            drafted += r.stats.drafted
        assert drafted > 0  # the drafter did take part
    return c1, c2


@pytest.fixture(scope="module")
def exact(small_pair):
    return exact_marginals(small_pair[0])


@pytest.fixture(scope="module")
def marginals(small_pair):
    """The target's marginals on each kind of kernels (batch-invariant, llama.cpp's)."""
    return {kind: exact_marginals(small_pair[0], kind) for kind in (True, False)}


@pytest.mark.parametrize("kernels_exact", [True, False], ids=["exact-kernels", "llama.cpp-kernels"])
def test_model_drafter_sampling_matches_target_distribution(small_pair, marginals, kernels_exact):
    target, draft = small_pair
    c1, c2 = speculative_counts(target, draft, k=2, kernels_exact=kernels_exact)
    marg = marginals[kernels_exact]
    for counts, p in ((c1, marg[0]), (c2, marg[1])):
        rejected, stat, crit = chi_square_rejects(counts, p)
        assert not rejected, f"chi2 {stat:.1f} > {crit:.1f}"


@pytest.mark.parametrize("kernels_exact", [True, False], ids=["exact-kernels", "llama.cpp-kernels"])
def test_fixed_proposal_sampling_matches_target_distribution(small_pair, marginals, kernels_exact):
    # prompt lookup proposes a fixed continuation (q is None): verified by matching the
    # target's own sample
    c1, c2 = speculative_counts(small_pair[0], "ngram", k=3, kernels_exact=kernels_exact)
    marg = marginals[kernels_exact]
    for counts, p in ((c1, marg[0]), (c2, marg[1])):
        rejected, stat, crit = chi_square_rejects(counts, p)
        assert not rejected, f"chi2 {stat:.1f} > {crit:.1f}"


@pytest.mark.parametrize("wrong_rule", ["resample_from_p", "always_accept"])
def test_chi_square_catches_a_wrong_acceptance_rule(wrong_rule, small_pair, exact, monkeypatch):
    """The same test must fail when the acceptance rule is subtly broken."""
    if wrong_rule == "resample_from_p":
        # classic bug: after a rejection, sample from p instead of norm(max(0, p - q))
        monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    else:
        monkeypatch.setattr(sampling, "accept", lambda p_x, q_x, rng: True)
    target, draft = small_pair
    c1, c2 = speculative_counts(target, draft, k=2)
    results = [chi_square_rejects(c, p) for c, p in ((c1, exact[0]), (c2, exact[1]))]
    assert any(r[0] for r in results), f"wrong rule {wrong_rule} went unnoticed: {results}"


def test_chi_square_has_power_against_a_5_percent_error(exact):
    """With N_SAMPLES draws the test rejects distributions 5% (total variation) away
    from p, in 20 of 20 seeded trials, and accepts p itself."""
    p = exact[1]
    top = int(np.argmax(p))
    wrong = p.copy()
    wrong[top] -= 0.05  # move 5% of the mass from the likeliest token to the others
    others = (p > 0) & (np.arange(p.size) != top)
    wrong[others] += 0.05 / others.sum()
    rng = np.random.default_rng(0)
    caught = sum(chi_square_rejects(rng.multinomial(N_SAMPLES, wrong).astype(float), p)[0] for _ in range(20))
    false_alarms = sum(chi_square_rejects(rng.multinomial(N_SAMPLES, p).astype(float), p)[0] for _ in range(20))
    assert caught == 20
    assert false_alarms == 0
