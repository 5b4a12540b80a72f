"""Whether a target (and its draft) fit in memory: weights, KV caches at ``n_ctx``, and
headroom for compute buffers. Sizes come from the table for catalog names, else from the
file's GGUF header; nothing is downloaded."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .fetching import find_local, unknown_model
from .gguf import _split_files, read_gguf_metadata, shape_from_metadata
from .table import GB, Shape, find_model


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
        found = find_local(text)
        if found is None:
            raise unknown_model(text)
        return ModelInfo(text, found.size_bytes, found.header.shape, True)
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
