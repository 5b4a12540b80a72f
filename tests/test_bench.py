"""``edgespec.measuring.bench`` and ``edgespec bench``: the interleaved measurement, its summaries
and the JSON/CSV contract. Correctness only — no assertion here depends on how fast
anything ran. Tiny generated models for the plumbing; the real Qwen2.5-Coder-0.5B for
one end-to-end run (integration)."""

from __future__ import annotations

import csv
import json

import pytest

from bench_support import TINY_PROMPTS, cli
from edgespec import Engine
from edgespec.cli.bench import bench as bench_cmd
from edgespec.events import Round
from edgespec.measuring import bench
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
    for x in d["results"]:
        assert {"config", "tokens_per_second", "speedup", "acceptance_rate", "identical"} <= set(x)
        assert x["identical"] is True
    assert {"config", "speedup"} <= set(d["auto"])
    assert d["settings"]["prompts"] == ["a", "b"]
    rows = list(csv.DictReader(out_csv.open()))
    assert [row["config"] for row in rows[:1]] == ["plain"] and len(rows) >= 5
    assert "speedup_custom" in rows[0]  # prompts from a file have no kind


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
