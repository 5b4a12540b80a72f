"""The engine defects of issue 13's review, 2, 3 and 5, on tiny generated GGUF models (each
test failed on the code before its fix): draft and target vocabularies of different sizes (320 vs
328 tokens here; Qwen2.5-7B and its 0.5B drafter in the wild) crashed ``llama_decode`` both ways
round, and a cut sampled draft must still keep the target's distribution;
``Engine(n_batch=...)`` smaller than a verify batch crashed mid-generation; ``penalty_last_n =
-1`` penalised all but the first token instead of all of them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from edgespec import DraftingOptions, Engine
from edgespec.decoding import sampling
from edgespec.decoding.drafters import BaseDrafter, Proposal
from edgespec.decoding.params import SamplingParams
from edgespec.decoding.policy import FixedPolicy
from edgespec.decoding.speculative import SpeculativeLoop, _penalized
from edgespec.errors import (
    InputError,
)
from edgespec.events import Stats
from tiny_models import make_tiny_model

# -- issue 13's review, 2: vocabularies of different sizes ---------------------------------


@pytest.fixture(scope="module")
def tiny_328(tiny_models_dir) -> Path:
    """tiny_target's weights and vocabulary plus 8 more ids (328 tokens)."""
    return make_tiny_model(tiny_models_dir / "target_328.gguf", seed=0, n_vocab=328, name="edgespec-tiny-328")


def plain_greedy(target: Path, prompt, max_tokens: int) -> list[int]:
    with Engine(target, exact=True, n_threads=1) as engine:
        return engine.generate(prompt, max_tokens=max_tokens).token_ids


def test_tiny_328_is_tiny_target_plus_eight_ids(tiny_target, tiny_328):
    from edgespec.llama import Model, check_vocab_compatible

    a, b = Model(tiny_target), Model(tiny_328)
    try:
        assert (a.n_vocab, b.n_vocab) == (320, 328)
        check_vocab_compatible(a, b)  # the check accepts this pair, both ways round
        check_vocab_compatible(b, a)
    finally:
        a.close()
        b.close()


def prompt_reaching_extra_ids(model: Path, n_vocab_small: int, max_tokens: int) -> list[int]:
    """A token-id prompt whose plain greedy continuation on ``model`` emits an id
    >= ``n_vocab_small`` (deterministic search over seeded random prompts)."""
    rng = np.random.default_rng(0)
    with Engine(model, exact=True, n_threads=1) as engine:
        for _ in range(200):
            prompt = [1, *map(int, rng.integers(5, n_vocab_small, size=6))]
            out = engine.generate(prompt, max_tokens=max_tokens).token_ids
            if any(t >= n_vocab_small for t in out):
                return prompt
    pytest.fail("no prompt makes the 328-token model emit one of its extra ids")


def test_draft_with_a_larger_vocabulary_has_its_proposal_cut(tiny_target, tiny_328):
    # The 328-token draft shares every weight of the 320-token target, so it drafts the
    # target's own tokens until one of its 8 extra ids wins: that id reaches the verify
    # batch, which crashed llama_decode.
    prompt = prompt_reaching_extra_ids(tiny_328, 320, max_tokens=24)
    expected = plain_greedy(tiny_target, prompt, 24)
    with Engine(tiny_target, tiny_328, drafting=DraftingOptions(k=6), exact=True, n_threads=1) as engine:
        got = engine.generate(prompt, max_tokens=24)
        assert got.token_ids == expected
        assert got.stats.accepted > 0
        for seed in range(3):  # sampling: the rejection path of the cut draft
            r = engine.generate(prompt, max_tokens=24, temperature=1.0, seed=seed)
            assert all(0 <= t < 320 for t in r.token_ids)


def test_draft_with_a_smaller_vocabulary_never_sees_the_ids_it_lacks(tiny_target, tiny_328):
    # The 328-token target gets a prompt holding two of its extra ids, and may emit more:
    # the 320-token draft model crashed decoding them.
    prompt = [1, 40, 50, 60, 325, 70, 80, 321, 90, 100, 110]
    for p in (prompt, prompt[:-3], prompt_reaching_extra_ids(tiny_328, 320, max_tokens=24)):
        expected = plain_greedy(tiny_328, p, 24)
        with Engine(tiny_328, tiny_target, drafting=DraftingOptions(k=4), exact=True, n_threads=1) as engine:
            got = engine.generate(p, max_tokens=24)
            assert got.token_ids == expected
            assert all(t < 320 for t in engine.draft_ctx.tokens)
            r = engine.generate(p, max_tokens=24, temperature=0.8, seed=1)
            assert all(0 <= t < 328 for t in r.token_ids)
    # after the last extra id the draft still drafts, from the text that follows it
    with Engine(tiny_328, tiny_target, drafting=DraftingOptions(k=4), exact=True, n_threads=1) as engine:
        r = engine.generate(prompt, max_tokens=24)
        assert r.stats.drafted > 0 and r.stats.accepted > 0


class _FixedTarget:
    """A stand-in target context: the same next-token distribution ``p`` everywhere."""

    n_ctx = 1 << 20
    n_batch = 512
    max_drafts = 511  # what a KV cache can undo: the whole verify

    def __init__(self, p: np.ndarray):
        self.logits = np.log(p)

    def decode(self, tokens, rows):
        return np.stack([self.logits for _ in rows])

    def rollback(self, n):
        pass


class _OneDraft(BaseDrafter):
    """Draws one draft from ``q`` (a vocabulary one id larger than the target's)."""

    name = "model"

    def __init__(self, q: np.ndarray, seed: int):
        self.q, self.rng = q, np.random.default_rng(seed)

    def propose(self, tokens, k, keep_drafting=None, guide=None, pick=None):
        return Proposal([int(self.rng.choice(len(self.q), p=self.q))], self.q[None, :])


def test_a_cut_sampled_draft_is_rejected_so_the_target_distribution_is_kept():
    # Target ids 0..2, the draft also has id 3. A draft of 3 is cut before the verify
    # batch; the next token must still follow p exactly: the draft counts as rejected
    # and the token comes from max(0, p - q). Sampling it from p instead would give
    # (0.4, 0.28, 0.32), which the check below tells apart from p = (0.5, 0.3, 0.2).
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.1, 0.1, 0.2, 0.6])
    loop = SpeculativeLoop(
        target=_FixedTarget(p),
        drafter=_OneDraft(q, 1),
        committed=[0],
        params=SamplingParams(temperature=1.0),
        rng=np.random.default_rng(2),
        policy=FixedPolicy(1),
        stats=Stats(drafter="model"),
        n_vocab=3,
    )
    n = 8000
    counts = np.zeros(3)
    for _ in range(n):
        counts[loop.round(2).tokens[0]] += 1
    freq = counts / n
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n)), freq


# -- issue 13's review, 3: n_batch smaller than a verify batch -----------------------------


@pytest.mark.parametrize("n_batch", [2, 3, 5])
def test_small_n_batch_bounds_k(tiny_target, tiny_same, n_batch):
    prompt = "the quick brown fox jumps over the lazy dog. the quick brown fox"
    with Engine(tiny_target, exact=True, n_threads=1) as plain:
        expected = plain.generate(prompt, max_tokens=30, raw=True).token_ids
    for draft in ("ngram", tiny_same):
        with Engine(
            tiny_target, draft, drafting=DraftingOptions(k_max=16), n_batch=n_batch, exact=True, n_threads=1
        ) as engine:
            got = engine.generate(prompt, max_tokens=30, raw=True)  # crashed in Context.decode
            assert got.token_ids == expected
            assert engine.k_max == n_batch - 1
            assert len(got.stats.drafted_by_position) <= n_batch - 1  # longest draft


def test_n_batch_below_two_is_refused_up_front(tiny_target):
    with pytest.raises(InputError, match="n_batch must be at least 2"):
        Engine(tiny_target, "ngram", n_batch=1)


# -- issue 13's review, 5: penalty_last_n = -1 (speculative's penalty window) --------------


def test_penalty_window_minus_one_is_the_whole_history():
    row = np.zeros(10, dtype=np.float32)
    params = SamplingParams(presence_penalty=1.0, penalty_last_n=-1)
    history = [7, 8, 9]
    assert np.array_equal(_penalized(row, history, [], params), sampling.apply_penalties(row, history, params))
    assert _penalized(row, history, [3], params)[7] == -1.0  # the first token counts too


def test_penalty_window_counts_this_rounds_tokens_within_its_n():
    # (A guard next to the fix, not a regression: this held before.) At a draft
    # position plain decoding sees the last n tokens of committed + the drafts accepted
    # so far, not n committed tokens plus the drafts.
    row = np.zeros(10, dtype=np.float32)
    params = SamplingParams(presence_penalty=1.0, penalty_last_n=3)
    got = _penalized(row, [1, 2, 3], [4], params)
    assert np.array_equal(got, sampling.apply_penalties(row, [2, 3, 4], params))
    assert got[1] == 0.0
