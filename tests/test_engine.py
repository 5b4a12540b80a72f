"""Engine tests on tiny generated GGUF models: losslessness, KV bookkeeping, errors.

Also issue 13's review, defects 2, 3 and 5 (each test failed on the code before its fix):
draft and target vocabularies of different sizes (320 vs 328 tokens here; Qwen2.5-7B and
its 0.5B drafter in the wild) crashed ``llama_decode`` both ways round;
``Engine(n_batch=...)`` smaller than a verify batch crashed mid-generation;
``penalty_last_n = -1`` penalised all but the first token instead of all of them.
"""

from __future__ import annotations

import itertools
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
    ContextOverflowError,
    IncompatibleVocabError,
    InputError,
    ModelFileError,
)
from edgespec.events import Done, Round, Stats, Token
from edgespec.llama import common_prefix_len
from tiny_models import make_tiny_model


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
