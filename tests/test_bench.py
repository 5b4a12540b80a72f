"""``edgespec.measuring.bench`` and ``edgespec bench``: the interleaved measurement, its summaries,
the per-pass ratios and their verdict (``measuring.bench_stats``) and the JSON/CSV contract.
Correctness only — no assertion here depends on how fast anything ran. Tiny generated
models for the plumbing; the real Qwen2.5-Coder-0.5B for one end-to-end run (integration)."""

from __future__ import annotations

import csv
import inspect
import json
from pathlib import Path

import pytest

from bench_support import TINY_PROMPTS, cli
from benchmarks import bench_agreement
from edgespec import Engine
from edgespec.cli.bench import bench as bench_cmd
from edgespec.events import Round
from edgespec.measuring import bench, bench_stats
from edgespec.measuring.prompts import CALIBRATION, HELD_OUT, KINDS, prompt_set


@pytest.fixture(scope="module")
def engine(tiny_target, tiny_noisy, engines):
    return engines(tiny_target, tiny_noisy, exact=False)


# -- the prompt set ------------------------------------------------------------------------


def test_prompt_sets_cover_every_kind_and_are_disjoint():
    for prompts in (HELD_OUT, CALIBRATION):
        assert {p.kind for p in prompts} == set(KINDS)
    ids = [p.id for p in HELD_OUT + CALIBRATION]
    assert len(ids) == len(set(ids))
    assert not {p.prompt for p in HELD_OUT} & {p.prompt for p in CALIBRATION}
    assert prompt_set("held-out") is HELD_OUT
    with pytest.raises(ValueError):
        prompt_set("nope")


# -- configurations --------------------------------------------------------------------------


def test_grid_and_names():
    g = bench.grid(["ngram", "model"], [4, 1, 2, 2], p_min=0.5)
    assert [c.name for c in g] == ["ngram k=1", "ngram k=2", "ngram k=4", "model k=1", "model k=2", "model k=4"]
    assert all(c.p_min == (0.5 if c.drafter == "model" else 0.0) for c in g)
    assert bench.PLAIN.name == "plain"
    assert bench.Config("ngram", 3, adaptive_k=True).name == "ngram k=3 adaptive"
    with pytest.raises(bench.InputError):
        bench.grid(["ngram"], [0])
    with pytest.raises(bench.InputError):
        bench.grid(["eagle"], [1])


def test_configure_fixed_k_above_default_bound(engine, tiny_noisy):
    bench.configure(engine, bench.Config("model", 12, p_min=0.3))
    assert engine.drafter_name == "model" and engine.k == 12 and engine.k_max >= 12
    assert engine.drafting.model.p_min == 0.3 and engine.adaptive_k is False
    rounds = [ev for ev in engine.stream(TINY_PROMPTS[2].prompt, max_tokens=30) if isinstance(ev, Round)]
    assert {r.k for r in rounds} == {12}  # fixed: never adapted, never clamped
    bench.configure(engine, bench.PLAIN)
    assert engine.drafter_name == "none"


# -- measure ---------------------------------------------------------------------------------


def test_measure_interleaves_after_a_warmup(engine):
    configs = [bench.PLAIN, bench.Config("ngram", 2), bench.Config("model", 2)]
    seen = []
    runs = bench.measure(
        engine,
        configs,
        TINY_PROMPTS,
        max_tokens=8,
        repeat=2,
        progress=lambda done, total, c, p: seen.append((done, total, c, p)),
    )
    names = [c.name for c in configs]
    total = len(configs) * (len(TINY_PROMPTS) * 2 + 1)
    assert [s[0] for s in seen] == list(range(1, total + 1)) and {s[1] for s in seen} == {total}
    # warm-up: every config once on the first prompt, not counted
    assert [(c, p) for _, _, c, p in seen[:3]] == [(n, "a") for n in names]
    measured = seen[3:]
    for i in range(0, len(measured), 3):
        block = measured[i : i + 3]
        assert len({p for *_, p in block}) == 1  # one prompt at a time ...
        assert sorted(c for _, _, c, _ in block) == sorted(names)  # ... every config on it
    firsts = [measured[i][2] for i in range(0, len(measured), 3)]
    assert len(set(firsts)) == len(configs)  # the order rotates
    for n in names:
        assert [r.prompt_id for r in runs[n]] == ["a", "b", "c"] * 2
        assert [r.pass_index for r in runs[n]] == [0, 0, 0, 1, 1, 1]
        assert all(r.config == n and r.tokens > 0 for r in runs[n])


def test_measure_rejects_bad_input(engine):
    with pytest.raises(bench.InputError):
        bench.measure(engine, [bench.PLAIN, bench.PLAIN], TINY_PROMPTS)
    with pytest.raises(bench.InputError):
        bench.measure(engine, [bench.PLAIN], [])


# -- summaries -------------------------------------------------------------------------------


def _run(config, pid, kind, tokens, seconds, **kw):
    base = dict(rounds=len(tokens), drafted=0, accepted=0, rounds_drafting=0, rounds_rejected=0, t_draft=0.0)
    base.update(kw)
    return bench.Run(config, pid, kind, tuple(tokens), seconds, **base)


def test_summarize_arithmetic():
    plain = [_run("plain", "a", "edit", [1] * 10, 1.0), _run("plain", "b", "chat", [2] * 10, 1.0)]
    cfg = bench.Config("ngram", 4)
    runs = [
        _run(
            cfg.name, "a", "edit", [1] * 10, 0.5, rounds=4, drafted=8, accepted=6, rounds_drafting=3, rounds_rejected=2
        ),
        _run(cfg.name, "b", "chat", [2] * 9 + [3], 1.0, rounds=10, drafted=0, accepted=0),
    ]
    s = bench.summarize(cfg, runs, plain, greedy=True)
    assert s.tokens == 20 and s.seconds == 1.5
    assert s.speedup == pytest.approx((20 / 1.5) / (20 / 2.0))
    assert s.by_kind == {"chat": pytest.approx(1.0), "edit": pytest.approx(2.0)}
    assert s.acceptance_rate == pytest.approx(6 / 8)
    assert s.mean_accepted_length == pytest.approx(6 / 14)
    assert s.alpha == pytest.approx(6 / (6 + 2))  # adaptive.estimate_alpha
    assert s.hit == pytest.approx(3 / 14)
    assert s.identical is False  # prompt b differs in its last token
    assert bench.summarize(cfg, runs[:1], plain, greedy=True).identical is True
    assert bench.summarize(cfg, runs, plain, greedy=False).identical is None
    p = bench.summarize(bench.PLAIN, plain, plain, greedy=True)
    assert p.speedup == 1.0 and p.acceptance_rate is None and p.alpha is None and p.identical is True


def test_speedup_is_the_median_of_ratios_to_plain_in_the_same_pass():
    cfg = bench.Config("ngram", 2)
    # pass 1 is a burst of load on both: its ratio is still the configuration's own
    plain_secs, cfg_secs = {0: 1.0, 1: 3.0, 2: 1.0}, {0: 0.8, 1: 2.0, 2: 1.25}
    plain = [_run("plain", pid, "edit", [1] * 10, plain_secs[p], pass_index=p) for p in range(3) for pid in "ab"]
    runs = [_run(cfg.name, pid, "edit", [1] * 10, cfg_secs[p], pass_index=p) for p in range(3) for pid in "ab"]
    s = bench.summarize(cfg, runs, plain, greedy=True)
    assert s.spread.ratios == pytest.approx((1.25, 1.5, 0.8))
    assert s.speedup == pytest.approx(1.25)  # the median, not all tokens over all time (1.23)
    assert s.by_kind == {"edit": pytest.approx(1.25)}
    d = s.to_dict()
    assert d["tokens_per_second_per_pass"] == [12.5, 5.0, 8.0]
    assert d["per_pass"]["ratios"] == [1.25, 1.5, 0.8]
    assert (d["per_pass"]["min"], d["per_pass"]["median"], d["per_pass"]["max"]) == (0.8, 1.25, 1.5)
    assert d["per_pass"]["verdict"] == "within noise" and d["per_pass"]["suggested_repeat"] >= 5
    assert d["per_pass"]["words"].startswith("within noise (per-pass 0.80-1.50×): run with --repeat ")
    p = bench.summarize(bench.PLAIN, plain, plain, greedy=True)
    assert p.speedup == 1.0 and p.spread is None and p.to_dict()["per_pass"] is None
    assert p.to_dict()["tokens_per_second_per_pass"] == [10.0, pytest.approx(10 / 3, abs=1e-3), 10.0]


@pytest.mark.parametrize(
    ("ratios", "verdict", "repeat"),
    [
        ((1.02, 1.05, 1.10, 1.04, 1.03), "faster", None),
        ((0.90, 0.95, 0.93, 0.97, 0.96), "slower", None),
        ((0.99, 1.01, 1.00, 1.02, 0.985), "level", None),
        ((0.94, 1.05, 1.20), "within noise", 27),  # issue 43's two readings in one run
        ((0.80, 1.25, 1.00), "within noise", bench_stats.MAX_SUGGESTED),
        ((0.99, 1.01, 1.00), "within noise", 5),  # level, but 3 passes cannot say so
        ((1.10,), "one pass", 5),
        ((1.02, 1.05, 1.10), "faster", 5),  # every pass, but 3 of them: 1 time in 4 by chance
    ],
)
def test_the_verdict_reads_the_spread(ratios, verdict, repeat):
    s = bench_stats.Spread(ratios)
    assert s.verdict == verdict and s.suggested_repeat == repeat
    assert (s.low, s.high) == (min(ratios), max(ratios))
    words = s.words()
    assert words.startswith({"level": "level with plain"}.get(verdict, verdict))
    assert (f"--repeat {repeat}" in words) == (repeat is not None)


def test_the_verdict_words_and_the_interval_from_more_passes():
    assert bench_stats.Spread((0.94, 1.05, 1.20)).words() == "within noise (per-pass 0.94-1.20×): run with --repeat 27"
    assert bench_stats.Spread((1.02, 1.05, 1.10)).words() == (
        "faster (per-pass 1.02-1.10×), but 3 passes agree by chance 1 time in 4: run with --repeat 5"
    )
    assert bench_stats.coverage(3, 1) == 0.75 and bench_stats.coverage(5, 1) == 0.9375
    assert bench_stats.median_interval([3, 1, 2, 5, 4]) == (1, 5, 0.9375)  # up to 7 passes: min..max
    # from 8 passes the interval narrows: one slow pass in ten no longer hides a gain
    ten = (0.97, 1.02, 1.03, 1.04, 1.05, 1.02, 1.06, 1.03, 1.04, 1.01)
    s = bench_stats.Spread(ten)
    assert s.interval == (1.01, 1.05, pytest.approx(0.9785, abs=1e-4))
    assert s.verdict == "faster" and s.suggested_repeat is None
    assert s.words() == "faster (per-pass 0.97-1.06×, the median within 1.01-1.05× at 98%)"
    assert bench_stats.Spread(ten[:7]).interval[:2] == (0.97, 1.06)


def test_bench_report_greedy_is_identical_and_auto_plain_is_plain(engine):
    cands = bench.grid(["ngram", "model"], [1, 3])
    rep = bench.bench_report(
        engine, cands, bench.Config("none"), TINY_PROMPTS, max_tokens=12, auto_plan={"drafter": "none", "k": 0}
    )
    d = rep.to_dict()
    assert d["plain"]["speedup"] == 1.0
    assert [r["config"] for r in d["results"]] == [c.name for c in cands]
    for r in d["results"] + [d["plain"]]:
        assert r["identical"] is True
        assert r["tokens_per_second"] > 0
        assert set(r["by_kind"]) == {"chat", "edit"}
    for r in d["results"]:
        assert 0.0 <= r["acceptance_rate"] <= 1.0
    assert d["auto"]["config"] == "plain" and d["auto"]["speedup"] == 1.0
    assert d["auto"]["planned_drafter"] == "none"
    assert d["best"]["config"] in {"plain", *(c.name for c in cands)}
    assert d["auto_vs_best"] == pytest.approx(1.0 / d["best"]["speedup"], rel=1e-3)
    assert d["settings"]["prompts"] == ["a", "b", "c"]
    json.dumps(d)  # serialisable


def test_bench_report_runs_a_drafting_auto_choice(engine):
    rep = bench.bench_report(
        engine, [], bench.Config("ngram", 2, adaptive_k=True, k_max=6), TINY_PROMPTS, max_tokens=12
    )
    assert rep.auto.config.name == "auto: ngram k=2 adaptive"
    assert rep.auto.identical is True and len(rep.auto.runs) == len(TINY_PROMPTS)
    assert rep.results == ()
    assert rep.auto.spread.passes == 1 and rep.auto.spread.verdict == "one pass"
    assert rep.plain.spread is None


def test_bench_report_per_pass_figures(engine):
    rep = bench.bench_report(
        engine, [], bench.Config("ngram", 2, adaptive_k=True), TINY_PROMPTS[:2], max_tokens=6, repeat=3
    )
    d = rep.to_dict()
    assert d["settings"]["repeat"] == 3
    assert len(d["plain"]["tokens_per_second_per_pass"]) == 3 and d["plain"]["per_pass"] is None
    spread = d["auto"]["per_pass"]
    assert len(spread["ratios"]) == 3 and spread["min"] <= spread["median"] <= spread["max"]
    assert d["auto"]["speedup"] == pytest.approx(spread["median"], abs=1e-4)
    assert spread["verdict"] in ("faster", "slower", "within noise") and spread["words"]


def test_sampling_runs_report_no_identity(engine):
    rep = bench.bench_report(
        engine,
        bench.grid(["model"], [2]),
        bench.Config("none"),
        TINY_PROMPTS[:1],
        max_tokens=8,
        temperature=0.8,
        seed=3,
    )
    assert rep.plain.identical is None and rep.results[0].identical is None


# -- the command -----------------------------------------------------------------------------


@pytest.fixture()
def run(tmp_path, monkeypatch):
    return cli("bench", bench_cmd, tmp_path, monkeypatch)


def test_cli_bench_json_contract_and_csv(run, tiny_target, tiny_noisy, prompt_file, tmp_path):
    out_csv = tmp_path / "bench.csv"
    r = run(
        "--profile",
        "cpu-small",
        "--target",
        tiny_target,
        "--draft-candidates",
        f"{tiny_noisy},ngram",
        "--k-grid",
        "1,2",
        "--input",
        prompt_file,
        "--limit",
        2,
        "--max-tokens",
        8,
        "--repeat",
        2,
        "--threads",
        1,
        "--json",
        "--csv",
        out_csv,
        "--quiet",
        "--exact",
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert {"plain", "results", "auto"} <= set(d)
    assert {"tokens_per_second", "speedup", "identical"} <= set(d["plain"])
    # with --exact on a CPU, plain decoding runs on llama.cpp's kernels (the baseline) and
    # on the exact kernels (the reference every speculative configuration reproduces)
    assert d["settings"]["plain_kernels"] == "llama.cpp"
    assert [x["config"] for x in d["results"]] == [
        "plain, exact kernels",
        "model k=1",
        "model k=2",
        "ngram k=1",
        "ngram k=2",
    ]
    assert d["plain"]["identical"] is None and d["plain"]["speedup"] == 1.0
    assert d["plain"]["per_pass"] is None and len(d["plain"]["tokens_per_second_per_pass"]) == 2
    auto_runs = [d["auto"]] if d["auto"]["config"] != "plain" else []
    for x in d["results"] + auto_runs:
        assert {"config", "tokens_per_second", "speedup", "acceptance_rate", "identical"} <= set(x)
        assert x["identical"] is True, x
        assert len(x["per_pass"]["ratios"]) == 2 and len(x["tokens_per_second_per_pass"]) == 2
        assert x["speedup"] == pytest.approx(x["per_pass"]["median"], abs=1e-4)
    assert {"config", "speedup"} <= set(d["auto"])
    assert d["settings"]["prompts"] == ["a", "b"] and d["settings"]["repeat"] == 2
    rows = list(csv.DictReader(out_csv.open()))
    assert [row["config"] for row in rows[:1]] == ["plain"] and len(rows) >= 5
    assert "speedup_custom" in rows[0]  # prompts from a file have no kind
    assert rows[0]["verdict"] == "" and rows[1]["verdict"] in ("faster", "slower", "within noise")
    assert float(rows[1]["speedup_min"]) <= float(rows[1]["speedup"]) <= float(rows[1]["speedup_max"])


def test_cli_bench_table(run, tiny_target, prompt_file):
    r = run(
        "--profile",
        "cpu-small",
        "--target",
        tiny_target,
        "-d",
        "ngram",
        "--k-grid",
        "2",
        "--input",
        prompt_file,
        "--max-tokens",
        6,
        "--threads",
        1,
    )
    assert r.exit_code == 0, r.output
    assert "ngram k=2" in r.stdout and "automatic choice" in r.stdout and "speedup" in r.stdout
    assert "per pass" in r.stdout and "verdict" in r.stdout
    # the default: five passes, and the automatic choice's verdict in words
    assert inspect.signature(bench_cmd).parameters["repeat"].default == bench_stats.DEFAULT_REPEAT == 5
    line = next(x for x in r.stdout.splitlines() if x.startswith("automatic choice against plain: "))
    assert any(w in line for w in ("faster (per-pass", "slower (per-pass", "level with plain", "within noise"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--k-grid", "1,x"), "--k-grid"),
        (("--k-grid", "0"), "--k-grid"),
        (("-d", "/nonexistent/a.gguf,/nonexistent/b.gguf"), "one draft model"),
        (("-d", "/nonexistent/draft.gguf"), "not found"),
    ],
)
def test_cli_bench_errors(run, tiny_target, prompt_file, args, message):
    r = run("--profile", "cpu-small", "--target", tiny_target, "--input", prompt_file, *args)
    assert r.exit_code != 0
    assert message in r.output and "Traceback" not in r.output


def test_cli_bench_bad_input_file(run, tiny_target, tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"id": 1}\n')
    r = run("--profile", "cpu-small", "--target", tiny_target, "--input", f)
    assert r.exit_code != 0 and "bad.jsonl:1" in r.output


# -- benchmarks/bench_agreement.py, without a model -----------------------------------------


def test_the_agreement_check_reads_bench_json():
    assert bench_agreement.agreement([1.00, 1.04])["agree"] is True
    assert bench_agreement.agreement([0.94, 1.20])["agree"] is False
    data = {
        "plain": {"tokens_per_second": 10.0},
        "auto": {
            "config": "auto: ngram k=2 adaptive",
            "planned_drafter": "ngram",
            "speedup": 1.1,
            "per_pass": {"ratios": [1.05, 1.1, 1.2], "verdict": "faster", "words": "faster (...)"},
        },
    }
    a = bench_agreement.auto_of(data)
    assert (a["config"], a["speedup"], a["per_pass"], a["verdict"]) == (
        "auto: ngram k=2 adaptive",
        1.1,
        [1.05, 1.1, 1.2],
        "faster",
    )
    plain = bench_agreement.auto_of({**data, "auto": {"config": "plain", "planned_drafter": "none", "speedup": 1.0}})
    assert plain["config"] == "plain decoding" and plain["verdict"] == "plain"
    args = bench_agreement.argparse.Namespace(
        edgespec="edgespec", target="t.gguf", draft=None, k_grid=None, repeat=None, max_tokens=160, threads=None
    )
    cmd = bench_agreement.bench_command(Path("p.txt"), args, ["-d", "ngram"])
    assert cmd[:5] == ["edgespec", "bench", "--prompt-file", "p.txt", "--json"]
    assert "--repeat" not in cmd and cmd[-4:] == ["--max-tokens", "160", "-d", "ngram"]  # bench's default passes


# -- a real model ----------------------------------------------------------------------------


@pytest.mark.integration
def test_real_model_bench_is_lossless():
    from edgespec.catalog import resolve_model

    try:
        path = resolve_model("qwen2.5-coder-0.5b")
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"Qwen2.5-Coder-0.5B not available: {e}")
    prompts = [p for p in HELD_OUT if p.kind in ("edit", "qa")][:2]
    with Engine(path, draft="ngram", n_ctx=2048, n_threads=1) as e:
        rep = bench.bench_report(
            e, bench.grid(["ngram"], [3]), bench.Config("ngram", 2, adaptive_k=True), prompts, max_tokens=16
        )
    assert rep.results[0].identical is True and rep.auto.identical is True
    assert rep.results[0].acceptance_rate is not None and rep.results[0].tokens > 0


def test_cli_bench_measures_each_drafter_as_users_run_it_by_default(run, tiny_target, tiny_noisy, prompt_file):
    """Without --k-grid each drafter gets one row, its learned draft length (the row the
    automatic choice would repeat is measured once, as the automatic choice); fixed k rows
    only when asked for."""
    args = ["--profile", "cpu-small", "--target", tiny_target, "-d", f"ngram,{tiny_noisy}", "--input", prompt_file]
    r = run(*args, "--max-tokens", 6, "--threads", 1, "--repeat", 1, "--json")
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    names = [x["config"] for x in data["results"]] + [data["auto"]["config"]]
    assert not any("k=" in n and "auto" not in n for n in names)  # no fixed-k row
    assert sum(1 for n in names if "learned k" in n or n.startswith("auto")) >= 2
    r = run(*args, "--k-grid", "policy,2", "--max-tokens", 6, "--threads", 1, "--repeat", 1, "--json")
    assert r.exit_code == 0, r.output
    assert "ngram k=2" in [x["config"] for x in json.loads(r.stdout)["results"]]


def test_the_automatic_choice_is_planned_again_after_the_first_use_measured_c(monkeypatch):
    """Loading a file for the first time measures c(n); bench plans its automatic choice
    again after loading, so a first run measures what later runs would (issue 43)."""
    from types import SimpleNamespace

    from edgespec.cli import measure
    from edgespec.cli.plan_options import PlanOptions

    first = SimpleNamespace(drafter="none")
    for again, loaded, expected in (("ngram", None, "ngram"), ("model", None, "none"), ("model", "d.gguf", "model")):
        monkeypatch.setattr(measure, "make_plan", lambda opts, d=again: SimpleNamespace(drafter=d))
        engine = SimpleNamespace(draft_model=loaded)
        assert measure.replan(first, PlanOptions(), engine).drafter == expected
