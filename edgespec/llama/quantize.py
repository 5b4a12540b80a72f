"""Rewriting a GGUF file in another weight type with llama.cpp's own quantize API
(``llama_model_quantize`` with ``llama_model_quantize_default_params``, the library call
behind the ``llama-quantize`` tool).

``quantize_model(src, dst, type)`` runs it in this process; ``run_quantize`` runs it in a child
Python process (``_main`` here) so that the caller can stop it at
once (Ctrl-C kills the child; llama.cpp does not return to Python until the whole file is
written) and so that a llama.cpp abort cannot take the caller down with a half-written
file. Both write ``dst`` directly: making that a temporary name and renaming it is the
caller's business, as is choosing the type and the place.

Requantizing an already quantized file (a Q4_K_M into Q4_0) needs ``allow_requantize``:
llama.cpp then dequantizes each tensor and quantizes it again. Tensors whose rows do not
split into the type's blocks get llama.cpp's fallback type (its log says how many).
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

from ..errors import ModelFileError, OutputError
from .backend import _ensure_backend, _last_llama_errors, _llama, _log_mark

# The weight types a copy can be written in: llama.cpp's file types (``LLAMA_FTYPE_MOSTLY_*``)
# and their bits per weight, for estimating the copy's size before writing it.
BITS_PER_WEIGHT = {
    "Q4_0": 4.5,
    "Q4_1": 5.0,
    "Q5_0": 5.5,
    "Q5_1": 6.0,
    "Q8_0": 8.5,
    "IQ4_NL": 4.5,
    "IQ4_XS": 4.25,
    "Q4_K_M": 4.9,
    "Q4_K_S": 4.6,
    "Q5_K_M": 5.7,
    "Q6_K": 6.6,
    "F16": 16.0,
    "BF16": 16.0,
}
UNQUANTIZED = ("F32", "F16", "BF16")
_DISK_WORDS = ("no space", "disk full", "enospc", "quota")
_CHILD = "import sys; from edgespec.llama.quantize import _main; sys.exit(_main(sys.argv[1:]))"


def ftype_of(name: str) -> int:
    """llama.cpp's file type for a weight type name ("Q4_0" -> 2); ``ValueError`` if unknown."""
    key = name.strip().upper()
    if key not in BITS_PER_WEIGHT:
        raise ValueError(f"unknown weight type {name!r}; one of {', '.join(BITS_PER_WEIGHT)}")
    return int(getattr(_llama, f"LLAMA_FTYPE_MOSTLY_{key}"))


def quantized_size(params: int, type_name: str) -> int:
    """About how large a copy of ``params`` weights in ``type_name`` is (llama.cpp keeps some
    tensors in wider types: the margin covers them)."""
    return int(params * BITS_PER_WEIGHT[type_name.strip().upper()] / 8 * 1.15) + (16 << 20)


def quantize_model(
    src: str | os.PathLike, dst: str | os.PathLike, type_name: str, *, threads: int = 0, allow_requantize: bool = True
) -> None:
    """Write ``src`` as ``dst`` in ``type_name`` here, in this process (blocks until done).
    ``ModelFileError`` with llama.cpp's reason when it fails (``OutputError`` when the
    reason is a full disk)."""
    reason = _quantize(src, dst, type_name, threads, allow_requantize)
    if reason is not None:
        raise failure(Path(src), type_name, reason)


def _quantize(
    src: str | os.PathLike, dst: str | os.PathLike, type_name: str, threads: int, allow_requantize: bool
) -> str | None:
    """llama_model_quantize; None on success, else llama.cpp's reason."""
    _ensure_backend()
    params = _llama.llama_model_quantize_default_params()
    params.ftype = ftype_of(type_name)
    params.nthread = int(threads)
    params.allow_requantize = bool(allow_requantize)
    mark = _log_mark()
    rc = _llama.llama_model_quantize(os.fsencode(src), os.fsencode(dst), ctypes.byref(params))
    return None if rc == 0 else (_last_llama_errors(mark) or "llama.cpp gave no reason")


def failure(src: Path, type_name: str, reason: str) -> ModelFileError | OutputError:
    """The error for a quantize that failed with llama.cpp's ``reason``."""
    if any(w in reason.lower() for w in _DISK_WORDS):
        return OutputError(
            f"the disk filled up while writing the {type_name} copy of {src.name} ({reason}); "
            "free some space and run it again"
        )
    return ModelFileError(
        f"llama.cpp could not write {src.name} as {type_name}: {reason}. The file may be "
        "truncated or corrupt, or hold tensors this llama.cpp cannot requantize"
    )


def run_quantize(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    type_name: str,
    *,
    threads: int = 0,
    allow_requantize: bool = True,
    poll: Callable[[], None] | None = None,
) -> None:
    """``quantize_model`` in a child process; waits for it. Ctrl-C (or any exception, including one
    ``poll`` raises while waiting) kills the child before it propagates; ``dst`` may then be
    half-written: the caller removes it."""
    ftype_of(type_name)  # an unknown type fails here, not in the child
    argv = [
        sys.executable,
        "-c",
        _CHILD,
        os.fspath(src),
        os.fspath(dst),
        type_name,
        str(int(threads)),
        "1" if allow_requantize else "0",
    ]
    child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, errors="replace")
    try:
        while True:
            try:
                _, err = child.communicate(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if poll is not None:
                    poll()
    except BaseException:
        child.kill()
        child.wait()
        raise
    if child.returncode == 0:
        return
    lines = [line for line in (err or "").splitlines() if line.strip()]
    reason = next((line[len("error: ") :] for line in reversed(lines) if line.startswith("error: ")), None)
    if reason is not None:
        raise failure(Path(src), type_name, reason)
    if child.returncode < 0:
        raise failure(
            Path(src),
            type_name,
            f"llama.cpp stopped with signal {-child.returncode}" + (f" ({lines[-1][-200:]})" if lines else ""),
        )
    raise failure(Path(src), type_name, (lines[-1][-300:] if lines else f"exit status {child.returncode}"))


def _main(argv: list[str]) -> int:
    """The child of ``run_quantize``: ``SRC DST TYPE THREADS ALLOW_REQUANTIZE``; a failure is
    one ``error: ...`` line on stderr and exit status 1."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # Ctrl-C ends it even inside llama.cpp
    src, dst, type_name, threads, allow = argv
    reason = _quantize(src, dst, type_name, int(threads), allow == "1")
    if reason is not None:
        print(f"error: {reason}", file=sys.stderr)
        return 1
    return 0
