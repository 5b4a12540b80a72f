"""Engine tests on tiny generated GGUF models: losslessness, KV bookkeeping, errors."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec import Engine
from edgespec.errors import (
    ContextOverflowError,
    IncompatibleVocabError,
    InputError,
    ModelFileError,
)
from edgespec.events import Done, Round, Token
from edgespec.llama import common_prefix_len


def random_prompts(n_vocab: int, count: int, seed: int, length=(12, 48)) -> list[list[int]]:
    """Token-id prompts with repeated segments, so prompt lookup finds matches."""
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(count):
        n = int(rng.integers(*length))
        base = rng.integers(5, n_vocab, size=n).tolist()
        # copy a random span of the prompt to its end, as code edits do
        a = int(rng.integers(0, n // 2))
        b = int(rng.integers(a + 2, n))
        prompts.append(base + base[a:b])
    return prompts


@pytest.fixture(scope="module")
def plain_engine(tiny_target):
    with Engine(tiny_target, draft=None, n_ctx=512, exact=True) as e:
        yield e


@pytest.fixture(scope="module")
def prompts(plain_engine):
    return random_prompts(plain_engine.target_model.n_vocab, 20, seed=1234)


@pytest.fixture(scope="module")
def greedy_reference(plain_engine, prompts):
    return [plain_engine.generate(p, max_tokens=40).token_ids for p in prompts]


@pytest.mark.parametrize("drafter", ["self", "noisy", "ngram"])
def test_greedy_equivalence_all_k(drafter, tiny_target, tiny_same, tiny_noisy, prompts, greedy_reference):
    draft = {"self": tiny_same, "noisy": tiny_noisy, "ngram": "ngram"}[drafter]
    with Engine(tiny_target, draft=draft, n_ctx=512, adaptive_k=False, exact=True) as e:
        for k in range(1, 9):
            e.set_k(k)
            for prompt, ref in zip(prompts, greedy_reference):
                got = e.generate(prompt, max_tokens=40).token_ids
                assert got == ref, f"drafter={drafter} k={k} prompt={prompt[:8]}..."


def test_greedy_equivalence_adaptive_k(tiny_target, tiny_noisy, prompts, greedy_reference):
    with Engine(tiny_target, draft=tiny_noisy, n_ctx=512, k=3, k_max=12, exact=True) as e:
        for prompt, ref in zip(prompts, greedy_reference):
            assert e.generate(prompt, max_tokens=40).token_ids == ref


def test_draft_equal_to_target_is_always_accepted(tiny_target, tiny_same, prompts):
    with Engine(tiny_target, draft=tiny_same, n_ctx=512, k=4, adaptive_k=False, exact=True) as e:
        for prompt in prompts[:10]:
            r = e.generate(prompt, max_tokens=40)
            assert r.stats.drafted > 0
            assert r.stats.accepted == r.stats.drafted
            assert r.stats.acceptance_rate == 1.0


@pytest.mark.parametrize("drafter", ["self", "noisy", "ngram", "none"])
def test_kv_positions_after_every_round(drafter, tiny_target, tiny_same, tiny_noisy, prompts):
    draft = {"self": tiny_same, "noisy": tiny_noisy, "ngram": "ngram", "none": None}[drafter]
    with Engine(tiny_target, draft=draft, n_ctx=512, k=5) as e:
        for prompt in prompts[:6]:
            committed = len(prompt)
            synced = 0
            ids: list[int] = []
            for ev in e.stream(prompt, max_tokens=40):
                if isinstance(ev, Token):
                    ids.append(ev.id)
                if isinstance(ev, Round):
                    if ev.drafted:
                        synced = committed  # the drafter caught up to here, then drafted
                    # every round commits its accepted drafts plus one target token
                    committed += ev.accepted + 1
                    # the target KV holds all committed tokens but the last
                    assert e.ctx.pos_max() == committed - 2
                    assert e.ctx.n_past == committed - 1
                    if e.draft_model is not None and drafter != "ngram":
                        dctx = e._model_drafter.ctx
                        assert dctx.pos_max() == dctx.n_past - 1
                        # the draft cache holds the committed text it was synced to,
                        # then its own drafts: never stale text before that point
                        shared = common_prefix_len(dctx.tokens, prompt + ids)
                        assert shared >= min(synced, len(prompt) + len(ids))


def test_prefix_reuse_decodes_only_new_tokens(tiny_target, prompts):
    with Engine(tiny_target, draft="ngram", n_ctx=512, exact=True) as e:
        p = prompts[0]
        r1 = e.generate(p, max_tokens=10)
        assert r1.stats.prompt_tokens_processed == len(p)
        follow = p + r1.token_ids + [7, 8, 9]
        r2 = e.generate(follow, max_tokens=10)
        # the first prompt and the reply (but its last token) are reused
        assert r2.stats.prompt_tokens_processed == 4
        # the same output as a fresh engine would give
        with Engine(tiny_target, draft=None, n_ctx=512, exact=True) as fresh:
            assert fresh.generate(follow, max_tokens=10).token_ids == r2.token_ids


def test_interrupt_mid_generation_keeps_session(tiny_target, tiny_noisy, prompts, greedy_reference):
    with Engine(tiny_target, draft=tiny_noisy, n_ctx=512, k=4, exact=True) as e:
        gen = e.stream(prompts[2], max_tokens=40)
        for i, ev in enumerate(gen):
            if isinstance(ev, Token) and i > 5:
                with pytest.raises(KeyboardInterrupt):
                    gen.throw(KeyboardInterrupt)
                break
        assert e.ctx.pos_max() == e.ctx.n_past - 1
        # the next generation works and is still exact
        assert e.generate(prompts[2], max_tokens=40).token_ids == greedy_reference[2]
        # closing a stream early is also fine
        gen = e.stream(prompts[3], max_tokens=40)
        next(gen)
        gen.close()
        assert e.generate(prompts[3], max_tokens=40).token_ids == greedy_reference[3]


def test_max_tokens_and_finish_reason(tiny_target, prompts):
    with Engine(tiny_target, draft="ngram", n_ctx=512, k=8) as e:
        r = e.generate(prompts[0], max_tokens=7)
        assert len(r.token_ids) <= 7
        assert r.finish_reason in ("length", "stop")
        if r.finish_reason == "length":
            assert len(r.token_ids) == 7


def test_context_full_finishes_with_length(tiny_target):
    with Engine(tiny_target, draft="ngram", n_ctx=64) as e:
        prompt = list(range(5, 5 + 50))
        r = e.generate(prompt, max_tokens=100)
        if r.finish_reason == "length":
            assert len(prompt) + len(r.token_ids) <= 64


def test_prompt_longer_than_context_is_a_clear_error(tiny_target):
    with Engine(tiny_target, n_ctx=64) as e:
        with pytest.raises(ContextOverflowError, match="context holds 64"):
            e.generate(list(range(5, 5 + 80)), max_tokens=4)
        # nothing was decoded
        assert e.n_cached == 0


def test_incompatible_vocab_names_both_files(tiny_target, tiny_other_vocab):
    with pytest.raises(IncompatibleVocabError) as info:
        Engine(tiny_target, draft=tiny_other_vocab)
    msg = str(info.value)
    assert tiny_target.name in msg and tiny_other_vocab.name in msg


def test_missing_truncated_and_non_gguf_files(tmp_path, tiny_truncated, tiny_not_gguf):
    with pytest.raises(ModelFileError, match="not found"):
        Engine(tmp_path / "nope.gguf")
    with pytest.raises(ModelFileError, match="truncated|corrupt"):
        Engine(tiny_truncated)
    with pytest.raises(ModelFileError, match="not a GGUF"):
        Engine(tiny_not_gguf)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(ModelFileError, match="empty"):
        Engine(empty)


def test_bad_arguments(tiny_target):
    with Engine(tiny_target, n_ctx=128) as e:
        with pytest.raises(InputError):
            e.generate([5, 6, 7], max_tokens=0)
        with pytest.raises(InputError):
            e.generate([5, 6, 10**7])
        with pytest.raises(InputError):
            e.set_drafter("model")  # no draft model loaded
    with pytest.raises(InputError):
        Engine(tiny_target, k=0)


def test_stream_event_shape(tiny_target, tiny_noisy, prompts):
    with Engine(tiny_target, draft=tiny_noisy, n_ctx=512, k=4) as e:
        events = list(e.stream(prompts[0], max_tokens=30))
    assert isinstance(events[-1], Done)
    tokens = [ev for ev in events if isinstance(ev, Token) and ev.id >= 0]
    rounds = [ev for ev in events if isinstance(ev, Round)]
    done = events[-1]
    assert [t.id for t in tokens] == list(done.token_ids)
    assert "".join(ev.text for ev in events if isinstance(ev, Token)) == done.text
    st = done.stats
    assert st.rounds == len(rounds)
    assert st.accepted == sum(r.accepted for r in rounds)
    assert st.from_draft_tokens == sum(t.from_draft for t in tokens) or done.finish_reason == "stop"
    assert sum(st.drafted_by_position) == st.drafted
    assert st.generated_tokens == len(done.token_ids)
    d = st.to_dict()
    for key in ("acceptance_rate", "mean_accepted_length", "tokens_per_second", "overhead_fraction",
                "acceptance_by_position", "t_draft", "t_verify", "t_other", "rounds", "drafted"):
        assert key in d


def test_kernel_choice(tiny_target, tiny_noisy, prompts, greedy_reference):
    """llama.cpp's kernels by default, for plain decoding and speculation alike (no
    reload when a drafter is set); exact=True gives batch-invariant kernels, and then
    speculation reproduces plain greedy decoding; a draft model follows its target."""
    prompt, ref = prompts[0], greedy_reference[0]
    with Engine(tiny_target, n_ctx=512, n_threads=1) as e:
        assert not e.exact_kernels and not e.target_model.exact
        e.generate(prompt, max_tokens=4)
        cached = e.n_cached
        e.set_drafter("ngram")
        assert not e.exact_kernels and e.n_cached == cached  # nothing reloaded
        e.set_drafter(tiny_noisy)
        assert not e.draft_model.exact
    with Engine(tiny_target, draft="ngram", n_ctx=512, n_threads=1, exact=True) as e:
        assert e.exact_kernels
        assert e.generate(prompt, max_tokens=40).token_ids == ref
        e.set_drafter(tiny_noisy)
        assert e.draft_model.exact
        assert e.generate(prompt, max_tokens=40).token_ids == ref



def test_the_plan_is_a_constructor_argument(tiny_target, plain_engine):
    assert plain_engine.plan is None  # built by hand
    plan = object()  # the engine keeps whatever plan it was built from, as it is
    with Engine(tiny_target, n_ctx=64, plan=plan) as e:
        assert e.plan is plan
