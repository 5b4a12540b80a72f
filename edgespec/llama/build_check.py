"""Whether this llama.cpp build can decode on this machine, found out in a child process.

llama-cpp-python compiles llama.cpp for the CPU it is built on (``-march=native``). A build
made on another CPU, or on a virtual machine that lists Intel AMX (``amx_tile`` in
/proc/cpuinfo) without enabling it, ends the process with SIGILL ("Illegal instruction")
at its first decode: no Python error, no message, exit status 132. The flags cannot tell
beforehand (such a VM even grants the AMX permission), only running the kernels can.

So before the first decode with a given build, ``check`` runs a child process
(``python -m edgespec.llama.build_check MODEL``) that loads the model and decodes a few
tokens on both kinds of kernels an engine uses (llama.cpp's own, weight repacking
included, and the batch-invariant ones). A child killed by SIGILL raises
``IllegalInstructionError``: what happened and the one command that rebuilds the library
without those instructions. A pass is kept per build (path, size and mtime of each shared
library of llama-cpp-python) in ``$XDG_CACHE_HOME/edgespec/build-checks.json``, so the
check runs once per build, not once per run. Any other failure of the child (a model that
does not load, a timeout) says nothing about the build: nothing is kept and the caller
goes on to meet the error itself.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import hashlib
import importlib.util
import json
import os
import platform
import shlex
import signal
import subprocess
import sys
from importlib import metadata as importlib_metadata
from pathlib import Path
from typing import Sequence

from ..errors import IllegalInstructionError

VERSION = 1
TIMEOUT_S = 300.0
CPUINFO = Path("/proc/cpuinfo")
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
# Windows reports a process ended by an illegal instruction by its NTSTATUS, not a signal
_STATUS_ILLEGAL_INSTRUCTION = 0xC000001D
PROMPT = "def reverse(text: str) -> str:\n    return text[::-1]\n\n\ndef main() -> None:\n"
PROMPT_TOKENS = 16  # a batch of 16 rows: the GEMM tiles of repacked kernels (4, 8, 16)
_SHARED = (".so", ".dylib", ".dll")


def library_dir() -> Path | None:
    """The folder llama-cpp-python loads its shared libraries from (``LLAMA_CPP_LIB_PATH``
    or the package's ``lib``), found without importing it."""
    env = os.environ.get("LLAMA_CPP_LIB_PATH")
    if env:
        return Path(env)
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent / "lib"


def build_identity(lib: Path | None = None) -> list[list] | None:
    """The build as the cache knows it: each shared library's resolved path, size and
    mtime (libllama and the ggml backends, the CPU kernels among them); None if none."""
    lib = library_dir() if lib is None else lib
    if lib is None:
        return None
    found = {}
    try:
        for p in lib.iterdir():
            if any(s in p.name for s in _SHARED) and p.is_file():
                real = p.resolve()  # libllama.so -> libllama.so.0 -> libllama.so.0.5.0: one file
                st = real.stat()
                found[str(real)] = [str(real), st.st_size, st.st_mtime_ns]
    except OSError:
        return None
    return [found[k] for k in sorted(found)] or None


def store_path() -> Path:
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "edgespec" / "build-checks.json"


def _key(identity: list[list]) -> str:
    return hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]


def _load() -> dict:
    try:
        data = json.loads(store_path().read_text(encoding="utf-8"))
        if data.get("version") == VERSION and isinstance(data.get("passed"), dict):
            return data
    except (OSError, ValueError, AttributeError):
        pass
    return {"version": VERSION, "passed": {}}


def passed(identity: list[list] | None = None) -> bool:
    """Whether this build (``build_identity()`` when None) decoded here before. A build
    that cannot be found passes: there is nothing to check (its import fails anyway)."""
    identity = build_identity() if identity is None else identity
    return identity is None or _key(identity) in _load()["passed"]


def _record_pass(identity: list[list], model: Path) -> None:
    """Keep the pass (a cache: one that cannot be written only means checking again)."""
    data = _load()
    data["passed"][_key(identity)] = {
        "libraries": identity,
        "model": str(model),
        "date": _dt.date.today().isoformat(),
    }
    out = store_path()
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, out)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass


def child_command(model: Path, *, n_gpu_layers: int = 0, n_threads: int | None = None) -> list[str]:
    """The child: this module run by this interpreter on ``model``."""
    cmd = [sys.executable, "-m", __name__, str(model), "--n-gpu-layers", str(n_gpu_layers)]
    return cmd + (["--threads", str(n_threads)] if n_threads else [])


def died_of_sigill(returncode: int) -> bool:
    return returncode == -signal.SIGILL or (returncode & 0xFFFFFFFF) == _STATUS_ILLEGAL_INSTRUCTION


def check(
    model: str | os.PathLike,
    *,
    n_gpu_layers: int = 0,
    n_threads: int | None = None,
    command: Sequence[str] | None = None,
    timeout: float = TIMEOUT_S,
) -> bool:
    """Decode a few tokens of ``model`` in a child process (``command``: another child,
    for the tests) unless this build passed before. True when it passed now or before;
    False when the child failed otherwise (nothing learnt). Raises
    ``IllegalInstructionError`` when the child died of SIGILL."""
    identity = build_identity()
    if passed(identity):
        return True
    model = Path(model)
    argv = (
        list(command) if command is not None else child_command(model, n_gpu_layers=n_gpu_layers, n_threads=n_threads)
    )
    env = dict(os.environ)
    # the child imports this edgespec, even where it runs from a checkout not on its path
    root = Path(__file__).resolve().parents[2]
    if root.name not in ("site-packages", "dist-packages"):
        env["PYTHONPATH"] = str(root) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    try:
        r = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, env=env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if died_of_sigill(r.returncode):
        raise IllegalInstructionError(sigill_message(model))
    if r.returncode != 0:
        return False
    assert identity is not None  # passed() is True for a build that cannot be found
    _record_pass(identity, model)
    return True


def lists_amx(cpuinfo: Path | None = None) -> bool:
    """Whether this is an x86-64 CPU whose /proc/cpuinfo lists Intel AMX (amx_tile)."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        text = (cpuinfo or CPUINFO).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return False
    return any(line.startswith("flags") and "amx_tile" in line.split() for line in text.splitlines())


def fix_command(*, amx: bool, lib: Path | None = None) -> str:
    """The one command that rebuilds llama-cpp-python for this machine, in this Python,
    keeping the backends the current build has (RPC, CUDA, ...) and, where the CPU lists
    AMX, leaving AMX out."""
    try:
        version = importlib_metadata.version("llama-cpp-python")
    except importlib_metadata.PackageNotFoundError:
        version = "0.3.36"
    env = [f'CFLAGS="{NO_AMX}"', f'CXXFLAGS="{NO_AMX}"'] if amx else []
    backends = _backends(library_dir() if lib is None else lib)
    if backends:
        env.append('CMAKE_ARGS="' + " ".join(f"-DGGML_{b.upper()}=on" for b in backends) + '"')
    pip = f"{shlex.quote(sys.executable)} -m pip install --force-reinstall --no-cache-dir --no-deps"
    return " ".join([*env, pip, f"llama-cpp-python=={version}"])


def _backends(lib: Path | None) -> list[str]:
    """The optional ggml backends a build has, by their libraries (libggml-rpc.so: rpc)."""
    names = set()
    try:
        for p in lib.iterdir() if lib is not None else ():
            stem = p.name.split(".")[0]
            if stem.startswith("libggml-") or stem.startswith("ggml-"):
                names.add(stem.split("ggml-", 1)[1])
    except OSError:
        return []
    return sorted(names - {"base", "cpu"})


def sigill_message(model: Path, *, amx: bool | None = None) -> str:
    amx = lists_amx() if amx is None else amx
    why = (
        "This CPU lists Intel AMX (amx_tile in /proc/cpuinfo) without enabling it, as some virtual "
        "machines do; rebuild it without AMX"
        if amx
        else "It was built for another CPU (llama-cpp-python compiles for the machine that builds it); rebuild it here"
    )
    return (
        f'llama.cpp died with "Illegal instruction" decoding a few tokens of {model.name} in a test '
        f"process: this llama-cpp-python build uses CPU instructions this machine does not run. {why}: "
        f"{fix_command(amx=amx)}"
    )


def _decode_a_few(path: str, *, exact: bool, n_gpu_layers: int, n_threads: int | None) -> None:
    """Load ``path`` on one kind of kernels and decode a prompt, then 3 tokens one by one."""
    import numpy as np

    from .context import Context
    from .model import Model

    model = Model(path, n_gpu_layers=n_gpu_layers, exact=exact)
    try:
        ctx = Context(model, n_ctx=256, n_batch=64, n_threads=n_threads)
        try:
            prompt = model.tokenize(PROMPT)[:PROMPT_TOKENS] or [model.bos]
            logits = ctx.decode(prompt, rows=(len(prompt) - 1,))
            for _ in range(3):
                logits = ctx.decode([int(np.argmax(logits[-1]))], rows=(0,))
        finally:
            ctx.close()
    finally:
        model.close()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edgespec.llama.build_check", description=__doc__)
    parser.add_argument("model")
    parser.add_argument("--n-gpu-layers", type=int, default=0)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    # llama.cpp's own kernels first (weight repacking: AMX where the build has it), then
    # the batch-invariant ones speculation runs on
    for exact in (False, True):
        _decode_a_few(args.model, exact=exact, n_gpu_layers=args.n_gpu_layers, n_threads=args.threads)
    print("decoded")
    return 0


if __name__ == "__main__":  # pragma: no cover - run as the child
    sys.exit(main())
