"""The OpenAI response objects of one generation: whole bodies, stream chunks, errors.

``ReplyBody`` builds a chat or text completion from the engine's events (``usage``,
llama-server's ``timings`` with ``draft_by_source``: drafted and accepted tokens by where
the drafts came from, ``token_ids`` on request); ``sse`` writes a streamed one as
server-sent events (each choice carries ``from_draft``, each chunk an ``x_edgespec``
object with the running drafted / accepted counts, for the chat page: extra fields that
OpenAI clients ignore); ``error_for`` turns an error the engine or the worker raised into
the ``ApiError`` the client gets (a 400 for bad input, a 500 that holds no traceback for
anything unexpected). Knows nothing of routes or of the worker's thread.

A constrained answer (``response_format``, tools) says how it ended in its choice:
``"structure": {"type": ..., "complete": true|false}`` (and ``"error"``: why it is not
complete; ``"relaxed"``: what ``lenient_schema`` relaxed, if anything); ``finish_reason`` is
``"length"`` when ``max_tokens`` cut it inside the structure. A chat answer that calls
tools reads its text with ``tools.CallStream``: ``message.tool_calls`` (ids, type
``function``, the function's name and its arguments as a JSON string) and
``finish_reason: "tool_calls"``; streamed, ``delta.tool_calls`` by index: a call's id,
type and name first, then its arguments piece by piece. The whole and the streamed
answer are read by the same parser, so they agree.

Asked for ``logprobs`` (``logprobs.LogprobWriter``), a choice carries them: the whole
answer's in the body, each streamed chunk those of the tokens it carries (a token whose
text is still held back, e.g. a possible stop string, comes with a later chunk). With
``n`` > 1 there is one ``ReplyBody`` per choice (``index``), joined by ``choices``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from typing import Any, AsyncIterator, Awaitable, Callable

from edgespec.decoding.params import SamplingOptionError
from edgespec.errors import ContextOverflowError, EdgespecError, InputError
from edgespec.events import Done, Round, Stats, Token, TokenLogprob

from .logprobs import LogprobWriter
from .schema import ApiError, ChatRequest, CompletionRequest
from .structured import Structure
from .tools import CallStream, Piece
from .worker import Failed, QueueFull, ServeJob, WorkerDied

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
        return ApiError(400, str(e), param=getattr(e, "param", None))
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


DRAFT_SOURCES = ("prompt", "memory", "grammar", "model")


def draft_by_source(stats: Stats) -> dict:
    """``draft_n`` / ``draft_n_accepted`` by where the drafts came from: "prompt" (prompt
    lookup), "memory" (earlier answers of the request's key), "grammar" (its forced and
    likely tokens), "model" (a draft model); every source, 0 where it drafted nothing."""
    names = [*DRAFT_SOURCES, *sorted(set(stats.drafted_by_source) - set(DRAFT_SOURCES))]
    return {
        name: {
            "draft_n": stats.drafted_by_source.get(name, 0),
            "draft_n_accepted": stats.accepted_by_source.get(name, 0),
        }
        for name in names
    }


class ReplyBody:
    """Builds the OpenAI response objects for one generation, from its events."""

    def __init__(
        self,
        *,
        chat: bool,
        model: str,
        req: ChatRequest | CompletionRequest,
        queue_wait: float,
        structure: Structure | None = None,
        index: int = 0,
        token_bytes: Callable[[int, bool], bytes] | None = None,
        fingerprint: str | None = None,
    ) -> None:
        self.chat = chat
        self.model = model
        self.fingerprint = fingerprint  # OpenAI's system_fingerprint: the key is always there
        self.req = req
        self.queue_wait = queue_wait
        self.structure = structure or Structure(prompt=None)
        self.calls = CallStream() if self.structure.tools else None
        self.id = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.object = "chat.completion" if chat else "text_completion"
        self.drafted = 0
        self.accepted = 0
        self.done: Done | None = None
        self.index = index  # of this choice, with n > 1
        # logprobs, when asked for: the writer, and a stream's tokens not yet in a chunk
        self.logprobs = (
            LogprobWriter(token_bytes, chat=chat)
            if token_bytes is not None and req.logprob_count() is not None
            else None
        )
        self._pending: list[TokenLogprob] = []

    def feed(self, event: Any) -> None:
        if isinstance(event, Token):
            if self.logprobs is not None and event.logprob is not None:
                self._pending.append(event.logprob)
        elif isinstance(event, Round):
            self.drafted += event.drafted
            self.accepted += event.accepted
        elif isinstance(event, Done):
            self.done = event

    # -- how it ended -----------------------------------------------------------------
    def finish_reason(self) -> str:
        done = self.done
        assert done is not None
        if (
            self.calls is not None
            and self.calls.calls
            and done.finish_reason == "stop"
            and all(c.complete for c in self.calls.calls)
        ):
            return "tool_calls"
        return done.finish_reason

    def structure_info(self) -> dict | None:
        """``{"type", "complete"}`` for a constrained answer, None for free text."""
        done = self.done
        if self.structure.kind is None or done is None:
            return None
        # the matcher's word (the structure as the reply ended), else how it ended
        complete = done.structured_complete
        if complete is None:
            complete = done.finish_reason == "stop"
        if self.calls is not None:
            if self.structure.optional and not self.calls.calls:
                return None  # tool_choice auto, answered in free text
            complete = complete and all(c.complete for c in self.calls.calls)
        info = {"type": self.structure.kind, "complete": bool(complete)}
        if not complete and done.structure_error:  # why, in the words every surface uses
            info["error"] = done.structure_error
        relaxed = getattr(self.structure.constraint, "warnings", ())
        if relaxed:  # what lenient_schema let through: never relaxed silently
            info["relaxed"] = list(relaxed)
        return info

    # -- whole responses ------------------------------------------------------------
    def usage(self, stats: Stats) -> dict:
        return {
            "prompt_tokens": stats.prompt_tokens,
            "completion_tokens": stats.generated_tokens,
            "total_tokens": stats.prompt_tokens + stats.generated_tokens,
            "prompt_tokens_details": {"cached_tokens": max(0, stats.prompt_tokens - stats.prompt_tokens_processed)},
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
            "forced_n": stats.forced,  # drafts the grammar forced (in draft_n too)
            "draft_by_source": draft_by_source(stats),
            "cache_n": max(0, stats.prompt_tokens - stats.prompt_tokens_processed),
            "queue_ms": round(self.queue_wait * 1000, 3),
        }

    def message(self) -> dict:
        done = self.done
        assert done is not None
        if self.calls is None:
            return {"role": "assistant", "content": done.text}
        self.calls.push(done.text)
        self.calls.finish()
        if not self.calls.calls:
            return {"role": "assistant", "content": self.calls.content}
        return {
            "role": "assistant",
            "content": self.calls.content or None,
            "tool_calls": [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.calls.calls
            ],
        }

    def choice(self) -> dict:
        """This choice of the whole response."""
        done = self.done
        assert done is not None
        lps = self.logprobs.object(done.logprobs or ()) if self.logprobs is not None else None
        if self.chat:
            choice = {
                "index": self.index,
                "message": self.message(),
                "logprobs": lps,
                "finish_reason": self.finish_reason(),
            }
        else:
            choice = {"index": self.index, "text": done.text, "logprobs": lps, "finish_reason": done.finish_reason}
        info = self.structure_info()
        if info is not None:
            choice["structure"] = info
        return choice

    def body(self) -> dict:
        done = self.done
        assert done is not None
        out = {
            "id": self.id,
            "object": self.object,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": [self.choice()],
            "usage": self.usage(done.stats),
            "timings": self.timings(done.stats),
        }
        if self.req.return_tokens:
            out["token_ids"] = list(done.token_ids)
        return out

    # -- stream chunks --------------------------------------------------------------
    def chunk(
        self,
        *,
        text: str | None = None,
        from_draft: bool | None = None,
        finish: str | None = None,
        first: bool = False,
        tool_call: dict | None = None,
    ) -> dict:
        if self.chat:
            delta: dict = {}
            if first:
                delta["role"] = "assistant"
            if text is not None:
                delta["content"] = text
            if tool_call is not None:
                delta["tool_calls"] = [tool_call]
            choice: dict = {
                "index": self.index,
                "delta": delta,
                "logprobs": self._chunk_logprobs(),
                "finish_reason": finish,
            }
        else:
            choice = {
                "index": self.index,
                "text": text or "",
                "logprobs": self._chunk_logprobs(),
                "finish_reason": finish,
            }
        if from_draft is not None:
            choice["from_draft"] = from_draft
        return {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": [choice],
            "x_edgespec": {"drafted": self.drafted, "accepted": self.accepted},
        }

    def _chunk_logprobs(self) -> dict | None:
        """The logprobs of the tokens no chunk has carried yet (None when none are)."""
        if self.logprobs is None or not self._pending:
            return None
        lps, self._pending = self._pending, []
        return self.logprobs.object(lps)

    def text_chunks(self, text: str, from_draft: bool | None) -> list[dict]:
        """The chunks of a piece of the answer's text."""
        if self.calls is None:
            return [self.chunk(text=text, from_draft=from_draft)] if text else []
        return [self._piece_chunk(p, from_draft) for p in self.calls.push(text)]

    def _piece_chunk(self, p: Piece, from_draft: bool | None) -> dict:
        if p.index < 0:
            return self.chunk(text=p.content, from_draft=from_draft)
        call: dict = {"index": p.index}
        if p.id is not None:
            call.update(id=p.id, type="function", function={"name": p.name, "arguments": ""})
        else:
            call["function"] = {"arguments": p.arguments}
        return self.chunk(tool_call=call, from_draft=from_draft)

    def stream_chunks(self, ev: Token | Round | Done, usage: bool = True) -> list[dict]:
        """Feed one generation event and return the chunks it streams: a token's text
        (less what a stop string may still claim), nothing for a round, the finish (and
        the usage chunk when asked and ``usage``) for ``Done``."""
        self.feed(ev)
        if isinstance(ev, Token):
            return self.text_chunks(ev.text, ev.from_draft)
        if isinstance(ev, Done):
            return self.last_chunks(usage=usage)
        return []

    def last_chunks(self, usage: bool = True) -> list[dict]:
        """The chunks that end this choice (``usage``: and the usage chunk, when asked)."""
        done = self.done
        assert done is not None
        chunks = [self._piece_chunk(p, None) for p in self.calls.finish()] if self.calls is not None else []
        last = self.chunk(text=None if self.chat else "", finish=self.finish_reason())
        info = self.structure_info()
        if info is not None:
            last["choices"][0]["structure"] = info
        last["timings"] = self.timings(done.stats)
        if self.req.return_tokens:
            last["token_ids"] = list(done.token_ids)
        chunks.append(last)
        if usage and self.req.include_usage():
            chunks.append(self.usage_chunk(done.stats))
        return chunks

    def usage_chunk(self, stats: Stats) -> dict:
        """The stream's usage chunk (``stream_options.include_usage``), no choices."""
        return {
            "id": self.id,
            "object": "chat.completion.chunk" if self.chat else "text_completion",
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
            "choices": [],
            "usage": self.usage(stats),
            "timings": self.timings(stats),
        }


def event(obj: dict | str) -> str:
    return f"data: {obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)}\n\n"


async def sse(
    reply: ReplyBody, job: ServeJob, watcher: asyncio.Task, next_event: Callable[[ServeJob], Awaitable[Any]]
) -> AsyncIterator[str]:
    """The server-sent events of one streamed generation (``next_event``: the worker's,
    which never waits on a dead worker). An error midway is an error event, then
    ``[DONE]``."""
    try:
        if reply.chat:
            yield event(reply.chunk(text="", first=True))
        while True:
            item = await next_event(job)
            if isinstance(item, (Token, Round, Done)):
                for chunk in reply.stream_chunks(item):
                    yield event(chunk)
                if isinstance(item, Done):
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
