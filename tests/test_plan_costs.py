"""The plan's c(n) is the target's own: measured for the file, else its weight type's curve.

``planning.costs.target_verify`` reads the target file's weight-type mix from its header
(``catalog.gguf.weight_mix``) and a curve measured for that file on this machine
(``catalog.verify_cache``), and picks with ``costmodel.priors``' order. These tests
change one input at a time and check the plan (its c(n), its k bound, its drafters,
its explanation) follows.
"""

from __future__ import annotations

import pytest

from edgespec.catalog import gguf, verify_cache
from edgespec.costmodel import priors
from edgespec.planning import costs as plan_costs
from edgespec.planning import planner
from edgespec.profiles import load_profile


@pytest.fixture
def config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path


def _same_curve(a, b) -> bool:
    return all(a(n) == pytest.approx(b(n)) for n in range(2, 17))


def _with_mix(monkeypatch, mix: str) -> None:
    monkeypatch.setattr(gguf, "weight_mix", lambda path: mix)


def test_the_weight_type_picks_the_cpu_curve(tiny_target, monkeypatch, config_home):
    prof = load_profile("cpu-small")
    _with_mix(monkeypatch, "Q4_0")
    q4_0 = plan_costs.target_verify(prof, str(tiny_target))
    _with_mix(monkeypatch, "Q4_K_M")
    q4_k_m = plan_costs.target_verify(prof, str(tiny_target))
    assert _same_curve(q4_0.cost, priors.VERIFY_PRIORS["cpu"]["Q4_0"].cost)
    assert _same_curve(q4_k_m.cost, priors.VERIFY_PRIORS["cpu"]["Q4_K_M"].cost)
    assert q4_0.cost(4) < q4_k_m.cost(4)  # the repacked Q4_0 GEMM verifies 4 tokens for less
    assert "Q4_0" in q4_0.note and q4_0.mix == "Q4_0"
    # and the plan weighs it: drafting is predicted to pay more on the Q4_0 file
    ng = {}
    for mix in ("Q4_0", "Q4_K_M"):
        _with_mix(monkeypatch, mix)
        ng[mix] = planner.plan("cpu-small", target=str(tiny_target), draft="ngram")
    assert ng["Q4_0"].predicted_speedup > ng["Q4_K_M"].predicted_speedup
    assert _same_curve(ng["Q4_0"].drafting.verify_cost, priors.VERIFY_PRIORS["cpu"]["Q4_0"].cost)


def test_a_curve_measured_for_the_file_comes_first(tiny_target, monkeypatch, config_home):
    _with_mix(monkeypatch, "Q4_K_M")
    curve = {2: 1.05, 4: 1.1, 8: 1.2, 16: 1.6}
    assert verify_cache.record(tiny_target, curve, step_ms=10.0, threads=2, exact=False, source="test") is not None
    p = planner.plan("cpu-small", target=str(tiny_target), draft="ngram")
    assert p.drafting.verify_cost is not None and p.drafting.verify_cost(4) == pytest.approx(1.1)
    assert any("measured for this file" in n for n in p.explanation.notes)
    # the exact kernels' measurement is another one: not used for llama.cpp's kernels' plan
    verify_cache.record(tiny_target, {2: 3.0, 4: 5.0}, step_ms=10.0, threads=2, exact=True, source="test")
    again = plan_costs.target_verify(load_profile("cpu-small"), str(tiny_target))
    assert again.cost(4) == pytest.approx(1.1)


def test_evidence_that_drafting_does_not_pay_bounds_the_plan(tiny_target, monkeypatch, config_home):
    """On an Apple GPU, quantized weights verify 2 tokens for ~1.6-1.9 steps: the profile
    says prompt lookup with one token at most, and the plan and the engine follow."""
    _with_mix(monkeypatch, "Q4_K_M")
    prof = load_profile("m2max")
    fig = prof.verify_for("Q4_K_M")
    assert fig.k_max == 1 and fig.drafters == ("ngram",)
    p = planner.plan("m2max", target=str(tiny_target))
    assert p.drafter in ("ngram", "none")
    assert p.drafting.k_max == 1
    # F16 weights verify 8 tokens for the cost of ~2: longer drafts are allowed there
    _with_mix(monkeypatch, "F16")
    f16 = planner.plan("m2max", target=str(tiny_target))
    assert f16.drafting.k_max == load_profile("m2max").verify_for("F16").k_max == 7


def test_the_plan_runs_the_optimized_copy_unless_told_not_to(tiny_target, tmp_path, monkeypatch, config_home):
    """``models optimize`` records its copy (``catalog.optimized``); the plan for the
    original then runs the copy, says so in one line, and --no-optimized keeps the original."""
    import shutil

    from edgespec.catalog import optimized
    from edgespec.cli.plan_options import PlanOptions, make_plan

    src = tmp_path / "model.gguf"
    shutil.copy(tiny_target, src)
    assert make_plan(PlanOptions(profile="cpu-small", target=str(src))).target == str(src)  # no copy yet
    copy = tmp_path / optimized.copy_name("model", "Q4_0")
    shutil.copy(tiny_target, copy)
    optimized.record(copy, src, source_name="model", type_name="Q4_0", figures={})
    p = make_plan(PlanOptions(profile="cpu-small", target=str(src)))
    assert p.target == str(copy)
    assert sum("models optimize" in n for n in p.explanation.notes) == 1
    assert make_plan(PlanOptions(profile="cpu-small", target=str(src), optimized=False)).target == str(src)
