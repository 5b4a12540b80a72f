"""The planner: which pair, drafter and k a profile (or the detected machine) chooses,
the command line's overrides, and the engine arguments a plan resolves to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import ISSUE_PROFILES
from edgespec import catalog
from edgespec.planning import costs as plan_costs
from edgespec.planning import planner


@pytest.fixture(autouse=True)
def user_dir(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    return tmp_path / "config" / "edgespec" / "profiles"


def test_m2max_uses_a_7b_pair_and_says_why_the_model_drafter_loses():
    """Published Metal timings (docs/profiles.md, issue 37): verifying 2 tokens of Q4_K
    weights costs ~1.6 steps, so a 0.5B drafter cannot pay for itself on the catalog's
    Q4_K_M pairs; the profile says so and the planner follows."""
    plan = planner.plan("m2max")
    assert plan.backend == "metal" and plan.n_gpu_layers == -1
    assert plan.target == "qwen2.5-coder-7b-instruct-q4_k_m"
    assert plan.drafter in ("ngram", "none")
    assert "model drafter loses" in plan.reason


def test_cpu_small_never_picks_the_model_drafter_and_says_why():
    plan = planner.plan("cpu-small")
    assert plan.drafter in ("ngram", "none")
    assert plan.target == catalog.DEFAULT_TARGET
    assert "model drafter loses" in plan.reason
    assert "γ=0.56 measured" in plan.reason
    if plan.drafter == "none":
        assert plan.k == 0 and plan.predicted_speedup == 1.0
        assert plan.reason.startswith("plain decoding")


def test_small_memory_skips_pairs_that_do_not_fit():
    plan = planner.plan("m1")  # 8 GB M1: a 7B pair does not fit in 5.3 GB
    assert plan.target != "qwen2.5-coder-7b-instruct-q4_k_m"
    assert any("skipped qwen2.5-coder-7b+0.5b" in n for n in plan.notes)
    big_ctx = planner.plan("m1", n_ctx=131072)
    assert big_ctx.n_ctx == 131072
    assert big_ctx.target != plan.target or any("fits" in n for n in big_ctx.notes)


@pytest.mark.parametrize("name", sorted(ISSUE_PROFILES))
def test_every_profile_plans(name):
    plan = planner.plan(name)
    d = plan.to_dict()
    for key in ("name", "backend", "target", "draft", "drafter", "k", "reason"):
        assert key in d
    assert d["drafter"] in ("model", "ngram", "none")
    assert (d["draft"] is None) == (d["drafter"] != "model")
    json.dumps(d)


def test_overrides_draft_none_ngram_and_a_named_model():
    assert planner.plan("m2max", draft="none").drafter == "none"
    p = planner.plan("m2max", draft="ngram")
    assert p.drafter == "ngram" and p.draft is None and p.k >= 1 and "as asked" in p.reason
    p = planner.plan("cpu-small", draft="model")
    assert p.drafter == "model" and p.draft == catalog.DEFAULT_DRAFT
    assert "slower than plain decoding" in p.reason  # honest even when overridden
    p = planner.plan("m2max", draft="qwen2.5-0.5b")
    assert p.drafter == "model" and p.draft == "qwen2.5-0.5b"


def test_overrides_target_k_and_gpu_layers(tiny_target, tiny_same):
    p = planner.plan("m2max", target=str(tiny_target), draft=str(tiny_same), k=7, n_gpu_layers=0)
    assert p.target == str(tiny_target) and p.draft == str(tiny_same)
    assert p.k == 7 and p.n_gpu_layers == 0 and "k=7 in every round from the command line" in p.reason
    assert not p.adaptive and p.drafting.k == 7 and p.engine_kwargs()["drafting"] is p.drafting  # --k: one form
    # an unpaired target file: no draft model is known, so only ngram or none
    p = planner.plan("m2max", target=str(tiny_target))
    assert p.drafter in ("ngram", "none")
    assert any("no known draft model" in n for n in p.notes)
    # a catalog target finds its pair (the model drafter asked for: on m2max's Q4_K figures it loses)
    p = planner.plan("m2max", target="qwen2.5-7b", draft="model")
    assert p.draft == "qwen2.5-0.5b-instruct-q4_k_m" and p.pair == "qwen2.5-7b+0.5b"
    # k=0 means plain decoding
    assert planner.plan("m2max", k=0).drafter == "none"


def test_engine_kwargs_resolve_paths(tiny_target, tiny_same):
    p = planner.plan("cpu-small", target=str(tiny_target), draft=str(tiny_same), k=3)
    kw = p.engine_kwargs()
    assert kw["target"] == tiny_target and kw["draft"] == tiny_same
    assert kw["drafting"].k == 3 and kw["n_gpu_layers"] == 0 and kw["n_ctx"] == 4096
    assert set(kw) >= {"target", "draft", "drafting", "n_ctx", "n_threads", "n_gpu_layers", "exact", "names"}
    p = planner.plan("cpu-small", target=str(tiny_target), draft="ngram")
    assert p.engine_kwargs()["draft"] == "ngram"
    p = planner.plan("cpu-small", target=str(tiny_target), draft="none")
    kw = p.engine_kwargs()
    assert kw["draft"] is None and kw["drafting"].k is None  # no drafter: nothing to fix


def test_engine_kwargs_build_a_real_engine(tiny_target, tiny_same):
    from edgespec.engine import Engine

    p = planner.plan("cpu-small", target=str(tiny_target), draft=str(tiny_same), n_ctx=256, exact=True)
    with Engine(**p.engine_kwargs()) as engine:
        assert engine.n_ctx == 256
        out = engine.generate("hello", max_tokens=12)
    with Engine(tiny_target, draft=None, n_ctx=256, exact=True) as plain:
        want = plain.generate("hello", max_tokens=12)
    # the plan's target decodes (greedy: plain decoding's tokens), with the plan's drafter
    assert out.token_ids == want.token_ids and out.finish_reason == want.finish_reason
    assert out.stats.drafter == "model" and want.stats.drafter != "model"


def test_offline_skips_pairs_that_are_not_here(monkeypatch, tmp_path):
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    plan = planner.plan("m2max", offline=True)
    assert any("not available offline" in n for n in plan.notes)
    if catalog.is_available(catalog.DEFAULT_TARGET) and catalog.is_available(catalog.DEFAULT_DRAFT):
        assert plan.target == catalog.DEFAULT_TARGET


def test_kernels_follow_exact_and_prompt_lookup_is_the_cpu_choice(tmp_path, monkeypatch, tiny_target):
    """llama.cpp's kernels unless --exact; on a CPU the automatic choice is prompt lookup
    (its policy drafts only where it pays, so it cannot lose); --exact counts the exact
    kernels' slowdown, and then plain decoding wins."""
    from edgespec import profiles
    from edgespec.costmodel import adaptive
    from edgespec.planning import planner

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    auto = planner.plan("cpu-small")
    assert auto.drafter == "ngram" and auto.exact is False and auto.adaptive
    kw = planner.plan("cpu-small", target=str(tiny_target)).engine_kwargs()
    assert kw["exact"] is False and kw["draft"] == "ngram" and kw["drafting"].adaptive
    assert kw["drafting"].k_max is None and kw["drafting"].verify_cost is not None  # the profile's c(n): the prior
    assert planner.plan("cpu-small", draft="none").exact is False
    ex = planner.plan("cpu-small", exact=True)
    assert ex.exact is True and ex.drafter == "none" and "batch-invariant kernels" in ex.reason
    assert ex.drafting.verify_cost is None  # the engine's prior for exact kernels
    prof = profiles.load_profile("cpu-small")
    ng = planner.plan("cpu-small", draft="ngram", exact=True)
    # the target's own c(n): its weight type's curve (the embedded Q4_K_M's), not the profile's for any weights
    c = plan_costs.target_verify(prof, ng.target).cost
    assert ng.target and c is not prof.verify.cost
    k, s = adaptive.best_k(
        prof.alpha_ngram.value,
        c,
        prof.gamma_ngram.value,
        k_min=prof.k_min,
        k_max=prof.k_max,
        hit=prof.ngram_hit.value,
        slowdown=prof.exact_slowdown.value,
    )
    # prompt lookup's policy cannot lose: predicted at least its floor (plain speed on the exact kernels)
    assert (ng.k, ng.predicted_speedup) == (k, pytest.approx(max(s, 1.0 / prof.exact_slowdown.value)))
    assert "batch-invariant kernels" not in auto.reason
    gpu = planner.plan("m2max", exact=True)
    assert gpu.n_gpu_layers != 0 and "batch-invariant kernels" not in gpu.reason
