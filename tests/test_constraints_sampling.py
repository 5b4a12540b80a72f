"""Speculation under a constraint samples the MASKED distribution exactly.

On the 36-token model we compute, from the target's own logits and the grammar's masks,
the exact distribution of the first three generated tokens under masked sampling
(p' = probs(mask(logits)) at every position), then draw thousands of constrained
speculative samples and run the chi-square test of tests/test_exact_sampling.py: with
prompt lookup (drafts cut to their valid prefix), with a model drafter sampling its
masked q', and with forced tokens leading the draft. The same test catches a broken
rejection rule under the constraint.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgespec import DraftingOptions, Engine
from edgespec.constraints import apply_mask, compile_constraint
from edgespec.decoding import sampling
from edgespec.decoding.params import SamplingParams
from edgespec.llama import Context, Model
from test_exact_sampling import chi_square_rejects
from tiny_models import make_tiny_model

PROMPT = [5, 9, 14, 20, 9, 14]  # " c h n c h": prompt lookup proposes "n c h ..."
TEMPERATURE = 1.0
N_SAMPLES = 4000
DEPTH = 3
# letters c..p only (ids 9..22, and the merge "he"), at least 7 characters: no end of
# generation within three tokens
FREE = {"type": "regex", "regex": "[c-p]{7,12}"}
# the first token is forced ('c' has no merge), then as FREE
FORCED = {"type": "regex", "regex": "c[c-p]{7,12}"}


@pytest.fixture(scope="module")
def small_pair(tiny_models_dir, tiny_small_vocab):
    draft = make_tiny_model(
        tiny_models_dir / "small_vocab_noisy.gguf",
        vocab="small",
        seed=3,
        noise=0.35,
        noise_seed=7,
        name="edgespec-tiny-small-noisy",
    )
    return tiny_small_vocab, draft


def masked_marginals(target_path, response_format) -> list[np.ndarray]:
    """p'(t1), p'(t2), p'(t3) by walking the tree of masked continuations."""
    model = Model(target_path, exact=True)
    ctx = Context(model, n_ctx=64)
    params = SamplingParams(temperature=TEMPERATURE)
    matcher = compile_constraint(response_format, model).matcher()
    out = [np.zeros(model.n_vocab) for _ in range(DEPTH)]

    def walk(prefix: list[int], prob: float) -> None:
        ctx.rollback(len(PROMPT) - 1)
        logits = ctx.decode([PROMPT[-1], *prefix])[-1].copy() if prefix else ctx.decode([PROMPT[-1]])[0].copy()
        p = sampling.probs_from_logits(apply_mask(matcher.fill_mask(), logits), params)
        depth = len(prefix)
        out[depth] += prob * p
        if depth + 1 == DEPTH:
            return
        for t in np.flatnonzero(p > 1e-12):
            matcher.consume([int(t)])
            walk([*prefix, int(t)], prob * p[t])
            matcher.rollback(1)

    try:
        ctx.decode(PROMPT[:-1], rows=())
        walk([], 1.0)
    finally:
        ctx.close()
        model.close()
    return out


def constrained_counts(
    target, draft, response_format, *, k: int, n: int = N_SAMPLES, memory: bool = False, by_source: dict | None = None
):
    """``n`` constrained samples; ``memory``: prompt lookup also drafts from the earlier
    samples' answers (``by_source`` gets the drafted tokens by source)."""
    with Engine(target, draft=draft, n_ctx=64, drafting=DraftingOptions(k=k, memory=memory), exact=True) as e:
        counts = [np.zeros(e.target_model.n_vocab) for _ in range(DEPTH)]
        drafted = forced = 0
        for seed in range(n):
            r = e.generate(
                PROMPT, max_tokens=DEPTH, temperature=TEMPERATURE, seed=seed, response_format=response_format
            )
            assert len(r.token_ids) == DEPTH
            for j, t in enumerate(r.token_ids):
                counts[j][t] += 1
            drafted += r.stats.drafted - r.stats.forced
            forced += r.stats.forced
            for src, d in r.stats.drafted_by_source.items():
                if by_source is not None:
                    by_source[src] = by_source.get(src, 0) + d
    return counts, drafted, forced


@pytest.fixture(scope="module")
def exact_free(small_pair):
    return masked_marginals(small_pair[0], FREE)


@pytest.fixture(scope="module")
def exact_forced(small_pair):
    return masked_marginals(small_pair[0], FORCED)


def assert_fits(counts, expected):
    for j, (c, p) in enumerate(zip(counts, expected)):
        assert c[p <= 1e-12].sum() == 0, f"token {j + 1}: a token the grammar forbids"
        if (p > 1e-12).sum() == 1:
            continue  # a forced position: one possible token, nothing to test beyond that
        rejected, stat, crit = chi_square_rejects(c, p)
        assert not rejected, f"token {j + 1}: chi2 {stat:.1f} > {crit:.1f}"


def test_the_mask_matters_here(exact_free, small_pair):
    """The constraint moves real mass: an unconstrained first token is often outside it."""
    model = Model(small_pair[0], exact=True)
    ctx = Context(model, n_ctx=64)
    try:
        p = sampling.probs_from_logits(ctx.decode(PROMPT)[0].copy(), SamplingParams(temperature=TEMPERATURE))
    finally:
        ctx.close()
        model.close()
    assert p[exact_free[0] <= 1e-12].sum() > 0.2


def test_prompt_lookup_samples_the_masked_distribution(small_pair, exact_free):
    counts, drafted, _ = constrained_counts(small_pair[0], "ngram", FREE, k=3)
    assert drafted > 0
    assert_fits(counts, exact_free)


def test_the_memorys_drafts_sample_the_masked_distribution(small_pair, exact_free):
    """Drafts from the earlier samples' answers, cut to their valid prefix like prompt
    lookup's: the masked distribution still."""
    by_source: dict = {}
    counts, _, _ = constrained_counts(small_pair[0], "ngram", FREE, k=3, memory=True, by_source=by_source)
    assert by_source.get("memory", 0) > 0
    assert_fits(counts, exact_free)


def test_a_model_drafter_samples_the_masked_distribution(small_pair, exact_free):
    counts, drafted, _ = constrained_counts(small_pair[0], small_pair[1], FREE, k=2)
    assert drafted > 0
    assert_fits(counts, exact_free)


@pytest.mark.parametrize("drafter", ["ngram", "model"])
def test_forced_tokens_in_the_draft_keep_the_masked_distribution(small_pair, exact_forced, drafter):
    draft = "ngram" if drafter == "ngram" else small_pair[1]
    counts, _, forced = constrained_counts(small_pair[0], draft, FORCED, k=2)
    assert forced > 0
    assert_fits(counts, exact_forced)


def test_chi_square_catches_a_wrong_residual_under_the_constraint(small_pair, exact_free, monkeypatch):
    monkeypatch.setattr(sampling, "residual", lambda p, q: p)
    counts, _, _ = constrained_counts(small_pair[0], small_pair[1], FREE, k=2)
    results = [chi_square_rejects(c, p) for c, p in zip(counts, exact_free)]
    assert any(r[0] for r in results), f"a wrong residual went unnoticed: {results}"
