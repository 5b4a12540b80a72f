"""The server sharing one model (real uvicorn on a loopback port, ``serve_support.LiveServer``):
a full queue is a 503 with ``Retry-After``, a client that hangs up stops its generation, a
request that hangs up while queued never runs, and shutdown stops a running generation. The
drafter is ``tiny_same`` (``serve_support.engine``)."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

import serve_support
from edgespec.server import create_app
from serve_support import GatedEngine, LiveServer, SlowEngine
from test_server import MESSAGES, error_of

engine = serve_support.engine


def test_full_queue_is_503_with_retry_after(engine):
    gated = GatedEngine(engine)
    app = create_app(gated, max_queue=1, max_tokens=6, retry_after=7)
    results: dict[str, int] = {}
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:

        def ask(name: str) -> None:
            results[name] = http.post("/v1/chat/completions", json={"messages": MESSAGES}).status_code

        def wait_for(cond) -> None:
            deadline = time.monotonic() + 10
            while not cond(http.get("/health").json()):
                assert time.monotonic() < deadline
                time.sleep(0.02)

        first = threading.Thread(target=ask, args=("first",))
        first.start()
        wait_for(lambda h: h["busy"])  # running, held at the gate
        second = threading.Thread(target=ask, args=("second",))
        second.start()
        wait_for(lambda h: h["queue"] == 1)  # waiting
        third = http.post("/v1/chat/completions", json={"messages": MESSAGES})
        assert third.status_code == 503 and third.headers["retry-after"] == "7"
        assert error_of(third)["code"] == "queue_full"
        gated.gate.set()
        first.join(30)
        second.join(30)
        assert results == {"first": 200, "second": 200}
        metrics = http.get("/metrics").text
        assert 'edgespec_requests_total{endpoint="/v1/chat/completions",status="503"} 1' in metrics


def test_a_client_that_hangs_up_stops_its_generation(engine, reference):
    slow = SlowEngine(engine, delay=0.02)
    app = create_app(slow, max_tokens=400)
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        with http.stream("POST", "/v1/chat/completions", json={"messages": MESSAGES, "stream": True}) as resp:
            seen = 0
            for line in resp.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 4:
                    break
        t_gone = time.monotonic()
        deadline = t_gone + 5
        while slow.closed < 1:
            assert time.monotonic() < deadline, "the generation went on after the client left"
            time.sleep(0.01)
        stopped_after = time.monotonic() - t_gone
        assert slow.events_yielded < 60  # far from the 400 tokens it was asked for
        # the next request is served, from caches the stopped generation left consistent
        body = http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 10, "temperature": 0}).json()
        assert body["choices"][0]["message"]["content"] == reference.generate(MESSAGES, max_tokens=10).text
        metrics = http.get("/metrics").text
        assert 'edgespec_requests_cancelled_total{stage="running"} 1' in metrics
        assert stopped_after < 1.0


def test_a_request_that_hangs_up_while_queued_never_runs(engine):
    gated = GatedEngine(engine)
    app = create_app(gated, max_tokens=4)
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        holder = threading.Thread(target=lambda: http.post("/v1/chat/completions", json={"messages": MESSAGES}))
        holder.start()
        while not http.get("/health").json()["busy"]:
            time.sleep(0.02)
        with httpx.Client(base_url=srv.url, timeout=0.5) as impatient:
            with pytest.raises(httpx.ReadTimeout):
                impatient.post("/v1/chat/completions", json={"messages": MESSAGES})
        deadline = time.monotonic() + 5
        while http.get("/health").json()["queue"] != 1 and time.monotonic() < deadline:
            time.sleep(0.02)
        gated.gate.set()
        holder.join(30)
        deadline = time.monotonic() + 5
        while 'stage="queued"} 1' not in http.get("/metrics").text:
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert gated.closed == 1  # only the first request ever reached the engine


def test_shutdown_stops_a_running_generation(engine):
    """What Ctrl-C / SIGTERM do under uvicorn: stop accepting, give running requests the
    grace period (2 s here), then cancel them, which stops their generation."""
    slow = SlowEngine(engine, delay=0.02)
    app = create_app(slow, max_tokens=400)
    srv = LiveServer(app).__enter__()
    lines: list[str] = []

    def read() -> None:
        try:
            with httpx.stream(
                "POST", f"{srv.url}/v1/chat/completions", timeout=30, json={"messages": MESSAGES, "stream": True}
            ) as resp:
                for line in resp.iter_lines():
                    lines.append(line)
        except httpx.HTTPError:
            pass  # the server closed the connection: expected

    reader = threading.Thread(target=read)
    reader.start()
    deadline = time.monotonic() + 10
    while len(lines) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    t0 = time.monotonic()
    srv.__exit__(None, None, None)
    assert not srv.thread.is_alive() and time.monotonic() - t0 < 6
    reader.join(5)
    assert slow.closed == 1 and slow.events_yielded < 300  # stopped, not run to its 400 tokens
    assert not app.state.worker.alive
