"""The copies of a model that ``edgespec models optimize`` writes in a weight type whose
verify is cheaper here, and finding them again (``optimized_copy_for``, for the planner).

A copy is named ``<stem>.edgespec-<TYPE>.gguf`` (``qwen2.5-coder-1.5b-instruct-q4_k_m.
edgespec-Q4_0.gguf``), so that a store and ``models list`` show it beside the original:

* next to the original, when the original's folder is one whose store lists every GGUF
  file in it (LM Studio, llama.cpp's cache, ``EDGESPEC_MODEL_PATH``, edgespec's own
  folder, a file given by path) and it can be written;
* else in edgespec's own model folder (``catalog.cache_dir()``), listed as
  ``edgespec:<stem>``: Ollama lists blobs through its manifests and the Hugging Face
  cache through its snapshots, so a file added there would be seen by no one. An Ollama
  blob's stem (``sha256-...``) says nothing: its copy is named after the store's name.

What each copy was made from is kept in ``$XDG_CONFIG_HOME/edgespec/optimized.json``
(else ``~/.config/edgespec``): the source's resolved path, size and modification time,
the store name, the type, and what ``optimize`` measured. A copy is the target's only
while both files are as recorded (a source replaced in place has no copy until it is
optimized again). A file named like a copy but not recorded counts when it sits next to
its original and is newer than it. Nothing here writes a model file.
"""

from __future__ import annotations

import datetime as _dt
import glob
import json
import os
import re
from pathlib import Path
from typing import Any, Mapping

from .chunks import cache_dir
from .verify_cache import file_identity, write_json

COPY_NAME = re.compile(r"^(?P<stem>.+)\.edgespec-(?P<type>[A-Za-z0-9_]+)\.gguf$", re.IGNORECASE)
UNLISTED_STORES = ("ollama", "huggingface")  # stores that do not list a file added to their folders


def copy_name(stem: str, type_name: str) -> str:
    return f"{stem}.edgespec-{type_name.upper()}.gguf"


def parse_copy_name(name: str) -> tuple[str, str] | None:
    """(stem, type) of a copy's file name, None for any other name."""
    m = COPY_NAME.match(name)
    return (m.group("stem"), m.group("type").upper()) if m else None


def stem_for(source: Path, store: str, name: str) -> str:
    """The stem of a copy's name: the original's file stem, or for an Ollama blob the
    store's name made a file name (``ollama:qwen2.5-coder:1.5b`` -> ``qwen2.5-coder-1.5b``)."""
    stem = source.name[: -len(".gguf")] if source.name.lower().endswith(".gguf") else source.name
    if store == "ollama" or stem.startswith("sha256-"):
        readable = re.sub(r"[^A-Za-z0-9._-]+", "-", name.split(":", 1)[-1] if name.startswith("ollama:") else name)
        return readable.strip("-.") or stem
    return stem


def folders(source: Path, store: str) -> list[Path]:
    """Where a copy of ``source`` may go, in order of preference."""
    own = cache_dir()
    if store in UNLISTED_STORES or source.parent == own:
        return [own]
    return [source.parent, own]


def registry_path() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "edgespec" / "optimized.json"


def _load() -> dict[str, Any]:
    try:
        data = json.loads(registry_path().read_text(encoding="utf-8"))
        if isinstance(data.get("copies"), dict):
            return data
    except (OSError, ValueError, AttributeError):
        pass
    return {"copies": {}}


def record(
    copy: Path,
    source: Path,
    *,
    source_name: str,
    type_name: str,
    figures: Mapping[str, Any],
    when: _dt.date | None = None,
) -> Path | None:
    """Remember that ``copy`` was made from ``source`` (both as they are now); the
    registry's path, or None if it cannot be written (the copy is then found by name)."""
    src, dst = file_identity(source), file_identity(copy)
    if src is None or dst is None:
        return None
    data = _load()
    copies = {k: v for k, v in data["copies"].items() if isinstance(v, dict) and file_identity(k) is not None}
    copies[dst["file"]] = {
        "size": dst["size"],
        "mtime_ns": dst["mtime_ns"],
        "type": type_name.upper(),
        "source": {**src, "name": source_name},
        "figures": dict(figures),
        "date": (when or _dt.date.today()).isoformat(),
    }
    data["copies"] = copies
    return write_json(registry_path(), data)


def entry(copy: str | os.PathLike) -> dict[str, Any] | None:
    """The registry's record of ``copy`` (its source, type, figures), None when there is
    none or the copy changed since."""
    ident = file_identity(copy)
    rec = _load()["copies"].get(ident["file"]) if ident else None
    if not isinstance(rec, dict) or rec.get("size") != ident["size"]:
        return None
    return rec


def _same(ident: Mapping[str, Any], rec: Mapping[str, Any]) -> bool:
    return all(rec.get(k) == ident[k] for k in ("file", "size", "mtime_ns"))


def optimized_copy_for(target: str | os.PathLike, type_name: str | None = None) -> Path | None:
    """The optimized copy of the model file ``target``, or None (see the module docstring).
    The newest when there are several (``type_name``: of that type only). Reads one small
    JSON file and lists two folders; no header is read."""
    ident = file_identity(target)
    if ident is None or parse_copy_name(Path(ident["file"]).name):
        return None
    want = type_name.upper() if type_name else None
    found: list[tuple[str, Path]] = []
    recorded = _load()["copies"]
    for path, rec in recorded.items():
        if (
            isinstance(rec, dict)
            and isinstance(rec.get("source"), dict)
            and _same(ident, rec["source"])
            and (want is None or rec.get("type") == want)
        ):
            now = file_identity(path)
            if now is not None and now["size"] == rec.get("size"):
                found.append((rec.get("date", ""), Path(path)))
    if found:
        return max(found, key=lambda f: f[0])[1]
    # unrecorded copies: named like one, next to the original, written after it
    src = Path(ident["file"])
    stem = src.name[: -len(".gguf")] if src.name.lower().endswith(".gguf") else src.name
    for p in sorted(src.parent.glob(f"{glob.escape(stem)}.edgespec-*.gguf")):
        parsed = parse_copy_name(p.name)
        now = file_identity(p)
        if (
            parsed
            and now
            and now["file"] not in recorded
            and (want is None or parsed[1] == want)
            and (now["mtime_ns"] >= ident["mtime_ns"])
        ):
            return p
    return None
