"""``edgespec.measuring.tune`` and ``edgespec tune``: the measurement procedure (on a simulated
clock, so the arithmetic is checked exactly), fitting, choosing, saving into a profile
that ``plan()`` then uses, and the JSON contract. No assertion depends on how fast
anything ran."""

from __future__ import annotations

import json

import pytest

from bench_support import TINY_PROMPTS as _PROMPTS
from bench_support import cli
from edgespec import Engine, catalog, profiles
from edgespec.cli.tune import tune as tune_cmd
from edgespec.costmodel import adaptive
from edgespec.measuring import batches, tune
from edgespec.planning import planner

TINY_PROMPTS = _PROMPTS[:2]
PAIR = catalog.DEFAULT_PAIR


# -- timing procedure on a simulated clock -----------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeContext:
    """Stands in for ``llama.Context``: decoding n tokens advances the clock by cost(n)."""

    recurrent = False  # a KV cache: any tail can be rolled back (llama.Context.recurrent)

    def __init__(self, clock: FakeClock, cost, n_ctx: int = 512) -> None:
        self.clock, self.cost, self.n_ctx = clock, cost, n_ctx
        self.tokens: list[int] = []
        self.calls: list[tuple[int, tuple[int, ...]]] = []

    def decode(self, tokens, rows=None):
        self.calls.append((len(tokens), tuple(rows) if rows is not None else (len(tokens) - 1,)))
        self.clock.now += self.cost(len(tokens))
        self.tokens.extend(tokens)

    def rollback(self, n_keep: int) -> None:
        del self.tokens[n_keep:]


def test_time_decodes_measures_each_batch_size_at_one_position():
    clock = FakeClock()
    target = FakeContext(clock, lambda n: 0.080 * (1 + 0.6 * (n - 1)))
    draft = FakeContext(clock, lambda n: 0.044 * n)
    prefix = list(range(10, 40))
    t = tune.time_decodes(target, prefix, n_max=8, repeats=3, draft=draft, clock=clock)
    assert t.position == 30 and t.repeats == 3
    assert t.step_ms == pytest.approx(80.0)
    assert t.relative == {n: pytest.approx(1 + 0.6 * (n - 1)) for n in range(1, 9)}
    assert t.draft_ms == pytest.approx(44.0) and t.gamma == pytest.approx(0.55)
    # both contexts end holding exactly the prefix; every timed batch asked for all rows
    assert target.tokens == prefix and draft.tokens == prefix
    timed = [c for c in target.calls[1:]]
    assert all(rows == tuple(range(n)) for n, rows in timed)
    # warm-up sweep + 3 timed sweeps of n = 1..8
    assert sorted(n for n, _ in timed) == sorted(list(range(1, 9)) * 4)


def test_time_decodes_takes_medians():
    clock = FakeClock()
    hiccups = iter([0.0] * 30 + [5.0] + [0.0] * 100)  # one call stalls for 5 s
    target = FakeContext(clock, lambda n: 0.01 * n + next(hiccups))
    t = tune.time_decodes(target, [1, 2, 3], n_max=4, repeats=5, clock=clock)
    assert t.target_ms == {n: pytest.approx(10.0 * n) for n in range(1, 5)}
    assert t.draft_ms is None and t.gamma is None


def test_time_decodes_checks_room():
    with pytest.raises(tune.InputError):
        tune.time_decodes(FakeContext(FakeClock(), lambda n: 1.0, n_ctx=20), list(range(10)), n_max=16)


# -- fitting and choosing ----------------------------------------------------------------------


def test_fit_verify_cost_keeps_the_tile_dips_and_is_at_least_one():
    raw = {1: 1.0, 2: 0.97, 3: 1.9, 4: 1.7, 5: 3.5, 6: 3.3, 7: 3.4, 8: 3.2}
    c = tune.fit_verify_cost(raw)
    assert c.n == tuple(range(1, 9)) and c(1) == 1.0
    assert c(2) == 1.0  # never below one step
    assert c(4) == pytest.approx(1.7) and c(8) == pytest.approx(3.2)  # dips kept
    ok = {1: 1.0, 2: 1.5, 3: 2.0}
    assert tune.fit_verify_cost(ok).c == (1.0, 1.5, 2.0)


def test_step_model_reproduces_both_steps():
    o, g = tune.step_model(80.0, 44.0, 1_117_320_768, 491_400_064)
    for ms, size in ((80.0, 1_117_320_768), (44.0, 491_400_064)):
        assert adaptive.step_ms(size, overhead_ms=o, gbs=g) == pytest.approx(ms)
    assert tune.step_model(80.0, 90.0, 2, 1) is None  # draft slower: nothing sensible
    assert tune.step_model(80.0, 40.0, 1, 2) is None


def test_p_min_follows_the_marginal_cost():
    cheap = adaptive.VerifyCost((1, 2, 5), (1.0, 1.02, 1.1))
    dear = adaptive.VerifyCost((1, 5), (1.0, 3.5))
    assert tune.p_min_for(0.1, cheap, 4) < 0.3
    assert tune.p_min_for(0.55, dear, 4) == tune.P_MIN_CAP
    assert tune.p_min_for(0.3, cheap, 1) > tune.p_min_for(0.1, cheap, 1)


def test_pair_of():
    assert tune.pair_of(catalog.DEFAULT_TARGET, catalog.DEFAULT_DRAFT) == PAIR
    assert tune.pair_of(f"/x/{catalog.DEFAULT_TARGET}.gguf", f"/y/{catalog.DEFAULT_DRAFT}.gguf") == PAIR
    assert tune.pair_of("/x/mine.gguf", "/y/other.gguf") is None
    assert tune.pair_of(catalog.DEFAULT_TARGET, None) is None


# -- the whole measurement on tiny models ------------------------------------------------------


@pytest.fixture(scope="module")
def result(tiny_target, tiny_noisy):
    with Engine(tiny_target, draft=tiny_noisy, n_ctx=512, n_threads=1) as e:
        phases = []
        r = tune.tune(e, ks=[1, 3], prompts=TINY_PROMPTS, max_tokens=10, repeats=1, n_max=6, phase=phases.append)
        assert len(phases) == 3 and "sequences at once" in phases[1]
        # the engine still generates correctly afterwards (caches left consistent)
        e.set_drafter("none")
        ref = e.generate(TINY_PROMPTS[0].prompt, max_tokens=10).token_ids
        e.set_drafter("model")
        assert e.generate(TINY_PROMPTS[0].prompt, max_tokens=10).token_ids == ref
        return r


def test_tune_result_contract(result):
    d = result.to_dict()
    assert list(d["verify_cost"]) == [str(n) for n in range(1, 7)] and d["verify_cost"]["1"] == 1.0
    vc = list(d["verify_cost"].values())
    assert min(vc) >= 1.0  # measured as it is (dips kept), never below one step
    assert d["draft_cost_ratio"] > 0 and d["target_step_ms"] > 0
    assert set(d["acceptance"]) == {"model", "ngram"}
    assert all(0.0 <= a <= 1.0 for a in d["acceptance"].values())
    assert {(p["drafter"], p["k"]) for p in d["points"]} == {("model", 1), ("model", 3), ("ngram", 1), ("ngram", 3)}
    ch = d["choice"]
    assert {"drafter", "k", "predicted_speedup"} <= set(ch)
    assert ch["drafter"] in ("model", "ngram", "none")
    # the choice is the cost model's on the measured figures
    opts = [f.option() for f in result.drafters]
    expect = adaptive.choose(opts, result.verify, k_min=1, k_max=8, min_gain=0.05)
    assert (ch["drafter"], ch["k"]) == (expect.drafter, expect.k)
    for f in result.drafters:
        assert (f.k, f.predicted_speedup) == adaptive.best_k(f.alpha, result.verify, f.gamma, k_max=8, hit=f.hit)
        assert (f.p_min is not None) == (f.drafter == "model")
    json.dumps(d)


def test_save_then_plan_uses_the_measured_figures(result, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path, skipped = tune.save(result, "cpu-small", pair=PAIR)
    assert path == profiles.user_dir() / "cpu-small.toml" and all("step-time model" in note for note in skipped)
    prof = profiles.load_profile("cpu-small")
    pc = prof.pair_cost(PAIR)
    assert pc.verify.status == "measured" and pc.verify(3) == pytest.approx(result.verify(3), abs=1e-3)
    assert pc.gamma.value == pytest.approx(result.drafter("model").gamma, abs=1e-3)
    assert pc.alpha.value == pytest.approx(min(0.99, result.drafter("model").alpha), abs=1e-3)
    assert pc.target_step_ms.status == "measured"
    assert prof.alpha_ngram.status == "measured" and prof.ngram_hit.status == "measured"
    p = planner.plan("cpu-small", target=catalog.DEFAULT_TARGET, draft="model")
    # the shipped exact-kernel slowdown stays (this result did not measure it) and counts
    # only under --exact
    assert prof.exact_slowdown.status == "measured" and prof.exact_slowdown.value > 1.0
    k, s = adaptive.best_k(pc.alpha.value, pc.verify.cost, pc.gamma.value, k_min=prof.k_min, k_max=prof.k_max)
    assert (p.drafter, p.k, p.predicted_speedup) == ("model", k, pytest.approx(s))
    assert p.drafting.draft_gamma == pytest.approx(pc.gamma.value)
    assert p.engine_kwargs(offline=True)["drafting"].draft_gamma
    px = planner.plan("cpu-small", target=catalog.DEFAULT_TARGET, draft="model", exact=True)
    k, s = adaptive.best_k(
        pc.alpha.value,
        pc.verify.cost,
        pc.gamma.value,
        k_min=prof.k_min,
        k_max=prof.k_max,
        slowdown=prof.exact_slowdown.value,
    )
    assert (px.k, px.predicted_speedup) == (k, pytest.approx(s))


def test_save_without_a_pair_keeps_device_figures(result, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    path, skipped = tune.save(result, "mine", pair=None, extends="cpu-small")
    prof = profiles.load_profile("mine")
    assert prof.verify.status == "measured" and skipped
    assert prof.pair_cost(PAIR).gamma.status == "measured"  # still the shipped pair figure


def test_saved_figures_drive_the_choice(tmp_path, monkeypatch, tiny_target):
    """A machine where batches are nearly free and the n-gram drafter is right often:
    after saving, the plan for the profile picks ngram; where batches are expensive,
    plain decoding."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))

    def fake(c5: float, alpha: float, hit: float) -> tune.TuneResult:
        times = tune.DecodeTimes(10, 1, {n: 50.0 * (1 + (c5 - 1) * (n - 1) / 4) for n in range(1, 9)}, None)
        c = tune.fit_verify_cost(times.relative)
        ngram = tune.DrafterFit("ngram", alpha, hit, 0.001, alpha, 4, 1.0)
        choice = adaptive.choose([ngram.option()], c)
        return tune.TuneResult(
            times,
            c,
            (ngram,),
            (),
            choice,
            20.0,
            {"target": "t.gguf", "n_threads": 2, "prompts": ["a"], "max_tokens": 8, "load_average": 0.1},
        )

    tune.save(fake(1.1, 0.8, 0.6), "cpu-small", pair=None)
    tgt = str(tiny_target)
    assert planner.plan("cpu-small", target=tgt, draft="ngram").predicted_speedup > 1.2
    assert planner.plan("cpu-small", target=tgt).drafter == "ngram"
    own = planner.plan("cpu-small", target=catalog.DEFAULT_TARGET, draft="ngram")
    assert own.drafting.verify_cost(5) != pytest.approx(1.1) and own.predicted_speedup < 1.2
    tune.save(fake(4.0, 0.5, 0.3), "cpu-small", pair=None)
    # expensive batches: prompt lookup is predicted no gain, but its policy cannot lose
    p = planner.plan("cpu-small", target=tgt)
    assert p.drafter == "ngram" and p.predicted_speedup == 1.0
    assert planner.plan("cpu-small", exact=True).drafter == "none"


# -- the command -----------------------------------------------------------------------------


@pytest.fixture()
def run(tmp_path, monkeypatch):
    return cli("tune", tune_cmd, tmp_path, monkeypatch)


def test_cli_tune_json_and_save_as(run, tiny_target, tiny_noisy, prompt_file, tmp_path):
    r = run(
        "--profile",
        "cpu-small",
        "--target",
        tiny_target,
        "--draft",
        tiny_noisy,
        "--k-grid",
        "1,2",
        "--input",
        prompt_file,
        "--max-tokens",
        6,
        "--repeats",
        1,
        "--threads",
        1,
        "--json",
        "--quiet",
        "--save-as",
        "tiny-box",
        "--exact",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert list(d["verify_cost"]) == [str(n) for n in range(1, 17)] and d["verify_cost"]["1"] == 1.0
    assert d["draft_cost_ratio"] > 0 and set(d["acceptance"]) == {"model", "ngram"}
    assert {"drafter", "k", "predicted_speedup"} <= set(d["choice"])
    # --exact on a CPU profile: plain decoding also ran on llama.cpp's kernels, for the slowdown
    assert d["exact_plain_tokens_per_second"] > 0 and d["exact_slowdown"] > 0
    saved = d["saved"]
    assert saved["profile"] == "tiny-box" and saved["pair"] is None and saved["skipped"]
    prof = profiles.load_profile("tiny-box")
    assert prof.verify.status == "measured" and prof.origin == "user, extends cpu-small"


def test_cli_tune_chart(run, tiny_target, prompt_file):
    r = run(
        "--profile",
        "cpu-small",
        "--target",
        tiny_target,
        "--draft",
        "ngram",
        "--k-grid",
        "1,4",
        "--input",
        prompt_file,
        "--max-tokens",
        6,
        "--repeat",
        1,
        "--threads",
        1,
    )
    assert r.exit_code == 0, r.output
    out = r.stdout
    assert "verify cost" in out and "c(16)=" in out and "ngram drafter" in out
    assert "predicted" in out and "measured" in out and "k=4" in out and "choice:" in out
    assert "model drafter" not in out


def test_cli_tune_none_measures_costs_only(run, tiny_target, prompt_file):
    r = run(
        "--profile",
        "cpu-small",
        "--target",
        tiny_target,
        "--draft",
        "none",
        "--input",
        prompt_file,
        "--max-tokens",
        4,
        "--repeats",
        1,
        "--threads",
        1,
        "--json",
        "--quiet",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["acceptance"] == {} and d["choice"]["drafter"] == "none" and d["draft_cost_ratio"] is None


def test_cli_tune_unknown_profile(run, tiny_target):
    r = run("--profile", "no-such-device", "--target", tiny_target)
    assert r.exit_code != 0 and "unknown profile" in r.output


@pytest.mark.integration
def test_real_model_verify_cost_is_measured():
    try:
        path = catalog.resolve_model("qwen2.5-coder-0.5b")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"Qwen2.5-Coder-0.5B not available: {e}")
    with Engine(path, draft=None, n_ctx=1024, n_threads=1) as e:
        prefix = e.prompt_tokens("Write a function that reverses a string.")
        t = tune.time_decodes(e.ctx, prefix, n_max=6, repeats=1)
        assert set(t.target_ms) == set(range(1, 7)) and t.relative[1] == 1.0
        assert e.ctx.tokens == prefix and e.ctx.pos_max() == len(prefix) - 1
        c = tune.fit_verify_cost(t.relative)
        assert min(c(n) for n in range(1, 7)) >= 1.0 and c(6) > 1.0


def test_exact_kernel_slowdown_is_measured_against_a_plain_fast_engine(tiny_target, tmp_path, monkeypatch):
    """With a second plain engine on llama.cpp's kernels, tune measures how much faster
    plain decoding is there than on the exact kernels, and saving records it."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    with (
        Engine(tiny_target, draft="ngram", n_ctx=512, n_threads=1, exact=True) as e,
        Engine(tiny_target, n_ctx=512, n_threads=1, exact=False) as fast,
    ):
        assert e.exact_kernels and not fast.exact_kernels
        r = tune.tune(
            e, drafters=["ngram"], ks=[2], prompts=TINY_PROMPTS, max_tokens=8, repeats=1, n_max=3, fast_engine=fast
        )
    d = r.to_dict()
    assert d["exact_plain_tokens_per_second"] > 0 and d["plain_tokens_per_second"] > 0
    assert d["exact_slowdown"] == pytest.approx(
        d["plain_tokens_per_second"] / d["exact_plain_tokens_per_second"], rel=1e-3
    )
    p = r.points[0]
    fit = r.drafter("ngram")
    assert p.predicted == pytest.approx(adaptive.speedup(fit.alpha, 2, r.verify, fit.gamma, fit.hit, r.exact_slowdown))
    tune.save(r, "cpu-small", pair=None)
    prof = profiles.load_profile("cpu-small")
    assert prof.exact_slowdown.status == "measured"
    assert prof.exact_slowdown.value == pytest.approx(min(5.0, max(0.5, r.exact_slowdown)), abs=1e-3)


def test_tune_measures_batch_throughput_and_saves_it_for_parallel_auto(result, tmp_path, monkeypatch):
    tuned = result
    from edgespec import profiles
    from edgespec.planning.planner import plan

    cost = tuned.batch_cost
    assert sorted(cost) == list(batches.BATCH_SIZES) and cost[1] == 1.0
    assert all(c > 0 for c in cost.values())
    d = tuned.to_dict()["batch"]
    assert d["4"]["throughput"] == round(4 / cost[4], 3)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    tune.save(tuned, "cpu-small", pair=None)
    prof = profiles.load_profile("cpu-small")
    assert prof.batch is not None and prof.batch.status == "measured"
    assert prof.batch.cost.n == (2, 4, 8, 16, 32)
    p = plan("cpu-small", target=str(tuned.settings["target"]), draft="none")
    assert p.engine_kwargs()["drafting"].batch_cost == prof.batch.cost


# -- c(n) per model file, kept per machine for the planner (catalog.verify_cache) ----------------


def test_tune_keeps_the_targets_measured_curve_per_file(result, tiny_target, tiny_noisy):
    from edgespec.catalog import verify_cache

    curve = verify_cache.measured_curve(tiny_target, exact=False)
    assert curve is not None and [curve(n) for n in range(2, 7)] == pytest.approx(
        [result.verify(n) for n in range(2, 7)], abs=1e-4
    )
    rec = verify_cache.measured_entry(tiny_target)
    assert rec["source"] == "edgespec tune" and rec["threads"] == 1 and rec["step_ms"] > 0
    assert verify_cache.measured_curve(tiny_noisy) is None  # the draft's is not measured
    assert verify_cache.measured_curve(tiny_target, exact=True) is None


def test_the_verify_cache_is_per_machine_file_and_kernels(tmp_path, monkeypatch):
    from edgespec.catalog import verify_cache
    from edgespec.detect import Machine

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    here = Machine("Linux", "x86_64", "CPU A", 2, 2, None, None)
    there = Machine("Linux", "x86_64", "CPU B", 2, 2, None, None)
    a, b = tmp_path / "a.gguf", tmp_path / "b.gguf"
    a.write_bytes(b"GGUF a")
    b.write_bytes(b"GGUF bb")
    assert verify_cache.measured_curve(a, machine=here) is None
    path = verify_cache.record(
        a, {2: 1.7, 4: 1.8, 8: 3.2}, step_ms=30.0, threads=2, exact=False, source="t", machine=here
    )
    verify_cache.record(
        a, adaptive.VerifyCost((2, 4), (1.9, 2.9)), step_ms=40.0, threads=2, exact=True, source="t", machine=here
    )
    verify_cache.record(b, {2: 0.5}, step_ms=10.0, threads=2, exact=False, source="t", machine=here)
    c = verify_cache.measured_curve(a, machine=here)
    assert (c.n, c.c) == ((2, 4, 8), (1.7, 1.8, 3.2)) and c(1) == 1.0
    assert verify_cache.measured_curve(a, machine=here, exact=True).c == (1.9, 2.9)
    assert verify_cache.measured_curve(a, machine=there) is None
    assert verify_cache.measured_curve(b, machine=here).c == (1.0,)  # never below one step
    # a file written again misses, and its entries go at the next write
    a.write_bytes(b"GGUF a, again")
    assert verify_cache.measured_curve(a, machine=here) is None
    verify_cache.record(b, {2: 1.5}, step_ms=10.0, threads=2, exact=False, source="t", machine=here)
    assert all("a.gguf" not in k for k in json.loads(path.read_text())["entries"])
    path.write_text("{not json")
    assert verify_cache.measured_curve(b, machine=here) is None
    assert verify_cache.machine_key(here) != verify_cache.machine_key(there)
