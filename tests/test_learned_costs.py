"""A run's own rounds measure c(n) for its target file, and the next plan uses it (issue 37 item 7)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from edgespec.catalog import verify_cache
from edgespec.costmodel.costs import OnlineCost
from edgespec.costmodel.priors import VERIFY_PRIORS
from edgespec.measuring.learned import keep_learned_costs
from edgespec.planning import costs as plan_costs
from edgespec.profiles import load_profile

T1 = 0.03
TRUE_C = {1: 1.0, 4: 1.8, 8: 3.2}  # what this "machine" really costs (a Q4_0-like curve)


def fake_engine(path, rounds: int) -> SimpleNamespace:
    cost = OnlineCost(VERIFY_PRIORS["cpu"]["Q4_K_M"].cost)  # planned from the wrong type's curve
    for i in range(rounds):
        n = (1, 4, 8)[i % 3]
        cost.observe(n, TRUE_C[n] * T1)
    model = SimpleNamespace(path=path, rpc=None)
    return SimpleNamespace(drafting=SimpleNamespace(cost=cost), target_model=model, exact_kernels=False, n_threads=2)


@pytest.fixture
def config_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def test_a_first_run_keeps_what_its_rounds_measured_and_the_next_plan_uses_it(tiny_target, config_home):
    prof = load_profile("cpu-small")
    before = plan_costs.target_verify(prof, str(tiny_target))
    assert keep_learned_costs(fake_engine(tiny_target, 6)) is None  # too few rounds: nothing measured yet
    line = keep_learned_costs(fake_engine(tiny_target, 120))
    assert line is not None and tiny_target.name in line and "next run" in line
    after = plan_costs.target_verify(prof, str(tiny_target))
    assert after.status == "measured for this file"
    assert after.cost(4) == pytest.approx(1.8, rel=0.1) and after.cost(8) == pytest.approx(3.2, rel=0.1)
    assert before.cost(4) != pytest.approx(after.cost(4), rel=0.1)
    # a measurement is there now: a later run does not overwrite it (tune does)
    assert keep_learned_costs(fake_engine(tiny_target, 120)) is None


def test_nothing_is_kept_over_rpc_or_for_the_exact_kernels_twice(tiny_target, config_home):
    eng = fake_engine(tiny_target, 120)
    eng.target_model.rpc = ("127.0.0.1:50052",)
    assert keep_learned_costs(eng) is None
    exact = fake_engine(tiny_target, 120)
    exact.exact_kernels = True
    assert keep_learned_costs(exact) is not None
    assert verify_cache.measured_curve(tiny_target, exact=True) is not None
    assert verify_cache.measured_curve(tiny_target, exact=False) is None  # the kernels are kept apart
