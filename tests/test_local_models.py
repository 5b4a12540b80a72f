"""The models people already have: fake Ollama, LM Studio, Hugging Face, llama.cpp and
EDGESPEC_MODEL_PATH stores under a temporary HOME, holding tiny GGUFs of two different
vocabularies (tests/tiny_models.py). What is found and under which names, what is
skipped and why, which pairs are compatible (and that llama.cpp agrees on the loaded
vocabularies), that the names work on the command line, and that the automatic drafter
is the compatible model and never the incompatible one."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from edgespec import catalog
from edgespec.catalog import ident, stores
from edgespec.errors import AmbiguousModelError, CatalogError, IncompatibleVocabError
from edgespec.planning import pairing, planner
from edgespec.profiles import load_profile
from tiny_models import make_header_model, make_tiny_model, write_random_bytes

TARGET = "ollama:tinytarget:latest"
DRAFT = "ollama:tinydraft:1b"
DRAFT_TOO = "ollama:hf.co/tinyorg/tiny-gguf:Q8_0"  # the same blob under a second Ollama name
OTHER = "tinyorg/Tiny-Other-GGUF"  # the other vocabulary, small enough to draft
BIG = 100_000  # F32 weights of the header-only models: too large to draft for the target


def _blob(root: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    return f"sha256:{digest}"


def _manifest(root: Path, rel: str, layers: list[tuple[str, str]]) -> None:
    f = root / "manifests" / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(
        json.dumps({"schemaVersion": 2, "layers": [{"mediaType": m, "digest": d, "size": 1} for m, d in layers]})
    )


def build_tree(home: Path, src: Path) -> dict[str, Path]:
    """The stores under ``home`` (models from ``src``); returns the interesting paths."""
    model, projector = stores.OLLAMA_MODEL_LAYER, "application/vnd.ollama.image.projector"
    o = home / ".ollama" / "models"
    t = _blob(o, (src / "target.gguf").read_bytes())
    d = _blob(o, (src / "draft.gguf").read_bytes())
    _manifest(o, "registry.ollama.ai/library/tinytarget/latest", [(model, t)])
    _manifest(o, "registry.ollama.ai/library/tinydraft/1b", [(model, d)])
    _manifest(o, "hf.co/tinyorg/tiny-gguf/Q8_0", [(model, d)])
    _manifest(
        o,
        "registry.ollama.ai/library/vision/7b",
        [(model, _blob(o, (src / "other.gguf").read_bytes())), (projector, _blob(o, b"GGUF projector"))],
    )
    _manifest(o, "registry.ollama.ai/library/ghost/latest", [(model, "sha256:" + "0" * 64)])
    broken = o / "manifests/registry.ollama.ai/library/broken/latest"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json")
    (o / "manifests" / ".DS_Store").write_bytes(b"\0")  # litter that is no one's business
    (o / "manifests" / "registry.ollama.ai" / "README").write_text("not a namespace")

    lms = home / ".lmstudio" / "models" / "tinyorg"
    (lms / "Tiny-Other-GGUF").mkdir(parents=True)
    shutil.copy(src / "other.gguf", lms / "Tiny-Other-GGUF" / "other-small.gguf")
    make_header_model(lms / "Tiny-Multi-GGUF" / "draft-a.gguf", name="multi-a", n_floats=BIG)
    make_header_model(lms / "Tiny-Multi-GGUF" / "draft-b.gguf", name="multi-b", n_floats=BIG + 1)
    make_header_model(lms / "Tiny-Multi-GGUF" / "mmproj-tiny-f16.gguf", kind="mmproj")
    (lms / "Broken-GGUF").mkdir()
    (lms / "Broken-GGUF" / "cut.gguf").write_bytes((src / "target.gguf").read_bytes()[:200])
    write_random_bytes(lms / "Broken-GGUF" / "notgguf.gguf")
    make_header_model(home / ".cache/lm-studio/models/old/Old-GGUF/old.gguf", name="old", n_floats=BIG)
    (lms.parent / "README.md").write_text("LM Studio keeps models here")
    (lms / "Tiny-Other-GGUF" / "README.md").write_text("a model card")

    hub = home / ".cache/huggingface/hub"
    repo = hub / "models--tinyorg--Tiny-Split-GGUF"
    parts = make_header_model(repo / "tmp" / "split.gguf", name="split", n_parts=2, n_floats=BIG)
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    snap = repo / "snapshots" / "abc123"
    snap.mkdir(parents=True)
    for p in parts:  # as huggingface_hub stores them: links into blobs/
        blob = repo / "blobs" / hashlib.sha256(p.read_bytes()).hexdigest()
        blob.parent.mkdir(exist_ok=True)
        p.rename(blob)
        (snap / p.name).symlink_to(os.path.relpath(blob, snap))
    (repo / "tmp").rmdir()
    gone = hub / "models--tinyorg--Tiny-Gone-GGUF" / "snapshots" / "abc"
    gone.mkdir(parents=True)
    (gone / "gone.gguf").symlink_to("../../blobs/deadbeef")

    make_header_model(home / ".cache/llama.cpp/tinyorg_Tiny-GGUF_lora.gguf", kind="lora")
    mine = home / "mymodels"
    make_header_model(mine / "sub" / "mine.gguf", name="mine", n_floats=BIG)
    make_header_model(mine / "sub" / "half-00001-of-00002.gguf", name="half")  # part 2 missing
    (mine / "locked").mkdir()
    return {
        "target_blob": o / "blobs" / t.replace(":", "-"),
        "draft_blob": o / "blobs" / d.replace(":", "-"),
        "mine": mine,
        "locked": mine / "locked",
    }


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    pytest.importorskip("gguf")
    src = tmp_path_factory.mktemp("src")
    make_tiny_model(src / "target.gguf", seed=0, name="tiny-target", n_ctx_train=512)
    # the target's vocabulary and weights, four times narrower: a real, runnable drafter
    make_tiny_model(src / "draft.gguf", seed=0, name="tiny-draft", n_embd=32, n_ff=64, n_layer=1)
    make_tiny_model(src / "other.gguf", vocab="other", seed=2, name="tiny-other", n_embd=32, n_ff=64, n_layer=1)
    home = tmp_path_factory.mktemp("home")
    return home, build_tree(home, src)


@pytest.fixture
def home(tree, tmp_path, monkeypatch):
    """HOME is the fake tree; every other store variable unset; caches and config here."""
    h, paths = tree
    monkeypatch.setenv("HOME", str(h))
    for var in (
        "OLLAMA_MODELS",
        "HF_HOME",
        "HF_HUB_CACHE",
        "HUGGINGFACE_HUB_CACHE",
        "LLAMA_CACHE",
        "XDG_CACHE_HOME",
        "HF_HUB_OFFLINE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("EDGESPEC_MODEL_PATH", str(paths["mine"]))
    monkeypatch.setattr(stores, "OLLAMA_SYSTEM_ROOTS", ())
    real_scandir = os.scandir

    def scandir(path="."):  # the folder no one may read (the tests run as root: chmod is no bar)
        if Path(path) == paths["locked"]:
            raise PermissionError(13, "Permission denied")
        return real_scandir(path)

    monkeypatch.setattr(stores.os, "scandir", scandir)
    catalog.forget()
    yield paths
    catalog.forget()


def names(index):
    return {m.name for m in index.models}


def test_every_store_is_found_under_its_names(home):
    index = catalog.scan()
    assert names(index) == {
        TARGET,
        DRAFT,
        DRAFT_TOO,
        "ollama:vision:7b",
        OTHER,
        "tinyorg/Tiny-Multi-GGUF/draft-a.gguf",
        "tinyorg/Tiny-Multi-GGUF/draft-b.gguf",
        "old/Old-GGUF",
        "hf:tinyorg/Tiny-Split-GGUF",
        "mine",
    }
    by = {m.name: m for m in index.models}
    assert by[TARGET].source == "ollama" and by[TARGET].path == home["target_blob"]
    assert by[OTHER].source == "lmstudio" and by["old/Old-GGUF"].source == "lmstudio"
    split = by["hf:tinyorg/Tiny-Split-GGUF"]
    assert split.source == "huggingface" and len(split.files) == 2  # one model, two parts
    assert split.size_bytes == sum(f.stat().st_size for f in split.files)
    assert split.header.params == 2 * BIG
    h = by[TARGET].header
    assert (h.architecture, h.quant, h.context_length, h.chat_template) == ("llama", "F32", 512, True)
    assert h.tokenizer.n_tokens == 320 and not by[OTHER].header.chat_template


def test_what_is_skipped_and_why(home):
    skipped = {Path(s.path).name: s.reason for s in catalog.scan().skipped}
    reasons = " | ".join(s.reason for s in catalog.scan().skipped)
    assert "ollama:broken:latest: corrupt manifest" in reasons
    assert "ollama:ghost:latest: its model blob" in reasons and "missing (dangling)" in reasons
    assert "ollama:vision:7b: a vision projector (mmproj) layer" in reasons
    assert "vision projector (mmproj)" in skipped["mmproj-tiny-f16.gguf"]
    assert "cut short or corrupt" in skipped["cut.gguf"]  # truncated mid-header
    assert "not a GGUF file" in skipped["notgguf.gguf"]
    assert "dangling link" in skipped["gone.gguf"]
    assert "a LoRA adapter, not a model" in skipped["tinyorg_Tiny-GGUF_lora.gguf"]
    assert "part(s) 2 of 2 missing" in skipped["half-00001-of-00002.gguf"]
    assert "cannot read the folder: Permission denied" in skipped["locked"]
    assert not any(n in (".DS_Store", "README", "README.md", "registry.ollama.ai") for n in skipped)
    assert len(catalog.scan().skipped) == 10  # the ten above, and nothing else


def test_compatibility_from_headers_follows_llama_cpp_and_llama_agrees(home):
    from edgespec import llama
    from edgespec.llama import vocab

    assert (ident.VOCAB_MAX_SIZE_DIFFERENCE, ident.VOCAB_CHECK_START_TOKEN_ID) == (
        vocab.VOCAB_MAX_SIZE_DIFFERENCE,
        vocab.VOCAB_CHECK_START_TOKEN_ID,
    )
    index = catalog.scan()
    by = {m.name: m for m in index.models}
    target, draft, other = by[TARGET], by[DRAFT], by[OTHER]
    assert {d.name for d in index.drafters_for(target)} == {DRAFT, DRAFT_TOO}
    assert ident.drafting_problem(target.header.tokenizer, other.header.tokenizer).startswith("different token")
    llama.check_vocab_files(target.path, draft.path)  # llama.cpp's check on the loaded vocabularies
    with pytest.raises(IncompatibleVocabError):
        llama.check_vocab_files(target.path, other.path)
    pairs = {(t.name, d.name) for t, d in index.pairs()}
    assert (TARGET, DRAFT) in pairs and not any(OTHER in p for p in pairs)
    assert (TARGET, "ollama:vision:7b") not in pairs


def test_sizes_within_128_tokens_are_compatible(tmp_path):
    """Qwen2.5-7B's 152,064 tokens and 0.5B's 151,936: llama.cpp's 128-token tolerance."""
    pytest.importorskip("gguf")
    a = make_tiny_model(tmp_path / "a.gguf", seed=0, n_vocab=328)
    b = make_tiny_model(tmp_path / "b.gguf", seed=0, n_embd=32, n_ff=64, n_layer=1)
    c = make_tiny_model(tmp_path / "c.gguf", seed=0, n_embd=32, n_ff=64, n_layer=1, n_vocab=452)
    ta, tb, tc = (ident.read_header(p).tokenizer for p in (a, b, c))
    assert ident.drafting_problem(ta, tb) is None and ident.drafting_problem(tb, ta) is None
    assert "more than 128 apart" in ident.drafting_problem(tb, tc)
    assert ident.drafting_problem(ta, tc) is None  # 328 and 452: the first 328 agree


def test_names_resolve_wherever_a_model_is_named(home):
    assert catalog.resolve_model(TARGET) == home["target_blob"]
    assert catalog.resolve_model("tinytarget") == home["target_blob"]  # no prefix, :latest
    assert catalog.resolve_model("tinydraft:1b") == home["draft_blob"]
    assert catalog.resolve_model(OTHER).name == "other-small.gguf"
    assert catalog.resolve_model("mine").name == "mine.gguf"
    assert catalog.model_info(TARGET).size_bytes == home["target_blob"].stat().st_size
    assert catalog.is_available(DRAFT) and catalog.local_path(DRAFT) == home["draft_blob"]
    with pytest.raises(AmbiguousModelError, match=r"matches 2 models.*draft-a\.gguf.*draft-b\.gguf"):
        catalog.resolve_model("tinyorg/Tiny-Multi-GGUF")
    with pytest.raises(CatalogError, match="did you mean 'ollama:tinytarget:latest'"):
        catalog.resolve_model("ollama:tinytarjet:latest")


def test_the_same_file_under_two_names_is_not_ambiguous(home, tmp_path, monkeypatch):
    for d in ("one", "two"):  # one model copied into two folders: two "tinydraft"s, the same bytes
        (tmp_path / d).mkdir()
        shutil.copy(home["draft_blob"], tmp_path / d / "tinydraft.gguf")
    monkeypatch.setenv("EDGESPEC_MODEL_PATH", os.pathsep.join(str(tmp_path / d) for d in ("one", "two")))
    catalog.forget()
    assert len(catalog.scan().find("tinydraft")) == 2
    m = catalog.lookup("tinydraft")
    assert m is not None and m.path == tmp_path / "one" / "tinydraft.gguf"
    assert m.key == catalog.lookup(DRAFT).key  # and the Ollama blob is the same model too


def gpu_profile():
    """A profile where a small drafter pays: memory-bound verification, no fixed step cost."""
    prof = load_profile("rtx4090")
    return dataclasses.replace(prof, overhead_ms=dataclasses.replace(prof.overhead_ms, value=0.0))


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


def test_a_warm_scan_reads_no_header_and_a_changed_file_is_read_again(home, monkeypatch):
    first = catalog.scan()
    catalog.forget()

    def no_reading(path):
        raise AssertionError(f"read {path} again")

    monkeypatch.setattr("edgespec.catalog.local.read_header", no_reading)
    assert names(catalog.scan()) == names(first)
    catalog.forget()
    mine = home["mine"] / "sub" / "mine.gguf"
    st = mine.stat()
    os.utime(mine, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    with pytest.raises(AssertionError, match="mine.gguf again"):
        catalog.scan()


@pytest.fixture
def cli():
    from edgespec.cli.profiles import models_app

    app = typer.Typer()
    app.add_typer(models_app, name="models")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))


def test_cli_models_list_shows_catalog_and_local_and_never_crashes(home, cli):
    r = cli("models", "list", "-v")
    assert r.exit_code == 0, r.output
    assert "tinytarget" in r.stdout and "catalog" in r.stdout
    assert "corrupt manifest" in r.stderr and "cannot read the folder" in r.stderr
    d = json.loads(cli("models", "list", "--json").stdout)
    local = {m["name"]: m for m in d["local"]}
    assert set(local) == names(catalog.scan())
    assert set(local[TARGET]["drafters"]) == {DRAFT, DRAFT_TOO}
    assert TARGET in local[DRAFT]["can_draft_for"] and local[OTHER]["can_draft_for"] == []
    assert {m["name"] for m in d["models"]} == {m.name for m in catalog.MODELS}
    assert any("dangling" in s["reason"] for s in d["skipped"])


def test_cli_models_pairs(home, cli):
    r = cli("models", "pairs", "--json", "--profile", "rtx4090")
    assert r.exit_code == 0, r.output
    pairs = json.loads(r.stdout)["pairs"]
    got = {(p["target"], p["draft"]) for p in pairs}
    assert (TARGET, DRAFT_TOO) in got or (TARGET, DRAFT) in got
    assert not any(OTHER in (p["target"], p["draft"]) for p in pairs)
    assert all(p["predicted_speedup"] > 0 for p in pairs)


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


def test_two_hundred_models_are_listed(tmp_path, monkeypatch):
    """The scale check behind benchmarks/local_models.py (which times it): 200 headers."""
    pytest.importorskip("gguf")
    folder = tmp_path / "many"
    for i in range(200):
        make_header_model(folder / f"m{i:03d}.gguf", name=f"m{i}", n_floats=64 + i)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EDGESPEC_MODEL_PATH", str(folder))
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(stores, "OLLAMA_SYSTEM_ROOTS", ())
    for var in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "LLAMA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    catalog.forget()
    try:
        assert len(catalog.scan().models) == 200
        catalog.forget()
        assert len(catalog.scan().models) == 200  # from the cache
    finally:
        catalog.forget()


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


def test_a_name_or_a_drafter_search_reads_only_the_headers_it_needs(home, monkeypatch):
    from edgespec.catalog import local

    read = []
    real = local.read_header
    monkeypatch.setattr(local, "read_header", lambda p: read.append(Path(p).name) or real(p))
    assert catalog.resolve_model(TARGET) == home["target_blob"]
    assert read == [home["target_blob"].name]  # a cold cache: this model's header alone
    read.clear()
    t = catalog.lookup(TARGET)
    assert {d.name for d in catalog.drafter_candidates(t)} == {DRAFT, DRAFT_TOO}
    # only files at most half the target's size: never the large header-only models
    assert home["draft_blob"].name in read and "other-small.gguf" in read
    assert not {"mine.gguf", "draft-a.gguf", "draft-b.gguf", "old.gguf", "split-00001-of-00002.gguf"} & set(read)


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


@pytest.mark.integration
def test_real_qwen_headers_and_llama_agree(tmp_path, monkeypatch, tiny_target):
    """The real Qwen2.5-Coder-0.5B (test extra) in a fake Ollama store: its header, its
    name, the catalog family the suggestion uses, and the vocabulary verdicts llama.cpp
    confirms (the 1.5B target too, when this machine has it)."""
    from edgespec import llama

    q05 = catalog.resolve_model("qwen2.5-coder-0.5b")
    q15 = catalog.local_path("qwen2.5-coder-1.5b")  # before HOME moves
    h = ident.read_header(q05)
    assert (h.architecture, h.quant, h.chat_template, h.context_length) == ("qwen2", "Q4_K_M", True, 32768)
    assert (h.tokenizer.model, h.tokenizer.pre, h.tokenizer.n_tokens) == ("gpt2", "qwen2", 151936)
    root = tmp_path / "ollama"
    blob = root / "blobs" / ("sha256-" + "1" * 64)
    blob.parent.mkdir(parents=True)
    blob.symlink_to(q05)  # no copy: the store only has to name the bytes
    _manifest(
        root, "registry.ollama.ai/library/qwen2.5-coder/0.5b", [(stores.OLLAMA_MODEL_LAYER, "sha256:" + "1" * 64)]
    )
    monkeypatch.setenv("OLLAMA_MODELS", str(root))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(stores, "OLLAMA_SYSTEM_ROOTS", ())
    catalog.forget()
    try:
        m = catalog.lookup("qwen2.5-coder:0.5b")
        assert m.name == "ollama:qwen2.5-coder:0.5b" and pairing.catalog_family(m) == "qwen2"
        other = ident.read_header(tiny_target).tokenizer
        assert ident.drafting_problem(h.tokenizer, other) is not None
        with pytest.raises(IncompatibleVocabError):
            llama.check_vocab_files(q05, tiny_target)
        if q15 is not None:
            assert ident.drafting_problem(ident.read_header(q15).tokenizer, h.tokenizer) is None
            llama.check_vocab_files(q15, q05)
    finally:
        catalog.forget()


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


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder; the monkeypatched scandir covers it")
def test_a_folder_without_read_permission_is_skipped(tmp_path, monkeypatch):
    locked = tmp_path / "models" / "locked"
    locked.mkdir(parents=True)
    make_header_model(tmp_path / "models" / "ok.gguf", name="ok")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("EDGESPEC_MODEL_PATH", str(tmp_path / "models"))
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(stores, "OLLAMA_SYSTEM_ROOTS", ())
    locked.chmod(0)
    catalog.forget()
    try:
        index = catalog.scan()
        assert names(index) == {"ok"}
        assert any(s.path == str(locked) and "cannot read the folder" in s.reason for s in index.skipped)
    finally:
        locked.chmod(0o755)
        catalog.forget()


def test_a_catalog_file_in_the_hf_cache_is_one_row_under_its_catalog_name(home, tmp_path, monkeypatch):
    m = catalog.get_model("qwen2.5-coder-0.5b")
    snap = tmp_path / "hub" / ("models--" + m.hf.repo.replace("/", "--")) / "snapshots" / "abc"
    snap.mkdir(parents=True)
    make_header_model(snap / m.hf.files[0], name="looks-like-qwen")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    catalog.forget()
    found = [x for x in catalog.scan().models if x.source == "huggingface" and x.catalog]
    assert [(x.name, x.catalog) for x in found] == [(m.name, m.name)]
    assert f"hf:{m.hf.repo}" in found[0].aliases
    from edgespec.catalog import listing

    assert m.name not in {r["name"] for r in listing.local_rows(catalog.scan())}


def test_the_header_cache_forgets_files_that_are_gone(home, tmp_path, monkeypatch):
    extra = tmp_path / "extra"
    make_header_model(extra / "gone-soon.gguf", name="gone-soon")
    monkeypatch.setenv("EDGESPEC_MODEL_PATH", f"{home['mine']}{os.pathsep}{extra}")
    catalog.forget()
    assert "gone-soon" in names(catalog.scan())
    index_file = catalog.cache_dir() / "local-index.json"
    assert str(extra / "gone-soon.gguf") in json.loads(index_file.read_text())["files"]
    (extra / "gone-soon.gguf").unlink()
    catalog.forget()
    assert "gone-soon" not in names(catalog.scan())
    assert str(extra / "gone-soon.gguf") not in json.loads(index_file.read_text())["files"]
