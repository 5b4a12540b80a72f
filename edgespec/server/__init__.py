"""The OpenAI-compatible HTTP server and its chat page (``edgespec serve``).

``create_app(engine)`` wraps one loaded ``Engine`` in an ASGI app: ``/v1/models``,
``/v1/chat/completions`` and ``/v1/completions`` (streamed and not; each also without
``/v1``), the Responses API's text and tool subset (``responses_api``), llama-server's
``/tokenize`` and ``/detokenize`` (``routes_extra``), ``/health``, ``/metrics`` and a
chat page at ``/``. Generations run one at a time on a worker thread,
fed by a bounded FIFO queue (``worker``); the counters behind ``/metrics`` live in
``metrics``; the OpenAI request and response shapes in ``schema``.

**Why FastAPI + uvicorn.** They are what llama-cpp-python's own server, vLLM and most
OpenAI-compatible servers in Python use, so the behaviour people expect (server-sent
events, graceful shutdown on SIGINT/SIGTERM, keep-alive, HTTP/1.1 details) comes from
code that millions of requests have exercised; pydantic (which FastAPI brings) validates
request bodies with messages that name the field. Both are pure Python wheels (uvicorn's
optional C speedups are not required), small next to llama.cpp, so they are part of the
default install: ``pip install edgespec`` is enough to run ``edgespec serve``. The
alternatives were heavier (aiohttp brings its own C extensions and a different server
model) or lower level (a hand-rolled ``http.server`` would need its own SSE, shutdown and
body-limit code, exactly what the well-kept libraries already get right).
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
