"""The ASGI app: OpenAI's endpoints over one ``Engine``, plus health, metrics and a chat page.

``create_app(engine, ...)`` returns a FastAPI app; it does not own the engine (the
caller closes it). Routes:

* ``GET /v1/models``                    the one model this server holds
* ``POST /v1/chat/completions``         chat, through the target's chat template
* ``POST /v1/completions``              raw text (or token ids) in, text out
* ``GET /health``                       ``{"status": "ok", ...}`` while the worker runs
* ``GET /metrics``                      Prometheus text (``metrics``)
* ``GET /``                             the chat page (``static/chat.html``)

**The flow of a request.** The body is read up to ``max_body_bytes`` (413 beyond),
validated (``schema``; 400 with an OpenAI error object naming the field), and becomes a
``worker.Job``. The handler waits for the worker's first word: ``Failed`` (the engine
refused the prompt: too long for the context, a bad value) is a 400 before any byte of
the response is sent, even for a streamed request; ``Started`` means tokens follow.
A streamed response is server-sent events, one chunk per piece of text, ending with
``data: [DONE]``; each chunk's choice carries ``from_draft`` (the piece came from an
accepted draft) and the chunk an ``x_edgespec`` object with the running drafted /
accepted counts, for the chat page — extra fields that OpenAI clients ignore. The last
chunk (with ``finish_reason``) carries llama-server's ``timings`` object; with
``stream_options.include_usage`` a final chunk with empty ``choices`` carries ``usage``.

**Hanging up.** A task watches the connection for ``http.disconnect`` while the request
waits in the queue and while it generates; when the client goes away it cancels the job,
so the worker stops that generation at the next token and serves the next request.

**Errors.** Every error is an OpenAI-style object: 400 for bad input, 401 for a wrong or
missing API key (only when the app has one), 404/405 for unknown routes, 413 for a body
over the limit, 503 with ``Retry-After`` when the queue is full. An unexpected exception
is logged on the server and answered with a 500 object that holds no traceback.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
import uuid
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator, Mapping

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from edgespec import __version__
from edgespec.errors import ContextOverflowError, EdgespecError, InputError
from edgespec.events import Done, Round, Stats, Token

from .metrics import CountRequests, Metrics
from .schema import ApiError, ChatRequest, CompletionRequest, describe_validation_error
from .worker import Failed, Job, QueueFull, Started, Worker

log = logging.getLogger("edgespec.server")

DEFAULT_MAX_QUEUE = 32
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_TOKENS = 1024
SAMPLING_FIELDS = ("temperature", "top_p", "top_k", "min_p", "repeat_penalty",
                   "frequency_penalty", "presence_penalty", "seed")
ROUTES = ("/", "/health", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions")


class _Gone(Exception):
    """The client hung up."""


def create_app(
    engine: Any,
    *,
    api_key: str | None = None,
    max_queue: int = DEFAULT_MAX_QUEUE,
    parallel: int = 1,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    defaults: Mapping[str, Any] | None = None,
    model_name: str | None = None,
    retry_after: int = 5,
) -> FastAPI:
    """An OpenAI-compatible app over ``engine`` (an ``edgespec.Engine``).

    ``api_key``: when set, every ``/v1`` request needs ``Authorization: Bearer <key>``.
    ``max_queue``: requests that may wait while one generates (503 beyond).
    ``parallel``: generations that share each decode (slots of one multi-sequence
    batch); 1 serves one at a time and reuses the previous request's KV prefix.
    ``max_body_bytes``: the largest request body (413 beyond). ``max_tokens``: the reply
    length for requests that do not give one. ``defaults``: sampling values (the keys of
    ``Engine.stream``: temperature, top_p, top_k, min_p, seed, ...) for requests that do
    not give them. ``model_name``: the id ``/v1/models`` reports (default: the target
    file's stem). ``retry_after``: the seconds a 503 asks the client to wait.
    """
    if max_body_bytes < 1024:
        raise InputError(f"max_body_bytes must be at least 1024 (got {max_body_bytes})")
    if max_tokens < 1:
        raise InputError(f"max_tokens must be at least 1 (got {max_tokens})")
    unknown = set(defaults or {}) - set(SAMPLING_FIELDS)
    if unknown:
        raise InputError(f"unknown sampling defaults: {', '.join(sorted(unknown))}")
    metrics = Metrics()
    worker = Worker(engine, max_queue=max_queue, metrics=metrics, parallel=parallel)
    metrics.queue_length = lambda: worker.waiting
    metrics.busy = lambda: worker.busy
    model_id = model_name or Path(str(engine.target_path)).stem
    created = int(time.time())
    base_options = {k: v for k, v in (defaults or {}).items() if v is not None}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)

    app = FastAPI(title="edgespec", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine
    app.state.worker = worker
    app.state.metrics = metrics
    app.add_middleware(CountRequests, metrics=metrics, routes=ROUTES)

    # -- errors ---------------------------------------------------------------------------
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        err = ApiError(e.status_code, message.get(e.status_code, str(e.detail)),
                       code="not_found" if e.status_code == 404 else None)
        return JSONResponse(err.body(), status_code=e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        err = ApiError(500, f"internal server error ({type(e).__name__}); see the server log", type="server_error")
        return JSONResponse(err.body(), status_code=500)

    # -- helpers --------------------------------------------------------------------------
    def check_key(request: Request) -> None:
        if api_key is None:
            return
        header = request.headers.get("authorization", "")
        scheme, _, given = header.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip().encode(), api_key.encode()):
            raise ApiError(401, "a valid API key is required: send 'Authorization: Bearer <key>'"
                           if not header else "the API key is wrong",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    async def read_body(request: Request) -> bytes:
        declared = request.headers.get("content-length", "")
        too_big = ApiError(413, f"the request body is larger than {max_body_bytes} bytes", code="request_too_large")
        if declared.isdigit() and int(declared) > max_body_bytes:
            raise too_big
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > max_body_bytes:
                raise too_big
        return bytes(body)

    def options_for(req: ChatRequest | CompletionRequest) -> dict:
        opts = dict(base_options)
        for name in SAMPLING_FIELDS:
            value = getattr(req, name)
            if value is not None:
                opts[name] = value
        opts["max_tokens"] = req.limit() or max_tokens
        opts["stop"] = req.stops()
        return opts

    async def run(request: Request, req: ChatRequest | CompletionRequest, prompt: Any, *, chat: bool) -> Response:
        options = options_for(req)
        if not chat:
            options["raw"] = True
        job = Job(prompt=prompt, options=options)
        try:
            worker.submit(job)
        except QueueFull as e:
            raise ApiError(503, f"the server is busy ({e}); retry in {retry_after} s", type="server_error",
                           code="queue_full", headers={"Retry-After": str(retry_after)}) from None
        watcher = asyncio.create_task(_watch_disconnect(request, job))
        try:
            first = await job.events.get()
            if isinstance(first, Failed):
                raise _error_for(first.error, param="messages" if chat else "prompt")
        except BaseException:
            job.cancel()
            watcher.cancel()
            raise
        assert isinstance(first, Started)
        reply = _Reply(chat=chat, model=model_id, req=req, queue_wait=first.queue_wait)
        if req.stream:
            return StreamingResponse(_sse(reply, job, watcher), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        try:
            while True:
                item = await job.events.get()
                if isinstance(item, Failed):
                    raise _error_for(item.error, param=None)
                reply.feed(item)
                if isinstance(item, Done):
                    return JSONResponse(reply.body())
        finally:
            job.cancel()
            watcher.cancel()

    def parse(model: type, body: bytes) -> Any:
        try:
            return model.model_validate_json(body)
        except ValidationError as e:
            message, param = describe_validation_error(e)
            raise ApiError(400, message, param=param) from None

    # -- routes ---------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        html = resources.files("edgespec.server").joinpath("static/chat.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Cache-Control": "no-cache"})

    @app.get("/health")
    async def health() -> JSONResponse:
        alive = worker.alive
        body = {
            "status": "ok" if alive else "error",
            "model": model_id,
            "drafter": engine.drafter_name,
            "k": engine.k,
            "n_ctx": engine.n_ctx,
            "exact": bool(engine.exact_kernels),
            "busy": worker.busy,
            "queue": worker.waiting,
            "queue_max": worker.max_queue,
            "auth": api_key is not None,
        }
        return JSONResponse(body, status_code=200 if alive else 503)

    @app.get("/metrics")
    async def metrics_text() -> PlainTextResponse:
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/v1/models")
    async def models(request: Request) -> JSONResponse:
        check_key(request)
        return JSONResponse({"object": "list", "data": [{
            "id": model_id, "object": "model", "created": created, "owned_by": "edgespec",
            "meta": {"drafter": engine.drafter_name, "k": engine.k, "n_ctx": engine.n_ctx,
                     "exact": bool(engine.exact_kernels)},
        }]})

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        check_key(request)
        req = parse(ChatRequest, await read_body(request))
        return await run(request, req, [m.to_engine() for m in req.messages], chat=True)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        check_key(request)
        req = parse(CompletionRequest, await read_body(request))
        return await run(request, req, req.engine_prompt(), chat=False)

    return app


def _error_for(e: BaseException, *, param: str | None) -> ApiError:
    """The HTTP answer to an error the engine raised."""
    if isinstance(e, ContextOverflowError):
        return ApiError(400, str(e), param=param, code="context_length_exceeded")
    if isinstance(e, InputError):
        return ApiError(400, str(e))
    if isinstance(e, QueueFull):
        return ApiError(503, f"the server is shutting down ({e})", type="server_error", code="shutting_down")
    if isinstance(e, _Gone):
        return ApiError(499, "the client closed the request")
    if isinstance(e, EdgespecError):
        return ApiError(500, str(e), type="server_error")
    log.error("generation failed: %r", e)
    return ApiError(500, f"internal server error ({type(e).__name__}); see the server log", type="server_error")


async def _watch_disconnect(request: Request, job: Job) -> None:
    """Cancel ``job`` when the client disconnects (and wake whoever waits on it)."""
    try:
        while True:
            message = await request.receive()
            if message["type"] == "http.disconnect":
                break
    except asyncio.CancelledError:
        return
    except Exception:  # pragma: no cover - the connection broke in some other way
        pass
    if not job.cancelled:
        job.cancel()
        job.events.put_nowait(Failed(_Gone()))


class _Reply:
    """Builds the OpenAI response objects for one generation, from its events."""

    def __init__(self, *, chat: bool, model: str, req: ChatRequest | CompletionRequest, queue_wait: float) -> None:
        self.chat = chat
        self.model = model
        self.req = req
        self.queue_wait = queue_wait
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        self.drafted = 0
        self.accepted = 0
        self.done: Done | None = None

    def feed(self, event: Any) -> None:
        if isinstance(event, Round):
            self.drafted += event.drafted
            self.accepted += event.accepted
        elif isinstance(event, Done):
            self.done = event

    # -- whole responses ------------------------------------------------------------
    def usage(self, stats: Stats) -> dict:
        return {
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": stats.generated_tokens,
            "total_tokens": stats.prompt_tokens + stats.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": stats.prompt_tokens - stats.prompt_tokens_processed},
        }

    def timings(self, stats: Stats) -> dict:
        """llama-server's ``timings`` object, plus the prefix reused and the queue wait."""
        return {
            "prompt_n": stats.prompt_tokens_processed,
            "prompt_ms": round(stats.t_prompt * 1000, 3),
            "prompt_per_second": round(stats.prompt_tokens_processed / stats.t_prompt, 3) if stats.t_prompt else 0.0,
            "predicted_n": stats.generated_tokens,
            "predicted_ms": round(stats.t_generate * 1000, 3),
            "predicted_per_second": round(stats.tokens_per_second, 3),
            "draft_n": stats.drafted,
            "draft_n_accepted": stats.accepted,
            "cache_n": stats.prompt_tokens - stats.prompt_tokens_processed,
            "queue_ms": round(self.queue_wait * 1000, 3),
        }

    def body(self) -> dict:
        done = self.done
        assert done is not None
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": done.text},
                      "logprobs": None, "finish_reason": done.finish_reason}
        else:
            choice = {"index": 0, "text": done.text, "logprobs": None, "finish_reason": done.finish_reason}
        out = {"id": self.id, "object": self.object, "created": self.created, "model": self.model,
               "choices": [choice], "usage": self.usage(done.stats), "timings": self.timings(done.stats)}
        if self.req.return_tokens:
            out["token_ids"] = list(done.token_ids)
        return out

    # -- stream chunks --------------------------------------------------------------
    def chunk(self, *, text: str | None = None, from_draft: bool | None = None, finish: str | None = None,
              first: bool = False) -> dict:
        if self.chat:
            delta: dict = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            choice: dict = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": None, "finish_reason": finish}
        if from_draft is not None:
            choice["from_draft"] = from_draft
        return {"id": self.id, "object": "chat.completion.chunk" if self.chat else "text_completion",
                "created": self.created, "model": self.model, "choices": [choice],
                "x_edgespec": {"drafted": self.drafted, "accepted": self.accepted}}

    def last_chunks(self) -> list[dict]:
        done = self.done
        assert done is not None
        last = self.chunk(text=None if self.chat else "", finish=done.finish_reason)
        last["timings"] = self.timings(done.stats)
        if self.req.return_tokens:
            last["token_ids"] = list(done.token_ids)
        chunks = [last]
        if self.req.include_usage():
            chunks.append({"id": self.id, "object": last["object"], "created": self.created, "model": self.model,
                           "choices": [], "usage": self.usage(done.stats), "timings": last["timings"]})
        return chunks


def _event(obj: dict | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


async def _sse(reply: _Reply, job: Job, watcher: asyncio.Task) -> AsyncIterator[str]:
    """The server-sent events of one streamed generation."""
    try:
        if reply.chat:
            yield _event(reply.chunk(text="", first=True))
        while True:
            item = await job.events.get()
            if isinstance(item, Token):
                if item.text:
                    yield _event(reply.chunk(text=item.text, from_draft=item.from_draft))
            elif isinstance(item, Round):
                reply.feed(item)
            elif isinstance(item, Done):
                reply.feed(item)
                for chunk in reply.last_chunks():
                    yield _event(chunk)
                yield _event("[DONE]")
                return
            elif isinstance(item, Failed):
                if isinstance(item.error, _Gone):
                    return
                yield _event(_error_for(item.error, param=None).body())
                yield _event("[DONE]")
                return
    finally:
        job.cancel()
        watcher.cancel()
