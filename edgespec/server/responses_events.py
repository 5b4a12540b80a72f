"""The Responses API's output (``responses_api``): a Responses object from a chat
completion, and Responses events from the chat completion's stream.

``ResponseBuilder`` keeps the answer's items: a ``message`` item with one ``output_text``
part for the text, a ``function_call`` item for each tool call. Streamed, an item opens
when its first piece arrives (``response.output_item.added``; text that comes before a
call is whole when the call starts) and closes at the end, in the order they opened;
every event carries the next ``sequence_number``. It reads the chat path's own objects
(``responses.ReplyBody``'s), so it knows nothing of the engine.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator, Mapping


def _new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


class ResponseBuilder:
    """The Responses objects of one answer, from the chat completion's objects.
    ``output`` holds the finished items, in order."""

    def __init__(self, req: Any, model: str) -> None:  # req: a responses_api.ResponsesRequest
        self.req = req
        self.model = model
        self.id = _new_id("resp_")
        self.created = int(time.time())
        self.sequence = 0
        self.output: list[dict] = []
        self.opened = 0  # items opened so far: the next one's output_index
        self.text: dict | None = None  # the message item being streamed
        self.calls: dict[int, dict] = {}  # the function calls being streamed, by the chat delta's index

    @staticmethod
    def message(item_id: str, text: str | None, status: str) -> dict:
        return {
            "id": item_id,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": [] if text is None else [ResponseBuilder.part(text)],
        }

    @staticmethod
    def call(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict:
        return {
            "id": item_id,
            "type": "function_call",
            "status": status,
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
        }

    @staticmethod
    def part(text: str) -> dict:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def response(self, status: str, *, usage: Mapping | None = None, error: dict | None = None) -> dict:
        req = self.req
        fmt = (
            req.text.format.model_dump(by_alias=True, exclude_none=True)
            if req.text is not None and req.text.format is not None
            else {"type": "text"}
        )
        return {
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "error": error,
            "model": self.model,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": req.instructions,
            "max_output_tokens": req.max_output_tokens,
            "output": list(self.output) if status in ("completed", "incomplete") else [],
            "parallel_tool_calls": req.parallel_tool_calls is not False,
            "previous_response_id": None,
            "store": False,
            "temperature": req.temperature,
            "top_p": req.top_p,
            "text": {"format": fmt},
            "tool_choice": req.tool_choice or ("auto" if req.tools else "none"),
            "tools": req.tools or [],
            "truncation": "disabled",
            "metadata": {},
            "usage": self.usage(usage) if usage is not None else None,
        }

    @staticmethod
    def usage(chat: Mapping) -> dict:
        cached = (chat.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return {
            "input_tokens": chat["prompt_tokens"],
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": chat["completion_tokens"],
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": chat["total_tokens"],
        }

    def whole(self, completion: Mapping) -> dict:
        """The Responses object for a whole chat completion."""
        choice = completion["choices"][0]
        status = "incomplete" if choice["finish_reason"] == "length" else "completed"
        text, calls = choice["message"].get("content") or "", choice["message"].get("tool_calls") or []
        if text or not calls:
            self.output.append(self.message(_new_id("msg_"), text, status))
        for c in calls:
            self.output.append(
                self.call(_new_id("fc_"), c["id"], c["function"]["name"], c["function"]["arguments"], "completed")
            )
        out = self.response(status, usage=completion["usage"])
        if "structure" in choice:
            out["structure"] = choice["structure"]
        return out

    # -- streamed -----------------------------------------------------------------------
    def event(self, kind: str, **fields: Any) -> str:
        obj = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(obj, ensure_ascii=False)}\n\n"

    def _open(self) -> int:
        self.opened += 1
        return self.opened - 1

    def text_piece(self, piece: str) -> list[str]:
        out = []
        if self.text is None:
            self.text = {"id": _new_id("msg_"), "index": self._open(), "text": ""}
            out.append(
                self.event(
                    "response.output_item.added",
                    output_index=self.text["index"],
                    item=self.message(self.text["id"], None, "in_progress"),
                )
            )
            out.append(self.event("response.content_part.added", **self._where(), part=self.part("")))
        self.text["text"] += piece
        out.append(self.event("response.output_text.delta", **self._where(), delta=piece, logprobs=[]))
        return out

    def _where(self) -> dict:
        assert self.text is not None
        return {"item_id": self.text["id"], "output_index": self.text["index"], "content_index": 0}

    def close_text(self, status: str) -> list[str]:
        if self.text is None:
            return []
        text, where = self.text["text"], self._where()
        item = self.message(self.text["id"], text, status)
        self.output.append(item)
        self.text = None
        return [
            self.event("response.output_text.done", **where, text=text, logprobs=[]),
            self.event("response.content_part.done", **where, part=self.part(text)),
            self.event("response.output_item.done", output_index=where["output_index"], item=item),
        ]

    def call_piece(self, delta: dict) -> list[str]:
        """One ``delta.tool_calls`` entry: a call's start (id and name) or a piece of its arguments."""
        fn = delta.get("function") or {}
        if delta.get("id"):
            out = self.close_text("completed")  # the text before a call is whole
            call = self.calls[delta["index"]] = {
                "id": _new_id("fc_"),
                "index": self._open(),
                "call_id": delta["id"],
                "name": fn.get("name", ""),
                "arguments": "",
            }
            out.append(
                self.event(
                    "response.output_item.added",
                    output_index=call["index"],
                    item=self.call(call["id"], call["call_id"], call["name"], "", "in_progress"),
                )
            )
            return out
        call = self.calls[delta["index"]]
        call["arguments"] += fn.get("arguments") or ""
        return [
            self.event(
                "response.function_call_arguments.delta",
                item_id=call["id"],
                output_index=call["index"],
                delta=fn.get("arguments") or "",
            )
        ]

    def close_calls(self) -> list[str]:
        out = []
        for call in self.calls.values():
            item = self.call(call["id"], call["call_id"], call["name"], call["arguments"], "completed")
            self.output.append(item)
            out.append(
                self.event(
                    "response.function_call_arguments.done",
                    item_id=call["id"],
                    output_index=call["index"],
                    name=call["name"],
                    arguments=call["arguments"],
                )
            )
            out.append(self.event("response.output_item.done", output_index=call["index"], item=item))
        self.calls = {}
        return out

    async def events(self, chunks: AsyncIterator[Any]) -> AsyncIterator[str]:
        """The Responses events of a streamed chat completion (``chunks``: its SSE text)."""
        yield self.event("response.created", response=self.response("in_progress"))
        yield self.event("response.in_progress", response=self.response("in_progress"))
        finish, usage = None, None
        async for chunk in _data(chunks):
            if "error" in chunk:
                err = chunk["error"]
                yield self.event("error", code=err.get("code"), message=err.get("message"), param=err.get("param"))
                yield self.event(
                    "response.failed",
                    response=self.response(
                        "failed", error={"code": err.get("code") or "server_error", "message": err.get("message")}
                    ),
                )
                return
            usage = chunk.get("usage") or usage
            for choice in chunk.get("choices", []):
                delta = choice.get("delta", {})
                for e in self.text_piece(delta["content"]) if delta.get("content") else []:
                    yield e
                for tc in delta.get("tool_calls") or []:
                    for e in self.call_piece(tc):
                        yield e
                finish = choice.get("finish_reason") or finish
        status = "incomplete" if finish == "length" else "completed"
        if self.text is None and not self.calls and not self.output:
            for e in self.text_piece(""):  # an empty answer is an empty message
                yield e
        for e in [*self.close_text(status), *self.close_calls()]:
            yield e
        yield self.event(f"response.{status}", response=self.response(status, usage=usage))


async def _data(chunks: AsyncIterator[Any]) -> AsyncIterator[dict]:
    """The JSON objects of a chat completion's event stream (``[DONE]`` left out)."""
    async for raw in chunks:
        for line in (raw.decode() if isinstance(raw, bytes) else raw).splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                yield json.loads(line[len("data: ") :])
