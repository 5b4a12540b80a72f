"""The ASGI app: OpenAI's endpoints over one ``Engine``, plus health, metrics and a chat page.

``create_app(engine, ...)`` returns a FastAPI app; it does not own the engine (the
caller closes it). Routes:

* ``GET /v1/models``                    the one model this server holds
* ``POST /v1/chat/completions``         chat, through the target's chat template
* ``POST /v1/completions``              raw text (or token ids) in, text out
* ``POST /v1/responses``                OpenAI's Responses API, text and tools (``responses_api``)
* ``POST /tokenize``, ``/detokenize``   llama-server's, over the target's vocabulary (``routes_extra``)
* ``POST /infill``                      llama-server's code completion (``infill``); ``suffix`` on
                                        ``/v1/completions`` goes through its prompt too
* ``GET /health``                       ``{"status": "ok", ...}`` while the worker runs
* ``GET /metrics``                      Prometheus text (``metrics``)
* ``GET /``                             the chat page (``static/chat.html``)

Each ``/v1/X`` route is also served as ``/X`` (llama-server does so: a client whose base
URL lacks ``/v1`` works), by the same handler, so behind the same key and guard.

With ``api_key`` every API route and ``/metrics`` need the key (``Authorization: Bearer``
or ``X-Api-Key``: ``guard.key_ok``); ``/health`` without
it says only ``{"status": ...}`` (liveness for load balancers), with it the full body;
``/`` is a static page that holds nothing and asks for the key. Before any route,
``guard.Guard`` refuses a Host that is not this server and a web page from an origin
that is not allowed (docs/server-safety.md).

**Memories.** A request drafts from the earlier answers of its own API key only
(``memories``: one index per key, one for requests without a key; ``memory=False``,
``serve --no-memory``, turns drafting from earlier answers off).

**The flow of a request.** The body is read up to ``max_body_bytes`` (413 beyond),
validated (``schema``; 400 with an OpenAI error object naming the field; ``fields`` is
the one table of the fields honoured, refused and ignored), its structure compiled off
the event loop (``structured``: ``response_format`` and tools; a 400 naming the field
when a schema, grammar or tool does not compile), and it becomes a ``worker.ServeJob``. The
handler waits for the worker's first word: ``Failed`` (the engine refused the prompt:
too long for the context, a bad value) is a 400 before any byte of the response is
sent, even for a streamed request; ``Started`` means tokens follow. The answer, whole or
as server-sent events ending with ``data: [DONE]``, is built by ``responses.ReplyBody``
(tool calls, the structure's completeness, ``timings``, ``usage``).

**Hanging up.** A task watches the connection for ``http.disconnect`` while the request
waits in the queue and while it generates; when the client goes away it cancels the job,
so the worker stops that generation at the next token and serves the next request.

**Shutting down.** Served by ``stopping.Server`` (``serve`` is), the requests still open
as the shutdown's grace runs out end with a ``shutting_down`` error (an error event and
``[DONE]`` on a stream, a 503 otherwise) and one log line, not a cancelled task's traceback.

**Errors.** Every error is an OpenAI-style object: 400 for bad input, 401 for a wrong or
missing API key (only when the app has one), 403 for a refused Host or Origin, 404/405
for unknown routes, 413 for a body over the limit, 503 with ``Retry-After`` when the
queue is full, 503 ``worker_stopped`` once the generation worker has died. An
unexpected exception, in a route or in a generation, is logged on the server and
answered with a 500 object that holds no traceback (an error event on a stream).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import asynccontextmanager
from importlib import resources
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Iterable, Mapping

from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from edgespec import __version__
from edgespec.decoding.params import SAMPLING_KEYS
from edgespec.errors import InputError
from edgespec.events import Done

from . import infill, responses_api, routes_extra
from .bodies import parse_request
from .choices import choice_jobs, serve_choices
from .guard import Guard, check_origins, given_keys, key_ok
from .memories import DEFAULT_MAX_KEYS, key_of
from .metrics import CountRequests, Metrics
from .responses import Gone, ReplyBody, error_for, sse
from .schema import ApiError, ChatRequest, CompletionRequest
from .structured import Structure, plan_chat, plan_completion
from .worker import Failed, QueueFull, ServeJob, Started, Worker, WorkerDied

log = logging.getLogger("edgespec.server")

DEFAULT_MAX_QUEUE = 32
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
DEFAULT_MAX_TOKENS = 1024
API_ROUTES = ("/models", "/chat/completions", "/completions", *responses_api.ROUTES)
ROUTES = (
    "/",
    "/health",
    "/metrics",
    *(f"/v1{r}" for r in API_ROUTES),
    *API_ROUTES,
    *routes_extra.ROUTES,
    *infill.ROUTES,
)


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
    on_fatal: Callable[[BaseException], None] | None = None,
    allow_origins: Iterable[str] = (),
    memory: bool = True,
    memory_keys: int = DEFAULT_MAX_KEYS,
    cache_reuse: int = 0,
) -> FastAPI:
    """An OpenAI-compatible app over ``engine`` (an ``edgespec.Engine``).

    ``api_key``: when set, every API request needs ``Authorization: Bearer <key>`` (or
    ``X-Api-Key: <key>``).
    ``max_queue``: requests that may wait while one generates (503 beyond).
    ``parallel``: generations that share each decode (slots of one multi-sequence
    batch); 1 serves one at a time and reuses the previous request's KV prefix.
    ``max_body_bytes``: the largest request body (413 beyond). ``max_tokens``: the reply
    length for requests that do not give one. ``defaults``: sampling values (the keys of
    ``Engine.stream``: temperature, top_p, top_k, min_p, seed, ...) for requests that do
    not give them. ``model_name``: the id ``/v1/models`` reports (default: the target
    file's stem). ``retry_after``: the seconds a 503 asks the client to wait.
    ``on_fatal(error)``: called if the generation worker dies (``serve`` stops then).
    ``allow_origins``: web origins allowed beside the server's own and loopback ones
    (``guard``: exact origins, patterns, ``*``). ``memory``: requests draft from the
    earlier answers of their own API key (False: from none); ``memory_keys``: the most
    keys whose memories are kept (``memories``). ``cache_reuse``: the shortest cached run
    (tokens) moved back for reuse when a request gives no ``n_cache_reuse`` (0: off).

    Everything that can fail is built here, before the app serves: with ``parallel`` > 1
    the batch of slots (``worker.Worker``); an error here means the server cannot run.
    """
    if max_body_bytes < 1024:
        raise InputError(f"max_body_bytes must be at least 1024 (got {max_body_bytes})")
    if max_tokens < 1:
        raise InputError(f"max_tokens must be at least 1 (got {max_tokens})")
    if isinstance(cache_reuse, bool) or not isinstance(cache_reuse, int) or cache_reuse < 0:
        raise InputError(f"cache_reuse must be a whole number of tokens, 0 for off (got {cache_reuse!r})")
    unknown = set(defaults or {}) - set(SAMPLING_KEYS)
    if unknown:
        raise InputError(f"unknown sampling defaults: {', '.join(sorted(unknown))}")
    origins = check_origins(allow_origins)
    metrics = Metrics()
    worker = Worker(
        engine,
        max_queue=max_queue,
        metrics=metrics,
        parallel=parallel,
        on_fatal=on_fatal,
        memory=memory,
        memory_keys=memory_keys,
    )
    metrics.queue_length = lambda: worker.waiting
    metrics.busy = lambda: worker.busy
    metrics.memories = lambda: (len(worker.memories), worker.memories.tokens())
    model_id = model_name or Path(str(engine.target_path)).stem
    fingerprint = routes_extra.system_fingerprint(engine)
    created = int(time.time())
    base_options = {k: v for k, v in (defaults or {}).items() if v is not None}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        worker.start()
        try:
            yield
        finally:
            await asyncio.to_thread(worker.stop)

    app = FastAPI(
        title="edgespec", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None
    )
    app.state.engine = engine
    app.state.worker = worker
    app.state.metrics = metrics

    def begin_shutdown(delay_s: float | None) -> None:  # stopping.Server: uvicorn's shutdown begins
        def end_open() -> None:
            ended = worker.drain()
            if ended:
                log.warning("shutting down: %d open request(s) ended with a 'shutting_down' error", ended)

        if delay_s is not None:
            asyncio.get_running_loop().call_later(delay_s, end_open)

    app.state.begin_shutdown = begin_shutdown
    app.add_middleware(Guard, origins=origins)  # inside the counting: refusals are counted too
    app.add_middleware(CountRequests, metrics=metrics, routes=ROUTES)

    # -- errors ---------------------------------------------------------------------------
    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError) -> JSONResponse:
        return JSONResponse(e.body(), status_code=e.status, headers=e.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no route {request.url.path}", 405: f"{request.method} is not allowed on {request.url.path}"}
        err = ApiError(
            e.status_code, message.get(e.status_code, str(e.detail)), code="not_found" if e.status_code == 404 else None
        )
        return JSONResponse(err.body(), status_code=e.status_code, headers=getattr(e, "headers", None))

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, e: Exception) -> JSONResponse:
        log.exception("unexpected error on %s", request.url.path)
        err = ApiError(500, f"internal server error ({type(e).__name__}); see the server log", type="server_error")
        return JSONResponse(err.body(), status_code=500)

    # -- helpers --------------------------------------------------------------------------
    def has_key(request: Request) -> bool:
        return key_ok(request.headers, api_key)

    def check_key(request: Request) -> None:
        if not has_key(request):
            raise ApiError(
                401,
                "a valid API key is required: send 'Authorization: Bearer <key>' or 'X-Api-Key: <key>'"
                if not given_keys(request.headers)
                else "the API key is wrong",
                code="invalid_api_key",
                headers={"WWW-Authenticate": "Bearer"},
            )

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
        opts = {**base_options, **req.sampling_options(tokenize_text)}
        limit = req.limit()
        opts["max_tokens"] = engine.n_ctx if limit == -1 else (limit or max_tokens)
        opts["stop"] = req.stops()
        opts["cache_reuse"] = cache_reuse if req.n_cache_reuse is None else req.n_cache_reuse
        return opts

    def tokenize_text(text: str) -> list[int]:
        return engine.tokenize(text, add_special=False, parse_special=False)

    def submit(jobs: list[ServeJob]) -> None:
        try:
            if len(jobs) == 1:
                worker.submit(jobs[0])
            else:
                worker.submit_all(jobs)
        except QueueFull as e:
            raise ApiError(
                503,
                f"the server is busy ({e}); retry in {retry_after} s",
                type="server_error",
                code="queue_full",
                headers={"Retry-After": str(retry_after)},
            ) from None
        except WorkerDied as e:
            raise error_for(e, param=None) from None

    async def run(
        request: Request, req: ChatRequest | CompletionRequest, structure: Structure, *, chat: bool
    ) -> Response:
        options = options_for(req)
        options["memory"] = worker.memories.option(key_of(request.headers, api_key))
        if not chat:
            options["raw"] = True
        if structure.constraint is not None:
            options["constraint"] = structure.constraint

        def reply_for(index: int, queue_wait: float) -> ReplyBody:
            return ReplyBody(
                chat=chat,
                model=model_id,
                req=req,
                queue_wait=queue_wait,
                structure=structure,
                index=index,
                token_bytes=engine.target_model.token_to_bytes,
                fingerprint=fingerprint,
            )

        if req.choices() > 1:  # n > 1: one job per choice (choices.py)
            return await serve_choices(
                request,
                worker,
                choice_jobs(structure.prompt, options, req.choices()),
                reply_for,
                stream=req.stream,
                param="messages" if chat else "prompt",
                submit=submit,
                watch=_watch_disconnect,
            )
        job = ServeJob(prompt=structure.prompt, options=options)
        submit([job])
        watcher = asyncio.create_task(_watch_disconnect(request, job))
        try:
            first = await worker.next_event(job)
            if isinstance(first, Failed):
                raise error_for(first.error, param="messages" if chat else "prompt")
        except BaseException:
            job.cancel()
            watcher.cancel()
            raise
        assert isinstance(first, Started)
        reply = reply_for(0, first.queue_wait)
        if req.stream:
            return StreamingResponse(
                sse(reply, job, watcher, worker.next_event),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
        try:
            while True:
                item = await worker.next_event(job)
                if isinstance(item, Failed):
                    raise error_for(item.error, param=None)
                reply.feed(item)
                if isinstance(item, Done):
                    return JSONResponse(reply.body())
        finally:
            job.cancel()
            watcher.cancel()

    # -- routes ---------------------------------------------------------------------------
    @app.get("/", response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        html = resources.files("edgespec.server").joinpath("static/chat.html").read_text(encoding="utf-8")
        return HTMLResponse(html, headers={"Cache-Control": "no-cache"})

    @app.get("/health")
    async def health(request: Request) -> JSONResponse:
        alive = worker.alive
        if not has_key(request):  # with --api-key, liveness only: no model, no load
            return JSONResponse({"status": "ok" if alive else "error"}, status_code=200 if alive else 503)
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
    async def metrics_text(request: Request) -> PlainTextResponse:
        check_key(request)  # with --api-key, Prometheus scrapes with the key (bearer auth)
        return PlainTextResponse(metrics.render(), media_type="text/plain; version=0.0.4; charset=utf-8")

    async def chat(request: Request, body: bytes) -> Response:
        """A chat completion for ``body`` (also the Responses API's way in)."""
        req = parse_request(ChatRequest, body)
        return await run(request, req, await asyncio.to_thread(plan_chat, engine, req), chat=True)

    @app.get("/v1/models")
    @app.get("/models")
    async def models(request: Request) -> JSONResponse:
        check_key(request)
        return JSONResponse(
            {
                "object": "list",
                "data": [
                    {
                        "id": model_id,
                        "object": "model",
                        "created": created,
                        "owned_by": "edgespec",
                        "meta": {
                            "drafter": engine.drafter_name,
                            "k": engine.k,
                            "n_ctx": engine.n_ctx,
                            "exact": bool(engine.exact_kernels),
                        },
                    }
                ],
            }
        )

    @app.post("/v1/chat/completions")
    @app.post("/chat/completions")
    async def chat_completions(request: Request) -> Response:
        check_key(request)
        return await chat(request, await read_body(request))

    @app.post("/v1/completions")
    @app.post("/completions")
    async def completions(request: Request) -> Response:
        check_key(request)
        req = parse_request(CompletionRequest, await read_body(request))
        return await run(request, req, await asyncio.to_thread(plan_completion, engine, req), chat=False)

    def generation_options(req: Any, request: Request) -> dict:
        return {**options_for(req), "memory": worker.memories.option(key_of(request.headers, api_key))}

    api = routes_extra.Api(
        engine=engine,
        model_id=model_id,
        check_key=check_key,
        read_body=read_body,
        chat=chat,
        worker=worker,
        submit=submit,
        options_for=generation_options,
        watch=_watch_disconnect,
    )
    routes_extra.add_routes(app, api)
    responses_api.add_routes(app, api)
    infill.add_routes(app, api)
    return app


async def _watch_disconnect(request: Request, job: ServeJob) -> None:
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
        job.events.put_nowait(Failed(Gone()))
