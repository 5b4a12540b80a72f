"""The 2026 model families in the catalog (issue 44 item 6): Qwen3.5 0.8B / 2B / 4B / 9B and
LFM2.5-1.2B (hybrids: a recurrent state beside a few attention layers) and Gemma 4 E2B / E4B
(not hybrid) by name, with their files' real names and sizes; the Qwen3.5 pairs; the memory
fit of a hybrid (KV only in its attention layers, its recurrent state, and the snapshots a
speculating target keeps), checked against llama.cpp's own allocation on tiny files; `models
list` saying how each model speculates; and `--target qwen3.5-4b` finding a qwen35 file
another tool (LM Studio, the Hugging Face cache) already has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import catalog_support
from edgespec import catalog
from edgespec.catalog import archs, stores
from edgespec.catalog.fit import MAX_RS_SEQ, layer_kinds, model_info, recurrent_state_bytes
from edgespec.planning import pairing

cli = catalog_support.cli

NEW = {
    # name: (alias, file, bytes, Hugging Face repo, architecture, tokenizer family)
    "qwen3.5-0.8b-q8_0": (
        "qwen3.5-0.8b",
        "Qwen3.5-0.8B-Q8_0.gguf",
        833_592_096,
        "ggml-org/Qwen3.5-0.8B-GGUF",
        "qwen35",
    ),
    "qwen3.5-2b-q4_k_m": ("qwen3.5-2b", "Qwen3.5-2B-Q4_K_M.gguf", 1_280_835_840, "unsloth/Qwen3.5-2B-GGUF", "qwen35"),
    "qwen3.5-4b-q4_k_m": ("qwen3.5-4b", "Qwen3.5-4B-Q4_K_M.gguf", 2_740_937_888, "unsloth/Qwen3.5-4B-GGUF", "qwen35"),
    "qwen3.5-9b-q4_k_m": ("qwen3.5-9b", "Qwen3.5-9B-Q4_K_M.gguf", 5_680_522_464, "unsloth/Qwen3.5-9B-GGUF", "qwen35"),
    "lfm2.5-1.2b-instruct-q4_k_m": (
        "lfm2.5-1.2b",
        "LFM2.5-1.2B-Instruct-Q4_K_M.gguf",
        730_895_168,
        "LiquidAI/LFM2.5-1.2B-Instruct-GGUF",
        "lfm2",
    ),
    "gemma-4-e2b-it-q4_k_m": (
        "gemma-4-e2b",
        "gemma-4-E2B-it-Q4_K_M.gguf",
        3_106_735_776,
        "unsloth/gemma-4-E2B-it-GGUF",
        "gemma4",
    ),
    "gemma-4-e4b-it-q4_k_m": (
        "gemma4-e4b",
        "gemma-4-E4B-it-Q4_K_M.gguf",
        4_977_171_584,
        "unsloth/gemma-4-E4B-it-GGUF",
        "gemma4",
    ),
}


# --------------------------------------------------------------------------------------
# Names, files, pairs
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(NEW))
def test_names_aliases_and_file_names_resolve(name):
    alias, filename, size, repo, arch = NEW[name]
    m = catalog.find_model(name)
    assert m is not None and m.name == name
    assert catalog.find_model(alias) is m and catalog.find_model(alias.upper()) is m
    assert catalog.find_model(filename) is m  # the bare file name, as `--target` may get it
    assert (m.filename, m.size_bytes, m.arch) == (filename, size, arch)
    assert (m.hf.repo, m.hf.files) == (repo, (filename,))
    assert m.hf.url == f"https://huggingface.co/{repo}/resolve/main/{filename}"
    assert m.quant in filename and m.sources() == ["huggingface"]


def test_qwen35_names_the_brief_uses():
    assert catalog.get_model("qwen3.5-4b").name == "qwen3.5-4b-q4_k_m"
    assert catalog.get_model("qwen35-9b").name == "qwen3.5-9b-q4_k_m"
    assert catalog.get_model("gemma4-e2b") is catalog.get_model("gemma-4-e2b-it")
    assert catalog.get_model("lfm2.5-1.2b-instruct").vocab == "lfm2"


def test_qwen35_0_8b_drafts_for_the_4b_and_the_9b():
    for target in ("qwen3.5-4b", "qwen3.5-9b"):
        p = catalog.find_pair(target)
        assert p is not None and p.draft == "qwen3.5-0.8b-q8_0", target
        assert catalog.find_pair(target, "qwen3.5-0.8b") is p
        t, d = catalog.get_model(p.target), catalog.get_model(p.draft)
        assert t.vocab == d.vocab == "qwen35"
        assert d.params_b * 3 <= t.params_b and d.size_bytes * 3 <= t.size_bytes
        assert "qwen3.5-0.8b-q8_0" in [m.name for m in catalog.drafts_for(target)]
    assert catalog.get_pair("qwen3.5-9b+0.8b").target == "qwen3.5-9b-q4_k_m"
    # the 2B is no drafter of the 4B (not 3x smaller); nothing of another family drafts for them
    assert [m.name for m in catalog.drafts_for("qwen3.5-4b")] == ["qwen3.5-0.8b-q8_0"]
    assert not catalog.drafts_for("qwen3.5-2b") and not catalog.drafts_for("gemma-4-e4b")


def test_tokenizer_families_are_llama_cpp_pre_tokenizers_and_do_not_mix_with_older_ones():
    """The families are the files' tokenizer.ggml.pre names (qwen35, lfm2, gemma4): Qwen3.5's
    248k vocabulary is not Qwen3's (qwen3), nor Gemma 4's Gemma 3's, so no older drafter is
    offered for them; the families pairing.py recognises in headers are catalog families."""
    assert {m.vocab for m in catalog.MODELS if m.name in NEW} == {"qwen35", "lfm2", "gemma4"}
    assert {fam for fam, _ in pairing._FAMILIES} <= {m.vocab for m in catalog.MODELS}
    for name in NEW:
        assert all(catalog.get_model(d).vocab == catalog.get_model(name).vocab for d in _drafts(name))


def _drafts(name: str) -> list[str]:
    return [p.draft for p in catalog.PAIRS if p.target == catalog.get_model(name).name]


# --------------------------------------------------------------------------------------
# Memory fit of a hybrid
# --------------------------------------------------------------------------------------


def test_a_hybrid_keeps_kv_only_in_its_attention_layers():
    q4 = catalog.get_model("qwen3.5-4b").shape
    dense = catalog.Shape(q4.n_layer, q4.n_head_kv, q4.key_length, q4.value_length)
    # Qwen3.5-4B: 8 of its 32 layers attend, 4 KV heads of 256 in f16: 32 KiB a position
    assert q4.kv_layers == 8 and catalog.kv_cache_bytes(q4, 1) == 8 * 4 * 512 * 2 == 32768
    assert catalog.kv_cache_bytes(q4, 4096) * 4 == catalog.kv_cache_bytes(dense, 4096)
    q08 = catalog.get_model("qwen3.5-0.8b").shape
    assert (q08.n_layer, q08.kv_layers, catalog.kv_cache_bytes(q08, 1)) == (24, 6, 6 * 2 * 512 * 2)
    lfm = catalog.get_model("lfm2.5-1.2b").shape  # 6 of 16 layers attend, 8 KV heads of 64
    assert (lfm.kv_layers, catalog.kv_cache_bytes(lfm, 1)) == (6, 6 * 8 * 128 * 2)
    # Gemma 4 is no hybrid: the layers that read an earlier layer's cache keep none
    assert catalog.get_model("gemma-4-e4b").shape.kv_layers == 24
    assert catalog.get_model("gemma-4-e2b").shape.kv_layers == 15
    # a dense model is counted as before
    q3 = catalog.get_model("qwen3-4b").shape
    assert catalog.kv_cache_bytes(q3, 1) == 36 * 8 * 256 * 2 and recurrent_state_bytes(q3, 16) == 0


def test_the_recurrent_state_and_its_snapshots():
    q9 = catalog.get_model("qwen3.5-9b").shape
    # 24 Gated DeltaNet layers: a state of 32 value heads x 128 x 128 and a convolution
    # state of 3 x (32 x 128 + 2 x 16 x 128) values, f32
    one = 24 * (32 * 128 * 128 + 3 * (32 * 128 + 2 * 16 * 128)) * 4
    assert recurrent_state_bytes(q9) == one == 52_690_944
    assert recurrent_state_bytes(q9, 16) == 17 * one  # llama.cpp keeps 1 + n_rs_seq copies
    lfm = catalog.get_model("lfm2.5-1.2b").shape  # 10 short convolutions of kernel 3
    assert recurrent_state_bytes(lfm) == 10 * 2 * 2048 * 4


def test_check_fit_counts_the_snapshots_when_a_draft_is_planned():
    kw = dict(n_ctx=8192, available_bytes=16 * catalog.GB, headroom_bytes=500_000_000)
    t, d = catalog.get_model("qwen3.5-9b"), catalog.get_model("qwen3.5-0.8b")
    alone = catalog.check_fit("qwen3.5-9b", None, **kw)
    assert alone.weights_bytes == t.size_bytes
    assert alone.kv_bytes == 8 * 4 * 512 * 2 * 8192
    assert alone.state_bytes == recurrent_state_bytes(t.shape)  # plain decoding: no snapshots
    pair = catalog.check_fit("qwen3.5-9b", "qwen3.5-0.8b", **kw)
    assert pair.weights_bytes == t.size_bytes + d.size_bytes
    assert pair.kv_bytes == (8 * 4 + 6 * 2) * 512 * 2 * 8192  # fewer than a dense 32 + 24 layers
    assert pair.state_bytes == recurrent_state_bytes(t.shape, MAX_RS_SEQ) + recurrent_state_bytes(d.shape)
    assert pair.need_bytes == pair.weights_bytes + pair.kv_bytes + pair.state_bytes + 500_000_000
    assert "recurrent state 0.92" in pair.describe() and pair.fits
    ngram = catalog.check_fit("qwen3.5-9b", None, n_rs_seq=8, **kw)  # prompt lookup's snapshots
    assert ngram.state_bytes == 9 * recurrent_state_bytes(t.shape)
    # on a small machine the snapshots are what does not fit
    small = dict(kw, available_bytes=pair.need_bytes - pair.state_bytes + recurrent_state_bytes(t.shape, 4))
    assert not catalog.check_fit("qwen3.5-9b", "qwen3.5-0.8b", **small).fits
    assert catalog.check_fit("qwen3.5-9b", "qwen3.5-0.8b", n_rs_seq=2, **small).fits
    # a dense pair has no recurrent state, and says nothing of one
    dense = catalog.check_fit("qwen3-8b", "qwen3-0.6b", **kw)
    assert dense.state_bytes == 0 and "recurrent" not in dense.describe()


def _llama_buffers(path: Path, n_rs_seq: int, n_ctx: int = 4096) -> dict[str, float]:
    """The KV and RS buffer sizes (MiB) llama.cpp logs when edgespec opens a context on
    ``path`` (llama.cpp's default cache types: f16 K and V). edgespec's own log callback
    keeps only the last lines, so a callback of ours listens meanwhile."""
    import ctypes

    from edgespec.llama import backend
    from edgespec.llama.context import create_context
    from edgespec.llama.model import Model

    lines: list[str] = []

    @backend._llama.llama_log_callback
    def listen(level, text, user_data):  # noqa: ARG001
        lines.append(text.decode("utf-8", "replace"))

    backend._ensure_backend()
    backend._llama.llama_log_set(listen, ctypes.c_void_p(0))
    try:
        model = Model(path, exact=False)
        ptr, _ = create_context(model, n_ctx=n_ctx, n_batch=64, n_threads=1, n_rs_seq=n_rs_seq)
        backend._llama.llama_free(ptr)
        model.close()
    finally:
        backend._llama.llama_log_set(backend._log_callback, ctypes.c_void_p(0))
    out = {}
    for line in "".join(lines).splitlines():
        for key, tag in (("kv", "KV buffer size"), ("rs", "RS buffer size")):
            if tag in line:
                out[key] = float(line.split("=")[1].split()[0])
    return out


@pytest.mark.parametrize("kind", ["qwen35", "lfm2"])
def test_a_hybrid_file_is_measured_as_llama_cpp_allocates_it(tmp_path, kind):
    """A GGUF file's layer kinds are read from its header as llama.cpp's loaders read them;
    the KV cache and the recurrent state with 4 snapshots come out at the sizes llama.cpp
    gives its buffers."""
    pytest.importorskip("gguf")
    from tiny_hybrid import make_tiny_lfm2, make_tiny_qwen35

    if kind == "qwen35":  # 8 layers: 6 Gated DeltaNet, 2 attention
        path = make_tiny_qwen35(tmp_path / "q.gguf", n_layer=8, d_state=64, n_v_heads=8, n_group=4)
        want = dict(n_recurrent_layer=6, n_embd_r=3 * (8 * 64 + 2 * 4 * 64), n_embd_s=64 * 8 * 64)
    else:  # conv, attn, conv, attn, conv, attn
        path = make_tiny_lfm2(tmp_path / "l.gguf", n_layer=6)
        want = dict(n_recurrent_layer=3, n_embd_r=2 * 64, n_embd_s=0)
    shape = model_info(str(path)).shape
    assert {k: getattr(shape, k) for k in want} == want and shape.kv_layers == shape.n_layer - want["n_recurrent_layer"]
    got = _llama_buffers(path, n_rs_seq=4)
    assert got["kv"] == pytest.approx(catalog.kv_cache_bytes(shape, 4096) / 2**20, abs=0.006)
    assert got["rs"] == pytest.approx(recurrent_state_bytes(shape, 4) / 2**20, abs=0.006)  # logged to 0.01 MiB


def test_layer_kinds_from_the_keys_each_loader_reads():
    base = catalog.Shape(8, 2, 32, 32)
    by_interval = {"general.architecture": "qwen35", "qwen35.full_attention_interval": 4}
    assert layer_kinds(by_interval, base).kv_layers == 2
    mtp = {**by_interval, "qwen35.nextn_predict_layers": 1}  # the MTP layer attends
    assert layer_kinds(mtp, catalog.Shape(9, 2, 32, 32)).n_recurrent_layer == 6
    listed = {"general.architecture": "qwen35", "qwen35.attention.recurrent_layers": [True] * 7 + [False]}
    assert layer_kinds(listed, base).n_recurrent_layer == 7
    pure = {"general.architecture": "mamba2", "mamba2.ssm.state_size": 16, "mamba2.ssm.inner_size": 64}
    assert layer_kinds(pure, base).kv_layers == 0 and catalog.kv_cache_bytes(layer_kinds(pure, base), 100) == 0
    gemma4 = {"general.architecture": "gemma4", "gemma4.attention.shared_kv_layers": 18}
    assert layer_kinds(gemma4, catalog.Shape(42, 2, 256, 256)).kv_layers == 24
    assert layer_kinds({"general.architecture": "llama"}, base) == base


# --------------------------------------------------------------------------------------
# models list: how each model speculates
# --------------------------------------------------------------------------------------


def test_models_list_shows_how_each_model_speculates(cli):
    r = cli("models", "list")
    assert r.exit_code == 0, r.output
    assert "speculates" in r.output
    lines = {line.split()[1]: line for line in r.output.splitlines() if line.startswith("│")}
    assert (
        "hybrid: snapshots" in lines["qwen3.5-4b-q4_k_m"]
        and "hybrid: snapshots" in lines["lfm2.5-1.2b-instruct-q4_k_m"]
    )
    assert "kv cache" in lines["gemma-4-e4b-it-q4_k_m"] and "kv cache" in lines["qwen3-8b-q4_k_m"]
    rows = {m["name"]: m for m in json.loads(cli("models", "list", "--json").stdout)["models"]}
    assert set(NEW) <= set(rows)
    for name, m in rows.items():
        model = catalog.get_model(name)
        assert m["architecture"] == model.arch and m["speculation"] == archs.how(model.arch), name
    assert rows["qwen3.5-9b-q4_k_m"]["speculation"] == "hybrid: snapshots"
    assert rows["qwen3.5-9b-q4_k_m"]["drafters"] == ["qwen3.5-0.8b-q8_0"]
    assert rows["qwen3.5-0.8b-q8_0"]["can_draft_for"] == ["qwen3.5-4b-q4_k_m", "qwen3.5-9b-q4_k_m"]
    assert rows["gemma-4-e2b-it-q4_k_m"]["speculation"] == "kv cache"


# --------------------------------------------------------------------------------------
# --target qwen3.5-4b: the file another tool has
# --------------------------------------------------------------------------------------


@pytest.fixture
def stores_home(tmp_path, monkeypatch):
    """An empty HOME (LM Studio, the Hugging Face cache... under it), offline."""
    pytest.importorskip("gguf")
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "LLAMA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("EDGESPEC_MODEL_PATH", str(tmp_path / "mine"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(stores, "OLLAMA_SYSTEM_ROOTS", ())
    catalog.forget()
    yield home
    catalog.forget()


def _qwen35_4b_at(path: Path, *, full_size: bool) -> Path:
    """A tiny qwen35 file named as the real one is (general.name Qwen3.5-4B), at the
    catalog's file name; ``full_size``: padded (sparse) to the published file's bytes."""
    from tiny_hybrid import make_tiny_qwen35

    make_tiny_qwen35(path, name="Qwen3.5-4B")
    if full_size:
        with open(path, "r+b") as f:
            f.truncate(catalog.get_model("qwen3.5-4b").size_bytes)
    return path


def test_target_qwen35_4b_is_the_file_lm_studio_has(stores_home, cli):
    m = catalog.get_model("qwen3.5-4b")
    lms = _qwen35_4b_at(stores_home / ".lmstudio/models/unsloth/Qwen3.5-4B-GGUF" / m.filename, full_size=True)
    assert catalog.resolve_model("qwen3.5-4b", offline=True) == lms  # no download, no second copy
    assert catalog.is_available("qwen3.5-4b") and catalog.local_path("qwen3.5-4b") == lms
    found = catalog.lookup("unsloth/Qwen3.5-4B-GGUF")
    assert found.path == lms and (found.header.architecture, found.header.name) == ("qwen35", "Qwen3.5-4B")
    d = json.loads(cli("models", "list", "--json").stdout)
    local = {r["name"]: r for r in d["local"]}
    assert local["unsloth/Qwen3.5-4B-GGUF"]["speculation"] == "hybrid: snapshots"
    assert {r["name"]: r for r in d["models"]}[m.name]["local"] == str(lms)
    # a file of another size is not taken for the catalog's
    catalog.forget()
    with open(lms, "r+b") as f:
        f.truncate(m.size_bytes // 2)
    assert catalog.local_path("qwen3.5-4b") is None


def test_target_qwen35_4b_is_the_file_in_the_hugging_face_cache(stores_home, cli):
    m = catalog.get_model("qwen3.5-4b")
    repo = stores_home / ".cache/huggingface/hub" / ("models--" + m.hf.repo.replace("/", "--"))
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc")
    path = _qwen35_4b_at(repo / "snapshots" / "abc" / m.filename, full_size=False)
    assert catalog.resolve_model("qwen3.5-4b", offline=True) == path
    found = [x for x in catalog.scan().models if x.catalog]
    assert [(x.name, x.source) for x in found] == [(m.name, "huggingface")]
    rows = {r["name"]: r for r in json.loads(cli("models", "list", "--json").stdout)["models"]}
    assert rows[m.name]["local"] == str(path) and rows[m.name]["speculation"] == "hybrid: snapshots"


def test_generate_runs_with_target_qwen35_4b(stores_home):
    """`edgespec generate --target qwen3.5-4b` on the file LM Studio has: planned with the
    catalog's figures (the hybrid's state counted), decoded by llama.cpp as qwen35."""
    import typer
    from typer.testing import CliRunner

    from edgespec.cli.generate import generate

    m = catalog.get_model("qwen3.5-4b")
    _qwen35_4b_at(stores_home / ".lmstudio/models/unsloth/Qwen3.5-4B-GGUF" / m.filename, full_size=True)
    app = typer.Typer()
    app.command("generate")(generate)
    app.command("other")(lambda: None)
    r = CliRunner().invoke(
        app, ["generate", "--target", "qwen3.5-4b", "--draft", "none", "--max-tokens", "6", "--raw", "--json", "ab"]
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert len(out["token_ids"]) == 6 and out["finish_reason"] == "length"


def test_the_catalog_page_lists_every_model_and_pair_with_its_file_and_size():
    page = (Path(__file__).resolve().parents[1] / "docs" / "models.md").read_text(encoding="utf-8")
    rows = {line.split("|")[1].strip(" `"): line for line in page.splitlines() if line.startswith("| `")}
    for m in catalog.MODELS:
        row = rows.get(m.name)
        assert row is not None, m.name
        assert f"`{m.filename}`" in row and f"{m.size_bytes / 1e9:.2f} GB" in row, m.name
        assert f"| {m.vocab} | {archs.how(m.arch)} |" in row, m.name
        assert m.hf is None or f"`{m.hf.repo}`" in row, m.name
    for p in catalog.PAIRS:
        assert f"| `{p.name}` | `{p.target}` | `{p.draft}` |" in page, p.name
