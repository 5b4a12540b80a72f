"""The first use of a model file measures its c(n) in a few seconds when it loads, and keeps
it for the next plan (issue 37 item 7; ``measuring.first_use``, which the CLI's
``load_engine`` calls after ``edgespec.load``'s ``engine_for``). On the tiny target: the
timings are real decodes (their values are this machine's noise; speed is measured in
benchmarks/), what is checked is what is measured, when, and where it goes."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import edgespec
from edgespec.catalog import verify_cache
from edgespec.measuring import first_use
from edgespec.planning import costs as plan_costs
from edgespec.profiles import load_profile


@pytest.fixture
def first_use_on(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv(first_use.ENV, "1")  # the tests' default is off (conftest)
    return tmp_path


def test_a_first_load_measures_c_and_the_next_plan_uses_it(tiny_target, first_use_on):
    prof = load_profile("cpu-small")
    assert plan_costs.target_verify(prof, str(tiny_target)).status != "measured for this file"
    with edgespec.load(str(tiny_target), draft="ngram", profile="cpu-small", n_ctx=256) as engine:
        line = first_use.measure_first_use(engine)
        assert line is not None and tiny_target.name in line and "later runs plan from it" in line
        assert engine.ctx.tokens == [] and engine.ctx.pos_max() == -1  # the cache is left empty
        entry = verify_cache.measured_entry(tiny_target)
        assert entry is not None and "first use" in entry["source"]
        assert sorted(int(n) for n in entry["c"]) == list(first_use.SIZES)
        # the engine's cost model starts from the measured curve, not from the table's row
        kept = verify_cache.measured_curve(tiny_target)
        assert [engine.verify_cost(n) for n in (2, 4, 8)] == pytest.approx([kept(n) for n in (2, 4, 8)], abs=1e-3)
        assert engine.generate("abc abc abc", max_tokens=8).stats.generated_tokens >= 1  # and it generates
    assert plan_costs.target_verify(prof, str(tiny_target)).status == "measured for this file"
    with edgespec.load(str(tiny_target), draft="ngram", profile="cpu-small", n_ctx=256) as again:
        assert first_use.measure_first_use(again) is None  # measured already: the plan starts from it
        assert again.verify_cost(4) == pytest.approx(kept(4), abs=1e-3)


@pytest.mark.parametrize("options", [{"draft": "none"}, {"draft": "ngram", "k": 3}])
def test_nothing_is_measured_where_c_decides_nothing(tiny_target, first_use_on, options):
    with edgespec.load(str(tiny_target), profile="cpu-small", n_ctx=256, **options) as engine:
        assert first_use.measure_first_use(engine) is None
    assert verify_cache.measured_entry(tiny_target) is None


def test_edgespec_first_use_0_turns_it_off(tiny_target, first_use_on, monkeypatch):
    monkeypatch.setenv(first_use.ENV, "0")
    with edgespec.load(str(tiny_target), draft="ngram", profile="cpu-small", n_ctx=256) as engine:
        assert first_use.measure_first_use(engine) is None
        planned = engine.plan.drafting.verify_cost
        assert [engine.verify_cost(n) for n in (2, 4, 8)] == pytest.approx([planned(n) for n in (2, 4, 8)])
    assert verify_cache.measured_entry(tiny_target) is None


def test_a_small_batch_measures_the_sizes_it_holds(tiny_target, first_use_on):
    with edgespec.load(str(tiny_target), draft="ngram", profile="cpu-small", n_ctx=256, n_batch=6) as engine:
        assert first_use.measure_first_use(engine) is not None
    sizes = sorted(int(n) for n in verify_cache.measured_entry(tiny_target)["c"])
    assert sizes == [1, 2, 3, 4, 5, 6]  # a verify batch holds at most n_batch tokens


def test_generate_says_it_once(tiny_target, first_use_on):
    env_cmd = [sys.executable, "-m", "edgespec", "generate", "--target", str(tiny_target), "--draft", "ngram"]
    env_cmd += ["--profile", "cpu-small", "-n", "4", "--n-ctx", "256", "hello"]
    first = subprocess.run(env_cmd, capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    assert "measured at first use" in first.stderr
    second = subprocess.run(env_cmd, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert "measured at first use" not in second.stderr
    assert "learned from this run" not in second.stderr  # a measurement is there: none kept over it


def test_the_weight_types_benchmark_starts_from_the_files_curve(tiny_target, first_use_on, monkeypatch):
    # benchmarks/weight_types --prior measured: a prompt-lookup engine built by hand starts
    # from the curve measured for its file here (measured now, as a first use, where there
    # is none), not from the table's row; --prior table leaves the row
    from benchmarks.weight_types import start_from
    from edgespec import Engine

    monkeypatch.setenv(first_use.ENV, "0")  # the benchmark measures even so, and leaves the setting
    with Engine(tiny_target, draft="ngram", n_ctx=256, n_threads=1) as eng:
        row = [eng.verify_cost(n) for n in (2, 4, 8)]
        assert "table" in start_from("table", eng)
        assert [eng.verify_cost(n) for n in (2, 4, 8)] == row
        assert "first use" in start_from("measured", eng)
        kept = verify_cache.measured_curve(tiny_target)
        assert kept is not None
        assert [eng.verify_cost(n) for n in (2, 4, 8)] == pytest.approx([kept(n) for n in (2, 4, 8)], abs=1e-3)
    assert os.environ[first_use.ENV] == "0"
    with Engine(tiny_target, draft="ngram", n_ctx=256, n_threads=1) as again:
        assert "measured for the file on this machine" in start_from("measured", again)
        assert again.verify_cost(4) == pytest.approx(kept(4), abs=1e-3)
