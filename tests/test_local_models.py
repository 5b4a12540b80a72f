"""The models people already have, on the fake stores of tests/local_models_support.py (Ollama,
LM Studio, Hugging Face, llama.cpp and EDGESPEC_MODEL_PATH under a temporary HOME): what is found
and under which names, what is skipped and why, which pairs are compatible (and that llama.cpp
agrees on the loaded vocabularies), that names resolve, that ``edgespec models`` lists them, and
what the header cache reads again. Using them (drafter choice, the commands that take a store
name) is tests/test_local_models_use.py."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import local_models_support as stores_support
from edgespec import catalog
from edgespec.catalog import ident, stores
from edgespec.errors import AmbiguousModelError, CatalogError, IncompatibleVocabError
from edgespec.planning import pairing
from local_models_support import BIG, DRAFT, DRAFT_TOO, OTHER, TARGET, names, write_manifest
from tiny_models import make_header_model, make_tiny_model

tree = stores_support.tree  # the fake stores' fixtures (tree, home) and `edgespec models` (cli)
home = stores_support.home
cli = stores_support.cli


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
    write_manifest(
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
