"""The suffix memory on disk (opt-in): one file per tokenizer identity, loaded warm by a
later run, written atomically, and never a reason to crash.

A file is a header and a payload::

    magic  b"ESSUFFIX"          8 bytes
    version                     u32 little-endian (FORMAT_VERSION)
    meta length, payload length u32, u64
    sha256(meta + payload)      32 bytes
    meta                        UTF-8 JSON: tokenizer identity, cap, documents, tokens,
                                the hit counters, when it was saved
    payload                     int64 document lengths, then int32 token ids

Two models with one vocabulary share a file (the name is a hash of the tokenizer
identity string, ``catalog.ident.Tokenizer.identity`` or any stable text the caller
picks; the header holds the identity in full and a file holding another is *foreign*).
A save writes a temporary file beside the target, fsyncs it and ``os.replace``-s it over
the old one, so a kill -9 at any moment leaves the previous file whole: it loses at most
the session being saved. A corrupt, truncated or foreign file, or one of another
version, is one warning line (``SuffixStoreWarning``: the file and what to do) and a
cold start. Stats and ``clear`` serve a ``memory`` command.

It knows the index's window (``SuffixIndex.documents``) and nothing of models.
"""

from __future__ import annotations

import hashlib
import json
import os
import struct
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .suffix import DEFAULT_CAP, SuffixIndex

MAGIC = b"ESSUFFIX"
FORMAT_VERSION = 1
_HEAD = struct.Struct("<8sIIQ32s")  # magic, version, meta length, payload length, sha256
SUFFIX = ".essuffix"


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


def save(index: SuffixIndex, identity: str, directory: Path | None = None) -> Path:
    """Write the index's window (every fragment as a closed document) and its counters
    atomically; returns the path. Stale temporary files of killed saves are removed."""
    path = store_path(identity, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    docs = index.documents()
    lengths = np.array([len(toks) for _, toks, _ in docs], dtype="<i8")
    tokens = np.fromiter((t for _, toks, _ in docs for t in toks), dtype="<i4", count=int(lengths.sum()))
    meta = json.dumps({
        "identity": identity, "cap": index.cap, "documents": len(docs), "tokens": int(lengths.sum()),
        "proposals": index.proposals, "hits": index.hits, "proposed": index.proposed,
        "accepted": index.accepted_ids, "saved_at": time.time(),
    }).encode("utf-8")
    payload = lengths.tobytes() + tokens.tobytes()
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, len(meta), len(payload), hashlib.sha256(meta + payload).digest())
    for stale in path.parent.glob(path.name + ".tmp-*"):
        stale.unlink(missing_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    # readable by its owner only: it holds what earlier answers said, as token ids
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "wb") as f:
        f.write(head)
        f.write(meta)
        f.write(payload)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync_dir(path.parent)
    return path


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


@dataclass(frozen=True)
class StoreStats:
    """One store file as a ``memory`` command shows it."""

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

    @property
    def hit_rate(self) -> float:
        """Share of proposals that drafted anything."""
        return self.hits / self.proposals if self.proposals else 0.0

    @property
    def acceptance(self) -> float:
        """Share of drafted ids the target kept."""
        return self.accepted / self.proposed if self.proposed else 0.0


class _Unusable(Exception):
    """Why a file cannot be used (the warning's text)."""


def _read(path: Path, identity: str | None) -> tuple[dict, bytes]:
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
        raise _Unusable(f"has format version {version}, this edgespec reads {FORMAT_VERSION}")
    body = data[_HEAD.size:]
    if len(body) != meta_len + payload_len:
        raise _Unusable(f"is truncated ({len(body)} of {meta_len + payload_len} bytes after the header)")
    if hashlib.sha256(body).digest() != digest:
        raise _Unusable("is corrupt (checksum mismatch)")
    try:
        meta = json.loads(body[:meta_len].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise _Unusable("is corrupt (unreadable header)") from None
    if identity is not None and meta.get("identity") != identity:
        raise _Unusable(f"belongs to another tokenizer ({meta.get('identity')!r}, not {identity!r})")
    return meta, body[meta_len:]


def _warn(path: Path, why: str) -> None:
    warnings.warn(f"suffix memory {path} {why}; starting cold (delete the file or run "
                  f"`edgespec memory clear` to silence this)", SuffixStoreWarning, stacklevel=3)


def load(identity: str, *, cap: int | None = None, directory: Path | None = None, **index_options) -> SuffixIndex:
    """The saved index for this tokenizer, or an empty one (no file: silently; an
    unusable file: one ``SuffixStoreWarning``). ``cap`` defaults to the saved cap; a
    smaller one keeps the newest tokens."""
    path = store_path(identity, directory)
    meta: dict | None = None
    if path.exists():
        try:
            meta, payload = _read(path, identity)
            n_docs, n_tok = int(meta["documents"]), int(meta["tokens"])
            if len(payload) != 8 * n_docs + 4 * n_tok:
                raise _Unusable("is corrupt (sizes disagree with its header)")
            lengths = np.frombuffer(payload, dtype="<i8", count=n_docs)
            if n_docs and (lengths.min() < 0 or int(lengths.sum()) != n_tok):
                raise _Unusable("is corrupt (document lengths disagree with its header)")
            if int(meta["cap"]) < 1:
                raise _Unusable("is corrupt (a cap under one token)")
        except (_Unusable, KeyError, TypeError, ValueError) as e:
            _warn(path, str(e) if isinstance(e, _Unusable) else "is corrupt (incomplete header)")
            meta = None
    index = SuffixIndex(cap or (int(meta["cap"]) if meta else DEFAULT_CAP), **index_options)
    if meta is None:
        return index
    tokens = np.frombuffer(payload, dtype="<i4", offset=8 * n_docs, count=n_tok).tolist()
    at = 0
    for n in lengths.tolist():
        doc = index.open()
        index.extend(doc, tokens[at:at + n])
        index.close(doc)
        at += n
    index.proposals, index.hits = int(meta["proposals"]), int(meta["hits"])
    index.proposed, index.accepted_ids = int(meta["proposed"]), int(meta["accepted"])
    return index


def stats(directory: Path | None = None) -> list[StoreStats]:
    """Every store file in the directory, readable or not (an unreadable one shows as
    zeros with its size, so that ``clear`` can still be offered)."""
    d = directory or store_dir()
    out = []
    for path in sorted(d.glob(f"*{SUFFIX}")) if d.is_dir() else []:
        try:
            meta, _ = _read(path, None)
        except _Unusable:
            meta = {}
        out.append(StoreStats(path, str(meta.get("identity", "?")), path.stat().st_size,
                              int(meta.get("documents", 0)), int(meta.get("tokens", 0)),
                              int(meta.get("proposals", 0)), int(meta.get("hits", 0)),
                              int(meta.get("proposed", 0)), int(meta.get("accepted", 0)),
                              float(meta.get("saved_at", 0.0))))
    return out


def clear(identity: str | None = None, directory: Path | None = None) -> list[Path]:
    """Delete one tokenizer's store (or every store, with ``identity=None``) and any
    temporary files; returns what was removed."""
    d = directory or store_dir()
    if not d.is_dir():
        return []
    pattern = store_path(identity, d).name if identity is not None else f"*{SUFFIX}"
    removed = []
    for path in [*d.glob(pattern), *d.glob(pattern + ".tmp-*")]:
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed
