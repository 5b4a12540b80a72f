"""Local models put to use, on the fake stores of tests/local_models_support.py: the automatic
drafter is the compatible model and never the incompatible one (nor one that does not fit), measured
acceptance is used next time, and the store names work in ``generate``, ``tune --save``, ``bench``,
``models check``, the Python API, ``edgespec.load``, ``serve`` and ``chat``."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import local_models_support as stores_support
from edgespec import catalog
from edgespec.errors import CatalogError, IncompatibleVocabError
from edgespec.planning import pairing, planner
from local_models_support import DRAFT, DRAFT_TOO, OTHER, TARGET, gpu_profile
from tiny_models import make_header_model

tree = stores_support.tree  # the fake stores' fixtures (tree, home) and `edgespec models` (cli)
home = stores_support.home
cli = stores_support.cli


def test_the_automatic_drafter_is_the_compatible_model(home):
    p = planner.plan(gpu_profile(), target=TARGET)
    assert p.drafter == "model" and p.draft in (DRAFT, DRAFT_TOO)
    assert f"model drafter {p.draft} (ollama)" in p.summary
    ranking = [n for n in p.notes if "(ollama):" in n or "(lmstudio)" in n]
    assert ranking and not any(OTHER in n for n in p.notes)
    assert Path(p.engine_kwargs()["draft"]) == home["draft_blob"]


def test_nothing_compatible_means_no_model_drafter(home):
    p = planner.plan(gpu_profile(), target=OTHER)
    assert p.drafter != "model" and p.draft is None
    assert any(n.startswith(f"drafters on this machine for {OTHER}: none") for n in p.notes)


def test_measured_acceptance_is_used_next_time(home):
    index = catalog.scan()
    by = {m.name: m for m in index.models}
    prof = gpu_profile()
    catalog.measured.record(by[TARGET], by[DRAFT], alpha=0.93, gamma=0.2, profile=prof.name, source="test")
    catalog.forget()
    r = pairing.rank(TARGET, prof, budget=10**10, headroom=0, c=prof.verify.cost)
    best = r.best
    assert best.alpha == pytest.approx(0.93) and best.alpha_status.startswith("measured")
    assert best.gamma == pytest.approx(0.2) and best.gamma_status.startswith("measured")


def test_acceptance_prior_by_size_and_family():
    same4 = pairing.acceptance_prior(0.7, 4_000, 1_000, True)
    assert same4 == pytest.approx(0.7)
    assert pairing.acceptance_prior(0.7, 16_000, 1_000, True) < same4
    assert pairing.acceptance_prior(0.7, 4_000, 1_000, False) == pytest.approx(0.7 * pairing.DIFFERENT_FAMILY)


def test_a_catalog_drafter_is_suggested_when_none_is_here(home, tmp_path):
    """A Qwen2-like header (its tokenizer's size and pre-tokenizer) with nothing to pair."""
    big = tmp_path / "lone" / "qwen-like.gguf"
    make_header_model(big, name="qwen-like", pre="qwen2", tokens=[f"t{i}" for i in range(151936)])
    with open(big, "r+b") as f:  # a sparse 2 GB: the size a 3B model has
        f.truncate(2_000_000_000)
    p = planner.plan(gpu_profile(), target=str(big))
    assert re.search(r"`edgespec models pull qwen2\.5-(coder-)?0\.5b-instruct-q4_k_m`", p.summary), p.summary
    assert p.drafter != "model"


def test_generate_runs_on_an_ollama_target(home):
    from edgespec.cli.generate import generate

    app = typer.Typer()
    app.command("generate")(generate)
    app.command("other")(lambda: None)
    runner = CliRunner()
    r = runner.invoke(app, ["generate", "--target", TARGET, "--max-tokens", "8", "--raw", "-v", "the quick fox"])
    assert r.exit_code == 0, r.output
    assert r.stdout.strip()
    assert "drafters on this machine for ollama:tinytarget:latest" in r.stderr
    r = runner.invoke(
        app,
        [
            "generate",
            "--target",
            TARGET,
            "--draft",
            DRAFT,
            "--k",
            "2",
            "--max-tokens",
            "8",
            "--raw",
            "--json",
            "the quick fox",
        ],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["stats"]["drafted"] > 0
    r = runner.invoke(app, ["generate", "--target", TARGET, "--draft", OTHER, "--max-tokens", "4", "--raw", "x"])
    assert r.exit_code == IncompatibleVocabError.exit_code and "vocabular" in r.stderr


def test_tune_save_records_acceptance_for_the_local_pair_and_the_next_plan_uses_it(home, tmp_path):
    from bench_support import write_prompt_file
    from edgespec.cli.tune import tune as tune_cmd

    app = typer.Typer()
    app.command("tune")(tune_cmd)
    app.command("other")(lambda: None)
    r = CliRunner().invoke(
        app,
        [
            "tune",
            "--profile",
            "cpu-small",
            "--target",
            TARGET,
            "--draft",
            DRAFT,
            "--k-grid",
            "1,2",
            "--input",
            str(write_prompt_file(tmp_path / "p.jsonl")),
            "--max-tokens",
            "6",
            "--repeats",
            "1",
            "--threads",
            "1",
            "--json",
            "--quiet",
            "--save-as",
            "tiny-box",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    alpha = json.loads(r.stdout)["acceptance"]["model"]
    rec = json.loads(catalog.measured.store_path().read_text())["pairs"]
    (only,) = rec.values()
    assert (only["target"], only["profile"]) == (TARGET, "tiny-box") and only["draft"] in (DRAFT, DRAFT_TOO)
    assert only["alpha"] == pytest.approx(min(alpha, 0.99), abs=1e-3)
    catalog.forget()
    p = planner.plan("tiny-box", target=TARGET, draft="model")
    assert p.drafter == "model" and any("α=" in n and "measured" in n for n in p.notes)


def test_bench_and_models_check_take_local_names(home, tmp_path, cli):
    from bench_support import write_prompt_file
    from edgespec.cli.bench import bench

    app = typer.Typer()
    app.command("bench")(bench)
    app.command("other")(lambda: None)
    r = CliRunner().invoke(
        app,
        [
            "bench",
            "--profile",
            "cpu-small",
            "--target",
            TARGET,
            "--draft-candidates",
            f"{DRAFT},ngram",
            "--k-grid",
            "2",
            "--input",
            str(write_prompt_file(tmp_path / "p.jsonl")),
            "--limit",
            "1",
            "--max-tokens",
            "6",
            "--threads",
            "1",
            "--json",
            "--quiet",
        ],
        catch_exceptions=False,
    )
    assert r.exit_code == 0, r.output
    assert "model k=2" in [x["config"] for x in json.loads(r.stdout)["results"]]
    r = cli("models", "check", TARGET, DRAFT, "--json")
    assert r.exit_code == 0 and json.loads(r.stdout)["compatible"] is True
    r = cli("models", "check", TARGET, OTHER)
    assert r.exit_code == IncompatibleVocabError.exit_code and "incompatible" in r.stdout


def test_the_python_api_takes_local_names(home):
    from edgespec import Engine

    p = planner.plan(gpu_profile(), target=TARGET, draft=DRAFT, n_gpu_layers=0)
    with Engine(**p.engine_kwargs()) as engine:
        assert engine.target_path == home["target_blob"] and engine.draft_path == home["draft_blob"]
        assert engine.generate("the quick fox", max_tokens=4, raw=True).token_ids


def test_edgespec_load_takes_a_store_name_and_chooses_the_compatible_drafter(home):
    import edgespec

    with edgespec.load(TARGET, profile=gpu_profile(), n_gpu_layers=0) as engine:
        assert engine.target_path == home["target_blob"]
        assert engine.plan.target == TARGET
        # the automatic choice never takes the other vocabulary's model
        assert engine.draft_path in (None, home["draft_blob"])
        assert engine.generate("the quick fox", max_tokens=4, raw=True).token_ids
    with edgespec.load(TARGET, draft=DRAFT, profile=gpu_profile(), n_gpu_layers=0) as engine:
        assert engine.draft_path == home["draft_blob"] and engine.drafter_name == "model"
    with pytest.raises(CatalogError, match="did you mean 'ollama:tinytarget:latest'"):
        edgespec.load("ollama:tinytarjet:latest", profile=gpu_profile())


def test_serve_and_chat_report_a_store_model_by_its_name(home, tmp_path):
    import sys

    import pexpect

    from edgespec.cli.common import store_name

    assert store_name(TARGET) == TARGET  # not the blob's "sha256-..." file name
    assert store_name(str(home["target_blob"])) is None
    assert store_name("qwen2.5-coder-1.5b") is None  # a catalog name: the file's stem
    child = pexpect.spawn(
        sys.executable,
        ["-m", "edgespec", "chat", "--target", TARGET, "--draft", "none"],
        env=dict(os.environ, TERM="xterm-256color", XDG_STATE_HOME=str(tmp_path / "state")),
        encoding="utf-8",
        timeout=120,
        dimensions=(40, 160),
    )
    try:
        child.expect_exact("you›")
        assert f"edgespec chat · {TARGET} · drafter none" in child.before
        child.sendeof()
        child.expect(pexpect.EOF)
    finally:
        child.close(force=True)


def test_a_drafter_that_does_not_fit_beside_the_target_is_not_taken(home):
    prof = gpu_profile()
    t, d = catalog.lookup(TARGET), catalog.lookup(DRAFT)
    alone = t.size_bytes + catalog.kv_cache_bytes(t.header.shape, prof.n_ctx)
    budget = alone + d.size_bytes // 2  # the target fits, the target and the drafter do not
    prof = dataclasses.replace(
        prof, headroom_gb=0.0, models_gb=dataclasses.replace(prof.models_gb, value=budget / catalog.GB)
    )
    p = planner.plan(prof, target=TARGET)
    assert p.drafter != "model"
    assert any("does not fit beside the target" in n for n in p.notes)


def test_a_catalog_model_another_tool_has_is_used_where_it_is(home, monkeypatch):
    """No second copy: a catalog name whose file (same name, same size) is in LM Studio's
    folder resolves to that file, offline, without assembling or downloading."""
    from edgespec.catalog import fetching, local

    lms = catalog.lookup(OTHER).path
    fake = dataclasses.replace(
        catalog.get_model("qwen2.5-coder-0.5b"),
        name="tiny-cat",
        aliases=(),
        filename=lms.name,
        size_bytes=lms.stat().st_size,
        hf=None,
    )
    monkeypatch.setattr(fetching, "find_model", lambda name: fake if name == "tiny-cat" else None)
    monkeypatch.setattr(fetching, "assemble", lambda *a: pytest.fail("assembled a second copy"))
    assert catalog.resolve_model("tiny-cat", offline=True) == lms
    assert catalog.is_available("tiny-cat") and catalog.local_path("tiny-cat") == lms
    assert local.store_copy(dataclasses.replace(fake, size_bytes=fake.size_bytes + 1)) is None  # hash known: exact
