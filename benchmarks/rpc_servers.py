"""``edgespec rpc-server`` processes on free loopback ports, started and stopped by the
caller: the servers of ``benchmarks/rpc.py`` and of the RPC tests (tests/test_rpc.py),
which import them from here. It knows how to start, wait for and stop a server; what is
asked of it over the link is the caller's."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from benchmarks.common import free_port
from edgespec.llama import rpc

__all__ = ["RpcServer", "free_port"]


class RpcServer:
    """``edgespec rpc-server`` in a child process on 127.0.0.1 (one CPU thread by default)."""

    def __init__(self, threads: int = 1, port: int | None = None) -> None:
        self.port = port or free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "edgespec", "rpc-server", "--port", str(self.port), "--threads", str(threads), "-q"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        deadline = time.monotonic() + 60
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"rpc-server exited: {self.proc.stderr.read().decode(errors='replace')}")
            if rpc._hello(rpc.Endpoint("127.0.0.1", self.port), 1.0)[0] == "ok":
                return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("rpc-server did not start within 60 s")
            time.sleep(0.1)

    def kill(self) -> None:
        """SIGKILL: the server dies as a crashed one does, mid-whatever."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()

    def __enter__(self) -> "RpcServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
