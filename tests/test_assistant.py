"""Gemma 4 assistants: a draft model whose context reads the target's KV cache (issue 45).

On a tiny ``gemma4`` target and ``gemma4-assistant`` drafters (tests/tiny_gemma4.py), under
batch-invariant kernels: an assistant right by construction has every draft accepted and
gives plain decoding's greedy tokens; perturbed and random assistants have drafts rejected
and still give them, alone, over several requests on one engine, under the learned policy
and under a JSON schema; the assistant's drafts read the target's KV cache (the same step
on two caches differs) and its first step of a round is fed the target's hidden row of the
position before; sampling with assistant drafts keeps the target's distribution (χ²); a
batch decodes plainly and says why; an assistant for another architecture, and an
assistant file as a target, say what is wrong.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgespec import DraftingOptions, Engine
from edgespec.decoding import assistant as assistant_module
from edgespec.decoding import sampling
from edgespec.decoding.params import SamplingParams
from edgespec.errors import InputError
from edgespec.llama import AssistantContext, Context, Model
from test_exact_sampling import chi_square_rejects
from tiny_gemma4 import make_tiny_assistant, make_tiny_gemma4
from tiny_models import make_tiny_model

PROMPTS = [
    "the cat sat on the mat. the cat sat on the",
    "def f(x): return x + 1\ndef g(x): return",
    "hello world hello world hello",
]
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "t",
        "schema": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "n": {"type": "integer"}},
            "required": ["name", "n"],
        },
    },
}


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("gemma4")
    return {
        "target-right": make_tiny_gemma4(d / "right" / "gemma4.gguf", right=True),
        "right": make_tiny_assistant(d / "right" / "gemma4-assistant.gguf", right=True),
        "perturbed": make_tiny_assistant(d / "p01.gguf", right=True, perturb=0.1),
        "wrong-ish": make_tiny_assistant(d / "p03.gguf", right=True, perturb=0.3),
        "target": make_tiny_gemma4(d / "gemma4.gguf"),
        "random": make_tiny_assistant(d / "random.gguf"),
        "llama": make_tiny_model(d / "llama.gguf"),
    }


def _target(files, which: str):
    return files["target" if which == "random" else "target-right"]


def _plain(path, prompt, **kw) -> list[int]:
    with Engine(path, None, exact=True, n_ctx=512, n_threads=1) as e:
        return e.generate(prompt, **kw).token_ids


def _assisted(files, which: str, k: int | None = 3, **drafting) -> Engine:
    return Engine(
        _target(files, which),
        files[which],
        exact=True,
        n_ctx=512,
        n_threads=1,
        drafting=DraftingOptions(k=k, **drafting),
    )


def test_the_right_assistant_has_every_draft_accepted(files):
    with _assisted(files, "right") as e:
        assert e.drafter_name == "assistant" and e.k_max == 4 and e.draft_path == files["right"]
        for prompt in PROMPTS:
            r = e.generate(prompt, max_tokens=48)
            assert r.token_ids == _plain(files["target-right"], prompt, max_tokens=48)
            st = r.stats
            assert st.drafter == "assistant" and st.drafted > 0 and st.accepted == st.drafted
            assert st.accepted_by_source == {"assistant": st.accepted}
            assert st.rounds < len(r.token_ids) / 2  # 3 drafts + 1 token per round, mostly


@pytest.mark.parametrize("which", ["perturbed", "wrong-ish", "random"])
def test_other_assistants_give_plain_decodings_tokens(files, which):
    drafted = accepted = 0
    with _assisted(files, which) as e:
        for prompt in PROMPTS:
            r = e.generate(prompt, max_tokens=48)
            assert r.token_ids == _plain(_target(files, which), prompt, max_tokens=48)
            drafted, accepted = drafted + r.stats.drafted, accepted + r.stats.accepted
    assert drafted > accepted  # some drafts rejected, the output unchanged
    if which != "random":
        assert accepted > 0


def test_requests_on_one_engine_reuse_the_cache_and_stay_exact(files):
    """Several requests and the same one again (the cache's prefix reused whole: the row
    the first step needs comes from the store) answer as a fresh engine does."""
    with _assisted(files, "perturbed") as e:
        for prompt in [*PROMPTS, PROMPTS[0], PROMPTS[0] + " the cat"]:
            r = e.generate(prompt, max_tokens=40)
            assert r.token_ids == _plain(files["target-right"], prompt, max_tokens=40)
            assert r.stats.accepted > 0


def test_the_learned_policy_stays_exact(files):
    from edgespec.costmodel.adaptive import VerifyCost

    flat = VerifyCost((1, 2, 4), (1.0, 1.05, 1.1))  # a verify as cheap as a GPU's
    with _assisted(files, "wrong-ish", k=None, draft_gamma=0.05, verify_cost=flat) as e:
        drafted = 0
        for prompt in PROMPTS:
            r = e.generate(prompt, max_tokens=40)
            assert r.token_ids == _plain(files["target-right"], prompt, max_tokens=40)
            drafted += r.stats.drafted
        assert drafted > 0


@pytest.mark.parametrize("which", ["right", "wrong-ish"])
def test_a_json_schema_equals_constrained_plain_decoding(files, which):
    with _assisted(files, which) as e:
        r = e.generate(PROMPTS[0], response_format=SCHEMA, max_tokens=60)
        assert r.token_ids == _plain(files["target-right"], PROMPTS[0], response_format=SCHEMA, max_tokens=60)
        assert r.stats.drafted > 0


def _step_on(files, prefix: list[int], token: int, row: np.ndarray) -> np.ndarray:
    model, helper = Model(files["target-right"], exact=True), Model(files["wrong-ish"], exact=True)
    ctx = Context(model, n_ctx=64, n_threads=1)
    a = AssistantContext(helper, ctx)
    try:
        ctx.decode(prefix)
        assert a.n_past == len(prefix)
        logits, _ = a.step(token, row)
        again, _ = a.step(token, row)  # nothing written: the same step gives the same
        np.testing.assert_array_equal(logits, again)
        assert ctx.n_past == len(prefix) and ctx.pos_max() == len(prefix) - 1
        return logits
    finally:
        a.close()
        ctx.close()
        model.close()
        helper.close()


def test_the_assistant_reads_the_targets_kv_cache(files):
    """The same (token, row) step at the same position differs with what the target's
    cache holds: its attention reads the target's keys and values."""
    row = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    a = _step_on(files, [1, 40, 41, 42, 43], 50, row)
    b = _step_on(files, [1, 90, 91, 92, 93], 50, row)
    assert np.abs(a - b).max() > 1e-3
    np.testing.assert_array_equal(a, _step_on(files, [1, 40, 41, 42, 43], 50, row))


def test_the_first_step_is_fed_the_targets_row_of_the_position_before(files, monkeypatch):
    """Each round's first step is at the target's next position p, on the text's token p
    and the target's hidden row at p - 1 as one decode of the whole text gives it; the
    drafts after it are at the same position, on the assistant's own rows."""
    calls: list = []
    step, propose = AssistantContext.step, assistant_module.AssistantDrafter.propose

    def recording_step(self, token, row):
        calls.append((self.n_past, int(token), np.array(row)))
        return step(self, token, row)

    def recording_propose(self, *args, **kwargs):
        calls.append("round")
        return propose(self, *args, **kwargs)

    monkeypatch.setattr(AssistantContext, "step", recording_step)
    monkeypatch.setattr(assistant_module.AssistantDrafter, "propose", recording_propose)
    with _assisted(files, "wrong-ish") as e:
        r = e.generate(PROMPTS[1], max_tokens=40, raw=True)
        text = e.prompt_tokens(PROMPTS[1], raw=True) + list(r.token_ids)
    model = Model(files["target-right"], exact=True)
    ctx = Context(model, n_ctx=512, n_threads=1)
    try:
        ctx.keep_hidden()
        ctx.decode(text)
        ref = ctx.hidden_kept().copy()
    finally:
        ctx.close()
        model.close()
    firsts = [c for prev, c in zip(calls, calls[1:]) if prev == "round" and c != "round"]
    assert len(firsts) > 5
    for pos, token, row in firsts:
        assert token == text[pos]
        np.testing.assert_allclose(row, ref[pos - 1], rtol=1e-4, atol=1e-4)
    rounds: list[list] = []
    for c in calls:
        if c == "round":
            rounds.append([])
        else:
            rounds[-1].append(c)
    assert all(len({pos for pos, _, _ in steps}) == 1 for steps in rounds if steps)  # one position a round


def test_a_batch_decodes_plainly_and_says_why(files):
    with _assisted(files, "right") as e:
        batch = e.generate_many(PROMPTS, parallel=2, max_tokens=24)
        assert "Gemma 4 assistant does not draft inside parallel batches" in batch.drafter_note
        got = {o.key: o.result.token_ids for o in batch}
    assert got == {i: _plain(files["target-right"], p, max_tokens=24) for i, p in enumerate(PROMPTS)}


def test_switching_drafters_and_back_keeps_the_assistant(files):
    with _assisted(files, "right") as e:
        e.set_drafter("ngram")
        assert e.drafter_name == "ngram"
        e.set_drafter("assistant")
        assert e.drafter_name == "assistant"
        e.set_drafter(str(files["right"]))  # the same file: not loaded again
        r = e.generate(PROMPTS[0], max_tokens=24)
        assert r.stats.accepted == r.stats.drafted > 0


def test_an_assistant_for_another_architecture_says_so(files):
    with pytest.raises(InputError, match="drafts only for a Gemma 4 target"):
        Engine(files["llama"], files["right"], n_ctx=128, n_threads=1)


def test_an_assistant_file_as_the_target_says_so(files):
    with pytest.raises(InputError, match="is a Gemma 4 assistant"):
        Engine(files["right"], None, n_ctx=128, n_threads=1)
    with pytest.raises(InputError, match="not a Gemma 4 assistant"):
        model, target = Model(files["llama"]), Model(files["target"])
        try:
            from edgespec.llama import check_assistant

            check_assistant(model, target)
        finally:
            model.close()
            target.close()


# -- lossless sampling ---------------------------------------------------------------

PROMPT_IDS = [5, 9, 14, 20, 9, 14]
N_SAMPLES = 4000


def _marginals(path) -> tuple[np.ndarray, np.ndarray]:
    """p(t1) and p(t2) = sum_t1 p(t1) p(t2 | t1), from the target's logits."""
    model = Model(path, exact=True)
    ctx = Context(model, n_ctx=64, n_threads=1)
    params = SamplingParams(temperature=1.0)
    try:
        p1 = sampling.probs_from_logits(ctx.decode(PROMPT_IDS)[0].copy(), params)
        p2 = np.zeros_like(p1)
        for t1 in np.nonzero(p1 > 1e-9)[0]:
            ctx.rollback(len(PROMPT_IDS))
            p2 += p1[t1] * sampling.probs_from_logits(ctx.decode([int(t1)])[0].copy(), params)
    finally:
        ctx.close()
        model.close()
    return p1, p2


def _counts(files) -> tuple[np.ndarray, np.ndarray, int, int]:
    with _assisted(files, "wrong-ish", k=2) as e:
        V = e.target_model.n_vocab
        c1, c2 = np.zeros(V), np.zeros(V)
        drafted = accepted = 0
        for seed in range(N_SAMPLES):
            r = e.generate(PROMPT_IDS, max_tokens=2, temperature=1.0, seed=seed)
            c1[r.token_ids[0]] += 1
            c2[r.token_ids[1]] += 1
            drafted, accepted = drafted + r.stats.drafted, accepted + r.stats.accepted
    return c1, c2, drafted, accepted


@pytest.fixture(scope="module")
def sampled(files):
    return _marginals(files["target-right"]), _counts(files)  # q near p, not equal


def test_sampling_with_assistant_drafts_keeps_the_targets_distribution(sampled):
    (p1, p2), (c1, c2, drafted, accepted) = sampled
    assert 0 < accepted < drafted
    for counts, p in ((c1, p1), (c2, p2)):
        rejected, stat, crit = chi_square_rejects(counts, p)
        assert not rejected, f"chi2 {stat:.1f} > {crit:.1f}"


def test_the_chi_square_catches_assistant_drafts_always_accepted(files, sampled, monkeypatch):
    (p1, p2), _ = sampled
    monkeypatch.setattr(sampling, "accept", lambda p_x, q_x, rng: True)
    c1, c2, _, _ = _counts(files)
    assert chi_square_rejects(c2, p2)[0]


# -- pairing -------------------------------------------------------------------------


@pytest.fixture
def store(tmp_path, monkeypatch):
    """A HOME whose one store (EDGESPEC_MODEL_PATH) holds a Gemma 4 target with its assistant
    beside it, an assistant of another Gemma 4 width, and a llama target of the same vocabulary."""
    from edgespec import catalog
    from edgespec.catalog import stores

    models = tmp_path / "models"
    paths = {
        "target": make_tiny_gemma4(models / "gemma4" / "gemma-4-tiny-it.gguf", right=True),
        "assistant": make_tiny_assistant(models / "gemma4" / "gemma-4-tiny-it-assistant.gguf", right=True),
        "llama": make_tiny_model(models / "llama" / "tiny-llama.gguf", n_ff=1024, n_layer=4),
    }
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for var in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "LLAMA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("EDGESPEC_MODEL_PATH", str(models))
    monkeypatch.setattr(stores, "OLLAMA_SYSTEM_ROOTS", ())
    catalog.forget()
    yield paths
    catalog.forget()


def test_the_assistant_beside_its_target_is_offered_to_it_alone(store):
    from edgespec import catalog

    index = catalog.scan()
    by_name = {m.name: m for m in index.models}
    target, helper, llama = by_name["gemma-4-tiny-it"], by_name["gemma-4-tiny-it-assistant"], by_name["tiny-llama"]
    assert helper.header.architecture == "gemma4-assistant" and helper.header.n_embd_out == target.header.n_embd
    assert [d.name for d in catalog.drafter_candidates(target)] == [helper.name]
    assert [d.name for d in index.drafters_for(target)] == [helper.name]
    assert catalog.drafter_candidates(llama) == [] and index.drafters_for(llama) == []
    assert "only for a Gemma 4 target" in helper.drafting_problem(llama)
    assert index.drafters_for(helper) == [] and index.targets_for(helper) == [target]


def test_models_pairs_lists_the_assistant_with_its_target_and_never_as_a_target(store):
    from edgespec.catalog import gguf
    from edgespec.planning import pairing
    from local_models_support import gpu_profile

    assert gguf.mtp_head(store["assistant"]) == (0, 0.0)  # all nextn layers: no head of its own
    _, pairs = pairing.machine_pairs(gpu_profile())
    assert [(t.name, c.name, c.assistant) for t, c in pairs] == [("gemma-4-tiny-it", "gemma-4-tiny-it-assistant", True)]
    assert "a Gemma 4 assistant" in pairs[0][1].line()


def test_an_assistant_of_another_width_is_not_offered():
    from edgespec.catalog import archs

    assert archs.assists("gemma4", 1536, "gemma4-assistant", 1536) is None
    assert "width 2560" in archs.assists("gemma4", 1536, "gemma4-assistant", 2560)
    assert "does not generate on its own" in archs.assists("gemma4-assistant", 96, "gemma4", 0)
    assert archs.assists("llama", 64, "llama", 0) is None


def test_draft_assistant_plans_the_assistant_and_the_engine_runs_it(store):
    from edgespec.planning import planner
    from local_models_support import gpu_profile

    p = planner.plan(gpu_profile(), target=str(store["target"]), draft="assistant", exact=True)
    assert p.draft == "gemma-4-tiny-it-assistant" and p.drafter == "model"
    assert any("a Gemma 4 assistant" in n for n in p.notes)
    kwargs = p.engine_kwargs()
    assert kwargs["draft"] == store["assistant"]
    auto = planner.plan(gpu_profile(), target=str(store["target"]), exact=True)
    assert auto.draft == "gemma-4-tiny-it-assistant"  # paired automatically: it lies beside its target
    with Engine(**{**kwargs, "n_ctx": 256, "n_threads": 1}) as e:
        r = e.generate(PROMPTS[0], max_tokens=24)
        assert e.drafter_name == "assistant" and r.stats.drafter == "assistant"
        assert r.token_ids == _plain(store["target"], PROMPTS[0], max_tokens=24)


def test_draft_assistant_without_one_says_where_to_put_it(store):
    from edgespec.costmodel.adaptive import normalize_draft
    from edgespec.errors import ProfileError
    from edgespec.planning import planner
    from local_models_support import gpu_profile

    assert normalize_draft(" Assistant ") == "assistant"
    with pytest.raises(ProfileError, match="no Gemma 4 assistant for .*beside it"):
        planner.plan(gpu_profile(), target=str(store["llama"]), draft="assistant")
    with pytest.raises(ProfileError, match="needs --target"):
        planner.plan(gpu_profile(), draft="assistant")
