"""The suffix memory on disk (opt-in): one file per tokenizer identity, loaded warm by a
later run, written atomically, and never a reason to crash or hang.

The format is ``suffix_codec``'s: a checked header and meta, then the index itself, not
its documents to replay, so loading is a few ``frombuffer`` calls and the chain heads'
dicts (140-160 ms of CPU at the cap of 262,144 tokens on a busy 2-core VM, where
replaying takes 2.2 s; benchmarks/suffix_overhead.py), ~15 MB at the cap. The chain keys
are Python's ``hash`` of token tuples; a file written by a Python whose tuple hash
differs (``hash_probe``), or loaded with another ``cap`` or ``key_lens`` than it was saved
with, is rebuilt by replaying its window (~1.6 s at the cap; a smaller cap keeps the
newest tokens).

Two models with one vocabulary share a file (the name is a hash of the tokenizer
identity string; the header holds the identity in full and a file holding another is
*foreign*). The files are handled by ``store_files``: the folder must be the user's own
(created 0700) and so must the folders on its path (root's will do; a symbolic link in
a sticky shared folder like /tmp is refused), only a regular file is read (never a FIFO; a symbolic link is not
followed), its size is checked against its cap before its payload is read, and a save
writes a ``mkstemp`` file beside the store, fsyncs it and ``os.replace``-s it over the old
one, so a kill -9 at any moment leaves the previous file whole.

Two runs on one store (the rule docs/memory.md states): a save takes the store's lock
(``flock`` on ``<store>.lock``), re-reads the file and merges what another run saved
since this one loaded (``suffix_merge``: by position where both continue one file, by content
otherwise), so neither run's answers are lost; the counters add up, the drafts' learned
rates are this run's. ``clear`` takes the lock and adds one to the store's generation: a
run that loaded before the clear finds another generation at its save and does not save,
so the cleared answers never come back.

A corrupt, truncated, inconsistent, foreign or older file is one warning line
(``SuffixStoreWarning``: the path, why and what to do) and a cold start, and the run's
save replaces it. A file from a newer edgespec, a folder or a FIFO at the store's path, a
folder another user owns or may write: one warning, a cold start, and nothing saved
(``save`` raises ``MemoryStoreError`` naming the path, or returns None where the load
already said so), every run until the file is removed (``edgespec memory clear``). A
``load`` with a cap below the tokens the file holds keeps the newest (``loaded_tokens``
says how many the file held, for the CLI's warning). Stats and ``clear`` serve the
``edgespec memory`` command.

It knows the index's arrays and nothing of models.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from edgespec.errors import MemoryStoreError

from . import store_files
from .store_files import Refused, StoreLock, Unusable, check_folder
from .suffix import DEFAULT_CAP, SuffixIndex
from .suffix_codec import FORMAT_VERSION, MAGIC, MAX_CAP, MAX_MODELS, Corrupt, read_store
from .suffix_codec import HEAD as _HEAD
from .suffix_codec import counters as _counters
from .suffix_codec import decode as _decode
from .suffix_codec import encode as _encode
from .suffix_merge import ORIGINS, Origin, merge, replay, stamp

__all__ = [
    "FORMAT_VERSION",
    "MAGIC",
    "MAX_CAP",
    "MAX_MODELS",
    "SUFFIX",
    "StoreStats",
    "SuffixStoreWarning",
    "clear",
    "hash_probe",
    "load",
    "loaded_tokens",
    "replay",
    "save",
    "stats",
    "store_dir",
    "store_path",
]
SUFFIX = ".essuffix"
_CLEAR_HINT = " (delete the file or run `edgespec memory clear` to silence this)"
_NOT_SAVED = ", and this run's memory is not saved"


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


# -- reading ----------------------------------------------------------------------------
def _warn(path: Path, why: str, warn: Callable[[str], None] | None, hint: str = _CLEAR_HINT) -> None:
    message = f"suffix memory {path} {why}; starting cold{hint}"
    if warn is not None:
        warn(message)
    else:
        warnings.warn(message, SuffixStoreWarning, stacklevel=3)


def _restored(meta: dict, payload: memoryview, cap: int | None, index_options: dict) -> tuple[SuffixIndex, bool]:
    """The index a checked file holds, as saved or rebuilt by replay (True: replayed)."""
    snap = _decode(meta, payload)
    key_lens = index_options.pop("key_lens", snap["key_lens"])
    wanted = tuple(sorted(set(key_lens), reverse=True))
    if (cap or snap["cap"]) == snap["cap"] and wanted == snap["key_lens"] and meta["hash_probe"] == hash_probe(wanted):
        index, replayed = SuffixIndex.restore(snap, **index_options), False
    else:
        index = replay(SuffixIndex.restore(snap), SuffixIndex(cap or snap["cap"], key_lens=key_lens, **index_options))
        replayed = True
    index.proposals, index.hits, index.proposed, index.accepted_ids = _counters(meta)
    # what its drafts had proved worth, where the file has it in this edgespec's buckets;
    # else the prior (an older file, or buckets changed since: learned again in a few answers)
    index.rates.beta.restore(meta.get("rates"))
    return index, replayed


def load(
    identity: str,
    *,
    cap: int | None = None,
    directory: Path | None = None,
    warn: Callable[[str], None] | None = None,
    **index_options,
) -> SuffixIndex:
    """The saved index for this tokenizer, or an empty one (no file: silently; an
    unusable file or folder: one ``SuffixStoreWarning``, or one call of ``warn`` with its
    text). ``cap`` defaults to the saved cap; another one, other ``key_lens`` or another
    Python's tuple hash rebuild the index by replaying the saved window (a smaller cap
    keeps the newest tokens). ``save`` of the returned index merges with what other runs
    saved meanwhile, and does not save after a ``clear``."""
    d = directory or store_dir()
    path = store_path(identity, d)
    origin, index = Origin(), None
    try:
        if check_folder(d):
            with StoreLock(path, exclusive=False) as lock:
                origin.generation = lock.generation if lock.held else None
                got = read_store(path, identity)
            if got is not None:
                meta, payload = got
                try:
                    index, replayed = _restored(meta, payload, cap, dict(index_options))
                except (Corrupt, ValueError, OverflowError, MemoryError) as e:
                    raise Unusable(
                        path,
                        str(e)
                        if isinstance(e, Corrupt)
                        else f"is corrupt (an index this edgespec cannot rebuild: {e})",
                    ) from None
                if not replayed:
                    origin.lineage, origin.base_next = meta.get("lineage"), meta["next"]
                origin.counters, origin.stamp, origin.tokens = _counters(meta), stamp(meta), meta["tokens"]
    except Refused as e:
        origin.refused = e.why
        _warn(e.path, e.why, warn, hint=_NOT_SAVED)
    except Unusable as e:
        if e.path != path:  # the folder, or the lock: nothing can be saved either
            origin.refused = e.why
        _warn(e.path, e.why, warn, hint=_NOT_SAVED if e.path != path else _CLEAR_HINT)
    if index is None:
        index = SuffixIndex(cap or DEFAULT_CAP, **index_options)
    ORIGINS[index] = origin
    return index


def loaded_tokens(index: SuffixIndex) -> int:
    """The tokens the file held when ``load`` returned ``index`` (0: it started cold):
    more than ``index.cap``, and the index kept only the newest, as its save will."""
    origin = ORIGINS.get(index)
    return origin.tokens if origin is not None else 0


# -- saving -------------------------------------------------------------------------------
def save(index: SuffixIndex, identity: str, directory: Path | None = None, *, model: str | None = None) -> Path | None:
    """Write the index (its open documents as closed ones) and its counters atomically,
    holding the store's lock; returns the path. ``model``: the name of the model that
    wrote it, added to the names a valid file of this tokenizer keeps. An index from
    ``load`` is first merged with what other runs saved since (``suffix_merge.merge``). Temporary
    files of killed saves are removed. ``MemoryStoreError`` (naming the path) when it
    cannot be saved: the folder or the path refused, a newer edgespec's file, the store
    cleared since this index was loaded, an OS error; None where the load already warned
    of the same refusal."""
    d = directory or store_dir()
    path = store_path(identity, d)
    origin = ORIGINS.get(index)
    try:
        if index.cap > MAX_CAP:
            raise Refused(path, f"cannot hold a cap of {index.cap:,} tokens (at most {MAX_CAP:,})")
        check_folder(d, create=True)
        with StoreLock(path, exclusive=True) as lock:
            if origin is not None and origin.generation is not None and lock.generation != origin.generation:
                raise Refused(path, "was cleared (`edgespec memory clear`) while this run went on: clearing wins")
            try:
                current = read_store(path, identity)
            except Refused:
                raise
            except Unusable:
                current = None  # corrupt, foreign, older, a link, another user's: replaced
            lineage = merge(index, current, origin)
            models = list(current[0].get("models", [])) if current else []
            if model:
                models = [model, *(m for m in models if m != model)]
            store_files.remove_stale_temps(path)
            saved = _write(path, index, identity, models[:MAX_MODELS], lineage)
            generation = lock.generation if lock.held else None
    except Unusable as e:
        if origin is not None and origin.refused == e.why:
            return None  # the load said so already, in its one line
        raise MemoryStoreError(f"suffix memory {e.path} {e.why}{_NOT_SAVED}") from None
    except OSError as e:
        raise MemoryStoreError(f"suffix memory {path} could not be saved ({e.strerror or e}){_NOT_SAVED}") from None
    ORIGINS[index] = Origin(generation, lineage, saved["next"], _counters(saved), stamp=stamp(saved))
    return path


def _write(path: Path, index: SuffixIndex, identity: str, models: list[str], lineage: str) -> dict:
    snap = index.snapshot()
    arrays, documents = _encode(snap)
    fields = {
        "identity": identity,
        "cap": index.cap,
        "key_lens": list(snap["key_lens"]),
        "start": snap["start"],
        "next": snap["next"],
        "documents": documents,
        "tokens": snap["next"] - snap["start"],
        "proposals": index.proposals,
        "hits": min(index.hits, index.proposals),  # (as a load checks them: merged counters could disagree)
        "proposed": index.proposed,
        "accepted": min(index.accepted_ids, index.proposed),
        "saved_at": time.time(),
        "models": models,
        "hash_probe": hash_probe(snap["key_lens"]),
        "rates": index.rates.beta.state(),
        "lineage": lineage,
        "arrays": [[name, a.dtype.str, len(a)] for name, a in arrays],
    }
    meta = json.dumps(fields).encode("utf-8")
    digest = hashlib.sha256(meta)
    for _, a in arrays:
        digest.update(memoryview(a).cast("B"))
    payload_len = sum(a.nbytes for _, a in arrays)
    head = _HEAD.pack(MAGIC, FORMAT_VERSION, len(meta), payload_len, digest.digest())
    fd, tmp = store_files.temp_file(path)  # unique, O_EXCL|O_NOFOLLOW, 0600: what earlier answers said
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(head)
            f.write(meta)
            for _, a in arrays:
                f.write(memoryview(a).cast("B"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    store_files.fsync_dir(path.parent)
    return fields


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


def _folder(directory: Path | None) -> tuple[Path, bool]:
    d = directory or store_dir()
    try:
        return d, check_folder(d)
    except Unusable as e:
        raise MemoryStoreError(f"suffix memory folder {e.path} {e.why}") from None


def stats(directory: Path | None = None) -> list[StoreStats]:
    """Every store file in the directory, readable or not (an unusable one, a dangling
    link or a folder at a store's name shows as zeros with its size and ``problem``, so
    that ``clear`` can still be offered). ``MemoryStoreError``: the folder is refused."""
    d, exists = _folder(directory)
    out = []
    for path in sorted(d.glob(f"*{SUFFIX}")) if exists else []:
        try:
            st = os.lstat(path)
        except OSError:
            continue  # removed meanwhile
        size = st.st_size if stat.S_ISREG(st.st_mode) else 0
        try:
            got = read_store(path, None, payload=False)
            if got is None:
                continue
            meta, problem = got[0], ""
            if store_path(meta["identity"], d).name != path.name:
                problem = "belongs to another tokenizer than its name says: remove it"
        except Unusable as e:
            meta, problem = {}, e.why
        if problem:
            out.append(StoreStats(path, str(meta.get("identity", "?")), size, 0, 0, 0, 0, 0, 0, 0.0, problem=problem))
            continue
        out.append(
            StoreStats(
                path,
                meta["identity"],
                size,
                meta["documents"],
                meta["tokens"],
                *_counters(meta),
                float(meta["saved_at"]),
                meta["cap"],
                tuple(meta["models"]),
            )
        )
    return out


def clear(identity: str | None = None, directory: Path | None = None, paths=None) -> list[Path]:
    """Delete one tokenizer's store (or every store, with ``identity=None``; or the
    store files ``paths``), a link at its name included, and its temporary files, each
    under its lock and adding one to its generation (a run that loaded it does not save
    it back). Returns what was removed; ``MemoryStoreError`` (with ``removed``) for what
    could not be: a folder at a store's name is not removed, nor anything on a read-only
    folder."""
    d, exists = _folder(directory)
    if not exists:
        return []
    if paths is not None:
        targets = [Path(p) for p in paths]
    else:
        targets = [store_path(identity, d)] if identity is not None else sorted(d.glob(f"*{SUFFIX}"))
    removed: list[Path] = []
    problems: list[str] = []
    for path in targets:
        try:
            with StoreLock(path, exclusive=True) as lock:
                if lock.held:
                    lock.bump()
                for victim in [path, *sorted(path.parent.glob(path.name + ".tmp-*"))]:
                    try:
                        mode = os.lstat(victim).st_mode
                    except FileNotFoundError:
                        continue
                    if stat.S_ISDIR(mode):
                        problems.append(f"{victim} is a folder, not removed (remove it yourself)")
                        continue
                    os.unlink(victim)
                    removed.append(victim)
        except Unusable as e:
            problems.append(f"{path} could not be removed: {e.path} {e.why}")
        except OSError as e:
            problems.append(f"{path} could not be removed ({e.strerror or e})")
    if problems:
        error = MemoryStoreError("suffix memory: " + "; ".join(problems))
        error.removed = removed  # type: ignore[attr-defined]
        raise error
    return removed
