"""``--draft mtp``: the target's own multi-token-prediction head drafts (issue 45).

On tiny ``qwen35`` models with one MTP block (tests/tiny_hybrid.py), under batch-invariant
kernels: a head right by construction (``right_head``: every draft is the target's next
token) has every draft accepted and gives plain decoding's greedy tokens; perturbed heads
have some rejected and still give them, alone, over several requests on one engine and
under a JSON schema; the rows the head was fed are the target's hidden rows of the
position before, as one decode of the whole text gives them; sampling with MTP drafts
keeps the target's distribution (χ²); a model without nextn layers asked for mtp says so.
"""

from __future__ import annotations

import numpy as np
import pytest

from edgespec import DraftingOptions, Engine
from edgespec.decoding import mtp as mtp_module
from edgespec.decoding import sampling
from edgespec.decoding.params import SamplingParams
from edgespec.errors import EdgespecError, InputError
from edgespec.llama import Context, Model
from test_exact_sampling import chi_square_rejects
from tiny_hybrid import make_tiny_qwen35

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
def heads(tmp_path_factory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("mtp")
    return {
        "right": make_tiny_qwen35(d / "right.gguf", nextn=True, right_head=True),
        "perturbed": make_tiny_qwen35(d / "p01.gguf", nextn=True, right_head=True, perturb=0.1),
        "wrong-ish": make_tiny_qwen35(d / "p03.gguf", nextn=True, right_head=True, perturb=0.3),
        "random": make_tiny_qwen35(d / "random.gguf", nextn=True),
        "plain": make_tiny_qwen35(d / "plain.gguf"),
    }


def _plain(path, prompt, **kw) -> list[int]:
    with Engine(path, None, exact=True, n_ctx=512, n_threads=1) as e:
        return e.generate(prompt, **kw).token_ids


def _mtp(path, k: int | None = 3, **drafting) -> Engine:
    return Engine(path, "mtp", exact=True, n_ctx=512, n_threads=1, drafting=DraftingOptions(k=k, **drafting))


def test_the_right_head_has_every_draft_accepted(heads):
    path = heads["right"]
    with _mtp(path) as e:
        assert e.drafter_name == "mtp" and e.k_max == 3 and e.target_model.has_mtp
        for prompt in PROMPTS:
            r = e.generate(prompt, max_tokens=48)
            assert r.token_ids == _plain(path, prompt, max_tokens=48)
            st = r.stats
            assert st.drafted > 0 and st.accepted == st.drafted
            assert st.accepted_by_source == {"mtp": st.accepted}
            assert st.rounds < len(r.token_ids) / 2  # 3 drafts + 1 token per round, mostly


@pytest.mark.parametrize("head", ["perturbed", "wrong-ish", "random"])
def test_perturbed_heads_give_plain_decodings_tokens(heads, head):
    path = heads[head]
    drafted = accepted = 0
    with _mtp(path) as e:
        for prompt in PROMPTS:
            r = e.generate(prompt, max_tokens=48)
            assert r.token_ids == _plain(path, prompt, max_tokens=48)
            drafted, accepted = drafted + r.stats.drafted, accepted + r.stats.accepted
    assert drafted > accepted  # some drafts rejected, the output unchanged
    if head != "random":
        assert accepted > 0


def test_requests_on_one_engine_reuse_the_cache_and_stay_exact(heads):
    """Several requests and the same one again (the cache's prefix, a checkpoint, the
    head's own cache cut back) answer as a fresh engine does."""
    path = heads["perturbed"]
    with _mtp(path) as e:
        for prompt in [*PROMPTS, PROMPTS[0], PROMPTS[0] + " the cat"]:
            assert e.generate(prompt, max_tokens=40).token_ids == _plain(path, prompt, max_tokens=40)


def test_the_learned_policy_stays_exact(heads):
    """Without --k the learned policy picks each round's length (on the tiny models and
    exact kernels it rarely pays to draft; where it drafts the tokens are the same)."""
    path = heads["right"]
    from edgespec.costmodel.adaptive import VerifyCost

    flat = VerifyCost((1, 2, 4), (1.0, 1.05, 1.1))  # a verify as cheap as a GPU's
    with _mtp(path, k=None, mtp_gamma=0.05, verify_cost=flat) as e:
        drafted = 0
        for prompt in PROMPTS:
            r = e.generate(prompt, max_tokens=40)
            assert r.token_ids == _plain(path, prompt, max_tokens=40)
            drafted += r.stats.drafted
        assert drafted > 0


@pytest.mark.parametrize("head", ["right", "wrong-ish"])
def test_a_json_schema_equals_constrained_plain_decoding(heads, head):
    path = heads[head]
    with _mtp(path) as e:
        r = e.generate(PROMPTS[0], response_format=SCHEMA, max_tokens=60)
        assert r.token_ids == _plain(path, PROMPTS[0], response_format=SCHEMA, max_tokens=60)
        assert r.stats.drafted > 0


def test_the_head_is_fed_the_targets_rows_of_the_position_before(heads, monkeypatch):
    """Every pair the head catches up on at position p (a round's first decode) is the
    text's token p with the target's hidden row at p - 1 as one decode of the whole text
    gives it (zeros before position 0); a draft step pairs a draft with the head's own row."""
    from edgespec.llama import MtpContext

    path = heads["wrong-ish"]
    calls: list = []
    decode, propose = MtpContext.decode, mtp_module.MtpDrafter.propose

    def recording_decode(self, tokens, rows):
        calls.append((self.n_past, list(tokens), rows.copy()))
        return decode(self, tokens, rows)

    def recording_propose(self, *args, **kwargs):
        calls.append("round")
        return propose(self, *args, **kwargs)

    monkeypatch.setattr(MtpContext, "decode", recording_decode)
    monkeypatch.setattr(mtp_module.MtpDrafter, "propose", recording_propose)
    with _mtp(path) as e:
        r = e.generate(PROMPTS[1], max_tokens=40, raw=True)
        text = e.prompt_tokens(PROMPTS[1], raw=True) + list(r.token_ids)
    model = Model(path, exact=True)
    ctx = Context(model, n_ctx=512, n_threads=1)
    try:
        ctx.keep_hidden()
        ctx.decode(text)
        ref = ctx.hidden_kept().copy()
    finally:
        ctx.close()
        model.close()
    catch_ups = [c for prev, c in zip(calls, calls[1:]) if prev == "round" and c != "round"]
    assert len(catch_ups) > 5 and catch_ups[0][0] == 0  # the first round: the whole prompt
    for pos, tokens, rows in catch_ups:
        assert tokens == text[pos : pos + len(tokens)]
        for i, p in enumerate(range(pos - 1, pos - 1 + len(tokens))):
            if p < 0:
                assert not rows[i].any()
            else:
                np.testing.assert_allclose(rows[i], ref[p], rtol=1e-4, atol=1e-4)
    steps = [c for prev, c in zip(calls, calls[1:]) if prev != "round" and c != "round"]
    assert steps and all(len(t) == 1 for _, t, _ in steps)  # drafts, one per decode


def test_a_model_without_nextn_layers_asked_for_mtp_says_so(heads):
    with pytest.raises(InputError, match="no multi-token-prediction"):
        Engine(heads["plain"], "mtp", n_ctx=128, n_threads=1)
    with Engine(heads["right"], None, n_ctx=128, n_threads=1) as e:  # loaded without its head
        with pytest.raises(InputError, match="without its MTP layers"):
            e.set_drafter("mtp")


def test_the_plan_picks_mtp_only_for_a_target_with_nextn_layers(heads):
    from edgespec.planning.planner import plan

    p = plan("cpu-small", target=str(heads["right"]), draft="mtp", offline=True)
    assert p.drafter == "mtp" and p.engine_kwargs(offline=True)["draft"] == "mtp"
    assert "mtp" in p.explanation.reason
    with pytest.raises(EdgespecError, match="no multi-token-prediction"):
        plan("cpu-small", target=str(heads["plain"]), draft="mtp", offline=True)
    auto = plan("cpu-small", target=str(heads["right"]), offline=True)
    assert "mtp" in {d for d, _, _ in auto.options}  # weighed; chosen where it pays


def test_a_batch_decodes_plainly_and_says_why(heads):
    path = heads["right"]
    with _mtp(path) as e:
        batch = e.generate_many(PROMPTS, parallel=2, max_tokens=24)
        assert "MTP head does not draft inside parallel batches" in batch.drafter_note
        got = {o.key: o.result.token_ids for o in batch}
    assert got == {i: _plain(path, p, max_tokens=24) for i, p in enumerate(PROMPTS)}


# -- lossless sampling ---------------------------------------------------------------

PROMPT_IDS = [5, 9, 14, 20, 9, 14]
N_SAMPLES = 4000


def _marginals(path) -> tuple[np.ndarray, np.ndarray]:
    """p(t1) and p(t2) = sum_t1 p(t1) p(t2 | t1), from the target's logits (a hybrid:
    each continuation decoded afresh)."""
    model = Model(path, exact=True)
    ctx = Context(model, n_ctx=64, n_threads=1)
    params = SamplingParams(temperature=1.0)
    try:
        p1 = sampling.probs_from_logits(ctx.decode(PROMPT_IDS)[0].copy(), params)
        p2 = np.zeros_like(p1)
        for t1 in np.nonzero(p1 > 1e-9)[0]:
            ctx.clear()
            p2 += p1[t1] * sampling.probs_from_logits(ctx.decode([*PROMPT_IDS, int(t1)])[0].copy(), params)
    finally:
        ctx.close()
        model.close()
    return p1, p2


def _counts(path) -> tuple[np.ndarray, np.ndarray, int, int]:
    with Engine(path, "mtp", n_ctx=64, n_threads=1, exact=True, drafting=DraftingOptions(k=2)) as e:
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
def sampled(heads):
    path = heads["wrong-ish"]  # q near p, not equal: acceptances, rejections and residuals
    return _marginals(path), _counts(path)


def test_sampling_with_mtp_drafts_keeps_the_targets_distribution(sampled):
    (p1, p2), (c1, c2, drafted, accepted) = sampled
    assert 0 < accepted < drafted
    for counts, p in ((c1, p1), (c2, p2)):
        rejected, stat, crit = chi_square_rejects(counts, p)
        assert not rejected, f"chi2 {stat:.1f} > {crit:.1f}"


def test_the_chi_square_catches_mtp_drafts_always_accepted(heads, sampled, monkeypatch):
    (p1, p2), _ = sampled
    monkeypatch.setattr(sampling, "accept", lambda p_x, q_x, rng: True)
    c1, c2, _, _ = _counts(heads["wrong-ish"])
    assert chi_square_rejects(c2, p2)[0]
