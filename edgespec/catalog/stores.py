"""Where other tools keep their GGUF models, and the names edgespec gives them.

Each store is read as it is, read-only; nothing is linked, copied or written there.

* **Ollama** (``$OLLAMA_MODELS``, else ``~/.ollama/models`` and the Linux service's
  ``/usr/share/ollama/.ollama/models``): ``manifests/<registry>/<namespace>/<model>/<tag>``
  are JSON files whose ``application/vnd.ollama.image.model`` layer names a blob,
  ``blobs/sha256-<hex>``, which is the GGUF file. Named ``ollama:<model>:<tag>``
  (``ollama:<namespace>/<model>:<tag>`` outside the library, with the registry in front
  outside registry.ollama.ai).
* **LM Studio** (``~/.lmstudio/models``, the older ``~/.cache/lm-studio/models``, and the
  folder ``~/.lmstudio-home-pointer`` names): ``<publisher>/<repo>/*.gguf``, named
  ``publisher/repo``, or ``publisher/repo/file.gguf`` when the repo holds several models.
* **The Hugging Face cache** (``HF_HUB_CACHE``, ``HF_HOME``): ``*.gguf`` under
  ``models--<org>--<repo>/snapshots/<revision>/``, named ``hf:org/repo`` (with the file
  when there are several; a catalog model's own file by its catalog name); the revision
  ``refs/main`` names wins over older ones.
* **llama.cpp's cache** (``LLAMA_CACHE``, else ``~/.cache/llama.cpp``): ``llama.cpp:<stem>``.
* **edgespec's own cache**: catalog files under their catalog name, others as
  ``edgespec:<stem>``; and **folders in ``EDGESPEC_MODEL_PATH``** (``:``-separated),
  searched four levels deep, named by the file's stem.

The parts of a split GGUF (``-00001-of-0000N``) are one model; a vision projector
(``mmproj`` in its name, or an Ollama projector layer) and a LoRA adapter layer are
skipped, as are corrupt manifests, blobs that are missing and folders that cannot be
read, each with a reason. What a file holds is for ``ident`` to say.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from .table import MODELS

OLLAMA_MODEL_LAYER = "application/vnd.ollama.image.model"
_OLLAMA_SKIPPED_LAYERS = {
    "application/vnd.ollama.image.projector": "a vision projector (mmproj) layer, not a model",
    "application/vnd.ollama.image.adapter": "a LoRA adapter layer, not a model",
}
OLLAMA_SYSTEM_ROOTS: tuple[Path, ...] = (Path("/usr/share/ollama/.ollama/models"),)
SPLIT = re.compile(r"^(.*)-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)


@dataclass(frozen=True)
class Found:
    """A model file (or the ordered parts of a split one) in a store, and its names.
    ``aliases`` also resolve to it (a name without its store's prefix, the file name)."""

    name: str
    source: str  # "ollama" | "lmstudio" | "huggingface" | "llama.cpp" | "edgespec" | "path"
    where: str  # the store's folder
    files: tuple[Path, ...]
    aliases: tuple[str, ...] = ()
    catalog: str | None = None  # the catalog name, for a catalog file in edgespec's cache


@dataclass(frozen=True)
class Skipped:
    """Something in a store that is not a usable model, and why. ``names``: the names it
    would have had (so that using one says why, not "unknown model")."""

    path: str
    reason: str
    names: tuple[str, ...] = ()


class _Walk:
    """Folder listing that records unreadable folders instead of raising."""

    def __init__(self) -> None:
        self.skipped: list[Skipped] = []

    def entries(self, folder: Path) -> list[os.DirEntry]:
        try:
            with os.scandir(folder) as it:
                return sorted(it, key=lambda e: e.name)
        except FileNotFoundError:
            return []
        except OSError as exc:
            self.skipped.append(Skipped(str(folder), f"cannot read the folder: {exc.strerror or exc}"))
            return []

    def folders(self, folder: Path) -> list[os.DirEntry]:
        """The sub-folders of ``folder`` (not hidden ones: .DS_Store and the like)."""
        return [e for e in self.entries(folder) if not e.name.startswith(".") and _is_dir(e)]

    def ggufs(self, folder: Path, depth: int) -> list[Path]:
        """``*.gguf`` files under ``folder``, at most ``depth`` levels down (folders that
        are links are not followed: no loops)."""
        out: list[Path] = []
        for e in self.entries(folder):
            if e.name.startswith("."):
                continue
            if e.name.lower().endswith(".gguf") and not _is_dir(e):
                out.append(Path(e.path))
            elif depth > 1 and _is_dir(e) and not e.is_symlink():
                out.extend(self.ggufs(Path(e.path), depth - 1))
        return out


def _is_dir(e: os.DirEntry) -> bool:
    try:
        return e.is_dir()
    except OSError:
        return False


def group_files(files: Iterable[Path], skipped: list[Skipped]) -> list[tuple[str, tuple[Path, ...]]]:
    """(stem, files) per model among ``files`` of one folder: split parts joined in order
    (all present, or skipped), vision projectors skipped."""
    singles: list[tuple[str, tuple[Path, ...]]] = []
    splits: dict[tuple[Path, str, int], dict[int, Path]] = {}
    for f in sorted(files):
        if "mmproj" in f.name.lower():
            skipped.append(Skipped(str(f), "a vision projector (mmproj), not a model"))
            continue
        m = SPLIT.match(f.name)
        if m:
            splits.setdefault((f.parent, m.group(1), int(m.group(3))), {})[int(m.group(2))] = f
        else:
            singles.append((f.name[: -len(".gguf")], (f,)))
    for (_parent, stem, n), parts in sorted(splits.items()):
        missing = [i for i in range(1, n + 1) if i not in parts]
        if missing:
            skipped.append(
                Skipped(
                    str(next(iter(parts.values()))),
                    f"split model {stem}: part(s) {', '.join(map(str, missing))} of {n} missing",
                )
            )
            continue
        singles.append((stem, tuple(parts[i] for i in range(1, n + 1))))
    return singles


def find_all(home: Path | None = None) -> tuple[list[Found], list[Skipped]]:
    """Every model in every store, in the stores' order, and what was skipped."""
    home = home or Path.home()
    walk = _Walk()
    found: list[Found] = []
    for store in (ollama, lmstudio, huggingface, llama_cpp, edgespec_cache, model_path):
        found.extend(store(home, walk))
    return found, walk.skipped


def roots(home: Path | None = None) -> dict[str, list[Path]]:
    """Each store's folders as the environment says now (for the cache key and -v)."""
    home = home or Path.home()
    return {
        "ollama": _ollama_roots(home),
        "lmstudio": _lmstudio_roots(home),
        "huggingface": [_hf_root()],
        "llama.cpp": [_llama_cache(home)],
        "edgespec": [_edgespec_cache()],
        "path": _model_path(),
    }


# --------------------------------------------------------------------------------------
# Ollama
# --------------------------------------------------------------------------------------


def _ollama_roots(home: Path) -> list[Path]:
    env = os.environ.get("OLLAMA_MODELS")
    if env:
        return [Path(env).expanduser()]
    return [home / ".ollama" / "models", *OLLAMA_SYSTEM_ROOTS]


def ollama_name(registry: str, namespace: str, model: str, tag: str) -> str:
    base = model if namespace == "library" else f"{namespace}/{model}"
    if registry != "registry.ollama.ai":
        base = f"{registry}/{base}"
    return f"ollama:{base}:{tag}"


def ollama(home: Path, walk: _Walk) -> list[Found]:
    out: list[Found] = []
    for root in _ollama_roots(home):
        manifests = root / "manifests"
        for reg in walk.folders(manifests):
            for ns in walk.folders(Path(reg.path)):
                for model in walk.folders(Path(ns.path)):
                    for tag in walk.entries(Path(model.path)):
                        if tag.name.startswith(".") or _is_dir(tag):
                            continue
                        parts = (reg.name, ns.name, model.name, tag.name)
                        f = _ollama_manifest(root, Path(tag.path), parts, walk.skipped)
                        if f is not None:
                            out.append(f)
    return out


def _ollama_aliases(name: str) -> tuple[str, ...]:
    """The other names of ``ollama:<model>:<tag>``: without the prefix, without ``:latest``."""
    short = name[len("ollama:") :]
    return (short,) + ((name[: -len(":latest")], short[: -len(":latest")]) if short.endswith(":latest") else ())


def _ollama_manifest(
    root: Path, manifest: Path, parts: tuple[str, str, str, str], skipped: list[Skipped]
) -> Found | None:
    name = ollama_name(*parts)
    aliases = _ollama_aliases(name)

    def skip(why: str, names: tuple[str, ...] = (name, *aliases)) -> None:
        skipped.append(Skipped(str(manifest), f"{name}: {why}", names))

    try:
        layers = json.loads(manifest.read_text(encoding="utf-8"))["layers"]
        kinds = [(str(layer["mediaType"]), str(layer["digest"])) for layer in layers]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else f"{type(exc).__name__}: {exc}"
        skip(f"corrupt manifest ({why})")
        return None
    for media, _digest in kinds:
        if media in _OLLAMA_SKIPPED_LAYERS:
            skip(_OLLAMA_SKIPPED_LAYERS[media], ())  # the model layer beside it is used
    digests = [d for m, d in kinds if m == OLLAMA_MODEL_LAYER]
    if not digests:
        skip("the manifest names no model layer")
        return None
    blob = root / "blobs" / digests[0].replace(":", "-")
    if not blob.is_file():
        skip(f"its model blob {blob.name} is missing (dangling)")
        return None
    return Found(name, "ollama", str(root), (blob,), aliases)


# --------------------------------------------------------------------------------------
# LM Studio, the Hugging Face cache, llama.cpp's cache, edgespec's cache, EDGESPEC_MODEL_PATH
# --------------------------------------------------------------------------------------


def _lmstudio_roots(home: Path) -> list[Path]:
    out = [home / ".lmstudio" / "models", home / ".cache" / "lm-studio" / "models"]
    try:
        pointed = Path((home / ".lmstudio-home-pointer").read_text(encoding="utf-8").strip()).expanduser()
        if pointed.is_absolute() and pointed / "models" not in out:
            out.insert(0, pointed / "models")
    except (OSError, ValueError):
        pass
    return out


def lmstudio(home: Path, walk: _Walk) -> list[Found]:
    out: list[Found] = []
    for root in _lmstudio_roots(home):
        for pub in walk.folders(root):
            for repo in walk.folders(Path(pub.path)):
                models = group_files(walk.ggufs(Path(repo.path), 2), walk.skipped)
                base = f"{pub.name}/{repo.name}"
                for _stem, files in models:
                    name = base if len(models) == 1 else f"{base}/{files[0].name}"
                    # the repo alone names each of several models: an ambiguity that lists them
                    aliases = (f"{base}/{files[0].name}",) if len(models) == 1 else (base,)
                    out.append(Found(name, "lmstudio", str(root), files, aliases + (files[0].name,)))
    return out


def _hf_root() -> Path:
    from .hub import hf_cache_dir

    return hf_cache_dir()


def huggingface(home: Path, walk: _Walk) -> list[Found]:
    out: list[Found] = []
    root = _hf_root()
    for repo_dir in walk.entries(root):
        if not repo_dir.name.startswith("models--"):
            continue
        repo = "/".join(repo_dir.name[len("models--") :].split("--"))
        snaps = Path(repo_dir.path) / "snapshots"
        try:
            main = (Path(repo_dir.path) / "refs" / "main").read_text(encoding="utf-8").strip()
        except OSError:
            main = ""
        by_file: dict[str, Path] = {}
        for rev in sorted(walk.folders(snaps), key=lambda e: e.name != main):
            for f in walk.ggufs(Path(rev.path), 3):
                rel = f.relative_to(rev.path).as_posix()
                if rel in by_file:
                    continue
                if not f.exists():  # a link into blobs/ whose blob is gone
                    names = (f"hf:{repo}/{rel}", f"{repo}/{rel}", f"hf:{repo}", repo, f.name)
                    walk.skipped.append(Skipped(str(f), f"hf:{repo}/{rel}: dangling link, its blob is missing", names))
                    continue
                by_file[rel] = f
        rel_of = {f: rel for rel, f in by_file.items()}
        models = group_files(by_file.values(), walk.skipped)
        for _stem, files in models:
            rel = rel_of[files[0]]
            name = f"hf:{repo}" if len(models) == 1 else f"hf:{repo}/{rel}"
            aliases = (name[3:], f"hf:{repo}/{rel}", f"{repo}/{rel}", files[0].name)
            cat = _HF_CATALOG.get((repo.lower(), rel.lower()))
            if cat is not None:  # a catalog model edgespec (or anyone) fetched: one row, its catalog name
                name, aliases = cat, (name,) + aliases
            aliases = tuple(dict.fromkeys(a for a in aliases if a != name))
            out.append(Found(name, "huggingface", str(root), files, aliases, cat))
    return out


_HF_CATALOG = {(m.hf.repo.lower(), m.hf.files[0].lower()): m.name for m in MODELS if m.hf is not None}


def _llama_cache(home: Path) -> Path:
    env = os.environ.get("LLAMA_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else home / ".cache") / "llama.cpp"


def _flat(source: str, prefix: str, depth: int) -> Callable[[Path, _Walk], list[Found]]:
    def store(home: Path, walk: _Walk) -> list[Found]:
        out = []
        for root in {"llama.cpp": lambda: [_llama_cache(home)], "path": _model_path}[source]():
            for stem, files in group_files(walk.ggufs(root, depth), walk.skipped):
                name = f"{prefix}{stem}"
                aliases = ((stem,) if prefix else ()) + (files[0].name,)
                out.append(Found(name, source, str(root), files, aliases))
        return out

    return store


llama_cpp = _flat("llama.cpp", "llama.cpp:", 3)
model_path = _flat("path", "", 4)


def _model_path() -> list[Path]:
    return [Path(p).expanduser() for p in os.environ.get("EDGESPEC_MODEL_PATH", "").split(os.pathsep) if p.strip()]


def _edgespec_cache() -> Path:
    from .chunks import cache_dir

    return cache_dir()


def edgespec_cache(home: Path, walk: _Walk) -> list[Found]:
    root = _edgespec_cache()
    by_file = {m.filename.lower(): m.name for m in MODELS}
    out = []
    for stem, files in group_files(walk.ggufs(root, 1), walk.skipped):
        cat = by_file.get(files[0].name.lower())
        name = cat or f"edgespec:{stem}"
        out.append(Found(name, "edgespec", str(root), files, (stem,) if not cat else (), cat))
    return out
