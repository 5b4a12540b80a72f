"""Helpers for the server tests: a real uvicorn on a loopback port, SSE parsing, engine
wrappers that hold or slow a generation, and the loopback load test.

``LiveServer(app)`` runs uvicorn in a thread on a free 127.0.0.1 port (a real TCP
server: clients can really hang up); ``serve_process(args)`` runs ``edgespec serve`` as a
user would, in a subprocess, until its ``/health`` answers. ``sse_events(lines)`` turns the lines of a
``text/event-stream`` body into the JSON objects of its ``data:`` fields, with the
string ``"[DONE]"`` for the end marker. ``GatedEngine`` / ``SlowEngine`` wrap a real
``Engine``: the first waits on a gate before its first event (to fill the queue), the
second sleeps between events (so a hang-up lands mid-generation); both record whether
their generator was closed. ``run_load`` is the concurrent load test (also runnable by
hand: ``python tests/serve_support.py URL``). The fixture ``engine`` is the tiny target
with its always-agreeing drafter.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

import pytest


@pytest.fixture(scope="module")
def engine(tiny_target, tiny_same, engines):
    """The tiny target with a drafter that always agrees (k=4): what the server tests serve.
    A test module takes it as ``engine = serve_support.engine``."""
    return engines(tiny_target, tiny_same, k=4)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """uvicorn serving ``app`` on 127.0.0.1 in a background thread (a context manager).
    ``hosts``: listen on these addresses instead, one socket each on one free port (as
    ``serve --host A,B`` does, through ``edgespec.server.listen``); ``url`` is the first's."""

    def __init__(self, app: Any, hosts: list[str] | None = None) -> None:
        import uvicorn

        from edgespec.server.listen import bind, url_host
        from edgespec.server.stopping import Server

        self.sockets = bind(hosts, 0) if hosts else None
        self.port = self.sockets[0].getsockname()[1] if self.sockets else free_port()
        self.url = f"http://{url_host(hosts[0]) if hosts else '127.0.0.1'}:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", timeout_graceful_shutdown=2)
        self.server = Server(config)  # as serve's: open requests end with an error at shutdown
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": self.sockets}, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(15)
        for sock in self.sockets or ():
            sock.close()


@contextlib.contextmanager
def serve_process(args: list[str], *, start_timeout: float = 180) -> Iterator[str]:
    """``edgespec serve ARGS --port P`` in a subprocess; yields its URL once ``/health``
    answers 200, and checks on the way out that SIGTERM stops it cleanly."""
    import httpx

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "serve", *args, "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "EDGESPEC_LOG_LEVEL": "warning"},
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + start_timeout
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError("edgespec serve did not come up:\n" + proc.communicate()[1])
        time.sleep(0.2)
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            _, err = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
    assert proc.returncode == 0, err


def sse_events(lines: Iterable[str]) -> Iterator[Any]:
    """The ``data:`` payloads of an event stream: dicts, and ``"[DONE]"`` at the end."""
    for line in lines:
        if not line.startswith("data: "):
            assert line == "" or line.startswith(":"), f"unexpected SSE line {line!r}"
            continue
        data = line[len("data: ") :]
        yield data if data == "[DONE]" else json.loads(data)


class _Wrapped:
    """An Engine stand-in that delegates everything to a real Engine."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.closed = 0
        self.events_yielded = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def _before(self, index: int) -> None:  # overridden
        pass

    def stream(self, prompt: Any, **kwargs: Any) -> Iterator[Any]:
        inner = self._engine.stream(prompt, **kwargs)  # raises here for a bad prompt, like Engine

        def gen() -> Iterator[Any]:
            try:
                for i, event in enumerate(inner):
                    self._before(i)
                    self.events_yielded += 1
                    yield event
            finally:
                inner.close()
                self.closed += 1

        return gen()


class GatedEngine(_Wrapped):
    """Waits on ``gate`` (a threading.Event) before the first event of each generation."""

    def __init__(self, engine: Any) -> None:
        super().__init__(engine)
        self.gate = threading.Event()

    def _before(self, index: int) -> None:
        if index == 0:
            assert self.gate.wait(30), "the test never opened the gate"


class SlowEngine(_Wrapped):
    """Sleeps ``delay`` seconds before each event: a generation that takes a while."""

    def __init__(self, engine: Any, delay: float) -> None:
        super().__init__(engine)
        self.delay = delay

    def _before(self, index: int) -> None:
        time.sleep(self.delay)


# -- the load test ------------------------------------------------------------------------


@dataclass
class LoadReport:
    """What the load test saw, per request and in total."""

    completed: int = 0
    hung_up: int = 0
    statuses: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    queue_ms: list[float] = field(default_factory=list)
    tokens: int = 0
    wall_s: float = 0.0
    texts: list[str] = field(default_factory=list)

    def summary(self) -> str:
        q = sorted(self.queue_ms)
        p = (lambda f: q[min(len(q) - 1, int(f * len(q)))]) if q else (lambda f: 0.0)
        return (
            f"{self.completed} requests answered completely, {self.hung_up} hung up, "
            f"statuses {sorted(set(self.statuses))}; queue wait median {statistics.median(q) if q else 0:.0f} ms, "
            f"p90 {p(0.9):.0f} ms, max {max(q) if q else 0:.0f} ms; {self.tokens} tokens in {self.wall_s:.2f} s "
            f"= {self.tokens / self.wall_s if self.wall_s else 0:.1f} tok/s through the server"
        )


async def _client(
    http: Any,
    url: str,
    index: int,
    requests: int,
    hang_up: bool,
    max_tokens: int,
    hang_up_max_tokens: int,
    report: LoadReport,
) -> None:
    for r in range(requests):
        leave = hang_up and r == 0
        # a request that will be abandoned asks for a long reply, so that it is still
        # generating when its client goes
        body = {
            "messages": [{"role": "user", "content": f"client {index} request {r}: tell me about the fox"}],
            "max_tokens": hang_up_max_tokens if leave else max_tokens,
            "temperature": 0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with http.stream("POST", f"{url}/v1/chat/completions", json=body) as resp:
            report.statuses.append(resp.status_code)
            if resp.status_code != 200:
                report.errors.append(f"client {index}: HTTP {resp.status_code} {await resp.aread()!r}")
                continue
            text, pieces, finish, usage, done, timings = "", 0, None, None, False, None
            async for line in resp.aiter_lines():
                for ev in sse_events([line]):
                    if ev == "[DONE]":
                        done = True
                        continue
                    if "error" in ev:
                        report.errors.append(f"client {index}: {ev['error']}")
                    if ev.get("timings"):
                        timings = ev["timings"]
                    if ev.get("usage"):
                        usage = ev["usage"]
                    for ch in ev.get("choices", []):
                        text += ch["delta"].get("content") or ""
                        pieces += 1 if ch["delta"].get("content") else 0
                        finish = ch.get("finish_reason") or finish
                if leave and pieces >= 3:
                    break  # hang up mid-stream: leaving the block closes the connection
            if leave:
                report.hung_up += 1
                continue
            if not (done and finish and usage and timings):
                report.errors.append(
                    f"client {index} request {r}: incomplete stream "
                    f"(done={done}, finish={finish}, usage={usage is not None})"
                )
                continue
            report.completed += 1
            report.tokens += usage["completion_tokens"]
            report.queue_ms.append(timings["queue_ms"])
            report.texts.append(text)


async def run_load_async(
    url: str,
    *,
    clients: int = 16,
    requests: int = 2,
    hang_ups: int = 4,
    max_tokens: int = 24,
    hang_up_max_tokens: int = 512,
    timeout: float = 120.0,
) -> LoadReport:
    import httpx

    report = LoadReport()
    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
        t0 = time.perf_counter()
        await asyncio.gather(
            *(
                _client(http, url, i, requests, i < hang_ups, max_tokens, hang_up_max_tokens, report)
                for i in range(clients)
            )
        )
        report.wall_s = time.perf_counter() - t0
    return report


def run_load(url: str, **kwargs: Any) -> LoadReport:
    return asyncio.run(run_load_async(url, **kwargs))


if __name__ == "__main__":
    rep = run_load(
        sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8080",
        max_tokens=int(sys.argv[2]) if len(sys.argv) > 2 else 24,
    )
    print(rep.summary())
    for e in rep.errors:
        print("error:", e)
