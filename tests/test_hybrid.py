"""Hybrid targets (issue 44): recurrent layers beside attention, rolled back through
llama.cpp's recurrent-state snapshots, prefix reuse through checkpoints.

On the tiny random ``lfm2`` (short convolutions) and ``qwen35`` (Gated DeltaNet) models of
tests/tiny_hybrid.py, with batch-invariant kernels: plain decoding serves any number of
requests on one engine, and every drafting path gives the same greedy tokens as plain
decoding, token for token; a property test drives 1,000 random rounds (accept lengths 0
to all, prompts across micro-batch boundaries) through the context against one decode of
the whole sequence.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgespec import DraftingOptions, Engine
from edgespec.llama import Context, Model
from tiny_hybrid import make_tiny_lfm2, make_tiny_qwen35
from tiny_models import make_tiny_model

ARCHS = ("lfm2", "qwen35")
PROMPTS = [
    "the cat sat on the mat. the cat sat on the",
    "def f(x): return x + 1\ndef g(x): return",
    "hello world hello world hello",
    "one two three one two three one two",
]


@pytest.fixture(scope="module")
def hybrids(tmp_path_factory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("hybrid")
    return {
        "lfm2": make_tiny_lfm2(d / "lfm2.gguf"),
        "qwen35": make_tiny_qwen35(d / "qwen35.gguf"),
        "lfm2-noisy": make_tiny_lfm2(d / "lfm2-noisy.gguf", noise=0.3, noise_seed=5),
        "llama": make_tiny_model(d / "llama.gguf", seed=11),
    }


def _run(engine: Engine, prompt, **kw):
    return engine.generate(prompt, max_tokens=kw.pop("max_tokens", 40), **kw)


def _fresh(path, prompt, **kw) -> list[int]:
    """The plain greedy tokens of ``prompt`` on a new engine (nothing cached)."""
    with Engine(path, None, exact=True, n_ctx=1024, n_threads=1) as e:
        return _run(e, prompt, **kw).token_ids


@pytest.mark.parametrize("arch", ARCHS)
def test_plain_decoding_serves_any_number_of_requests(hybrids, arch):
    """The second request used to raise RollbackError (prefix reuse cut the cache back):
    each request now keeps what the recurrent state can keep, restores a checkpoint or
    decodes again, and answers as a fresh engine does."""
    path = hybrids[arch]
    with Engine(path, None, exact=True, n_ctx=1024, n_threads=1) as e:
        assert e.ctx.recurrent and e.ctx.max_drafts == 0  # plain: no snapshots asked for
        seen = []
        for prompt in [PROMPTS[0], PROMPTS[0], PROMPTS[0] + " cat", *PROMPTS[1:], PROMPTS[1]]:
            r = _run(e, prompt, raw=True)
            assert r.token_ids == _fresh(path, prompt, raw=True)
            seen.append(r.stats.prompt_reuse)
        # the same prompt again restores the checkpoint taken after its prefill; one that
        # extends the cache keeps it all
        assert seen[1] == "checkpoint" and seen[2] == "checkpoint"
        assert e.ctx.checkpoints.restored >= 1


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("memory", [False, True], ids=["prompt-lookup", "memory"])
def test_prompt_lookup_and_memory_equal_plain_decoding(hybrids, arch, memory):
    path = hybrids[arch]
    drafted = accepted = 0
    # k fixed: the learned policy may judge drafting not worth it on these timings
    with Engine(path, "ngram", drafting=DraftingOptions(k=6), exact=True, n_ctx=1024, n_threads=1) as spec:
        assert spec.ctx.n_rs_seq == 6 and spec.ctx.max_drafts == 6
        for _ in range(2):  # the second pass drafts from the memory of the first
            for prompt in PROMPTS:
                r = _run(spec, prompt, raw=True, max_tokens=48, memory=memory)
                assert r.token_ids == _fresh(path, prompt, raw=True, max_tokens=48)
                drafted, accepted = drafted + r.stats.drafted, accepted + r.stats.accepted
    assert drafted > 0  # random weights rarely repeat the prompt: drafts rejected, rolled back
    if memory:
        assert accepted > 20  # the second pass: the memory's drafts of the first pass's answers


@pytest.mark.parametrize("drafter", ["lfm2-noisy", "llama"], ids=["hybrid-drafter", "kv-drafter"])
def test_a_model_drafter_equals_plain_decoding(hybrids, drafter):
    """A draft model, itself hybrid (rolled back through its checkpoints: it decodes
    its drafts one per call) or not, for a hybrid target."""
    target = hybrids["lfm2"]
    # k fixed: the drafters are as large as the target, which the policy would not draft with
    with Engine(target, hybrids[drafter], drafting=DraftingOptions(k=4), exact=True, n_ctx=1024, n_threads=1) as spec:
        assert spec.ctx.max_drafts == 4
        drafted = rejected = 0
        for prompt in PROMPTS:
            r = _run(spec, prompt, raw=True)
            assert r.token_ids == _fresh(target, prompt, raw=True)
            drafted, rejected = drafted + r.stats.drafted, rejected + r.stats.rejected
        assert drafted > 0 and rejected > 0  # rollbacks happened on both models
        if drafter == "lfm2-noisy":
            assert drafted > rejected  # and the hybrid drafter's checkpoints served accepted drafts


@pytest.mark.parametrize("arch", ARCHS)
def test_a_json_schema_equals_constrained_plain_decoding(hybrids, arch):
    path = hybrids[arch]
    fmt = {
        "type": "json_schema",
        "json_schema": {
            "name": "x",
            "schema": {
                "type": "object",
                "properties": {"name": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}},
                "required": ["name", "n"],
            },
        },
    }
    with Engine(path, "ngram", exact=True, n_ctx=1024, n_threads=1) as spec:
        r = _run(spec, PROMPTS[0], response_format=fmt, max_tokens=60)
        assert r.token_ids == _fresh(path, PROMPTS[0], response_format=fmt, max_tokens=60)
        assert r.stats.drafted > 0  # the grammar's forced tokens at least


@pytest.mark.parametrize("arch", ARCHS)
def test_a_batch_of_four_equals_plain_decoding(hybrids, arch):
    path = hybrids[arch]
    with Engine(path, "ngram", exact=True, n_ctx=1024, n_threads=1) as spec:
        outs = {o.key: o.result for o in spec.generate_many(PROMPTS, parallel=4, max_tokens=40, raw=True)}
    for i, prompt in enumerate(PROMPTS):
        assert outs[i].token_ids == _fresh(path, prompt, raw=True)


@pytest.mark.parametrize("arch", ARCHS)
def test_chat_over_three_turns_with_edits(hybrids, arch):
    """Turns that extend the cache, an edited last message (back to the checkpoint at
    the previous turn's end) and a regenerated answer (the prompt's checkpoint)."""
    path = hybrids[arch]
    t1 = [{"role": "user", "content": "the cat sat on the mat"}]
    with Engine(path, "ngram", exact=True, n_ctx=1024, n_threads=1) as spec:
        history = list(t1)
        for text in ["and the dog?", "the cat sat on the mat again"]:
            reply = _run(spec, history)
            assert reply.token_ids == _fresh(path, history)
            history += [{"role": "assistant", "content": reply.text}, {"role": "user", "content": text}]
        reply = _run(spec, history)
        assert reply.token_ids == _fresh(path, history)
        edited = [*history[:-1], {"role": "user", "content": "no: the dog sat on the mat"}]
        again = _run(spec, edited)
        assert again.token_ids == _fresh(path, edited)
        assert again.stats.prompt_reuse == "checkpoint"
        assert again.stats.prompt_tokens_processed < len(spec.prompt_tokens(edited)) / 2
        regen = _run(spec, edited)
        assert regen.token_ids == again.token_ids and regen.stats.prompt_reuse == "checkpoint"


@pytest.mark.parametrize("arch", ARCHS)
def test_the_context_rolls_back_exactly_over_1000_random_rounds(hybrids, arch):
    """Random verify batches of 0..R drafts, each round keeping 0..all of them, prompts
    decoded in chunks across micro-batch boundaries (n_batch 16): the logits of every
    committed row equal plain decoding's, one token per decode (within 0.01: the
    recurrent kernels of an n-token batch round differently; the argmax equal), so no
    rollback ever restored a stale state."""
    model = Model(hybrids[arch], exact=True)
    R, rng = 8, np.random.default_rng(7)
    ctx = Context(model, n_ctx=2048, n_batch=16, n_threads=1, rollback=R)
    ref = Context(model, n_ctx=2048, n_batch=16, n_threads=1)
    assert ctx.max_drafts == R
    mismatches = rounds = 0
    try:
        for _ in range(10):
            ctx.clear()
            prompt = [int(t) for t in rng.integers(5, 300, size=int(rng.integers(2, 60)))]
            committed, rows_at = list(prompt), {}
            if len(committed) > 1:
                ctx.decode(committed[:-1], rows=())
            for _ in range(100):
                k = int(rng.integers(0, R + 1))
                L = len(committed)
                drafts = [int(t) for t in rng.integers(5, 300, size=k)]
                rows = ctx.decode([committed[-1], *drafts], rows=range(k + 1))
                n = int(rng.integers(0, k + 1))  # how many drafts this round keeps
                ctx.rollback(L + n)
                assert ctx.pos_max() == L + n - 1
                for i in range(n + 1):
                    rows_at[L - 1 + i] = np.array(rows[i])
                committed += [*drafts[:n], int(np.argmax(rows[n]))]
                rounds += 1
            ref.clear()
            plain = [np.array(ref.decode([t])[0]) for t in committed[:-1]]  # plain decoding's rows
            for pos, row in rows_at.items():
                if int(np.argmax(row)) != int(np.argmax(plain[pos])) or not np.allclose(row, plain[pos], atol=0.01):
                    mismatches += 1
    finally:
        ctx.close()
        ref.close()
        model.close()
    assert rounds == 1000 and mismatches == 0


def test_a_rollback_past_the_snapshots_is_refused_before_llama_cpp_is_asked(hybrids):
    """Undoing a whole decode (upstream #26695) or more than the snapshots hold would
    restore a stale state silently: the context refuses it (the loop never asks)."""
    from edgespec.errors import RollbackError

    model = Model(hybrids["lfm2"], exact=True)
    ctx = Context(model, n_ctx=256, n_batch=32, n_threads=1, rollback=4)
    try:
        ctx.decode([5, 6, 7, 8, 9, 10])
        ctx.decode([11, 12, 13])
        assert ctx.rollback_room() == 2
        with pytest.raises(RollbackError):
            ctx.rollback(6)  # the whole last decode
        ctx.rollback(7)  # two of three: fine
        with pytest.raises(RollbackError):
            ctx.rollback(6)  # a second removal before the next decode
        ctx.rollback(0)  # everything: always fine
        assert ctx.pos_max() == -1
    finally:
        ctx.close()
        model.close()


def test_snapshots_are_asked_for_by_the_drafter_and_fitted_later(hybrids):
    """A plain engine asks for no snapshots; switching to a drafter reopens the context
    with enough for its longest verify; --k asks for that many."""
    with Engine(hybrids["qwen35"], None, exact=True, n_ctx=512, n_threads=1) as e:
        assert e.ctx.n_rs_seq == 0 and e.k_max_for("ngram") == 0
        e.set_drafter("ngram")
        assert e.ctx.n_rs_seq == 15 and e.k_max == 15
    with Engine(hybrids["qwen35"], "ngram", drafting=DraftingOptions(k=3), n_ctx=512, n_threads=1) as e:
        assert e.ctx.n_rs_seq == 3


def test_a_small_batch_caps_the_snapshots_so_llama_cpp_never_aborts(hybrids):
    """llama.cpp aborts (GGML_ASSERT) when n_ubatch < n_rs_seq + 2: the request is cut."""
    with Engine(hybrids["lfm2"], "ngram", n_batch=8, n_ctx=256, n_threads=1) as e:
        assert e.ctx.n_rs_seq == 6 and e.k_max == 6
        r = _run(e, PROMPTS[2], raw=True)
        assert r.token_ids


def test_sampling_stays_lossless_on_a_hybrid(hybrids):
    """χ² on the first two sampled tokens, prompt lookup drafting on the tiny lfm2."""
    from edgespec.decoding import sampling
    from edgespec.decoding.params import SamplingParams
    from test_exact_sampling import chi_square_rejects

    path, prompt = hybrids["lfm2"], [5, 9, 14, 20, 9, 14, 20, 9, 14]
    model = Model(path, exact=True)
    ctx = Context(model, n_ctx=64, n_threads=1)
    params = SamplingParams(temperature=1.0)
    try:
        p1 = sampling.probs_from_logits(ctx.decode(prompt)[0].copy(), params)
        p2 = np.zeros_like(p1)
        for t1 in np.nonzero(p1 > 1e-9)[0]:
            ctx.clear()
            ctx.decode(prompt, rows=())
            p2 += p1[t1] * sampling.probs_from_logits(ctx.decode([int(t1)])[0].copy(), params)
    finally:
        ctx.close()
        model.close()
    c1, c2 = np.zeros(len(p1)), np.zeros(len(p1))
    drafted = 0
    with Engine(path, "ngram", drafting=DraftingOptions(k=3), n_ctx=64, exact=True, n_threads=1) as e:
        for seed in range(3000):
            r = e.generate(prompt, max_tokens=2, temperature=1.0, seed=seed)
            c1[r.token_ids[0]] += 1
            c2[r.token_ids[1]] += 1
            drafted += r.stats.drafted
    assert drafted > 0
    for counts, p in ((c1, p1), (c2, p2)):
        rejected, stat, crit = chi_square_rejects(counts, p)
        assert not rejected, f"chi2 {stat:.1f} > {crit:.1f}"


@pytest.fixture(scope="module")
def fim_hybrid(tmp_path_factory):
    return make_tiny_lfm2(tmp_path_factory.mktemp("fim-hybrid") / "lfm2-fim.gguf", fim=True)


def _texts(client, path: str, bodies: list[dict]) -> list:
    out = []
    for body in bodies:
        resp = client.post(path, json=body)
        assert resp.status_code == 200, resp.text
        j = resp.json()
        out.append(j["content"] if "content" in j else [c["text"] for c in j["choices"]])
    return out


@pytest.mark.parametrize("parallel", [1, 2], ids=["one-slot", "two-slots"])
def test_the_server_equals_plain_decoding_on_a_hybrid(fim_hybrid, parallel):
    """/v1/completions with cache_prompt (the same prompt again, one that extends it, n = 2)
    and /infill typed forward, on a server drafting with prompt lookup: the texts of a
    server decoding plainly."""
    from fastapi.testclient import TestClient

    from edgespec.server import create_app

    typed = "    total = total + value  # add"
    prefix, suffix = "def add_all(values):\n    total = 0\n    for value in values:\n", "    return total\n"
    completions = [
        {"prompt": PROMPTS[0], "cache_prompt": True},
        {"prompt": PROMPTS[0], "cache_prompt": True},
        {"prompt": PROMPTS[0] + " cat sat", "cache_prompt": True},
        {"prompt": PROMPTS[2], "n": 2, "cache_prompt": True},
    ]
    infills = [
        {"input_prefix": prefix, "prompt": typed[:i], "input_suffix": suffix, "cache_prompt": True}
        for i in range(4, len(typed), 7)
    ]
    answers = []
    for draft, slots in (("ngram", parallel), (None, 1)):
        with Engine(fim_hybrid, draft, exact=True, n_ctx=1024, n_threads=1) as e:
            app = create_app(e, max_tokens=24, parallel=slots, defaults={"temperature": 0.0})
            with TestClient(app) as c:
                answers.append((_texts(c, "/v1/completions", completions), _texts(c, "/infill", infills)))
    assert answers[0] == answers[1]
    assert answers[0][0][3][0] == answers[0][0][3][1]  # n = 2 at temperature 0: the same text twice


def test_c_of_a_hybrid_is_measured_at_first_use(hybrids, tmp_path, monkeypatch):
    """Timing a verify batch on a recurrent state cannot undo it by snapshots (a whole
    decode): each batch is undone by restoring the prefix's checkpoint."""
    from edgespec.catalog import verify_cache
    from edgespec.measuring import first_use

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    path = hybrids["qwen35"]
    with Engine(path, "ngram", exact=True, n_ctx=256, n_threads=1) as e:
        line = first_use.measure_first_use(e, even_if_off=True)
        assert line is not None and "later runs plan from it" in line
        assert e.ctx.tokens == [] and e.ctx.pos_max() == -1
        assert sorted(int(n) for n in verify_cache.measured_entry(path, exact=True)["c"]) == list(first_use.SIZES)
        assert _run(e, PROMPTS[1], raw=True).token_ids == _fresh(path, PROMPTS[1], raw=True)


def test_a_hybrid_without_snapshots_plans_plain_decoding_with_the_reason(tmp_path):
    """A target of a recurrent architecture llama.cpp cannot roll back (here a header
    that says mamba2) is planned plainly, and the plan line says why."""
    from edgespec.planning.planner import plan
    from tiny_models import make_header_model

    (path,) = make_header_model(tmp_path / "mamba.gguf", arch="mamba2")
    p = plan("cpu-small", target=str(path), draft="ngram", offline=True)
    assert p.drafter == "none"
    assert "cannot roll back" in p.explanation.headline and "mamba2" in p.explanation.headline
    (kv,) = make_header_model(tmp_path / "llama.gguf")
    assert plan("cpu-small", target=str(kv), draft="ngram", offline=True).drafter == "ngram"


def test_an_arch_whose_snapshots_break_across_sequences_batches_plainly(hybrids, monkeypatch):
    """qwen4exp's snapshots go wrong in a multi-sequence decode (upstream #28019): its batch
    contexts keep none, so a batch there decodes plainly, still equal to plain decoding
    (shown with lfm2 standing in for it)."""
    from edgespec.llama import MultiContext, multi

    monkeypatch.setattr(multi, "MULTI_SEQUENCE_UNSAFE", frozenset({"lfm2"}))
    model = Model(hybrids["lfm2"], exact=True)
    ctxs = [MultiContext(model, n_seq=n, n_ctx=256, rollback=8) for n in (2, 1)]
    try:
        assert [c.max_drafts for c in ctxs] == [0, 8]
    finally:
        for c in ctxs:
            c.close()
        model.close()
    path = hybrids["lfm2"]
    with Engine(path, "ngram", exact=True, n_ctx=1024, n_threads=1) as spec:
        outs = {o.key: o.result for o in spec.generate_many(PROMPTS[:2], parallel=2, max_tokens=30, raw=True)}
    assert all(outs[i].stats.drafted == 0 for i in outs)
    assert [outs[i].token_ids for i in range(2)] == [_fresh(path, p, raw=True, max_tokens=30) for p in PROMPTS[:2]]


@pytest.mark.parametrize("arch", ARCHS)
def test_a_generation_closed_early_leaves_the_state_consistent(hybrids, arch):
    """Ctrl-C in chat or a client gone closes the stream between rounds: the next request
    on the engine still answers as a fresh engine does."""
    path = hybrids[arch]
    with Engine(path, "ngram", drafting=DraftingOptions(k=4), exact=True, n_ctx=1024, n_threads=1) as e:
        _run(e, PROMPTS[3], raw=True)  # the memory holds an answer: the next stream drafts from it
        events = e.stream(PROMPTS[3], raw=True, max_tokens=40)
        for i, _ in enumerate(events):
            if i == 12:
                break
        events.close()
        for prompt in (PROMPTS[3], PROMPTS[1]):
            assert _run(e, prompt, raw=True).token_ids == _fresh(path, prompt, raw=True)


def test_the_plan_trades_the_draft_length_against_the_snapshots_memory(hybrids, monkeypatch):
    """Each draft a round may verify costs one more copy of the recurrent state: where the
    memory left holds fewer copies than the drafter's bound, the plan drafts fewer (here a
    100 MB state with room for 3.5 copies: 3 drafts a round), and says so."""
    from dataclasses import replace

    from edgespec import catalog
    from edgespec.planning import choice
    from edgespec.planning.planner import plan

    path = str(hybrids["qwen35"])
    assert plan("cpu-small", target=path, draft="ngram", offline=True).drafting.k_max != 3
    plane, real = 100 * 10**6, catalog.check_fit
    monkeypatch.setattr(choice, "recurrent_state_bytes", lambda shape, n_rs_seq=0: plane * (1 + n_rs_seq))
    monkeypatch.setattr(
        catalog, "check_fit", lambda *a, **kw: replace(f := real(*a, **kw), available_bytes=f.need_bytes + 350 * 10**6)
    )
    p = plan("cpu-small", target=path, draft="ngram", offline=True)
    assert p.drafter == "ngram" and p.drafting.k_max == 3
    assert any("drafts limited to 3 a round" in n for n in p.explanation.notes)
