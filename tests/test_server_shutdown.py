"""Shutting down while requests are open (issue 34): a stream still open as uvicorn's
grace runs out ends with an error event (``shutting_down``) and ``data: [DONE]``, a
request waiting behind it gets a 503 with the same code, and the server logs one line,
not uvicorn's "Exception in ASGI application" with a ``CancelledError`` traceback.

A real uvicorn (``serve_support.LiveServer``, served by ``edgespec.server.stopping.Server``
as ``serve`` is) over the tiny target, slowed down (``SlowEngine``) so that the
generation outlasts the grace.
"""

from __future__ import annotations

import logging
import threading
import time

import httpx
import pytest

from edgespec import Engine
from edgespec.server import create_app
from serve_support import LiveServer, SlowEngine, sse_events

MESSAGES = [{"role": "user", "content": "hello world"}]


class _Records(logging.Handler):
    """Every record of a logger, whatever uvicorn's logging configuration propagates."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture()
def records():
    handler = _Records()
    loggers = [logging.getLogger(name) for name in ("uvicorn", "uvicorn.error", "edgespec.server")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler.records
    for logger in loggers:
        logger.removeHandler(handler)


def test_open_requests_at_shutdown_end_with_an_error_and_one_log_line(tiny_target, records):
    with Engine(tiny_target, draft=None, n_ctx=1024, n_threads=1) as engine:
        app = create_app(SlowEngine(engine, 0.05), max_tokens=600, defaults={"temperature": 0.0})
        body = {"messages": MESSAGES, "max_tokens": 600, "ignore_eos": True}
        live = LiveServer(app)
        with live:
            waiting: list[httpx.Response] = []
            events: list = []
            with httpx.stream(
                "POST", f"{live.url}/v1/chat/completions", json={**body, "stream": True}, timeout=30
            ) as resp:
                assert resp.status_code == 200
                lines = resp.iter_lines()
                for event in sse_events(lines):
                    events.append(event)
                    if len(events) == 3:  # generating: queue one more, then stop the server
                        behind = threading.Thread(
                            target=lambda: waiting.append(
                                httpx.post(f"{live.url}/v1/chat/completions", json=body, timeout=30)
                            )
                        )
                        behind.start()
                        time.sleep(0.3)
                        t0 = time.monotonic()
                        live.server.should_exit = True
                ended_after = time.monotonic() - t0
            behind.join(30)
    assert events[-1] == "[DONE]", events[-3:]
    error = events[-2]["error"]
    assert error["code"] == "shutting_down" and error["type"] == "server_error", error
    assert 0.5 < ended_after < 2.0  # within the grace (2 s), once most of it has passed
    assert all("choices" in e for e in events[:-2])  # tokens until then, then the error
    assert waiting and waiting[0].status_code == 503, waiting
    assert waiting[0].json()["error"]["code"] == "shutting_down"
    messages = [r.getMessage() for r in records]
    assert not any("Exception in ASGI application" in m or "Cancel" in m for m in messages), messages
    assert not any(r.exc_info for r in records), messages
    ours = [m for m in messages if m.startswith("shutting down:")]
    assert ours == ["shutting down: 2 open request(s) ended with a 'shutting_down' error"], messages


def test_a_request_that_ends_within_the_grace_is_answered(tiny_target, records):
    with Engine(tiny_target, draft=None, n_ctx=512, n_threads=1) as engine:
        app = create_app(SlowEngine(engine, 0.05), max_tokens=8, defaults={"temperature": 0.0})
        live = LiveServer(app)
        with live:
            answer: list[httpx.Response] = []
            t = threading.Thread(
                target=lambda: answer.append(
                    httpx.post(
                        f"{live.url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 8}, timeout=30
                    )
                )
            )
            t.start()
            time.sleep(0.2)
            live.server.should_exit = True
            t.join(30)
    assert answer[0].status_code == 200 and answer[0].json()["choices"][0]["finish_reason"] == "length"
    assert not [r for r in records if r.getMessage().startswith("shutting down:")]
