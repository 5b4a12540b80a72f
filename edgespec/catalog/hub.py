"""Hugging Face: the hub cache as the environment says now, whether the endpoint answers,
and downloading a file (or every part of a split GGUF) through ``huggingface_hub``."""

from __future__ import annotations

import os
import socket
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

from .table import HFSource


def hf_cache_dir() -> Path:
    """The Hugging Face hub cache as the environment says *now* (huggingface_hub reads
    these variables once at import; reading them per call keeps tests and long-lived
    processes honest)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HUGGINGFACE_HUB_CACHE"):
        return Path(os.environ["HUGGINGFACE_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "huggingface" / "hub"


def hf_endpoint() -> str:
    return (os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")


def endpoint_reachable(endpoint: str | None = None, *, timeout: float = 3.0) -> bool:
    """Whether a TCP connection to the Hub endpoint opens within ``timeout`` seconds.

    huggingface_hub retries a failed request five times with backoff (~25 s, with a
    warning per try) before it gives up; asking first lets an offline machine fall back
    to the cache at once."""
    url = urlsplit(endpoint or hf_endpoint())
    host = url.hostname
    if not host:
        return False
    if urllib.request.getproxies() and not urllib.request.proxy_bypass(host):
        return True  # behind a proxy a direct connection proves nothing: let the client try
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


class _HFUnavailable(Exception):
    """Internal: the Hub source failed; the message says how, for the final error."""


def _hf_cached(src: HFSource, filename: str) -> Path | None:
    if not (hf_cache_dir() / ("models--" + src.repo.replace("/", "--"))).is_dir():
        return None  # not cached: no need to import huggingface_hub (~0.3 s) to say so
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(src.repo, filename, cache_dir=str(hf_cache_dir()), revision=src.revision)
    return Path(found) if isinstance(found, str) else None


def _hf_fetch(src: HFSource, *, offline: bool) -> Path:
    """Download (or find in the HF cache) every file of ``src``; the first file's path.

    A split GGUF is returned as its first part: llama.cpp loads the others from the
    same directory, and the HF cache puts all files of one revision in one snapshot
    directory.
    """
    where = f"Hugging Face {src.repo}"
    try:
        from huggingface_hub import constants as hf_constants
    except ImportError:
        raise _HFUnavailable(f"{where} (huggingface_hub is not installed)") from None

    # huggingface_hub reads HF_HUB_OFFLINE once, at import; edgespec decides per call
    # (``offline=`` or the environment now), so tell it for the duration of the call.
    saved_offline = hf_constants.HF_HUB_OFFLINE
    hf_constants.HF_HUB_OFFLINE = offline
    try:
        return _hf_download_all(src, offline=offline, where=where)
    finally:
        hf_constants.HF_HUB_OFFLINE = saved_offline


def _hf_download_all(src: HFSource, *, offline: bool, where: str) -> Path:
    from huggingface_hub import hf_hub_download

    try:
        from huggingface_hub.errors import (
            EntryNotFoundError,
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )
    except ImportError:  # pragma: no cover - very old huggingface_hub
        from huggingface_hub.utils import (  # type: ignore[no-redef]
            EntryNotFoundError,
            GatedRepoError,
            LocalEntryNotFoundError,
            RepositoryNotFoundError,
        )

    cache = hf_cache_dir()
    paths = []
    unreachable = not offline and not endpoint_reachable()
    for filename in src.files:
        try:
            paths.append(
                hf_hub_download(
                    repo_id=src.repo,
                    filename=filename,
                    revision=src.revision,
                    cache_dir=str(cache),
                    endpoint=hf_endpoint(),
                    local_files_only=offline or unreachable,
                )
            )
        except GatedRepoError:
            raise _HFUnavailable(
                f"{where} (gated: accept its license on the Hub and log in with `huggingface-cli login`)"
            ) from None
        except RepositoryNotFoundError:
            raise _HFUnavailable(f"{where} at {hf_endpoint()} (repository not found)") from None
        except LocalEntryNotFoundError:
            # Raised both offline and when the Hub cannot be reached with nothing cached.
            reason = "offline" if offline else f"{hf_endpoint()} unreachable"
            if unreachable:
                reason += "; without a network, HF_HUB_OFFLINE=1 skips the connection check"
            raise _HFUnavailable(f"{where} ({filename} not in the cache at {cache}; {reason})") from None
        except EntryNotFoundError:
            raise _HFUnavailable(f"{where} ({filename} not found in the repository)") from None
        except OSError as exc:  # disk full, permissions, connection errors
            raise _HFUnavailable(f"{where} ({type(exc).__name__}: {exc})") from None
        except Exception as exc:  # noqa: BLE001 - HTTP errors of the Hub client
            first_line = str(exc).splitlines()[0] if str(exc) else ""
            raise _HFUnavailable(f"{where} ({type(exc).__name__}: {first_line})") from None
    return Path(paths[0])
