"""Whether a target (and its draft) fit in memory: weights, KV caches at ``n_ctx``, the
recurrent state of a hybrid (Qwen3.5, LFM2: with the snapshots a speculating target keeps)
and headroom for compute buffers. Sizes come from the table for catalog names, else from
the file's GGUF header; nothing is downloaded."""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from ..errors import ModelFileError
from .archs import recurrent
from .fetching import find_local, unknown_model
from .gguf import _split_files, read_gguf_metadata, shape_from_metadata
from .table import GB, Shape, find_model

# The most recurrent-state snapshots a speculating target keeps (llama.cpp's n_rs_seq: one
# per draft token a verify may undo; the planner's longest draft): check_fit counts this
# many when a draft is planned and it is not told otherwise.
MAX_RS_SEQ = 16


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
        shape = found.header.shape
        if recurrent(found.header.architecture) or found.header.architecture == "gemma4":
            try:  # the header cache keeps no layer kinds: read them (a header read)
                shape = layer_kinds(read_gguf_metadata(found.path), shape)
            except ModelFileError:
                pass
        return ModelInfo(text, found.size_bytes, shape, True)
    meta = read_gguf_metadata(path)
    files = _split_files(path, meta)
    size = sum(f.stat().st_size for f in files if f.exists())
    return ModelInfo(text, size, layer_kinds(meta, shape_from_metadata(meta)), True)


def layer_kinds(meta: dict[str, Any], shape: Shape) -> Shape:
    """``shape`` with what a GGUF header says of its layers' kinds, as llama.cpp's loaders
    read it: which layers are recurrent (``attention.recurrent_layers``, else a 0 in the
    per-layer ``attention.head_count_kv`` (lfm2), else all but every
    ``full_attention_interval``-th (qwen35)), the size of their state (``n_embd_r``,
    ``n_embd_s``: llama_hparams), and the layers that read an earlier layer's KV cache
    (``attention.shared_kv_layers``, Gemma 4). A model of another architecture comes back
    as it was."""
    arch = meta.get("general.architecture", "")

    def get(key: str, default: Any = None) -> Any:
        return meta.get(f"{arch}.{key}", default)

    shared = int(get("attention.shared_kv_layers", 0) or 0)
    if shared:
        shape = replace(shape, n_kv_layer=max(0, shape.n_layer - shared))
    if not recurrent(arch):
        return shape
    n_layer = shape.n_layer - int(get("nextn_predict_layers", 0) or 0)  # MTP layers attend
    kinds = get("attention.recurrent_layers")
    kv = get("attention.head_count_kv")
    if isinstance(kinds, list):
        is_recurrent = [bool(k) for k in kinds[:n_layer]]
    elif isinstance(kv, list):
        is_recurrent = [int(h) == 0 for h in kv[:n_layer]]
    elif get("full_attention_interval") is not None:
        every = max(1, int(get("full_attention_interval")))
        is_recurrent = [(i + 1) % every != 0 for i in range(n_layer)]
    else:  # a purely recurrent model (mamba, rwkv): no KV cache at all
        is_recurrent = [True] * n_layer
    l_cache = int(get("shortconv.l_cache", 0) or 0)
    d_conv = int(get("ssm.conv_kernel", 0) or 0)
    d_inner = int(get("ssm.inner_size", 0) or 0)
    d_state = int(get("ssm.state_size", 0) or 0)
    n_group = int(get("ssm.group_count", 0) or 0)
    n_embd = int(get("embedding_length", 0) or 0)
    if l_cache:
        n_embd_r = n_embd * (l_cache - 1)
    else:
        n_embd_r = max(0, d_conv - 1) * (d_inner + 2 * n_group * d_state)
    return replace(shape, n_recurrent_layer=sum(is_recurrent), n_embd_r=n_embd_r, n_embd_s=d_state * d_inner)


def kv_cache_bytes(shape: Shape, n_ctx: int, bytes_per_value: int = 2) -> int:
    """K and V for every layer that keeps them (``Shape.kv_layers``: not a hybrid's
    recurrent layers, not Gemma 4's shared ones) at ``n_ctx`` positions (f16 by default,
    llama.cpp's)."""
    per_token = max(0, shape.kv_layers) * shape.n_head_kv * (shape.key_length + shape.value_length)
    return per_token * n_ctx * bytes_per_value


def recurrent_state_bytes(shape: Shape, n_rs_seq: int = 0) -> int:
    """The recurrent state of one sequence of a hybrid or recurrent model: every recurrent
    layer's convolution and recurrent state in f32 (``n_embd_r + n_embd_s`` values), times
    1 + ``n_rs_seq`` where llama.cpp keeps that many snapshots of it to undo drafts. 0 for
    a model without one."""
    per_copy = shape.n_recurrent_layer * (shape.n_embd_r + shape.n_embd_s) * 4
    return per_copy * (1 + max(0, n_rs_seq))


@dataclass(frozen=True)
class Fit:
    weights_bytes: int
    kv_bytes: int
    headroom_bytes: int
    available_bytes: int
    state_bytes: int = 0  # hybrids' recurrent state, snapshots included

    @property
    def need_bytes(self) -> int:
        return self.weights_bytes + self.kv_bytes + self.state_bytes + self.headroom_bytes

    @property
    def fits(self) -> bool:
        return self.need_bytes <= self.available_bytes

    def describe(self) -> str:
        state = f" + recurrent state {self.state_bytes / GB:.2f}" if self.state_bytes else ""
        return (
            f"needs {self.need_bytes / GB:.1f} GB (weights {self.weights_bytes / GB:.2f} + "
            f"KV {self.kv_bytes / GB:.2f}{state} + headroom {self.headroom_bytes / GB:.2f}) of "
            f"{self.available_bytes / GB:.1f} GB"
        )


def check_fit(
    target: str | os.PathLike,
    draft: str | os.PathLike | None,
    *,
    n_ctx: int,
    available_bytes: int,
    headroom_bytes: int = 750 * 1_000_000,
    n_rs_seq: int | None = None,
) -> Fit:
    """Whether target (+ draft) with KV caches at ``n_ctx``, their recurrent states and
    ``headroom_bytes`` for compute buffers fit in ``available_bytes``. Both models get their
    own KV cache of ``n_ctx`` (the draft context mirrors the target's). A hybrid target
    keeps ``n_rs_seq`` snapshots of its recurrent state to undo rejected drafts (None:
    ``MAX_RS_SEQ`` when a draft model is given, else none; pass it for prompt lookup); a
    draft model keeps its state once."""
    t = model_info(target)
    d = model_info(draft) if draft is not None else None
    infos = [t] + ([d] if d is not None else [])
    if n_rs_seq is None:
        n_rs_seq = MAX_RS_SEQ if draft is not None else 0
    return Fit(
        weights_bytes=sum(i.size_bytes for i in infos),
        kv_bytes=sum(kv_cache_bytes(i.shape, n_ctx) for i in infos),
        headroom_bytes=headroom_bytes,
        available_bytes=available_bytes,
        state_bytes=recurrent_state_bytes(t.shape, n_rs_seq) + (recurrent_state_bytes(d.shape) if d else 0),
    )
