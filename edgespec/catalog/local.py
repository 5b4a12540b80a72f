"""The models already on this machine: found in other tools' stores (``stores``), known
from their headers (``ident``), named, and paired.

``scan()`` returns an ``Index``: every ``LocalModel`` and every file skipped, with the
reason. Headers are cached in edgespec's cache folder (``local-index.json``), keyed by
path, size and modification time, so a warm scan only lists folders and stats files;
the ``gguf`` package is imported only when a header must be read. The index is kept for
the life of the process (``forget()`` drops it). Naming a model (``lookup``) and looking
for its drafters (``drafter_candidates``) read only the headers they need: those of the
models the name names, and of the files small enough to draft.

``lookup(name)`` resolves the names ``stores`` gives, and the same names without their
store's prefix or by file name: several matches are an ``AmbiguousModelError`` listing
them (unless they are the same file), none is None (``suggest`` finds the closest names).

A drafter for a target: its vocabulary passes llama.cpp's rules on the headers
(``ident.drafting_problem``), its files are at least ``DRAFT_SIZE_RATIO`` times smaller,
and their architectures allow it (``archs.assists``: a Gemma 4 assistant drafts for its
own Gemma 4 target alone, and is never a target). Nothing here is written outside edgespec's own cache.
"""

from __future__ import annotations

import contextlib
import difflib
import glob
import hashlib
import json
import os
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from ..errors import AmbiguousModelError, ModelFileError
from . import archs, stores
from .ident import Header, drafting_problem, read_header
from .stores import Found, Skipped

CACHE_VERSION = 2  # 2: headers say their widths (a Gemma 4 assistant's target, archs.assists)
DRAFT_SIZE_RATIO = 2.0  # a drafter's files are at least this many times smaller


@dataclass(frozen=True)
class LocalModel:
    """One model on this machine: its name and store, files, size and header."""

    name: str
    source: str
    where: str
    files: tuple[Path, ...]
    size_bytes: int
    header: Header
    aliases: tuple[str, ...] = ()
    catalog: str | None = None

    @property
    def path(self) -> Path:
        """The file to load (the first part of a split model)."""
        return self.files[0]

    @cached_property
    def key(self) -> str:
        """A stable identity for measured figures: the same bytes under any store's name
        (an Ollama blob and an LM Studio copy of one file share it)."""
        h = self.header
        text = f"{h.name}|{h.architecture}|{h.params}|{h.quant}|{self.size_bytes}|" + (
            h.tokenizer.digest if h.tokenizer else ""
        )
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def drafting_problem(self, target: "LocalModel") -> str | None:
        """Why this model cannot draft for ``target``, or None when it can."""
        if self.size_bytes * DRAFT_SIZE_RATIO > target.size_bytes:
            return f"not {DRAFT_SIZE_RATIO:g}× smaller than the target"
        if self.header.tokenizer is None or target.header.tokenizer is None:
            return "no tokenizer in its header"
        return self.arch_problem(target) or drafting_problem(target.header.tokenizer, self.header.tokenizer)

    def arch_problem(self, target: "LocalModel") -> str | None:
        """Why their architectures keep this model from drafting for ``target`` (a Gemma 4
        assistant drafts for its own Gemma 4 target only, and is no target): ``archs.assists``."""
        t, d = target.header, self.header
        return archs.assists(t.architecture, t.n_embd, d.architecture, d.n_embd_out)


@dataclass
class Index:
    """Every model found, what was skipped and why, and the pairs among them."""

    models: list[LocalModel]
    skipped: list[Skipped]
    _by_key: dict[str, list[LocalModel]] = field(default_factory=dict, repr=False)
    _groups: dict[str, list[LocalModel]] = field(default_factory=dict, repr=False)
    _compatible: dict[tuple[str, str], bool] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for m in self.models:
            for key in dict.fromkeys(k.lower() for k in (m.name, *m.aliases)):
                self._by_key.setdefault(key, []).append(m)

    def find(self, name: str) -> list[LocalModel]:
        """The models ``name`` names: by full name first, then by alias."""
        key = name.strip().lower()
        exact = [m for m in self._by_key.get(key, []) if m.name.lower() == key]
        return exact or self._by_key.get(key, [])

    def drafters_for(self, target: LocalModel) -> list[LocalModel]:
        """Models that can draft for ``target``, largest first."""
        out = [
            m
            for m in self._same_vocab(target, as_target=True)
            if m.size_bytes * DRAFT_SIZE_RATIO <= target.size_bytes and m.arch_problem(target) is None
        ]
        return sorted(out, key=lambda m: -m.size_bytes)

    def targets_for(self, draft: LocalModel) -> list[LocalModel]:
        return [
            m
            for m in self._same_vocab(draft, as_target=False)
            if draft.size_bytes * DRAFT_SIZE_RATIO <= m.size_bytes and draft.arch_problem(m) is None
        ]

    def _same_vocab(self, m: LocalModel, *, as_target: bool) -> list[LocalModel]:
        """The models whose vocabulary can stand in for ``m``'s (``as_target``) or for
        which ``m``'s can: llama.cpp's rules, decided once per pair of distinct
        tokenizers (200 models usually hold a handful)."""
        groups = self._groups
        if not groups:
            for x in self.models:
                groups.setdefault(x.header.tokenizer.digest, []).append(x)
        mine = m.header.tokenizer
        out: list[LocalModel] = []
        for digest, members in groups.items():
            other = members[0].header.tokenizer
            pair = (mine.digest, digest) if as_target else (digest, mine.digest)
            if pair not in self._compatible:
                t, d = (mine, other) if as_target else (other, mine)
                self._compatible[pair] = drafting_problem(t, d) is None
            if self._compatible[pair]:
                out.extend(members)
        return out

    def pairs(self) -> list[tuple[LocalModel, LocalModel]]:
        """Every (target, drafter) pair on this machine."""
        return [(t, d) for t in self.models for d in self.drafters_for(t)]


_MEMO: dict[tuple, Index] = {}


def forget() -> None:
    """Drop the index kept for this process (the next ``scan`` lists the stores again)."""
    _MEMO.clear()


def scan(*, refresh: bool = False) -> Index:
    """Every model in the stores (see ``stores``), read-only, headers from the cache."""
    memo_key = _memo_key()
    if not refresh and memo_key in _MEMO:
        return _MEMO[memo_key]
    found, skipped = stores.find_all(Path.home())
    cache = _Cache.load()
    models: list[LocalModel] = []
    for f in found:
        m = _model(f, cache, skipped)
        if m is not None:
            models.append(m)
    cache.prune()
    cache.save()
    index = Index(models, list(skipped))
    _MEMO[memo_key] = index
    return index


def _memo_key() -> tuple[str, str]:
    home = Path.home()
    return str(home), json.dumps({k: [str(p) for p in v] for k, v in stores.roots(home).items()})


def _model(f: Found, cache: "_Cache", skipped: list[Skipped]) -> LocalModel | None:
    headers = []
    size = 0
    names = (f.name, *f.aliases)
    for part in f.files:
        try:
            h, n = cache.header(part)
        except ModelFileError as exc:  # the skip line names the file already
            why = str(exc).replace(f" of {part}", "").replace(f": {part}", "").replace(str(part), "it")
            skipped.append(Skipped(str(part), f"{f.name}: {why}", names))
            return None
        headers.append(h)
        size += n
    first = headers[0]
    if first.kind != "model":
        what = {"mmproj": "a vision projector (mmproj)", "lora": "a LoRA adapter"}.get(
            first.kind, f"a {first.kind} file"
        )
        skipped.append(Skipped(str(f.files[0]), f"{f.name}: {what}, not a model", names))
        return None
    if first.tokenizer is None:
        skipped.append(Skipped(str(f.files[0]), f"{f.name}: no tokenizer in its header", names))
        return None
    if len(headers) > 1:
        from dataclasses import replace

        first = replace(first, params=sum(h.params for h in headers))
    return LocalModel(f.name, f.source, f.where, f.files, size, first, f.aliases, f.catalog)


class _Cache:
    """Headers by path, valid while the file's size and mtime are unchanged."""

    def __init__(self, path: Path, entries: dict) -> None:
        self.path, self.entries, self.dirty = path, entries, False

    @classmethod
    def load(cls) -> "_Cache":
        from .chunks import cache_dir

        path = cache_dir() / "local-index.json"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            entries = data["files"] if data.get("version") == CACHE_VERSION else {}
        except (OSError, ValueError, KeyError, TypeError):
            entries = {}
        return cls(path, entries)

    def header(self, path: Path) -> tuple[Header, int]:
        """The header of ``path`` and its size; ``ModelFileError`` if it cannot be read."""
        try:
            st = path.stat()
        except OSError as exc:
            raise ModelFileError(f"cannot read {path}: {exc.strerror or exc}") from None
        key = str(path)
        e = self.entries.get(key)
        if e and e.get("size") == st.st_size and e.get("mtime_ns") == st.st_mtime_ns:
            if "error" in e:
                raise ModelFileError(e["error"])
            try:
                return Header.from_dict(e["header"]), st.st_size
            except (KeyError, TypeError):
                pass
        entry: dict = {"size": st.st_size, "mtime_ns": st.st_mtime_ns}
        try:
            h = read_header(path)
            entry["header"] = h.to_dict()
        except ModelFileError as exc:
            entry["error"] = str(exc)
            self.entries[key], self.dirty = entry, True
            raise
        self.entries[key], self.dirty = entry, True
        return h, st.st_size

    def prune(self) -> None:
        """Forget the files that are gone (a deleted model, an Ollama blob pruned)."""
        gone = [p for p in self.entries if not os.path.lexists(p)]
        for p in gone:
            del self.entries[p]
        self.dirty = self.dirty or bool(gone)

    def save(self) -> None:
        if not self.dirty:
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps({"version": CACHE_VERSION, "files": self.entries}), encoding="utf-8")
            os.replace(tmp, self.path)
        except OSError:  # a read-only cache: the next run reads the headers again
            with contextlib.suppress(OSError):  # (a cache path through a file: ENOTDIR here too)
                tmp.unlink()


def _listed() -> list[Found]:
    """The stores' models without their headers: what is cheap to know (folder listings)."""
    memo = _MEMO.get(_memo_key())
    if memo is not None:
        return [Found(m.name, m.source, m.where, m.files, m.aliases, m.catalog) for m in memo.models]
    return stores.find_all(Path.home())[0]


def drafter_candidates(target: LocalModel) -> list[LocalModel]:
    """The models that can draft for ``target``, largest first, reading the headers of
    only the files small enough to draft for it (a first run on a machine with many large
    models reads a few headers, not all of them)."""
    memo = _MEMO.get(_memo_key())
    if memo is not None:
        return memo.drafters_for(target)
    cache = _Cache.load()
    out = []
    for f in _listed():
        try:
            size = sum(p.stat().st_size for p in f.files)
        except OSError:
            continue
        if size * DRAFT_SIZE_RATIO <= target.size_bytes:
            m = _model(f, cache, [])
            if m is not None and m.drafting_problem(target) is None:
                out.append(m)
    cache.save()
    return sorted(out, key=lambda m: -m.size_bytes)


def describe_file(path: str | os.PathLike) -> LocalModel:
    """A file anywhere as a ``LocalModel``: under its store's name when it is in one,
    else named by its path. Reads this file's header only."""
    p = Path(path).expanduser()
    for f in _listed():
        if p in f.files or (f.files[0].name == p.name and p.resolve() == f.files[0].resolve()):
            cache = _Cache.load()
            m = _model(f, cache, [])
            cache.save()
            if m is not None:
                return m
    files: tuple[Path, ...] = (p,)
    split = stores.SPLIT.match(p.name)
    if split:  # every part of a split model, when all are there
        parts = p.parent.glob(f"{glob.escape(split.group(1))}-*-of-{split.group(3)}.gguf")
        files = next((fs for _, fs in stores.group_files(parts, []) if p in fs), files)
    cache = _Cache.load()
    skipped: list[Skipped] = []
    m = _model(Found(str(p), "path", str(p.parent), files), cache, skipped)
    cache.save()
    if m is None:
        raise ModelFileError(skipped[-1].reason if skipped else f"cannot read {p}")
    return m


def lookup(name: str) -> LocalModel | None:
    """The local model ``name`` names, None if none; ``AmbiguousModelError`` when it
    names several different models."""
    memo = _MEMO.get(_memo_key())
    if memo is not None:
        matches = memo.find(name)
    else:  # read the headers of the models this name names, not of every model here
        key = name.strip().lower()
        listed = _listed()
        named = [f for f in listed if f.name.lower() == key] or [
            f for f in listed if key in (a.lower() for a in f.aliases)
        ]
        cache = _Cache.load()
        matches = [m for m in (_model(f, cache, []) for f in named) if m is not None]
        cache.save()
    if not matches:
        return None
    if len({m.key for m in matches}) > 1:
        listed = "; ".join(f"{m.name} ({m.source}: {m.path})" for m in matches)
        raise AmbiguousModelError(
            f"{name!r} matches {len(matches)} models on this machine: {listed}; use one of these names, or a path"
        )
    return matches[0]


def store_copy(model: Any) -> Path | None:
    """A catalog model's file in another tool's store, to use those bytes instead of
    assembling or downloading a second copy: the same file name (llama.cpp's cache
    prefixes it with ``org_repo_``) and the same size (exactly, when the catalog knows
    the file's hash; within 5% of the catalog's rounded size otherwise)."""
    want = model.filename.lower()
    for f in _listed():
        name = f.files[0].name.lower()
        # edgespec's own cache is fetch's to check (a damaged file there is assembled again)
        if f.source == "edgespec" or not (name == want or name.endswith("_" + want)):
            continue
        try:
            size = sum(p.stat().st_size for p in f.files)
        except OSError:
            continue
        near = model.sha256 is None and abs(size - model.size_bytes) <= 0.05 * model.size_bytes
        if size == model.size_bytes or near:
            return f.files[0]
    return None


def unusable(name: str) -> str | None:
    """Why the store entry ``name`` names is no usable model (a corrupt manifest, a
    missing blob, a file that is not a GGUF: what ``models list -v`` says), or None when
    no entry is named so. For the error of a name that ``lookup`` does not find."""
    key = name.strip().lower()
    memo = _MEMO.get(_memo_key())
    if memo is not None:
        skipped = memo.skipped
    else:  # list the stores (their own skips) and read the headers of this name's files
        found, skipped = stores.find_all(Path.home())
        cache = _Cache.load()
        for f in found:
            if key in (n.lower() for n in (f.name, *f.aliases)):
                _model(f, cache, skipped)
        cache.save()
    reasons = [s.reason for s in skipped if key in (n.lower() for n in s.names)]
    return "; ".join(dict.fromkeys(reasons)) or None


def known_names() -> list[str]:
    """Every name and alias of the models in the stores (no header is read)."""
    return [n for f in _listed() for n in (f.name, *f.aliases)]


def suggest(name: str, names: list[str], n: int = 3) -> list[str]:
    """The names closest to ``name`` (for an unknown name's error message), never
    ``name`` itself."""
    low = {k.lower(): k for k in names if k.strip().lower() != name.strip().lower()}
    close = difflib.get_close_matches(name.lower(), list(low), n=n, cutoff=0.5)
    contains = [k for k in low if name.lower() in k and k not in close][: max(0, n - len(close))]
    return [low[k] for k in close + contains]
