"""A latency-injecting TCP proxy on loopback: a stand-in for a LAN or Wi-Fi link.

``LatencyProxy(("127.0.0.1", 50052), delay_ms=3)`` listens on a free port of 127.0.0.1
and relays each connection to the target, holding every chunk of bytes ``delay_ms``
before passing it on, in each direction, without limiting throughput: a message sent
at t arrives at t + delay, so a request/response round trip costs 2 × delay on top of
the loopback's own. ``delay_ms`` can be changed while it runs (it applies to the bytes
read from then on), so one process can measure several links over one connection.
``sever()`` drops every relayed connection, as a link that fails does.

It listens on loopback only and knows nothing of what it relays (llama.cpp's RPC in
the tests and ``benchmarks/rpc.py``).
"""

from __future__ import annotations

import queue
import socket
import threading
import time

_CHUNK = 1 << 16


class LatencyProxy:
    """Relay 127.0.0.1:``port`` -> ``target``, ``delay_ms`` each way per chunk."""

    def __init__(self, target: tuple[str, int], delay_ms: float = 0.0, port: int = 0) -> None:
        self.target = target
        self.delay_ms = float(delay_ms)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(16)
        self.port: int = self._listener.getsockname()[1]
        self._conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = False
        threading.Thread(target=self._accept_loop, name="proxy-accept", daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> "LatencyProxy":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop listening and drop every relayed connection."""
        self._closed = True
        try:
            self._listener.close()
        except OSError:
            pass
        self.sever()

    def sever(self) -> None:
        """Drop every relayed connection (both ends see it closed)."""
        with self._lock:
            conns, self._conns = self._conns, []
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
                upstream.settimeout(None)
            except OSError:
                client.close()  # the target is gone: hang up, as the link would
                continue
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._conns += [client, upstream]
            self._relay(client, upstream)
            self._relay(upstream, client)

    def _relay(self, src: socket.socket, dst: socket.socket) -> None:
        """Two threads per direction: one reads and stamps, one waits out the delay and
        writes, so a slow link delays bytes without slowing the reading."""
        pending: queue.Queue = queue.Queue()

        def read() -> None:
            while True:
                try:
                    data = src.recv(_CHUNK)
                except OSError:
                    data = b""
                pending.put((time.monotonic() + self.delay_ms / 1000.0, data))
                if not data:
                    return

        def write() -> None:
            while True:
                due, data = pending.get()
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                try:
                    if not data:
                        dst.shutdown(socket.SHUT_WR)
                        return
                    dst.sendall(data)
                except OSError:
                    try:
                        src.shutdown(socket.SHUT_RDWR)  # the other side is gone: stop reading too
                    except OSError:
                        pass
                    return

        threading.Thread(target=read, name="proxy-read", daemon=True).start()
        threading.Thread(target=write, name="proxy-write", daemon=True).start()
