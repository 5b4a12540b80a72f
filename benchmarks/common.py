"""What the benchmarks share: the geometric mean they report, the commit and the machine
a run measured on, and starting a server process on a free loopback port and waiting
until it answers.

It knows nothing of models or of edgespec's engines (the scripts hold those), and nothing
of llama.cpp's own tools (``benchmarks.peers`` starts those, through ``start_server``).
The scripts run from the repository root as ``python -m benchmarks.NAME``.
"""

from __future__ import annotations

import math
import os
import platform
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"


def geomean(xs: Iterable[float | None], digits: int | None = None) -> float | None:
    """The geometric mean of the positive values of ``xs`` (a missing or zero ratio is
    left out, not counted as a loss); None when there are none. ``digits`` rounds it."""
    vals = [x for x in xs if x is not None and x > 0]
    if not vals:
        return None
    g = math.exp(math.fsum(math.log(x) for x in vals) / len(vals))
    return round(g, digits) if digits is not None else g


def git(*args: str) -> str:
    """``git ARGS`` in the checkout, its output stripped ("" where git is missing or fails)."""
    try:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True, check=False)
    except OSError:
        return ""
    return out.stdout.strip()


def commit() -> str:
    """The short hash of the commit the benchmark runs on ("" outside a git checkout)."""
    return git("rev-parse", "--short", "HEAD")


def git_info() -> dict:
    """The commit, the branch and whether tracked files differ from the commit."""
    return {
        "commit": commit(),
        "branch": git("rev-parse", "--abbrev-ref", "HEAD"),
        "dirty": bool(git("status", "--porcelain", "--untracked-files=no")),
    }


def machine_info() -> dict:
    """The CPU count, platform, Python and load average of the machine the run is on."""
    return {
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "python": platform.python_version(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http_ok(url: str) -> bool:
    """Whether ``url`` answers 200 now (a server's ``/health``)."""
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_server(
    cmd: list[str],
    ready: Callable[[], bool],
    *,
    timeout: float = 300.0,
    log=None,
    env: dict[str, str] | None = None,
    name: str = "the server",
) -> subprocess.Popen:
    """Start ``cmd`` and poll ``ready()`` until it holds. A process that exits first, or is
    not ready in ``timeout`` seconds, raises RuntimeError (the process stopped) naming
    ``name``; ``log`` (an open file) takes its output, which is otherwise discarded."""
    out = log if log is not None else subprocess.DEVNULL
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{name} exited with {proc.returncode} before it was ready: {' '.join(cmd)}")
        if ready():
            return proc
        time.sleep(0.5)
    stop(proc)
    raise RuntimeError(f"{name} was not ready in {timeout:.0f} s: {' '.join(cmd)}")


def stop(proc: subprocess.Popen, timeout: float = 30.0) -> None:
    """Terminate ``proc`` and wait for it; kill it if it does not end in ``timeout`` s."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
