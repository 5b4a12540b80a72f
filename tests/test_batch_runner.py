"""Many sequences per decode (edgespec.batching.runner) on tiny models.

Under ``exact`` (batch-invariant kernels) each sequence of a batch must equal its solo
run token for token, whatever shared its decodes: sequences joining and leaving
mid-batch, prompts longer than the prefill chunk, sequences ended by EOG, stop strings
and max_tokens at different steps, sampling with seeds, prompt lookup drafting.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgespec import DraftingOptions, Engine
from edgespec.batching.run import PreparedBatch
from edgespec.batching.runner import Request
from edgespec.costmodel.adaptive import VerifyCost, choose_parallel
from edgespec.errors import ContextOverflowError, InputError
from edgespec.llama import Model, MultiContext
from tiny_models import make_tiny_model

WORDS = "the quick brown fox jumps over the lazy dog while seven wizards quietly hex".split()


def prompt(i: int, n_words: int) -> str:
    return " ".join(WORDS[(i + j) % len(WORDS)] for j in range(n_words))


def solo(engine: Engine, req: Request):
    return engine.generate(req.prompt, **req.options)


def run(engine: Engine, reqs: list[Request], parallel, chunk: int = 128) -> dict:
    out = {}
    for o in PreparedBatch(engine, reqs, parallel=parallel, chunk=chunk):
        assert o.key not in out, "an outcome came back twice"
        out[o.key] = o
    assert set(out) == {r.key for r in reqs}
    return out


@pytest.fixture(scope="module")
def exact_engine(tiny_target, engines):
    return engines(tiny_target)


@pytest.fixture(scope="module")
def eos_model(tmp_path_factory):
    # EOS often but not always the likeliest token: sampled replies end at different steps
    return make_tiny_model(tmp_path_factory.mktemp("eos") / "eos.gguf", eos_bias=22.0)


def test_sequences_joining_and_leaving_equal_their_solo_runs(exact_engine):
    # 9 requests through 3 slots: every slot is refilled several times mid-batch
    reqs = [Request(i, prompt(i, 3 + 5 * (i % 4)), {"max_tokens": 4 + 7 * (i % 3), "raw": True}) for i in range(9)]
    out = run(exact_engine, reqs, parallel=3)
    for r in reqs:
        want = solo(exact_engine, r)
        got = out[r.key].result
        assert got.token_ids == want.token_ids, r.key
        assert got.text == want.text and got.finish_reason == want.finish_reason


def test_prompts_longer_than_the_chunk_are_prefilled_beside_running_sequences(exact_engine):
    reqs = [
        Request("short", prompt(0, 2), {"max_tokens": 30, "raw": True}),
        Request("long", prompt(1, 60), {"max_tokens": 10, "raw": True}),
        Request("long2", prompt(2, 45), {"max_tokens": 12, "raw": True}),
    ]
    batch = PreparedBatch(exact_engine, reqs, parallel=3, chunk=8)
    out = {o.key: o for o in batch}
    assert len(exact_engine.prompt_tokens(reqs[1].prompt, raw=True)) > 8 * 5
    # the long prompts took several steps of 8 tokens while "short" kept generating
    assert batch.stats.steps > 30
    for r in reqs:
        assert out[r.key].result.token_ids == solo(exact_engine, r).token_ids


def test_stop_strings_and_max_tokens_end_sequences_at_different_steps(exact_engine):
    base = [Request(i, prompt(i, 6), {"max_tokens": 24, "raw": True}) for i in range(4)]
    texts = [solo(exact_engine, r).text for r in base]
    reqs = []
    for i, (r, text) in enumerate(zip(base, texts)):
        cut = 2 + 4 * i
        stop = text[cut : cut + 2]
        opts = dict(r.options, stop=[stop]) if stop.strip() else dict(r.options, max_tokens=3 + i)
        reqs.append(Request(i, r.prompt, opts))
    out = run(exact_engine, reqs, parallel=4)
    lengths = set()
    for r in reqs:
        want = solo(exact_engine, r)
        got = out[r.key].result
        assert (got.text, got.finish_reason, got.token_ids) == (want.text, want.finish_reason, want.token_ids)
        lengths.add(len(got.token_ids))
    assert len(lengths) >= 3


def test_eog_ends_sampled_sequences_at_different_steps(eos_model):
    with Engine(eos_model, n_ctx=512, exact=True, n_threads=1) as e:
        reqs = [
            Request(i, prompt(i, 4), {"max_tokens": 40, "temperature": 1.0, "seed": 100 + i, "raw": True})
            for i in range(8)
        ]
        out = run(e, reqs, parallel=4)
        ends = []
        for r in reqs:
            want = solo(e, r)
            got = out[r.key].result
            assert got.token_ids == want.token_ids and got.finish_reason == want.finish_reason
            if got.finish_reason == "stop":
                ends.append(len(got.token_ids))
        assert len(set(ends)) >= 2, f"EOG should end sequences at different steps: {ends}"


def test_prompt_lookup_inside_a_batch_keeps_every_sequence_exact(tiny_target):
    with (
        Engine(tiny_target, draft="ngram", n_ctx=512, exact=True, n_threads=1) as e,
        Engine(tiny_target, draft=None, n_ctx=512, exact=True, n_threads=1) as plain,
    ):
        # prompts that repeat themselves: the continuation copies, so lookup has matches
        reqs = [
            Request(i, prompt(i, 5) + " " + prompt(i, 5) + " " + prompt(i, 3), {"max_tokens": 30, "raw": True})
            for i in range(6)
        ]
        batch = PreparedBatch(e, reqs, parallel=3)
        out = {o.key: o for o in batch}
        for r in reqs:
            assert out[r.key].result.token_ids == solo(plain, r).token_ids
        assert batch.runner.drafter_name == "ngram"
        assert out[0].result.stats.drafter == "ngram"


def test_batch_drafts_carry_sentence_breaks_into_the_choice(tiny_target, monkeypatch):
    # the batch weighs each sequence's proposal with the same features a solo round
    # uses, including where copied spans may end (the break marks of prompt lookup)
    from edgespec.decoding.policy import DraftPolicy

    seen = []
    real = DraftPolicy.expected_tokens

    def spy(self, ids, match_len=0, after_break=(), forced=0, **kw):
        if kw.get("source") == "prompt":  # (the memory's drafts have no break features)
            seen.append((len(ids), len(after_break)))
        return real(self, ids, match_len, after_break, forced, **kw)

    monkeypatch.setattr(DraftPolicy, "expected_tokens", spy)
    with Engine(tiny_target, draft="ngram", n_ctx=512, n_threads=1) as e:
        reqs = [Request(i, prompt(i, 6) + " " + prompt(i, 6), {"max_tokens": 20, "raw": True}) for i in range(3)]
        batch = PreparedBatch(e, reqs, parallel=3)
        list(batch)
    proposals = [(n, b) for n, b in seen if n]
    assert proposals and all(n == b for n, b in proposals)


def test_a_fixed_k_drafts_inside_the_batch(tiny_target):
    with Engine(tiny_target, draft="ngram", n_ctx=512, exact=True, n_threads=1, drafting=DraftingOptions(k=4)) as e:
        reqs = [Request(i, prompt(i, 6) + " " + prompt(i, 6), {"max_tokens": 30, "raw": True}) for i in range(4)]
        batch = PreparedBatch(e, reqs, parallel=4)
        out = {o.key: o for o in batch}
        assert batch.stats.drafted > 0
        e.set_drafter(None)
        for r in reqs:
            assert out[r.key].result.token_ids == solo(e, r).token_ids


def test_prompt_lookup_in_a_batch_drafts_after_the_first_round(tiny_target):
    # a batch times its decodes as a whole, so a sequence's rounds come untimed to its
    # policy: the stop-loss once counted them by their drafting seconds alone, waited for
    # a plain step that never came, and no sequence drafted after its first round
    with Engine(tiny_target, draft="ngram", n_ctx=512, exact=True, n_threads=1) as e:
        reqs = [Request(i, " ".join([prompt(i, 7)] * 4), {"max_tokens": 40, "raw": True}) for i in range(3)]
        out = {o.key: o for o in PreparedBatch(e, reqs, parallel=3)}
    drafting_rounds = [o.result.stats.drafted_by_position[:1] for o in out.values()]
    assert max(r[0] for r in drafting_rounds if r) >= 3, drafting_rounds


def test_a_large_fixed_k_is_cut_to_fit_one_batch(tiny_target):
    # issue 22 item 2: a 400-character text written twice, --k 600, two sequences: the
    # second copy is proposed whole by both at once (730 rows for a batch of 512), which
    # crashed with "tokens do not fit one batch"; now the drafts are cut to fit
    import random

    rng = random.Random(0)
    text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz     ") for _ in range(400))
    reqs = [Request(i, text + text, {"max_tokens": 400, "raw": True}) for i in range(2)]
    with Engine(tiny_target, draft="ngram", drafting=DraftingOptions(k=600), n_ctx=2048, exact=True, n_threads=1) as e:
        batch = PreparedBatch(e, reqs, parallel=2)
        sizes = []
        real = MultiContext.decode

        def decode(self, parts):
            sizes.append(sum(len(toks) for _, toks, _ in parts))
            return real(self, parts)

        MultiContext.decode = decode
        try:
            out = {o.key: o for o in batch}
        finally:
            MultiContext.decode = real
        n_batch = batch.runner.ctx.n_batch
        assert max(sizes) <= n_batch < 2 * 300  # both proposed a copy of the text
        assert max(sizes) > n_batch // 2  # cut to fit, not dropped
        e.set_drafter(None)
        for r in reqs:
            assert out[r.key].error is None
            assert out[r.key].result.token_ids == solo(e, r).token_ids


def test_each_sequence_gets_its_share_of_every_step(tiny_target):
    # issue 22 item 8: per-result times were t_prompt 0, t_verify 0, overhead 1.0
    reqs = [
        Request(i, prompt(i, 4 + 20 * i) + " " + prompt(i, 6), {"max_tokens": 12 + 6 * i, "raw": True})
        for i in range(3)
    ]
    with Engine(tiny_target, draft="ngram", drafting=DraftingOptions(k=4), n_ctx=512, n_threads=1) as e:
        batch = PreparedBatch(e, reqs, parallel=3, chunk=16)
        results = [o.result for o in batch]
    assert batch.stats.prompt_shared == 0
    for r in results:
        st = r.stats
        assert st.t_prompt > 0 and st.t_verify > 0 and st.t_batch > st.t_verify
        assert 0 < st.overhead_fraction < 1
        assert st.to_dict()["t_prompt"] > 0
        assert 0 < st.t_generate <= st.t_total
    # the shares add up to the steps' measured time, the decode shares to the decode
    assert sum(r.stats.t_prompt + r.stats.t_batch for r in results) == pytest.approx(batch.stats.t_steps)
    assert sum(r.stats.t_verify for r in results) < batch.stats.t_decode <= batch.stats.t_steps


def test_a_request_that_cannot_run_comes_back_as_its_error(exact_engine):
    reqs = [
        Request("ok", prompt(0, 4), {"max_tokens": 5, "raw": True}),
        Request("long", prompt(0, 400), {"max_tokens": 5, "raw": True}),
        Request("bad", prompt(0, 4), {"max_tokens": 0}),
        Request("oov", [1, 5, 10**6], {}),
    ]
    out = run(exact_engine, reqs, parallel=2)
    assert out["ok"].result is not None and out["ok"].error is None
    assert isinstance(out["long"].error, ContextOverflowError)
    assert isinstance(out["bad"].error, InputError)
    assert isinstance(out["oov"].error, InputError)


def test_generate_many_yields_index_keys_and_parallel_is_checked(exact_engine):
    prompts = [prompt(i, 3) for i in range(5)]
    outs = {o.key: o.result for o in exact_engine.generate_many(prompts, parallel=2, max_tokens=6, raw=True)}
    assert sorted(outs) == list(range(5))
    assert outs[3].token_ids == exact_engine.generate(prompts[3], max_tokens=6, raw=True).token_ids
    with pytest.raises(InputError):
        exact_engine.generate_many(prompts, parallel=0)
    auto = exact_engine.generate_many(prompts, parallel="auto", max_tokens=6, raw=True)
    assert 1 <= auto.n_parallel <= 5 and "auto" in auto.parallel_reason


def test_closing_the_iterator_early_frees_the_slots(exact_engine):
    reqs = [Request(i, prompt(i, 5), {"max_tokens": 20, "raw": True}) for i in range(6)]
    batch = PreparedBatch(exact_engine, reqs, parallel=3)
    it = iter(batch)
    first = next(it)
    assert first.result is not None
    ctx = batch.runner.ctx
    it.close()
    assert ctx._ptr is None  # the multi-sequence context was released
    # the engine itself is untouched and still generates
    assert exact_engine.generate(reqs[0].prompt, **reqs[0].options).token_ids


def test_multi_context_keeps_each_sequence_apart(tiny_target):
    m = Model(tiny_target, exact=True)
    try:
        c = MultiContext(m, n_seq=3, n_ctx=256, n_batch=64, n_threads=1)
        rows = c.decode([(0, [5, 6, 7], [2]), (2, [8, 9], [0, 1]), (1, [10], [0])])
        assert [r.shape[0] for r in rows] == [1, 2, 1]
        assert [c.pos_max(s) for s in range(3)] == [2, 0, 1]
        c.rollback(0, 1)
        c.free(2)
        assert [c.pos_max(s) for s in range(3)] == [0, 0, -1]
        assert c.tokens == [[5], [10], []]
        # the same tokens give the same logits, whichever sequence and batch (bit for
        # bit on the real model: test_integration_qwen; the tiny F32 models' matmuls
        # differ between 1 and 2 rows in the last bits)
        a = c.decode([(0, [6], [0]), (2, [5], [0])])
        b = c.decode([(2, [6], [0])])
        assert np.allclose(a[0], b[0], atol=1e-4)
        with pytest.raises(ValueError):
            c.decode([(0, [1], [0]), (0, [2], [0])])
        c.close()
    finally:
        m.close()


def test_a_sequence_can_take_a_common_prefix_another_computed(tiny_target):
    m = Model(tiny_target, exact=False)
    try:
        c = MultiContext(m, n_seq=3, n_ctx=256, n_batch=64, n_threads=1)
        assert c.unified
        prefix = list(range(5, 25))
        c.decode([(0, prefix + [30, 31], [])])
        c.share(0, 1, len(prefix))  # no compute: the cells gain sequence 1's id
        assert c.tokens[1] == prefix and c.pos_max(1) == len(prefix) - 1
        shared = c.decode([(1, [40, 41], [1])])[0]
        c.decode([(2, prefix, [])])
        computed = c.decode([(2, [40, 41], [1])])[0]
        assert np.allclose(shared, computed, atol=1e-4)
        c.free(0)  # the donor leaves; the shared cells stay with sequence 1
        c.rollback(1, len(prefix))
        assert np.allclose(c.decode([(1, [40, 41], [1])])[0], computed, atol=1e-4)
        with pytest.raises(ValueError):
            c.share(2, 1, 3)  # sequence 1 already holds more than that
        with pytest.raises(ValueError):
            c.share(1, 0, 30)  # more than sequence 1 holds
        c.close()
    finally:
        m.close()
    m = Model(tiny_target, exact=True)
    try:
        # a KV stream per sequence: the donor's stream is copied, then cut to the prefix
        c = MultiContext(m, n_seq=3, n_ctx=256, n_batch=64, n_threads=1)
        assert not c.unified
        c.decode([(0, prefix + [30, 31], [])])
        c.share(0, 1, len(prefix))
        assert c.tokens[1] == prefix and c.pos_max(1) == len(prefix) - 1
        shared = c.decode([(1, [40, 41], [1])])[0]
        c.decode([(2, prefix, [])])
        computed = c.decode([(2, [40, 41], [1])])[0]
        assert np.array_equal(shared, computed)
        c.close()
    finally:
        m.close()


def test_a_batch_computes_a_common_prompt_prefix_once(tiny_target, exact_engine):
    head = prompt(0, 40)
    reqs = [Request(i, head + " " + prompt(i + 1, 3 + i), {"max_tokens": 8, "raw": True}) for i in range(5)]
    with Engine(tiny_target, draft=None, n_ctx=512, exact=False, n_threads=1) as fast:
        ids = [fast.prompt_tokens(r.prompt, raw=True) for r in reqs]
        n_head = len(os.path.commonprefix(ids))
        assert n_head > 30
        batch = PreparedBatch(fast, reqs, parallel=3, chunk=16)
        out = {o.key: o.result for o in batch}
    # the first sequence computed the head; the others waited for it, then took its cells
    st = batch.stats
    assert st.prompt_shared >= 4 * n_head
    assert st.prompt_tokens + st.prompt_shared == sum(len(i) - 1 for i in ids)
    assert sum(len(i) - r.stats.prompt_tokens_processed for i, r in zip(ids, out.values())) == st.prompt_shared
    assert all(len(r.token_ids) == 8 for r in out.values())
    assert "prompt tokens shared" in batch.summary()
    # exact kernels: each sequence still equals its solo run, shared head included
    batch = PreparedBatch(exact_engine, reqs, parallel=3, chunk=16)
    out = {o.key: o.result for o in batch}
    assert batch.stats.prompt_shared >= 4 * n_head
    for r in reqs:
        assert out[r.key].token_ids == solo(exact_engine, r).token_ids


def test_auto_parallel_follows_the_batch_cost_and_the_caps():
    flat = VerifyCost((1, 64), (1.0, 1.5))  # a GPU: more is nearly free
    linear = VerifyCost((1, 64), (1.0, 64.0))  # no batching gain at all
    assert choose_parallel(flat, 100, 1000) >= 24
    assert choose_parallel(linear, 100, 1000) == 1
    assert choose_parallel(flat, 3, 1000) == 3  # never more than the requests
    assert choose_parallel(flat, 100, 5) == 5  # nor than memory holds
    cpu = VerifyCost((1, 4, 8, 16, 32), (1.0, 2.67, 4.54, 5.27, 9.13))
    assert choose_parallel(cpu, 64, 1000) == 32  # two full waves, not 24 + 24 + 16
    assert choose_parallel(cpu, 100, 1000) in range(20, 26)  # 4-5 even waves, not 32 × 3 + 4


@settings(
    max_examples=12,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    jobs=st.lists(
        st.tuples(st.integers(1, 30), st.integers(1, 16), st.integers(0, 9), st.sampled_from([0.0, 0.8])),
        min_size=1,
        max_size=7,
    ),
    parallel=st.integers(1, 4),
    chunk=st.integers(1, 24),
)
def test_any_batch_composition_gives_each_sequence_its_solo_output(exact_engine, jobs, parallel, chunk):
    reqs = [
        Request(i, prompt(seed, n_words), {"max_tokens": max_tokens, "temperature": temp, "seed": seed, "raw": True})
        for i, (n_words, max_tokens, seed, temp) in enumerate(jobs)
    ]
    out = run(exact_engine, reqs, parallel=parallel, chunk=chunk)
    for r in reqs:
        assert out[r.key].result.token_ids == solo(exact_engine, r).token_ids
