"""The raw binding and the process-wide state of llama.cpp: the ``llama_cpp`` import,
its log (kept so errors can quote it, echoed only when verbose), backend start-up, and
what the build and the machine offer (GPU offload, system info, threads).

Every other module of ``edgespec.llama`` reaches llama.cpp through ``_llama`` from here
(and ``_llama_ext``, the binding of llama.cpp's staging API ``llama-ext.h``: the nextn
hidden rows an MTP head drafts from, ``nextn.py`` and ``mtp.py``).
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections import deque

try:  # pragma: no cover - exercised only when the package is broken
    import llama_cpp as _llama
    import llama_cpp._ggml as _ggml_binding
    from llama_cpp import llama_cpp_ext as _llama_ext  # noqa: F401 - the staging API: an MTP head's rows (mtp.py)
except Exception as exc:  # noqa: BLE001 - a missing shared library raises OSError etc.
    raise ImportError(
        "edgespec needs llama-cpp-python==0.3.36 with its compiled library; "
        f"importing it failed: {exc}. Reinstall with "
        "`pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36`."
    ) from exc

LLAMA_CPP_PYTHON_VERSION = getattr(_llama, "__version__", "unknown")


def _ggml_library() -> ctypes.CDLL:
    """libggml (the backend registry; libggml-base's symbols resolve through it), for the
    device and RPC calls the Python binding does not declare (see ``rpc.py``)."""
    return _ggml_binding.libggml


# --------------------------------------------------------------------------------------
# Logging: llama.cpp talks a lot on stderr. Keep its recent lines so an error message can
# quote the reason it gave, and print them only when asked to be verbose.
# --------------------------------------------------------------------------------------

_log_lines: deque[tuple[int, str]] = deque(maxlen=64)
_log_lock = threading.Lock()
_verbose = bool(os.environ.get("EDGESPEC_LLAMA_VERBOSE"))
_GGML_LOG_ERROR = 3
_GGML_LOG_WARN = 2


@_llama.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    try:
        line = text.decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - never raise into C
        return
    with _log_lock:
        _log_lines.append((level, line))
    if _verbose:
        os.write(2, text)


_backend_ready = False


def _ensure_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        _llama.llama_log_set(_log_callback, ctypes.c_void_p(0))
        _llama.llama_backend_init()
        _backend_ready = True


def set_verbose(verbose: bool) -> None:
    """Echo llama.cpp's own log to stderr (off by default)."""
    global _verbose
    _verbose = verbose


def _last_llama_errors(since: int = 0) -> str:
    """The error/warning lines llama.cpp logged, most recent last, as one string."""
    with _log_lock:
        lines = [t.strip() for lvl, t in list(_log_lines)[since:] if lvl in (_GGML_LOG_ERROR, _GGML_LOG_WARN)]
    return "; ".join(line for line in lines if line)[-400:]


def _log_mark() -> int:
    with _log_lock:
        return len(_log_lines)


def supports_gpu_offload() -> bool:
    """Whether this llama.cpp build can put layers on a GPU (Metal, CUDA, Vulkan...)."""
    _ensure_backend()
    return bool(_llama.llama_supports_gpu_offload())


LLAMA_MAX_SEQ = 256
"""llama.cpp's compile-time limit on sequences per context (``LLAMA_MAX_SEQ`` in its
``llama-cparams.h``), when the build does not say (``max_parallel_sequences``)."""


def max_parallel_sequences() -> int:
    """The most sequences one llama.cpp context can hold (``llama_max_parallel_sequences``;
    a context asked for more fails without a reason in the log)."""
    fn = getattr(_llama, "llama_max_parallel_sequences", None)
    try:
        return int(fn()) if fn is not None else LLAMA_MAX_SEQ
    except Exception:  # noqa: BLE001 - a build without the symbol
        return LLAMA_MAX_SEQ


def system_info() -> str:
    _ensure_backend()
    return _llama.llama_print_system_info().decode("utf-8", errors="replace").strip()


def default_threads() -> int:
    """Physical cores (llama.cpp gains nothing from hyper-threads on matmuls)."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001
        n = None
    return max(1, n or os.cpu_count() or 1)
