"""Code completion: llama-server's ``POST /infill``, and the prompt of OpenAI's ``suffix``.

An editor (llama.vim, llama.vscode) sends the text before the cursor, the text after it
and other files of the repository; the model writes the middle. The request, as
llama-server reads it:

* ``input_prefix``, ``input_suffix`` (required strings): the file before and after the
  cursor; ``prompt`` (optional): more text before the cursor (llama.vim sends the cursor's
  line there), tokenized with its special tokens;
* ``input_extra``: ``[{"filename": str, "text": str}]``, other files (a chunk without
  ``text``, or with a field that is not a string, is a 400);
* ``n_predict`` / ``max_tokens``, the samplers of ``/v1/completions``, ``stop``,
  ``stream``; ``t_max_predict_ms`` and ``n_indent`` (``infill_reply``); ``response_fields``;
* accepted and without effect: ``t_max_prompt_ms`` (llama-server does not implement it
  either), ``cache_prompt`` and ``id_slot`` (the KV prefix is reused on its own),
  ``samplers`` (names of llama.cpp's samplers; edgespec's order is fixed: top-k, top-p,
  min-p, temperature, and llama.cpp's ``infill`` sampler is not applied).

The prompt is ``fim_prompt.infill_ids`` (``edgespec.llama.fim``): the model's FIM tokens and its
repository-level format, read from the GGUF (a model without FIM tokens: a 400,
``infill_not_supported``). A middle that reaches the suffix's text stops there: the first
non-blank line after the cursor's, after a newline, is one more stop string
(``fim.suffix_stop``). The answer is ``infill_reply``'s. ``/v1/completions`` with
``suffix`` builds its prompt the same way (``fim_prompt.suffix_prompt``) and answers in
OpenAI's shape.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any, AsyncIterator, Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from .bodies import parse_request
from .fim_prompt import infill_ids, with_suffix_stop
from .infill_reply import InfillReply
from .responses import Gone, error_for
from .schema import ApiError, _Request
from .worker import Failed, ServeJob, Started

ROUTES = ("/infill",)


class ExtraChunkBody(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    text: str
    filename: str = "tmp"


class InfillRequest(_Request):
    """llama-server's ``/infill`` body (see the module docstring)."""

    endpoint = "completions"
    input_prefix: str
    input_suffix: str
    input_extra: list[ExtraChunkBody] = Field(default_factory=list)
    prompt: str = ""
    t_max_predict_ms: Optional[int] = Field(None, ge=-1)
    t_max_prompt_ms: Optional[int] = None
    n_indent: Optional[int] = Field(None, ge=-1)
    response_fields: Optional[list[str]] = None
    samplers: Optional[Union[list[str], str]] = None

    def logprob_count(self) -> int | None:
        if self.top_logprobs:
            raise ApiError(400, "top_logprobs is not served on /infill", param="top_logprobs")
        return None


def _check(req: InfillRequest) -> None:
    if req.choices() > 1:
        raise ApiError(400, "n: /infill writes one middle per request", param="n")
    fmt, field = req.constraint_format()
    if fmt is not None:
        raise ApiError(400, f"{field} is not served on /infill", param=field)


def add_routes(app: FastAPI, api: Any) -> None:
    """``POST /infill`` behind the app's key, body limit and worker (``api``: the app's
    ``routes_extra.Api``)."""

    @app.post("/infill")
    async def infill_route(request: Request) -> Response:
        api.check_key(request)
        req = parse_request(InfillRequest, await api.read_body(request))
        _check(req)
        options = api.options_for(req, request)
        options["raw"] = True
        options["stop"] = with_suffix_stop(options["stop"], req.input_suffix)
        # the extra files' budget keeps room for the middle the request asks for (llama-server
        # reserves its own n_predict, -1 by default), not for the server's default length
        asked = req.limit()
        ids = await asyncio.to_thread(infill_ids, api.engine, req, -1 if asked is None else asked)
        return await _serve(request, api, req, ids, options)


async def _serve(request: Request, api: Any, req: InfillRequest, ids: list[int], options: dict) -> Response:
    worker = api.worker
    job = ServeJob(prompt=ids, options=options)
    api.submit([job])
    watcher = asyncio.create_task(api.watch(request, job))
    try:
        first = await worker.next_event(job)
        if isinstance(first, Failed):
            raise error_for(first.error, param="input_prefix")
    except BaseException:
        job.cancel()
        watcher.cancel()
        raise
    assert isinstance(first, Started)
    reply = InfillReply(
        req=req,
        ids=ids,
        model_id=api.model_id,
        engine=api.engine,
        max_tokens=options["max_tokens"],
        cached=first.cached,
        options=options,
    )
    if req.stream:
        return StreamingResponse(
            _events(reply, job, watcher, worker.next_event),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    try:
        while reply.done is None and not reply.cut:
            item = await worker.next_event(job)
            if isinstance(item, Failed):
                raise error_for(item.error, param=None)
            reply.feed(item)
        return JSONResponse(reply.final(streamed=False))
    finally:
        job.cancel()
        watcher.cancel()


def _data(obj: dict) -> str:
    return f"data: {json.dumps(obj, ensure_ascii=False)}\n\n"


async def _events(reply: InfillReply, job: ServeJob, watcher: asyncio.Task, next_event: Any) -> AsyncIterator[str]:
    """llama-server's stream of an infill: a ``data:`` event per piece of text, then the
    whole answer's object; an error midway is an error event (no ``[DONE]``)."""
    try:
        while reply.done is None and not reply.cut:
            item = await next_event(job)
            if isinstance(item, Failed):
                if not isinstance(item.error, Gone):
                    yield _data(error_for(item.error, param=None).body())
                return
            text = reply.feed(item)
            if text:
                yield _data(reply.chunk(text))
        if reply.tail():
            yield _data(reply.chunk(reply.tail()))
        yield _data(reply.final(streamed=True))
    finally:
        job.cancel()
        watcher.cancel()
