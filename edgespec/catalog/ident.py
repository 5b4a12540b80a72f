"""Knowing a model from its GGUF header: what it is, and whether it can draft for another.

``read_header(path)`` reads one file's header with the ``gguf`` package's reader
(``gguf.GGUFReader``: the key/value table and the tensor list; the weights are memory
mapped and never touched) and returns a ``Header``: architecture, parameter count,
quantization, context length, chat template presence, what kind of file it is (a model,
a vision projector, a LoRA adapter) and the tokenizer's identity (``Tokenizer``).

``drafting_problem(target, draft)`` applies llama.cpp's rules for a draft model's
vocabulary (common/speculative.cpp, as ``edgespec.llama.vocab`` applies them to the
loaded models): same tokenizer type, same BOS/EOS ids and add-BOS/add-EOS flags, sizes
within 128 of each other, and the same token text for every id from 5 up to the smaller
size. The last rule is decided from hashes: each header keeps the hash of its token
texts from id 5 up to every length from ``n - 128`` to ``n``, so two headers are compared
on the prefix both have without keeping the token lists. ``edgespec.llama`` checks the
same rules again on the real vocabularies when the models load.

Nothing here knows where files live (``stores``) or caches anything (``local``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..errors import ModelFileError
from .gguf import shape_from_metadata
from .table import Shape

# llama.cpp's rule (common/speculative.cpp); edgespec.llama.vocab holds the same two
# numbers for the load-time check, and a test keeps them equal.
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5

# Scalars and short arrays are kept as metadata; the token lists (150k+ entries) are not.
_MAX_KEPT_ARRAY = 64


@dataclass(frozen=True)
class Tokenizer:
    """A tokenizer's identity. ``digest`` hashes every token text and the special token
    ids and flags (two equal digests: the same tokenizer); ``prefix`` holds the hashes of
    the token texts from id 5 up to each length ``n - len(prefix) + 1 .. n`` (for the
    size-tolerant comparison llama.cpp makes)."""

    model: str  # tokenizer.ggml.model: "gpt2" (BPE), "llama" (SentencePiece), ...
    pre: str  # tokenizer.ggml.pre: the pre-tokenizer ("qwen2", "llama-bpe", ...)
    n_tokens: int
    bos: int | None
    eos: int | None
    add_bos: bool | None
    add_eos: bool | None
    digest: str
    prefix: tuple[str, ...]

    @property
    def identity(self) -> str:
        """Short text for tables: ``model/count/hash``."""
        return f"{self.model}/{self.n_tokens}/{self.digest[:10]}"

    def prefix_hash(self, length: int) -> str | None:
        """The hash of token texts 5..length-1, if this header kept it."""
        i = length - (self.n_tokens - len(self.prefix) + 1)
        return self.prefix[i] if 0 <= i < len(self.prefix) else None


@dataclass(frozen=True)
class Header:
    """What a GGUF header says about a file (see the module docstring)."""

    kind: str  # "model" | "mmproj" | "lora" | "other"
    architecture: str
    name: str  # general.name, else ""
    basename: str  # general.basename, else ""
    params: int  # parameters, summed over the tensors of this file
    quant: str  # "Q4_K_M", "F16", ...
    context_length: int
    chat_template: bool
    split_count: int  # 0 or 1: not split
    shape: Shape
    tokenizer: Tokenizer | None
    # the hidden width (``embedding_length``), and a Gemma 4 assistant's target's
    # (``embedding_length_out``: the rows it reads, ``archs.assists``); 0 where none is said
    n_embd: int = 0
    n_embd_out: int = 0

    @property
    def family(self) -> str:
        """The model family for people: ``general.basename`` (e.g. "Qwen2.5-Coder") or
        the architecture."""
        return self.basename or self.architecture

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Header":
        tok = d.get("tokenizer")
        return cls(
            **{
                **d,
                "shape": Shape(**d["shape"]),
                "tokenizer": Tokenizer(**{**tok, "prefix": tuple(tok["prefix"])}) if tok else None,
            }
        )


def read_header(path: str | os.PathLike) -> Header:
    """The header of one GGUF file (the first part of a split model holds the tokenizer).
    Raises ``ModelFileError`` saying why a file cannot be read: not GGUF, cut short,
    unreadable."""
    p = Path(path)
    try:
        with open(p, "rb") as f:
            magic = f.read(4)
    except OSError as exc:
        raise ModelFileError(f"cannot read {p}: {exc.strerror or exc}") from None
    if magic != b"GGUF":
        raise ModelFileError(f"not a GGUF file: {p}" + (" (empty)" if not magic else ""))
    try:
        reader = _reader_class()(str(p), "r")
    except Exception as exc:  # noqa: BLE001 - the reader raises ValueError, IndexError, ...
        raise ModelFileError(
            f"cannot read the GGUF header of {p} (cut short or corrupt): {type(exc).__name__}: {exc}"
        ) from None
    return _header(reader, p)


@lru_cache(maxsize=1)
def _reader_class() -> Any:
    """``gguf.GGUFReader``, reading through a plain ndarray view of its memory map: numpy's
    ``memmap`` subclass costs ~3x in the hundreds of thousands of small views a 150k-token
    vocabulary makes (measured: 14.8 s vs 4.6 s for Qwen2.5-0.5B on a loaded 2-core VM).
    The bytes stay memory mapped and are only read."""
    try:
        import numpy as np
        from gguf import GGUFReader
    except ImportError:  # pragma: no cover - a runtime dependency
        raise ModelFileError("reading GGUF headers needs the `gguf` package: pip install gguf") from None

    import inspect

    if list(inspect.signature(GGUFReader._get).parameters) != ["self", "offset", "dtype", "count", "override_order"]:
        return GGUFReader  # another gguf release: its reader as it is (slower, as correct)

    class _Reader(GGUFReader):
        def _get(self, offset: int, dtype: Any, count: int = 1, override_order: Any = None) -> Any:
            if type(self.data) is not np.ndarray:
                self.data = self.data.view(np.ndarray)
            return super()._get(offset, dtype, count, override_order)

    return _Reader


def _header(reader: Any, p: Path) -> Header:
    meta = {
        name: _value(field)
        for name, field in reader.fields.items()
        if not name.startswith("GGUF.") and name != "tokenizer.ggml.tokens" and not _is_long_array(field)
    }
    arch = str(meta.get("general.architecture", ""))
    tokens = reader.fields.get("tokenizer.ggml.tokens")
    return Header(
        kind=_kind(meta, arch, p),
        architecture=arch,
        name=str(meta.get("general.name", "")),
        basename=str(meta.get("general.basename", "")),
        params=sum(int(t.n_elements) for t in reader.tensors),
        quant=_quant(meta, reader),
        context_length=int(meta.get(f"{arch}.context_length", 0) or 0),
        chat_template="tokenizer.chat_template" in meta,
        split_count=int(meta.get("split.count", 0) or 0),
        shape=shape_from_metadata(meta),
        tokenizer=_tokenizer(meta, tokens) if tokens is not None else None,
        n_embd=int(meta.get(f"{arch}.embedding_length", 0) or 0),
        n_embd_out=int(meta.get(f"{arch}.embedding_length_out", 0) or 0),
    )


def _is_long_array(field: Any) -> bool:
    from gguf import GGUFValueType

    return bool(field.types) and field.types[0] == GGUFValueType.ARRAY and len(field.data) > _MAX_KEPT_ARRAY


def _value(field: Any) -> Any:
    try:
        return field.contents()
    except (UnicodeDecodeError, ValueError):  # a string that is not UTF-8
        return ""


def _kind(meta: dict[str, Any], arch: str, p: Path) -> str:
    gtype = str(meta.get("general.type", "")).lower()
    if gtype == "mmproj" or arch == "clip" or "mmproj" in p.name.lower():
        return "mmproj"
    if gtype == "adapter" or "adapter.type" in meta:
        return "lora"
    if gtype in ("", "model"):
        return "model"
    return "other"


def _quant(meta: dict[str, Any], reader: Any) -> str:
    """The file type llama.cpp wrote (``general.file_type``), else the commonest tensor type."""
    from gguf import GGMLQuantizationType, LlamaFileType

    ft = meta.get("general.file_type")
    if ft is not None:
        try:
            name = LlamaFileType(int(ft)).name
            return name.removeprefix("MOSTLY_").removeprefix("ALL_")
        except ValueError:
            pass
    counts: dict[str, int] = {}
    for t in reader.tensors:
        key = GGMLQuantizationType(t.tensor_type).name
        counts[key] = counts.get(key, 0) + int(t.n_elements)
    return max(counts, key=lambda k: counts[k]) if counts else ""


def _tokenizer(meta: dict[str, Any], tokens: Any) -> Tokenizer:
    texts = [bytes(tokens.parts[i]) for i in tokens.data]
    n = len(texts)
    special = (
        meta.get("tokenizer.ggml.bos_token_id"),
        meta.get("tokenizer.ggml.eos_token_id"),
        meta.get("tokenizer.ggml.add_bos_token"),
        meta.get("tokenizer.ggml.add_eos_token"),
    )
    full = hashlib.sha256(repr(special).encode())
    for t in texts:
        full.update(len(t).to_bytes(4, "little") + t)
    # the prefix hashes: token texts from id 5 up to each length in [n - 128, n]
    h = hashlib.sha256()
    first = max(VOCAB_CHECK_START_TOKEN_ID, n - VOCAB_MAX_SIZE_DIFFERENCE)
    prefix: list[str] = []
    for i in range(VOCAB_CHECK_START_TOKEN_ID, n + 1):
        if i >= first:
            prefix.append(h.hexdigest()[:16])
        if i < n:
            h.update(len(texts[i]).to_bytes(4, "little") + texts[i])
    bos, eos, add_bos, add_eos = special
    return Tokenizer(
        model=str(meta.get("tokenizer.ggml.model", "")),
        pre=str(meta.get("tokenizer.ggml.pre", "")),
        n_tokens=n,
        bos=None if bos is None else int(bos),
        eos=None if eos is None else int(eos),
        add_bos=None if add_bos is None else bool(add_bos),
        add_eos=None if add_eos is None else bool(add_eos),
        digest=full.hexdigest(),
        prefix=tuple(prefix),
    )


def drafting_problem(target: Tokenizer, draft: Tokenizer) -> str | None:
    """Why ``draft`` cannot draft for ``target`` by llama.cpp's vocabulary rules, or None
    when it can (see the module docstring)."""
    if target.model != draft.model:
        return f"different tokenizer types ({target.model} vs {draft.model})"
    for what, a, b in (
        ("add-BOS flag", target.add_bos, draft.add_bos),
        ("add-EOS flag", target.add_eos, draft.add_eos),
        ("BOS token", target.bos, draft.bos),
        ("EOS token", target.eos, draft.eos),
    ):
        if a != b:
            return f"different {what} ({a} vs {b})"
    if abs(target.n_tokens - draft.n_tokens) > VOCAB_MAX_SIZE_DIFFERENCE:
        return (
            f"vocabularies of {target.n_tokens} and {draft.n_tokens} tokens "
            f"(more than {VOCAB_MAX_SIZE_DIFFERENCE} apart)"
        )
    m = min(target.n_tokens, draft.n_tokens)
    if target.digest == draft.digest:
        return None
    a, b = target.prefix_hash(m), draft.prefix_hash(m)
    if a is None or b is None or a != b:
        return f"different token texts among ids {VOCAB_CHECK_START_TOKEN_ID}..{m - 1}"
    return None
