"""The suffix memory's file format: the header, the meta (every field checked) and the
index's arrays (``SuffixIndex.snapshot``/``restore``), for ``suffix_store``.

A file is a header and a payload::

    magic  b"ESSUFFIX"          8 bytes
    version                     u32 little-endian (FORMAT_VERSION)
    meta length, payload length u32, u64
    sha256(meta + payload)      32 bytes
    meta                        UTF-8 JSON: tokenizer identity, cap, key lengths, the
                                window (start, next), documents, tokens, the hit
                                counters, the models that wrote it, when it was saved,
                                what its drafts proved worth (``rates``: the
                                MemoryAcceptance counts), the payload's layout
                                (``arrays``: name, dtype, count), and its ``lineage``
                                (which saves share its positions: ``suffix_store``'s merge)
    payload                     the index's arrays, one after another, little-endian

Positions are stored relative to the window's start as int32 (a link that left the
window is -1: the index treats any position before its start alike), so a file is ~44
bytes a token plus 12 a chain head. An open document is saved closed. A crafted file
with a valid checksum is still checked field by field (``check_meta``: types, ranges,
finite numbers, counters that agree with each other, a meta of at most ``MAX_META``
bytes, a payload no larger than its cap allows) and array by array (``decode``: no walk
of the index can leave its window), so nothing in it reaches the index unchecked.
``Corrupt`` says why, in words.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import struct
from array import array
from pathlib import Path

import numpy as np

from . import store_files
from .store_files import Refused, Unusable, printable
from .suffix import END

MAGIC = b"ESSUFFIX"
FORMAT_VERSION = 2
HEAD = struct.Struct("<8sIIQ32s")  # magic, version, meta length, payload length, sha256
MAX_CAP = 1 << 24  # the largest cap a store holds (16.8M tokens: ~3.4 GB in memory, ~1.3 GB on disk)
MAX_META = 1 << 20  # bytes of meta JSON (a real one is a few KB)
MAX_MODELS = 8  # model names a file remembers having been written by
MAX_KEY_LEN = 24  # SuffixIndex's max_match: a longer key could never match
_COUNTERS = ("proposals", "hits", "proposed", "accepted")


class Corrupt(Exception):
    """Why a file's content cannot be used (the warning's text)."""


def payload_bound(cap: int, n_keys: int) -> int:
    """The most payload bytes a valid file of this cap can hold: per token its token,
    two document links and per key length four arrays (20 bytes) and a chain head (12)."""
    return cap * (12 + 32 * n_keys)


def parse_meta(raw: bytes) -> dict:
    """The meta JSON, checked (``Corrupt`` otherwise)."""
    try:
        meta = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Corrupt("is corrupt (unreadable header)") from None
    if not isinstance(meta, dict):
        raise Corrupt("is corrupt (unreadable header)")
    check_meta(meta)
    return meta


def _int(meta: dict, key: str, lo: int, hi: int) -> int:
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
        raise Corrupt(f"is corrupt ({key} is {printable(str(v)[:40])}, not a whole number from {lo} to {hi})")
    return v


def check_meta(meta: dict) -> None:
    """Every field a load or ``memory show`` reads has its type and range."""
    if not isinstance(meta.get("identity"), str) or len(meta["identity"]) > 4096:
        raise Corrupt("is corrupt (no tokenizer identity)")
    cap = meta.get("cap")
    if isinstance(cap, int) and not isinstance(cap, bool) and cap < 1:
        raise Corrupt("is corrupt (a cap under one token)")
    cap = _int(meta, "cap", 1, MAX_CAP)
    key_lens = meta.get("key_lens")
    if (
        not isinstance(key_lens, list)
        or not 1 <= len(key_lens) <= 8
        or any(isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= MAX_KEY_LEN for k in key_lens)
        or key_lens != sorted(set(key_lens), reverse=True)
    ):
        raise Corrupt("is corrupt (key lengths that are not distinct whole numbers, longest first)")
    start = _int(meta, "start", 0, 1 << 62)
    _int(meta, "next", start, 1 << 62)
    _int(meta, "tokens", 0, cap)
    _int(meta, "documents", 0, cap)
    proposals, hits, proposed, accepted = (_int(meta, key, 0, (1 << 63) - 1) for key in _COUNTERS)
    if hits > proposals or accepted > proposed:  # a proposal hits at most once; a drafted id is kept at most once
        raise Corrupt(
            f"is corrupt (counters that contradict each other: {hits:,} hits of {proposals:,} proposals, "
            f"{accepted:,} kept of {proposed:,} drafted)"
        )
    saved_at = meta.get("saved_at")
    if (
        isinstance(saved_at, bool)
        or not isinstance(saved_at, (int, float))
        or not math.isfinite(saved_at)
        or not 0 <= saved_at < 1e11
    ):
        raise Corrupt("is corrupt (an impossible save time)")
    models = meta.get("models", [])
    if (
        not isinstance(models, list)
        or len(models) > MAX_MODELS
        or any(not isinstance(m, str) or len(m) > 1024 for m in models)
    ):
        raise Corrupt("is corrupt (model names that are not a short list of names)")
    probe = meta.get("hash_probe")
    if (
        not isinstance(probe, list)
        or len(probe) != len(key_lens)
        or any(isinstance(p, bool) or not isinstance(p, int) for p in probe)
    ):
        raise Corrupt("is corrupt (no hash probe)")
    arrays = meta.get("arrays")
    if (
        not isinstance(arrays, list)
        or len(arrays) > 8 + 6 * len(key_lens)
        or any(
            not isinstance(a, list)
            or len(a) != 3
            or not isinstance(a[0], str)
            or not isinstance(a[1], str)
            or isinstance(a[2], bool)
            or not isinstance(a[2], int)
            or not 0 <= a[2] <= cap
            for a in arrays
        )
    ):
        raise Corrupt("is corrupt (an unreadable array layout)")
    lineage = meta.get("lineage")
    if lineage is not None and (not isinstance(lineage, str) or len(lineage) > 64):
        raise Corrupt("is corrupt (an unreadable lineage)")


def counters(meta: dict) -> list[int]:
    return [meta[k] for k in _COUNTERS]


# -- the arrays ---------------------------------------------------------------------------
def encode(snap: dict) -> tuple[list[tuple[str, np.ndarray]], int]:
    """The snapshot's arrays as stored (see the module docstring), and its documents."""
    cap, start = snap["cap"], snap["start"]
    n, window = len(snap["tok"]), snap["next"] - start
    inwin = (np.arange(n, dtype=np.int64) - start) % cap < window

    def rel(a: array, keep_sentinels: bool = False) -> np.ndarray:
        v = np.frombuffer(a, dtype=np.int64)
        gone = END if keep_sentinels else -1  # an open document's OPEN becomes END: closed
        return np.where(inwin, np.where(v >= start, v - start, gone), -1).astype("<i4")

    out = [
        ("tok", np.where(inwin, np.frombuffer(snap["tok"], dtype=np.int32), 0).astype("<i4")),
        ("back", rel(snap["back"])),
        ("fwd", rel(snap["fwd"], keep_sentinels=True)),
    ]
    for i, n_key in enumerate(snap["key_lens"]):
        kstart = rel(snap["kstart"][i])
        khash = np.where(kstart >= 0, np.frombuffer(snap["khash"][i], dtype=np.int64), 0).astype("<i8")
        head = snap["head"][i]
        out += [
            (f"prev{n_key}", rel(snap["prev"][i])),
            (f"kstart{n_key}", kstart),
            (f"khash{n_key}", khash),
            (f"kend{n_key}", rel(snap["kend"][i])),
            (f"headkey{n_key}", np.fromiter(head.keys(), dtype="<i8", count=len(head))),
            (f"headpos{n_key}", (np.fromiter(head.values(), dtype=np.int64, count=len(head)) - start).astype("<i4")),
        ]
    documents = int(np.count_nonzero(inwin & (out[1][1] < 0)))
    return out, documents


def decode(meta: dict, payload: memoryview) -> dict:
    """A snapshot from the stored arrays, checked so that no walk of the index can leave
    its window or loop (``Corrupt`` otherwise)."""
    cap, start, nxt = int(meta["cap"]), int(meta["start"]), int(meta["next"])
    key_lens = tuple(int(k) for k in meta["key_lens"])
    if cap < 1:
        raise Corrupt("is corrupt (a cap under one token)")
    arrays, at = {}, 0
    for name, dtype, count in meta["arrays"]:
        if dtype not in ("<i4", "<i8"):
            raise Corrupt("is corrupt (an unknown array type)")
        size = int(count) * np.dtype(dtype).itemsize
        if at + size > len(payload):
            raise Corrupt("is corrupt (sizes disagree with its header)")
        arrays[name] = np.frombuffer(payload, dtype=dtype, count=int(count), offset=at)
        at += size
    if at != len(payload):
        raise Corrupt("is corrupt (sizes disagree with its header)")
    per_token = ["tok", "back", "fwd", *(f"{a}{n}" for n in key_lens for a in ("prev", "kstart", "khash", "kend"))]
    if any(name not in arrays for name in per_token) or any(
        f"head{a}{n}" not in arrays for n in key_lens for a in ("key", "pos")
    ):
        raise Corrupt("is corrupt (an array is missing)")
    n = len(arrays["tok"])
    window = nxt - start
    if int(meta["tokens"]) != window:
        raise Corrupt("is corrupt (sizes disagree with its header)")
    if (
        not key_lens
        or min(key_lens) < 1
        or any(len(arrays[a]) != n for a in per_token)
        or n > cap
        or start < 0
        or not 0 <= window <= n
        or (n < cap and nxt > n)
    ):
        raise Corrupt("is corrupt (its window disagrees with its arrays)")
    r = (np.arange(n, dtype=np.int64) - start) % cap  # each slot's position, relative to the start
    full = window == n  # every slot in the window (the ring at its cap): nothing to mask
    inwin = None if full else r < window

    def bad(v: np.ndarray, lo: np.ndarray | int, hi: np.ndarray | int, ok: int | None = None) -> bool:
        good = (v >= lo) & (v < hi)
        if ok is not None:
            good |= v == ok
        return not bool(good.all() if inwin is None else good[inwin].all())

    if bad(arrays["tok"], 0, 1 << 31) or bad(arrays["back"], -1, r) or bad(arrays["fwd"], r + 1, window, END):
        raise Corrupt("is corrupt (document links outside the window)")
    for k in key_lens:
        if (
            bad(arrays[f"prev{k}"], -1, r)
            or bad(arrays[f"kstart{k}"], -1, r + 1)
            or bad(arrays[f"kend{k}"], r, window, -1)
            or len(arrays[f"headkey{k}"]) != len(arrays[f"headpos{k}"])
            or not np.all((arrays[f"headpos{k}"] >= 0) & (arrays[f"headpos{k}"] < window))
        ):
            raise Corrupt("is corrupt (chain links outside the window)")

    def as_array(v: np.ndarray, code: str) -> array:
        out = array(code)
        out.frombytes(memoryview(np.ascontiguousarray(v)).cast("B"))
        return out

    def positions(name: str) -> array:
        v = arrays[name].astype(np.int64)  # a native copy
        if start:
            np.add(v, start, out=v, where=v >= 0)
        return as_array(v, "q")

    tok = as_array(arrays["tok"].astype(np.int32), "i")
    snap = {
        "cap": cap,
        "key_lens": key_lens,
        "start": start,
        "next": nxt,
        "tok": tok,
        "back": positions("back"),
        "fwd": positions("fwd"),
        "prev": [],
        "kstart": [],
        "khash": [],
        "kend": [],
        "head": [],
    }
    for k in key_lens:
        snap["prev"].append(positions(f"prev{k}"))
        snap["kstart"].append(positions(f"kstart{k}"))
        snap["khash"].append(as_array(arrays[f"khash{k}"].astype(np.int64), "q"))
        snap["kend"].append(positions(f"kend{k}"))
        snap["head"].append(
            dict(zip(arrays[f"headkey{k}"].tolist(), (arrays[f"headpos{k}"].astype(np.int64) + start).tolist()))
        )
    return snap


# -- reading a file -----------------------------------------------------------------------
def read_store(path: Path, identity: str | None, *, payload: bool = True) -> tuple[dict, memoryview] | None:
    """The checked meta and payload of the store file ``path`` (None: no file there).
    ``Unusable`` says why it cannot be used; ``Refused`` for a newer edgespec's file or
    something else than a file at the path. Without ``payload`` the checksum is computed
    in chunks and the payload is not kept (``memory show``)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Unusable(path, f"cannot be read ({e.strerror or e})") from None
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):  # a FIFO is never opened: it could hang the read
        raise Refused(path, f"is {store_files.kind(mode)}, not a memory file: remove it")
    opened = store_files.open_regular(path)
    if opened is None:
        return None
    fd, st = opened
    try:
        return _read_fd(path, fd, st.st_size, identity, payload)
    except Corrupt as e:
        raise Unusable(path, str(e)) from None
    except OSError as e:
        raise Unusable(path, f"cannot be read ({e.strerror or e})") from None
    finally:
        os.close(fd)


def _read_fd(path: Path, fd: int, size: int, identity: str | None, want_payload: bool) -> tuple[dict, memoryview]:
    head = store_files.read_exact(fd, HEAD.size, 0)
    if len(head) < HEAD.size and MAGIC.startswith(head[: len(MAGIC)]):
        raise Corrupt(f"is truncated ({len(head)} bytes, shorter than its header)")
    if not head.startswith(MAGIC):
        raise Corrupt("is not an edgespec suffix memory (no magic)")
    _, version, meta_len, payload_len, digest = HEAD.unpack(head)
    if version > FORMAT_VERSION:
        raise Refused(
            path,
            f"has format version {version}, from a newer edgespec (this one reads "
            f"{FORMAT_VERSION}), so this edgespec does not save over it: use that edgespec or another "
            f"EDGESPEC_MEMORY_DIR, or remove it with `edgespec memory clear` (a damaged version byte reads "
            f"as newer too)",
        )
    if version != FORMAT_VERSION:
        raise Corrupt(
            f"has format version {version}, this edgespec reads {FORMAT_VERSION} "
            f"(an older edgespec's: the next --remember run replaces it)"
        )
    body = size - HEAD.size
    if body < meta_len + payload_len:
        raise Corrupt(f"is truncated ({body} of {meta_len + payload_len} bytes after the header)")
    if body > meta_len + payload_len:
        raise Corrupt(f"is corrupt ({body - meta_len - payload_len} bytes more than its header says)")
    if meta_len > MAX_META:
        raise Corrupt(f"is corrupt (a header of {meta_len:,} bytes; at most {MAX_META:,})")
    raw = store_files.read_exact(fd, meta_len, HEAD.size)
    meta = parse_meta(raw)  # every field checked, before a byte of the payload is read
    if payload_len > payload_bound(meta["cap"], len(meta["key_lens"])):
        raise Corrupt(f"is corrupt ({payload_len:,} bytes of arrays, more than a cap of {meta['cap']:,} can hold)")
    h = hashlib.sha256(raw)
    data = b""
    if want_payload:
        data = store_files.read_exact(fd, payload_len, HEAD.size + meta_len)
        h.update(data)
    else:
        at = HEAD.size + meta_len
        while at < size:
            chunk = store_files.read_exact(fd, min(1 << 22, size - at), at)
            if not chunk:
                break
            h.update(chunk)
            at += len(chunk)
    if h.digest() != digest:
        raise Corrupt("is corrupt (checksum mismatch)")
    if identity is not None and meta["identity"] != identity:
        raise Corrupt(f"belongs to another tokenizer ({meta['identity']!r}, not {identity!r})")
    return meta, memoryview(data)
