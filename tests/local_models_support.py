"""The fake model stores the local-models tests share: a temporary HOME holding Ollama, LM Studio,
Hugging Face, llama.cpp and EDGESPEC_MODEL_PATH stores of tiny GGUFs of two vocabularies
(tests/tiny_models.py), the ``tree``/``home`` fixtures that build it and point the environment at
it, the ``cli`` fixture for ``edgespec models``, and the names the tests look for. It knows
nothing of what the tests assert."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from pathlib import Path

import pytest

import catalog_support
from edgespec import catalog
from edgespec.catalog import stores
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


def write_manifest(root: Path, rel: str, layers: list[tuple[str, str]]) -> None:
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
    write_manifest(o, "registry.ollama.ai/library/tinytarget/latest", [(model, t)])
    write_manifest(o, "registry.ollama.ai/library/tinydraft/1b", [(model, d)])
    write_manifest(o, "hf.co/tinyorg/tiny-gguf/Q8_0", [(model, d)])
    write_manifest(
        o,
        "registry.ollama.ai/library/vision/7b",
        [(model, _blob(o, (src / "other.gguf").read_bytes())), (projector, _blob(o, b"GGUF projector"))],
    )
    write_manifest(o, "registry.ollama.ai/library/ghost/latest", [(model, "sha256:" + "0" * 64)])
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


def gpu_profile():
    """A profile where a small drafter pays: memory-bound verification, no fixed step cost."""
    prof = load_profile("rtx4090")
    return dataclasses.replace(prof, overhead_ms=dataclasses.replace(prof.overhead_ms, value=0.0))


cli = catalog_support.cli  # `edgespec models ...`, as tests/test_catalog.py runs it
