"""Engine tests on tiny generated GGUF models: losslessness, KV bookkeeping, errors, stream
events, kernels, and what the engine keeps (its plan, its drafting record, its stats, its gamma
estimate). Issue 13's review's defects are tests/test_engine_review.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from edgespec import DraftingOptions, Engine
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
def plain_engine(tiny_target, engines):
    return engines(tiny_target, n_threads=None)


@pytest.fixture(scope="module")
def prompts(plain_engine):
    return random_prompts(plain_engine.target_model.n_vocab, 20, seed=1234)


@pytest.fixture(scope="module")
def greedy_reference(plain_engine, prompts):
    return [plain_engine.generate(p, max_tokens=40).token_ids for p in prompts]


@pytest.mark.parametrize("drafter", ["self", "noisy", "ngram"])
def test_greedy_equivalence_all_k(drafter, tiny_target, tiny_same, tiny_noisy, prompts, greedy_reference):
    draft = {"self": tiny_same, "noisy": tiny_noisy, "ngram": "ngram"}[drafter]
    with Engine(tiny_target, draft=draft, n_ctx=512, drafting=DraftingOptions(k=4), exact=True) as e:
        for k in range(1, 9):
            e.set_k(k)
            for prompt, ref in zip(prompts, greedy_reference):
                got = e.generate(prompt, max_tokens=40).token_ids
                assert got == ref, f"drafter={drafter} k={k} prompt={prompt[:8]}..."


def test_greedy_equivalence_adaptive_k(tiny_target, tiny_noisy, prompts, greedy_reference):
    with Engine(tiny_target, draft=tiny_noisy, n_ctx=512, drafting=DraftingOptions(k_max=12), exact=True) as e:
        for prompt, ref in zip(prompts, greedy_reference):
            assert e.generate(prompt, max_tokens=40).token_ids == ref


def test_draft_equal_to_target_is_always_accepted(tiny_target, tiny_same, prompts):
    with Engine(tiny_target, draft=tiny_same, n_ctx=512, drafting=DraftingOptions(k=4), exact=True) as e:
        for prompt in prompts[:10]:
            r = e.generate(prompt, max_tokens=40)
            assert r.stats.drafted > 0
            assert r.stats.accepted == r.stats.drafted
            assert r.stats.acceptance_rate == 1.0


@pytest.mark.parametrize("drafter", ["self", "noisy", "ngram", "none"])
def test_kv_positions_after_every_round(drafter, tiny_target, tiny_same, tiny_noisy, prompts):
    draft = {"self": tiny_same, "noisy": tiny_noisy, "ngram": "ngram", "none": None}[drafter]
    with Engine(tiny_target, draft=draft, n_ctx=512) as e:
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
                        dctx = e.draft_ctx
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
    with Engine(tiny_target, draft=tiny_noisy, n_ctx=512, exact=True) as e:
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
    with Engine(tiny_target, draft="ngram", n_ctx=512) as e:
        r = e.generate(prompts[0], max_tokens=7)
        assert len(r.token_ids) <= 7
        assert r.finish_reason in ("length", "stop")
        if r.finish_reason == "length":
            assert len(r.token_ids) == 7


def test_context_full_finishes_with_length(tiny_target):
    """A reply that reaches the end of the context stops there, with "length", short of
    max_tokens. ``ignore_eos`` keeps it from stopping earlier, so the check always runs."""
    with Engine(tiny_target, draft="ngram", n_ctx=64) as e:
        prompt = list(range(5, 5 + 50))
        r = e.generate(prompt, max_tokens=100, ignore_eos=True)
        assert r.finish_reason == "length"
        assert len(prompt) + len(r.token_ids) == 64  # every free position used, none past
        # whatever ends the reply, it never holds more than the context
        free = e.generate(prompt, max_tokens=100)
        assert len(prompt) + len(free.token_ids) <= 64
        assert free.finish_reason == "length" or len(prompt) + len(free.token_ids) < 64


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
        DraftingOptions(k=0)  # a fixed k drafts at least one token (None: the learned policy)
    with pytest.raises(InputError):
        Engine(tiny_target, n_batch=1)


def test_stream_event_shape(tiny_target, tiny_noisy, prompts):
    with Engine(tiny_target, draft=tiny_noisy, n_ctx=512) as e:
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
    for key in (
        "acceptance_rate",
        "mean_accepted_length",
        "tokens_per_second",
        "overhead_fraction",
        "acceptance_by_position",
        "t_draft",
        "t_verify",
        "t_other",
        "rounds",
        "drafted",
    ):
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


def test_the_plan_is_kept_by_the_engine_built_from_it(tiny_target, plain_engine):
    from edgespec import engine_for
    from edgespec.planning import planner

    assert plain_engine.plan is None  # built by hand
    plan = planner.plan("cpu-small", target=str(tiny_target), draft="ngram", k=3, n_ctx=64, n_threads=1)
    with engine_for(plan) as e:
        assert e.plan is plan and e.drafting.options is plan.drafting  # one record, not copied
        assert (e.drafter_name, e.k, e.adaptive_k, e.n_ctx, e.n_threads) == ("ngram", 3, False, 64, 1)


def test_the_engine_takes_what_a_model_needs_and_one_drafting_record():
    import inspect

    params = [p for p in inspect.signature(Engine.__init__).parameters if p != "self"]
    assert len(params) <= 12 and "drafting" in params
    assert not {"k", "k_max", "adaptive_k", "p_min", "memory", "memory_cap", "plan"} & set(params)
    from edgespec.costmodel.drafting import MEMORY_CAP
    from edgespec.decoding.suffix import DEFAULT_CAP

    assert MEMORY_CAP == DEFAULT_CAP  # the record's default is the index's own


def test_a_generation_closed_early_leaves_its_stats_on_the_engine(plain_engine, prompts):
    events = plain_engine.stream(prompts[0], max_tokens=40)
    tokens = [ev for ev in itertools.islice(events, 6) if isinstance(ev, Token)]
    events.close()  # no Done comes: the stats are the engine's declared last_stats (chat records them)
    stats = plain_engine.last_stats
    assert stats is not None and stats.generated_tokens == len([t for t in tokens if t.id >= 0]) > 0
    done = plain_engine.generate(prompts[0], max_tokens=3)
    assert plain_engine.last_stats is done.stats


def test_the_engine_estimates_gamma_with_the_cost_models_formula(tiny_target, tiny_noisy):
    from types import SimpleNamespace

    from edgespec.costmodel.adaptive import DEFAULT_DECODE_GBS, DEFAULT_OVERHEAD_MS, draft_cost_ratio
    from edgespec.costmodel.costs import CPU_BATCH_PRIOR, CPU_VERIFY_PRIOR
    from edgespec.decoding.drafting import Drafting

    # a 0.4 GB draft for a 1.1 GB target (the Qwen2.5-Coder 0.5B/1.5B pair): the size
    # formula the engine had of its own said 0.44, the cost model's says 0.40
    drafting = Drafting(DraftingOptions(), verify_cost=CPU_VERIFY_PRIOR, batch_cost=CPU_BATCH_PRIOR, max_k=15)
    draft = SimpleNamespace(model=SimpleNamespace(size_bytes=400_000_000))
    drafting.use_model(draft, target_bytes=1_100_000_000)
    want = draft_cost_ratio(400_000_000, 1_100_000_000, overhead_ms=DEFAULT_OVERHEAD_MS, gbs=DEFAULT_DECODE_GBS)
    assert drafting.policy().gamma == pytest.approx(want) and want < 0.42  # one γ formula, the planner's
    with Engine(tiny_target, tiny_noisy, n_ctx=128, n_threads=1, drafting=DraftingOptions(draft_gamma=0.3)) as e:
        assert e.draft_policy().gamma == 0.3  # a given γ (the plan's) is the prior
