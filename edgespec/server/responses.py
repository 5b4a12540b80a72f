"""The OpenAI response objects of one generation: whole bodies, stream chunks, errors.

``ReplyBody`` builds a chat or text completion from the engine's events (``usage``,
llama-server's ``timings``, ``token_ids`` on request); ``sse`` writes a streamed one as
server-sent events; ``error_for`` turns an error the engine or the worker raised into
the ``ApiError`` the client gets (a 400 for bad input, a 500 that holds no traceback for
anything unexpected). Knows nothing of routes or of the worker's thread.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any, AsyncIterator, Awaitable, Callable

from edgespec.errors import ContextOverflowError, EdgespecError, InputError
from edgespec.events import Done, Round, Stats, Token
from edgespec.sampling import SamplingOptionError

from .schema import ApiError, ChatRequest, CompletionRequest
from .worker import Failed, Job, QueueFull, WorkerDied

log = logging.getLogger("edgespec.server")


class Gone(Exception):
    """The client hung up."""


def error_for(e: BaseException, *, param: str | None) -> ApiError:
    """The HTTP answer to an error the engine raised."""
    if isinstance(e, ContextOverflowError):
        return ApiError(400, str(e), param=param, code="context_length_exceeded")
    if isinstance(e, SamplingOptionError):
        return ApiError(400, str(e), param=e.option)
    if isinstance(e, InputError):
        return ApiError(400, str(e))
    if isinstance(e, WorkerDied):
        return ApiError(503, str(e), type="server_error", code="worker_stopped")
    if isinstance(e, QueueFull):
        return ApiError(503, f"the server is shutting down ({e})", type="server_error", code="shutting_down")
    if isinstance(e, Gone):
        return ApiError(499, "the client closed the request")
    if isinstance(e, EdgespecError):
        return ApiError(500, str(e), type="server_error")
    log.error("generation failed: %r", e)
    return ApiError(500, f"internal server error ({type(e).__name__}); see the server log", type="server_error")


class ReplyBody:
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


def event(obj: dict | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


async def sse(reply: ReplyBody, job: Job, watcher: asyncio.Task,
              next_event: Callable[[Job], Awaitable[Any]]) -> AsyncIterator[str]:
    """The server-sent events of one streamed generation (``next_event``: the worker's,
    which never waits on a dead worker). An error midway is an error event, then
    ``[DONE]``."""
    try:
        if reply.chat:
            yield event(reply.chunk(text="", first=True))
        while True:
            item = await next_event(job)
            if isinstance(item, Token):
                if item.text:
                    yield event(reply.chunk(text=item.text, from_draft=item.from_draft))
            elif isinstance(item, Round):
                reply.feed(item)
            elif isinstance(item, Done):
                reply.feed(item)
                for chunk in reply.last_chunks():
                    yield event(chunk)
                yield event("[DONE]")
                return
            elif isinstance(item, Failed):
                if isinstance(item.error, Gone):
                    return
                yield event(error_for(item.error, param=None).body())
                yield event("[DONE]")
                return
    finally:
        job.cancel()
        watcher.cancel()
