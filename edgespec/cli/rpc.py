"""``edgespec rpc-server``: llama.cpp's RPC server from the installed build.

Another machine's ``edgespec generate --rpc HOST:PORT`` puts its target's layers here.
Thin: check the build has RPC and the port is free, warn loudly about a non-loopback
address (the server has no authentication and no encryption), then run the server in
a thread so Ctrl-C and SIGTERM still stop it. llama.cpp prints its own lines (devices,
connections) on stdout.
"""

from __future__ import annotations

import os
import signal
import socket
import sys
import threading
from typing import Annotated, Optional

import typer
from rich.text import Text

from edgespec.cli.common import EXIT_INTERRUPTED, cli_errors, err_console
from edgespec.cli.plan_options import ThreadsOpt
from edgespec.cli.serve import is_loopback
from edgespec.errors import InputError, RpcError

WARNING = (
    "WARNING: the RPC server on {host}:{port} is reachable from the network, with no authentication "
    "and no encryption: anyone who can reach that port can run computations on this machine and read "
    "what it holds for clients. Use it only on a network you trust (a home LAN, a private link), "
    "never on an open or public one."
)


def _check_port(host: str, port: int) -> None:
    """Fail with a clear message before llama.cpp does (it only prints and returns)."""
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as e:
        raise InputError(f"--host {host}: {e.strerror or e}") from None
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(infos[0][4])
        except OSError as e:
            raise InputError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None


def rpc_server(
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on (127.0.0.1 = this machine only).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=1, max=65535, help="TCP port.")] = 50052,
    threads: ThreadsOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No warning banner or device list.")] = False,
    mem: Annotated[
        Optional[float],
        typer.Option("--mem", min=0.1, hidden=True, help="Not supported by this llama.cpp's RPC server."),
    ] = None,
) -> None:
    """Run llama.cpp's RPC server, so another machine can put model layers here (--rpc)."""
    from edgespec.llama import default_threads, rpc

    err = err_console()
    with cli_errors():
        if mem is not None:
            raise InputError(
                "--mem: the RPC server of this llama.cpp (0.3.36) reports the device's real memory "
                "and cannot be limited; balance servers with --tensor-split on the client instead"
            )
        if ":" in host:
            raise InputError("--host: llama.cpp's RPC server takes an IPv4 address or a host name, not IPv6")
        rpc.require_rpc()
        devices = rpc.server_devices()
        _check_port(host, port)
    if not is_loopback(host):
        err.print(Text("!" * 78, style="bold red"))
        err.print(Text(WARNING.format(host=host, port=port), style="bold red"))
        err.print(Text("!" * 78, style="bold red"))
    n_threads = threads or default_threads()
    if not quiet:
        for dev in devices:
            err.print(Text(f"edgespec rpc-server: {rpc.describe_device(dev)}, {n_threads} threads", style="dim"))
        err.print(
            Text(
                f"edgespec rpc-server: listening on {host}:{port}; on the client: "
                f"edgespec generate --rpc {host}:{port} ...",
                style="dim",
            )
        )
    failure: list[BaseException] = []

    def run() -> None:
        try:
            rpc.serve(host, port, n_threads)
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            failure.append(e)

    # llama.cpp's server never returns while it serves; in a thread, the main thread
    # stays free to take Ctrl-C and SIGTERM
    thread = threading.Thread(target=run, name="rpc-server", daemon=True)
    signal.signal(signal.SIGTERM, lambda *_: _stop(0))
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.5)
    except KeyboardInterrupt:
        _stop(EXIT_INTERRUPTED)
    with cli_errors():
        raise failure[0] if failure else RpcError(f"the RPC server on {host}:{port} stopped")


def _stop(code: int) -> None:
    """Leave at once: the server thread sits inside llama.cpp and cannot be joined."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
