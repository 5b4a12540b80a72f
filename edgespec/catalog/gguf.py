"""GGUF metadata read from the file header, without llama.cpp: the key/value table, the
files of a split model, and the shape the KV cache size depends on."""

from __future__ import annotations

import mmap
import os
import re
import struct
from pathlib import Path
from typing import Any

from ..errors import ModelFileError
from .table import Shape

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
