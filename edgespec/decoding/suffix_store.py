"""The suffix memory on disk (opt-in): one file per tokenizer identity, loaded warm by a
later run, written atomically, and never a reason to crash.

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
                                (``arrays``: name, dtype, count)
    payload                     the index's arrays (``SuffixIndex.snapshot``), one after
                                another, little-endian

The payload is the index itself, not its documents to replay: loading is a few
``frombuffer`` calls and the chain heads' dicts (140-160 ms of CPU at the cap of 262,144
tokens on a busy 2-core VM, where replaying takes 2.2 s; most of it is building the ~300k
dict entries of the heads; benchmarks/suffix_overhead.py). Positions are
stored relative to the window's start as int32 (a link that left the window is -1: the
index treats any position before its start alike), so a file is ~44 bytes a token plus
12 a chain head, ~15 MB at the cap. An open document is saved closed. The chain keys are
Python's ``hash`` of token tuples; a file written by a Python whose tuple hash differs
(``hash_probe`` in the meta), or loaded with another ``cap`` or ``key_lens`` than it was
saved with, is rebuilt by replaying its window (correct, ~1.6 s at the cap; a smaller cap
keeps the newest tokens).

Two models with one vocabulary share a file (the name is a hash of the tokenizer
identity string, built from ``catalog.ident.Tokenizer``'s digest by the CLI, or any
stable text the caller picks; the header holds the identity in full and a file holding
another is *foreign*). A save writes a temporary file beside the target, fsyncs it and
``os.replace``-s it over the old one, so a kill -9 at any moment leaves the previous file
whole: it loses at most the session being saved. A corrupt, truncated, inconsistent or
foreign file, or one of another version, is one warning line (``SuffixStoreWarning``:
the file and what to do) and a cold start. Stats and ``clear`` serve the ``edgespec
memory`` command.

It knows the index's arrays (``SuffixIndex.snapshot``/``restore``) and nothing of models.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
import warnings
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from .suffix import DEFAULT_CAP, END, SuffixIndex

MAGIC = b"ESSUFFIX"
FORMAT_VERSION = 2
_HEAD = struct.Struct("<8sIIQ32s")  # magic, version, meta length, payload length, sha256
SUFFIX = ".essuffix"
MAX_MODELS = 8  # model names a file remembers having been written by


class SuffixStoreWarning(UserWarning):
    """A suffix-memory file could not be used; the run starts cold."""


def store_dir() -> Path:
    """``$EDGESPEC_MEMORY_DIR``, else ``edgespec/suffix-memory/`` in the XDG cache (beside
    the models' ``edgespec/models/``; decoding/ may not reach catalog/ to ask it)."""
    env = os.environ.get("EDGESPEC_MEMORY_DIR")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "edgespec" / "suffix-memory"


def store_path(identity: str, directory: Path | None = None) -> Path:
    """The file for one tokenizer identity: a readable prefix and a hash of the whole."""
    readable = "".join(c if c.isalnum() or c in "-_." else "-" for c in identity)[:40]
    digest = hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]
    return (directory or store_dir()) / f"{readable}-{digest}{SUFFIX}"


def hash_probe(key_lens) -> list[int]:
    """What this Python's ``hash`` makes of a token tuple of each key length: the chain
    keys of a file are only valid where these agree."""
    return [hash(tuple(range(7, 7 + n))) for n in key_lens]


# -- the arrays ---------------------------------------------------------------------------
def _encode(snap: dict) -> tuple[list[tuple[str, np.ndarray]], int]:
    """The snapshot's arrays as stored (see the module docstring), and its documents."""
    cap, start = snap["cap"], snap["start"]
    n, window = len(snap["tok"]), snap["next"] - start
    inwin = (np.arange(n, dtype=np.int64) - start) % cap < window

    def rel(a: array, keep_sentinels: bool = False) -> np.ndarray:
        v = np.frombuffer(a, dtype=np.int64)
        gone = END if keep_sentinels else -1  # an open document's OPEN becomes END: closed
        return np.where(inwin, np.where(v >= start, v - start, gone), -1).astype("<i4")

    out = [("tok", np.where(inwin, np.frombuffer(snap["tok"], dtype=np.int32), 0).astype("<i4")),
           ("back", rel(snap["back"])), ("fwd", rel(snap["fwd"], keep_sentinels=True))]
    for i, n_key in enumerate(snap["key_lens"]):
        kstart = rel(snap["kstart"][i])
        khash = np.where(kstart >= 0, np.frombuffer(snap["khash"][i], dtype=np.int64), 0).astype("<i8")
        head = snap["head"][i]
        out += [(f"prev{n_key}", rel(snap["prev"][i])), (f"kstart{n_key}", kstart), (f"khash{n_key}", khash),
                (f"kend{n_key}", rel(snap["kend"][i])),
                (f"headkey{n_key}", np.fromiter(head.keys(), dtype="<i8", count=len(head))),
                (f"headpos{n_key}", (np.fromiter(head.values(), dtype=np.int64, count=len(head)) - start)
                 .astype("<i4"))]
    documents = int(np.count_nonzero(inwin & (out[1][1] < 0)))
    return out, documents


def _decode(meta: dict, payload: memoryview) -> dict:
    """A snapshot from the stored arrays, checked so that no walk of the index can leave
    its window or loop (``_Unusable`` otherwise)."""
    cap, start, nxt = int(meta["cap"]), int(meta["start"]), int(meta["next"])
    key_lens = tuple(int(k) for k in meta["key_lens"])
    if cap < 1:
        raise _Unusable("is corrupt (a cap under one token)")
    arrays, at = {}, 0
    for name, dtype, count in meta["arrays"]:
        if dtype not in ("<i4", "<i8"):
            raise _Unusable("is corrupt (an unknown array type)")
        size = int(count) * np.dtype(dtype).itemsize
        if at + size > len(payload):
            raise _Unusable("is corrupt (sizes disagree with its header)")
        arrays[name] = np.frombuffer(payload, dtype=dtype, count=int(count), offset=at)
        at += size
    if at != len(payload):
        raise _Unusable("is corrupt (sizes disagree with its header)")
    per_token = ["tok", "back", "fwd", *(f"{a}{n}" for n in key_lens for a in ("prev", "kstart", "khash", "kend"))]
    if any(name not in arrays for name in per_token) or \
            any(f"head{a}{n}" not in arrays for n in key_lens for a in ("key", "pos")):
        raise _Unusable("is corrupt (an array is missing)")
    n = len(arrays["tok"])
    window = nxt - start
    if int(meta["tokens"]) != window:
        raise _Unusable("is corrupt (sizes disagree with its header)")
    if not key_lens or min(key_lens) < 1 or any(len(arrays[a]) != n for a in per_token) or \
            n > cap or start < 0 or not 0 <= window <= n or (n < cap and nxt > n):
        raise _Unusable("is corrupt (its window disagrees with its arrays)")
    r = (np.arange(n, dtype=np.int64) - start) % cap  # each slot's position, relative to the start
    full = window == n  # every slot in the window (the ring at its cap): nothing to mask
    inwin = None if full else r < window

    def bad(v: np.ndarray, lo: np.ndarray | int, hi: np.ndarray | int, ok: int | None = None) -> bool:
        good = (v >= lo) & (v < hi)
        if ok is not None:
            good |= v == ok
        return not bool(good.all() if inwin is None else good[inwin].all())

    if bad(arrays["tok"], 0, 1 << 31) or bad(arrays["back"], -1, r) or bad(arrays["fwd"], r + 1, window, END):
        raise _Unusable("is corrupt (document links outside the window)")
    for k in key_lens:
        if bad(arrays[f"prev{k}"], -1, r) or bad(arrays[f"kstart{k}"], -1, r + 1) or \
                bad(arrays[f"kend{k}"], r, window, -1) or len(arrays[f"headkey{k}"]) != len(arrays[f"headpos{k}"]) \
                or not np.all((arrays[f"headpos{k}"] >= 0) & (arrays[f"headpos{k}"] < window)):
            raise _Unusable("is corrupt (chain links outside the window)")

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
    snap = {"cap": cap, "key_lens": key_lens, "start": start, "next": nxt, "tok": tok,
            "back": positions("back"), "fwd": positions("fwd"), "prev": [], "kstart": [], "khash": [],
            "kend": [], "head": []}
    for k in key_lens:
        snap["prev"].append(positions(f"prev{k}"))
        snap["kstart"].append(positions(f"kstart{k}"))
        snap["khash"].append(as_array(arrays[f"khash{k}"].astype(np.int64), "q"))
        snap["kend"].append(positions(f"kend{k}"))
        snap["head"].append(dict(zip(arrays[f"headkey{k}"].tolist(),
                                     (arrays[f"headpos{k}"].astype(np.int64) + start).tolist())))
    return snap


# -- saving -------------------------------------------------------------------------------
def save(index: SuffixIndex, identity: str, directory: Path | None = None, *, model: str | None = None) -> Path:
    """Write the index (its open documents as closed ones) and its counters atomically;
    returns the path. ``model``: the name of the model that wrote it, added to the names
    the file keeps (for ``edgespec memory show``). Stale temporary files of killed saves
    are removed."""
    path = store_path(identity, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    snap = index.snapshot()
    arrays, documents = _encode(snap)
    models = [m for m in _peek_meta(path).get("models", []) if isinstance(m, str)]
    if model:
        models = [model, *(m for m in models if m != model)]
    meta = json.dumps({
        "identity": identity, "cap": index.cap, "key_lens": list(snap["key_lens"]), "start": snap["start"],
        "next": snap["next"], "documents": documents, "tokens": snap["next"] - snap["start"],
        "proposals": index.proposals, "hits": index.hits, "proposed": index.proposed,
        "accepted": index.accepted_ids, "saved_at": time.time(), "models": models[:MAX_MODELS],
        "hash_probe": hash_probe(snap["key_lens"]),
        "rates": index.rates.beta.state(),
        "arrays": [[name, a.dtype.str, len(a)] for name, a in arrays],
    }).encode("utf-8")
    digest = hashlib.sha256(meta)
    for _, a in arrays:
        digest.update(memoryview(a).cast("B"))
    payload_len = sum(a.nbytes for _, a in arrays)
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, len(meta), payload_len, digest.digest())
    for stale in path.parent.glob(path.name + ".tmp-*"):
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    # readable by its owner only: it holds what earlier answers said, as token ids
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(head)
        f.write(meta)
        for _, a in arrays:
            f.write(memoryview(a).cast("B"))
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


def _peek_meta(path: Path) -> dict:
    """A file's meta, unchecked (the names of the models that wrote it); {} if none."""
    try:
        with open(path, "rb") as f:
            magic, _, meta_len, _, _ = _HEAD.unpack(f.read(_HEAD.size))
            meta = json.loads(f.read(meta_len).decode("utf-8")) if magic == MAGIC else {}
        return meta if isinstance(meta, dict) else {}
    except (OSError, struct.error, UnicodeDecodeError, ValueError):
        return {}


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return  # a platform without directory fds (Windows): the replace is what we have
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- loading ------------------------------------------------------------------------------
class _Unusable(Exception):
    """Why a file cannot be used (the warning's text)."""


def _read(path: Path, identity: str | None) -> tuple[dict, memoryview]:
    try:
        data = path.read_bytes()
    except OSError as e:
        raise _Unusable(f"cannot be read ({e.strerror or e})") from None
    if len(data) < _HEAD.size and MAGIC.startswith(data[:len(MAGIC)]):
        raise _Unusable(f"is truncated ({len(data)} bytes, shorter than its header)")
    if not data.startswith(MAGIC):
        raise _Unusable("is not an edgespec suffix memory (no magic)")
    magic, version, meta_len, payload_len, digest = _HEAD.unpack_from(data)
    if version != FORMAT_VERSION:
        older = " (an older edgespec's: the next --remember run replaces it)" if version < FORMAT_VERSION else ""
        raise _Unusable(f"has format version {version}, this edgespec reads {FORMAT_VERSION}{older}")
    body = memoryview(data)[_HEAD.size:]
    if len(body) != meta_len + payload_len:
        raise _Unusable(f"is truncated ({len(body)} of {meta_len + payload_len} bytes after the header)")
    if hashlib.sha256(body).digest() != digest:
        raise _Unusable("is corrupt (checksum mismatch)")
    try:
        meta = json.loads(bytes(body[:meta_len]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _Unusable("is corrupt (unreadable header)") from None
    if not isinstance(meta, dict):
        raise _Unusable("is corrupt (unreadable header)")
    if identity is not None and meta.get("identity") != identity:
        raise _Unusable(f"belongs to another tokenizer ({meta.get('identity')!r}, not {identity!r})")
    return meta, body[meta_len:]


def _warn(path: Path, why: str, warn: Callable[[str], None] | None) -> None:
    message = (f"suffix memory {path} {why}; starting cold (delete the file or run "
               f"`edgespec memory clear` to silence this)")
    if warn is not None:
        warn(message)
    else:
        warnings.warn(message, SuffixStoreWarning, stacklevel=3)


def load(identity: str, *, cap: int | None = None, directory: Path | None = None,
         warn: Callable[[str], None] | None = None, **index_options) -> SuffixIndex:
    """The saved index for this tokenizer, or an empty one (no file: silently; an
    unusable file: one ``SuffixStoreWarning``, or one call of ``warn`` with its text).
    ``cap`` defaults to the saved cap; another one, other ``key_lens`` or another
    Python's tuple hash rebuild the index by replaying the saved window (a smaller cap
    keeps the newest tokens)."""
    path = store_path(identity, directory)
    snap: dict | None = None
    if path.exists():
        try:
            meta, payload = _read(path, identity)
            snap = _decode(meta, payload)
            counters = [int(meta[k]) for k in ("proposals", "hits", "proposed", "accepted")]
            probe = meta["hash_probe"]
        except (_Unusable, KeyError, TypeError, ValueError, OverflowError) as e:
            _warn(path, str(e) if isinstance(e, _Unusable) else "is corrupt (incomplete header)", warn)
            snap = None
    if snap is None:
        return SuffixIndex(cap or DEFAULT_CAP, **index_options)
    key_lens = index_options.pop("key_lens", snap["key_lens"])
    wanted = tuple(sorted(set(key_lens), reverse=True))
    if (cap or snap["cap"]) == snap["cap"] and wanted == snap["key_lens"] and probe == hash_probe(wanted):
        index = SuffixIndex.restore(snap, **index_options)
    else:
        index = replay(SuffixIndex.restore(snap), SuffixIndex(cap or snap["cap"], key_lens=key_lens,
                                                               **index_options))
    index.proposals, index.hits, index.proposed, index.accepted_ids = counters
    # what its drafts had proved worth, where the file has it in this edgespec's buckets;
    # else the prior (an older file, or buckets changed since: learned again in a few answers)
    index.rates.beta.restore(meta.get("rates"))
    return index


def replay(source: SuffixIndex, into: SuffixIndex) -> SuffixIndex:
    """``into`` with ``source``'s window written into it, fragment by fragment, each as a
    closed document (what a cap or key lengths other than the saved ones need)."""
    for _, tokens, _ in source.documents():
        doc = into.open()
        into.extend(doc, tokens)
        into.close(doc)
    return into


# -- the memory command -------------------------------------------------------------------
@dataclass(frozen=True)
class StoreStats:
    """One store file as ``edgespec memory show`` shows it (``problem``: why it cannot be
    used, "" when it can)."""

    path: Path
    identity: str
    file_bytes: int
    documents: int
    tokens: int
    proposals: int
    hits: int
    proposed: int
    accepted: int
    saved_at: float
    cap: int = 0
    models: tuple[str, ...] = ()
    problem: str = ""

    @property
    def hit_rate(self) -> float:
        """Share of proposals that drafted anything."""
        return self.hits / self.proposals if self.proposals else 0.0

    @property
    def acceptance(self) -> float:
        """Share of drafted ids the target kept."""
        return self.accepted / self.proposed if self.proposed else 0.0


def stats(directory: Path | None = None) -> list[StoreStats]:
    """Every store file in the directory, readable or not (an unreadable one shows as
    zeros with its size and ``problem``, so that ``clear`` can still be offered)."""
    d = directory or store_dir()
    out = []
    for path in sorted(d.glob(f"*{SUFFIX}")) if d.is_dir() else []:
        problem = ""
        try:
            meta, _ = _read(path, None)
        except _Unusable as e:
            meta, problem = {}, str(e)
        try:
            models = tuple(str(m) for m in meta.get("models", ()))
            out.append(StoreStats(path, str(meta.get("identity", "?")), path.stat().st_size,
                                  int(meta.get("documents", 0)), int(meta.get("tokens", 0)),
                                  int(meta.get("proposals", 0)), int(meta.get("hits", 0)),
                                  int(meta.get("proposed", 0)), int(meta.get("accepted", 0)),
                                  float(meta.get("saved_at", 0.0)), int(meta.get("cap", 0)), models, problem))
        except (TypeError, ValueError):
            out.append(StoreStats(path, "?", path.stat().st_size, 0, 0, 0, 0, 0, 0, 0.0,
                                  problem="is corrupt (unreadable header)"))
        except OSError:
            continue  # removed meanwhile
    return out


def clear(identity: str | None = None, directory: Path | None = None, paths=None) -> list[Path]:
    """Delete one tokenizer's store (or every store, with ``identity=None``; or the
    store files ``paths``) and any temporary files; returns what was removed."""
    d = directory or store_dir()
    if not d.is_dir():
        return []
    if paths is not None:
        targets = [Path(p) for p in paths]
        targets += [t for p in targets for t in d.glob(Path(p).name + ".tmp-*")]
    else:
        pattern = store_path(identity, d).name if identity is not None else f"*{SUFFIX}"
        targets = [*d.glob(pattern), *d.glob(pattern + ".tmp-*")]
    removed = []
    for path in targets:
        if path.exists():
            path.unlink(missing_ok=True)
            removed.append(path)
    return removed
