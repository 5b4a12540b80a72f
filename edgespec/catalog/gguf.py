"""GGUF metadata read from the file header, without llama.cpp: the key/value table, the
files of a split model, the shape the KV cache size depends on, and the weight-type mix
of the matrices (``weight_mix``: what a verify of n tokens costs depends on the kernels
of the weight types, see ``edgespec.costmodel.priors``). Reads headers only: the
weights themselves are never touched."""

from __future__ import annotations

import mmap
import os
import re
import struct
from functools import lru_cache
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


# ggml's tensor type ids (ggml.h, enum ggml_type) for the names weight_mix reports; an id
# not here is reported as "TYPE<id>" (and falls back to the backend's default prior).
GGML_TYPES = {
    0: "F32",
    1: "F16",
    2: "Q4_0",
    3: "Q4_1",
    6: "Q5_0",
    7: "Q5_1",
    8: "Q8_0",
    9: "Q8_1",
    10: "Q2_K",
    11: "Q3_K",
    12: "Q4_K",
    13: "Q5_K",
    14: "Q6_K",
    15: "Q8_K",
    16: "IQ2_XXS",
    17: "IQ2_XS",
    18: "IQ3_XXS",
    19: "IQ1_S",
    20: "IQ4_NL",
    21: "IQ3_S",
    22: "IQ2_S",
    23: "IQ4_XS",
    24: "I8",
    25: "I16",
    26: "I32",
    27: "I64",
    28: "F64",
    29: "IQ1_M",
    30: "BF16",
    34: "TQ1_0",
    35: "TQ2_0",
    39: "MXFP4",
}
_K_QUANTS = ("Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K")
# a file is "pure" when one type holds at least this share of its layer matrices' weights
_PURE_SHARE = 0.9
# the embedding (read by row) and the output head: llama.cpp's file types leave them out
# of the mix name (they are often Q6_K or Q8_0 whatever the layers are)
_NOT_LAYER = ("token_embd.", "output.")


def read_tensor_types(path: str | os.PathLike) -> list[tuple[str, str, int, int]]:
    """``(name, ggml type, elements, dimensions)`` of every tensor in a GGUF file (all parts of a
    split model), from the headers only. Raises ``ModelFileError`` like
    ``read_gguf_metadata``."""
    p = Path(path)
    meta = read_gguf_metadata(p)
    out: list[tuple[str, str, int, int]] = []
    align = int(meta.get("general.alignment", 32) or 32)
    for part in _split_files(p, meta):
        try:
            with open(part, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                out += _parse_tensor_infos(mm, part, align)
        except (OSError, ValueError, struct.error) as exc:
            raise ModelFileError(f"cannot read the GGUF tensor list of {part}: {exc}") from exc
    return out


def _parse_tensor_infos(buf: Any, p: Path, align: int) -> list[tuple[str, str, int, int]]:
    """The tensor list of one file; a file whose last tensor would start past its end is
    cut short (the weights are not read, so a cut inside the last tensor goes unseen)."""
    if buf[:4] != b"GGUF":
        raise ModelFileError(f"not a GGUF model file: {p}")
    _version, n_tensors, n_kv = struct.unpack_from("<IQQ", buf, 4)
    off = _skip_kv(buf, 24, n_kv)
    out = []
    last = 0
    for _ in range(n_tensors):
        (n,) = struct.unpack_from("<Q", buf, off)
        name = bytes(buf[off + 8 : off + 8 + n]).decode("utf-8", errors="replace")
        off += 8 + n
        (n_dims,) = struct.unpack_from("<I", buf, off)
        dims = struct.unpack_from(f"<{n_dims}Q", buf, off + 4)
        off += 4 + 8 * n_dims
        t, data_off = struct.unpack_from("<IQ", buf, off)
        off += 4 + 8
        last = max(last, data_off)
        elements = 1
        for d in dims:
            elements *= int(d)
        out.append((name, GGML_TYPES.get(t, f"TYPE{t}"), elements, int(n_dims)))
    data_start = -(-off // align) * align
    if out and data_start + last >= len(buf):
        raise ModelFileError(f"the GGUF file {p} is cut short: its tensors end past its {len(buf)} bytes")
    return out


def _skip_kv(buf: Any, off: int, n_kv: int) -> int:
    """The offset after ``n_kv`` key/value pairs starting at ``off``, without decoding them."""

    def skip(t: int, o: int) -> int:
        if t == _STRING:
            return o + 8 + struct.unpack_from("<Q", buf, o)[0]
        if t in _SCALARS:
            return o + struct.calcsize(_SCALARS[t])
        if t == _ARRAY:
            et, n = struct.unpack_from("<IQ", buf, o)
            o += 12
            if et in _SCALARS:
                return o + n * struct.calcsize(_SCALARS[et])
            for _ in range(n):
                o = skip(et, o)
            return o
        raise ValueError(f"unknown GGUF value type {t}")

    for _ in range(n_kv):
        off += 8 + struct.unpack_from("<Q", buf, off)[0]
        (t,) = struct.unpack_from("<I", buf, off)
        off = skip(t, off + 4)
    return off


def classify_mix(tensors: list[tuple[str, str, int, int]]) -> str:
    """The weight-type mix of a model's layer matrices (2-D and up, not the embedding or
    the output head), by their weights' share per type:

    * one type holding >= 90% of them: its name ("Q4_0", "IQ4_NL", "Q8_0", "F16", ...);
    * a k-quant with a larger k-quant beside it: llama.cpp's mix names, "Q4_K_M" when the
      others hold >= 10% (Q4_K with Q6_K for attn_v and half of ffn_down), else "Q4_K_S";
    * anything else: the two largest types joined by "+" ("Q4_0+Q8_0");
    * "" when there are no layer matrices (a vocabulary-only file)."""
    share: dict[str, int] = {}
    for name, kind, elements, dims in tensors:
        if dims < 2 or name.startswith(_NOT_LAYER):
            continue
        share[kind] = share.get(kind, 0) + elements
    total = sum(share.values())
    if not total:
        return ""
    ranked = sorted(share, key=lambda k: -share[k])
    top = ranked[0]
    rest = 1.0 - share[top] / total
    if rest <= 1.0 - _PURE_SHARE and top not in _K_QUANTS:
        return top
    if top in _K_QUANTS:
        return f"{top}_{'M' if rest >= 1.0 - _PURE_SHARE else 'S'}"
    return f"{top}+{ranked[1]}"


def weight_mix(path: str | os.PathLike) -> str:
    """The weight-type mix class of a GGUF model file (``classify_mix`` of its tensors):
    the key its verify-cost prior is looked up by. Read from the headers, once per file
    version in a process (cached by path, size and modification time). Raises
    ``ModelFileError`` on a file that is not GGUF or is cut short."""
    p = Path(path)
    try:
        st = p.stat()
    except OSError as exc:
        raise ModelFileError(f"cannot read {p}: {exc.strerror or exc}") from None
    return _weight_mix(str(p.resolve()), st.st_size, st.st_mtime_ns)


@lru_cache(maxsize=256)
def _weight_mix(path: str, size: int, mtime_ns: int) -> str:
    del size, mtime_ns  # the cache key: a rewritten file is read again
    return classify_mix(read_tensor_types(path))


def mtp_head(path: str | os.PathLike) -> tuple[int, float]:
    """The multi-token-prediction (nextn) layers a GGUF model file keeps
    (``{arch}.nextn_predict_layers``; 0: none, as most plain conversions) and what one step
    of that head reads relative to one step of the model: the tensors of its nextn blocks
    and the LM head against those of the trunk and the LM head (elements, from the headers;
    0.0 without nextn layers; none either for a file of nextn layers alone, a Gemma 4
    assistant: a drafter for another model, not a head of its own). Raises
    ``ModelFileError`` like ``read_gguf_metadata``."""
    meta = read_gguf_metadata(path)
    arch = meta.get("general.architecture", "")
    n_nextn = int(meta.get(f"{arch}.nextn_predict_layers", 0) or 0)
    first = int(meta.get(f"{arch}.block_count", 0) or 0) - n_nextn
    if n_nextn <= 0 or first <= 0:
        return 0, 0.0
    tensors = read_tensor_types(path)
    names = {name for name, *_ in tensors}
    head = "output.weight" if "output.weight" in names else "token_embd.weight"  # tied embeddings
    mtp = trunk = 0
    for name, _type, elements, _dims in tensors:
        m = re.match(r"blk\.(\d+)\.", name)
        if m and int(m.group(1)) >= first:
            mtp += elements
        elif name == head:
            mtp, trunk = mtp + elements, trunk + elements
        elif name != "token_embd.weight":  # a row of it is read per token, not the matrix
            trunk += elements
    return n_nextn, mtp / max(1, trunk)
