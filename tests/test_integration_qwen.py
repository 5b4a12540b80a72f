"""Integration: the engine on the real Qwen2.5-Coder-0.5B-Instruct (from the test extra).

Greedy speculative output must equal plain greedy output token for token, with the model
drafting for itself and with prompt lookup, on real prompts through the chat template.
"""

from __future__ import annotations

import pytest

from edgespec import DraftingOptions, Engine
from edgespec.catalog import resolve_model

pytestmark = pytest.mark.integration

PROMPTS = [
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Rename the variable `x` to `total` in this code and return the whole code:\n\n"
    "def f(items):\n    x = 0\n    for i in items:\n        x += i\n    return x\n",
    "Explain in two sentences what a KV cache is in a transformer.",
]


@pytest.fixture(scope="module")
def qwen05():
    return resolve_model("qwen2.5-coder-0.5b")


@pytest.fixture(scope="module")
def reference(qwen05):
    with Engine(qwen05, draft=None, n_ctx=1024, exact=True) as e:
        return [e.generate(p, max_tokens=48).token_ids for p in PROMPTS]


@pytest.mark.parametrize("draft", ["self", "ngram"])
def test_real_model_greedy_equivalence(draft, qwen05, reference):
    # exact kernels (token identity) and a fixed k (the learned policy rightly declines a
    # same-size drafter on a CPU; here the point is the mechanics of drafting)
    with Engine(
        qwen05, draft=qwen05 if draft == "self" else "ngram", n_ctx=1024, drafting=DraftingOptions(k=4), exact=True
    ) as e:
        for prompt, ref in zip(PROMPTS, reference):
            r = e.generate(prompt, max_tokens=48)
            assert r.token_ids == ref
            if draft == "self":
                # a model drafting for itself is always right at temperature 0
                assert r.stats.drafted > 0 and r.stats.acceptance_rate == 1.0
            assert e.ctx.pos_max() == e.ctx.n_past - 1


def test_real_model_multi_turn_reuses_cache(qwen05):
    with Engine(qwen05, draft="ngram", n_ctx=1024) as e:
        messages = [{"role": "user", "content": PROMPTS[0]}]
        first = e.generate(messages, max_tokens=24)
        messages += [
            {"role": "assistant", "content": first.text},
            {"role": "user", "content": "Now make it recursive."},
        ]
        second = e.generate(messages, max_tokens=8)
        full = len(e.prompt_tokens(messages))
        assert second.stats.prompt_tokens == full
        # only the new turn (plus a few tokens where the re-rendered reply differs)
        assert second.stats.prompt_tokens_processed < full - first.stats.prompt_tokens


def test_real_model_refuses_a_draft_with_another_vocabulary(qwen05, tiny_target):
    from edgespec.errors import IncompatibleVocabError

    with pytest.raises(IncompatibleVocabError, match="target"):
        Engine(qwen05, draft=tiny_target)


def test_real_model_logits_do_not_depend_on_batch_size(qwen05):
    """The batch-invariant kernel setup (see edgespec/llama/kernels.py): a token's logits are
    bit-identical whether it is decoded alone or first in a verify batch of up to 17,
    also past 256 cached tokens where flash attention changes path for single tokens."""
    import numpy as np

    from edgespec.llama import Context, Model

    model = Model(qwen05)
    ctx = Context(model, n_ctx=1024)
    try:
        assert ctx.batch_invariant
        ids = model.tokenize("def add(a, b):\n    return a + b\n" * 30)
        assert len(ids) > 300
        ctx.decode(ids[:-1], rows=())
        alone = ctx.decode([ids[-1]]).copy()
        for n in (2, 4, 5, 8, 9, 17):
            ctx.rollback(len(ids) - 1)
            batch = ctx.decode([ids[-1]] + ids[: n - 1], rows=range(n))
            assert np.array_equal(batch[0], alone[0]), f"batch of {n} differs"
    finally:
        ctx.close()
        model.close()


def test_real_model_sequence_logits_do_not_depend_on_the_batch_it_shares(qwen05):
    """Multi-sequence decoding under exact kernels: a sequence's logits are bit-identical
    to its solo run, prefilled in other chunks, sharing its decode with other sequences,
    after others left holes in the KV pool, with a prefix taken from another sequence. On llama.cpp's
    kernels they differ."""
    import numpy as np

    from edgespec.llama import Model, MultiContext

    rng = np.random.default_rng(0)
    ctxt = [int(t) for t in rng.integers(100, 5000, 30)]
    for exact in (True, False):
        model = Model(qwen05, exact=exact)
        try:
            many = MultiContext(model, n_seq=4, n_ctx=1024, n_batch=128)
            many.decode(
                [
                    (0, [int(t) for t in rng.integers(100, 5000, 37)], ()),
                    (1, [int(t) for t in rng.integers(100, 5000, 50)], ()),
                    (3, [int(t) for t in rng.integers(100, 5000, 20)], ()),
                ]
            )
            many.free(1)
            many.rollback(0, 10)
            shared = many.decode([(0, [7, 8, 9], [2]), (2, ctxt, [29]), (3, [11], [0])])[1]
            alone = MultiContext(model, n_seq=1, n_ctx=1024, n_batch=128)
            alone.decode([(0, ctxt[:13], ())])
            solo = alone.decode([(0, ctxt[13:], [16])])[0]
            many.share(2, 1, 20)  # a common prefix: sequence 1 takes 2's first 20 tokens
            taken = many.decode([(1, ctxt[20:], [9])])[0]
            for got in (shared, taken):
                diff = float(np.abs(got - solo).max())
                if exact:
                    assert diff == 0.0
                else:
                    assert diff < 2.0  # llama.cpp's kernels: close, not identical
            many.close()
            alone.close()
        finally:
            model.close()


def test_real_model_parallel_batch_equals_sequential_under_exact(qwen05):
    with Engine(qwen05, draft="ngram", n_ctx=1024, exact=True) as e:
        outs = {o.key: o.result for o in e.generate_many(PROMPTS * 2, parallel=4, max_tokens=32)}
        e.set_drafter(None)
        for i, p in enumerate(PROMPTS * 2):
            assert outs[i].token_ids == e.generate(p, max_tokens=32).token_ids, i
