"""OpenAI's Responses API (``POST /v1/responses``), its text subset, over the chat path.

A Responses request is turned into the chat completion it means and answered by the
app's own chat handler (``Api.chat``: the same queue, key, guard, limits, prefix reuse,
hang-up handling and structured output), then the chat answer is rewritten as a
Responses object, or its chunks as Responses events. Served:

* ``input``: a string (one user message) or a list of messages (``{"role", "content"}``,
  ``"type": "message"`` optional; roles user, assistant, system, developer; content a
  string or ``input_text`` / ``output_text`` parts); ``instructions`` (a system message
  first); ``max_output_tokens``, ``temperature``, ``top_p``; ``text.format`` ``text``,
  ``json_object`` or ``json_schema`` (``name``, ``schema``, ``strict``: the chat path's
  ``response_format``, compiled before any model work); the chat path's extra sampling
  fields (``seed``, ``top_k``, ``stop`` ...) pass through.
* ``stream``: ``response.created``, ``response.in_progress``,
  ``response.output_item.added``, ``response.content_part.added``,
  ``response.output_text.delta`` ..., ``response.output_text.done``,
  ``response.content_part.done``, ``response.output_item.done``, then
  ``response.completed`` (or ``response.incomplete`` when ``max_output_tokens`` cut it,
  ``response.failed`` after an ``error`` event if the generation failed midway), each
  with its ``sequence_number``.
* ``usage``: ``input_tokens`` (``input_tokens_details.cached_tokens``: the reused prefix),
  ``output_tokens``, ``total_tokens``; ``status`` ``completed``, or ``incomplete`` with
  ``incomplete_details.reason`` ``max_output_tokens``.

Not served, and refused with a 400 that names the field (``REFUSED``): tools and tool
choice, anything that needs stored state (``previous_response_id``, ``conversation``,
``store: true``, ``background``), ``include``, reusable ``prompt`` templates,
``top_logprobs``, ``truncation: "auto"``, and input items or parts that are not text
(images, files, tool results). Metadata and hints (``model``, ``metadata``, ``user``,
``reasoning``, ``service_tier`` ...) are ignored, as on the chat path.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any, AsyncIterator, Callable, Mapping, Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from .routes_extra import Api
from .schema import ApiError, describe_validation_error

ROUTES = ("/responses",)
ROLES = ("user", "assistant", "system", "developer")
PASS_THROUGH = ("seed", "top_k", "min_p", "repeat_penalty", "repeat_last_n", "frequency_penalty",
                "presence_penalty", "stop", "logit_bias", "min_tokens", "ignore_eos", "lenient_schema")


def _none_or(*inert: Any) -> Callable[[Any], bool]:
    return lambda v: v is None or any(v == i and type(v) is type(i) for i in inert)


# field -> (asks for nothing with this value, why it is refused)
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
    "tools": (lambda v: v in (None, []), "tools are not served on /v1/responses: use /v1/chat/completions"),
    "tool_choice": (_none_or("none", "auto"), "tools are not served on /v1/responses: use /v1/chat/completions"),
    "previous_response_id": (_none_or(), "responses are not stored: send the whole conversation as input"),
    "conversation": (_none_or(), "conversations are not stored: send the whole conversation as input"),
    "store": (_none_or(False), "responses are not stored (send store: false)"),
    "background": (_none_or(False), "background responses need storage, which this server has not"),
    "include": (lambda v: v in (None, []), "no extra output items are produced"),
    "prompt": (_none_or(), "reusable prompt templates are not supported: send input"),
    "top_logprobs": (_none_or(0), "token log-probabilities are not returned"),
    "truncation": (_none_or("disabled"), "the input is never truncated: one that does not fit is refused"),
}


class TextFormat(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True, populate_by_name=True)
    type: str
    name: Optional[str] = None
    description: Optional[str] = None
    schema_: Optional[dict[str, Any]] = Field(None, alias="schema")
    strict: Optional[bool] = None


class TextOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    format: Optional[TextFormat] = None


class ResponsesRequest(BaseModel):
    model_config = ConfigDict(extra="allow", strict=True)
    input: Union[str, list[dict[str, Any]]]
    instructions: Optional[str] = None
    max_output_tokens: Optional[int] = Field(None, ge=1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    stream: bool = False
    text: Optional[TextOptions] = None

    def refusal(self) -> ApiError | None:
        for name, value in (self.model_extra or {}).items():
            rule = REFUSED.get(name)
            if rule is not None and not rule[0](value):
                shown = json.dumps(value, ensure_ascii=False)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                return ApiError(400, f"{name}={shown} is not supported by this server: {rule[1]}",
                                param=name, code="unsupported_parameter")
        return None

    def response_format(self) -> dict | None:
        fmt = self.text.format if self.text is not None else None
        if fmt is None or fmt.type == "text":
            return None
        if fmt.type == "json_object":
            return {"type": "json_object"}
        if fmt.type == "json_schema":
            if fmt.schema_ is None:
                raise ApiError(400, "text.format.schema: this field is required", param="text.format.schema")
            spec = {"name": fmt.name or "response", "schema": fmt.schema_}
            if fmt.strict is not None:
                spec["strict"] = fmt.strict
            return {"type": "json_schema", "json_schema": spec}
        raise ApiError(400, f"text.format.type must be text, json_object or json_schema (got {fmt.type!r})",
                       param="text.format.type")

    def messages(self) -> list[dict]:
        out = [{"role": "system", "content": self.instructions}] if self.instructions else []
        if isinstance(self.input, str):
            return [*out, {"role": "user", "content": self.input}]
        if not self.input:
            raise ApiError(400, "input: the input is empty", param="input")
        return [*out, *(_message(i, item) for i, item in enumerate(self.input))]

    def chat_body(self) -> dict:
        body: dict[str, Any] = {"messages": self.messages(), "stream": self.stream}
        for ours, theirs in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"),
                             ("top_p", "top_p")):
            if getattr(self, ours) is not None:
                body[theirs] = getattr(self, ours)
        fmt = self.response_format()
        if fmt is not None:
            body["response_format"] = fmt
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        extra = self.model_extra or {}
        body.update({k: extra[k] for k in PASS_THROUGH if k in extra})
        return body


def _message(i: int, item: dict) -> dict:
    """One input item as a chat message; a 400 naming ``input.i...`` for what is not text."""
    kind = item.get("type", "message")
    if kind != "message":
        raise ApiError(400, f"input.{i}.type: {kind!r} items are not supported: this server takes text "
                            "messages", param=f"input.{i}.type", code="unsupported_parameter")
    role = item.get("role")
    if role not in ROLES:
        raise ApiError(400, f"input.{i}.role must be one of {', '.join(ROLES)} (got {role!r})",
                       param=f"input.{i}.role")
    content = item.get("content")
    if isinstance(content, str):
        return {"role": role, "content": content}
    if not isinstance(content, list):
        raise ApiError(400, f"input.{i}.content must be a string or a list of text parts", param=f"input.{i}.content")
    texts = []
    for j, part in enumerate(content):
        ptype = part.get("type") if isinstance(part, dict) else None
        if ptype not in ("input_text", "output_text", "text") or not isinstance(part.get("text"), str):
            raise ApiError(400, f"input.{i}.content.{j}: {ptype!r} parts are not supported: this server takes "
                                "text (input_text)", param=f"input.{i}.content.{j}.type", code="unsupported_parameter")
        texts.append(part["text"])
    return {"role": role, "content": "".join(texts)}


def _parse(body: bytes) -> ResponsesRequest:
    try:
        req = ResponsesRequest.model_validate_json(body)
    except ValidationError as e:
        message, param = describe_validation_error(e)
        raise ApiError(400, message, param=param) from None
    refused = req.refusal()
    if refused is not None:
        raise refused
    return req


# the chat request's field -> the Responses request's, for a 400 the chat path gives
CHAT_PARAMS = {"max_tokens": "max_output_tokens", "response_format": "text.format", "messages": "input"}


def _renamed(e: ApiError) -> ApiError:
    if e.param is not None:
        head, dot, rest = e.param.partition(".")
        if head in CHAT_PARAMS:
            e.param = CHAT_PARAMS[head] + (dot + rest if head != "messages" else "")
            e.message = e.message.replace(head, e.param, 1) if e.message.startswith(head) else e.message
    return e


class ResponseBuilder:
    """The Responses objects of one answer, from the chat completion's objects."""

    def __init__(self, req: ResponsesRequest, model: str) -> None:
        self.req = req
        self.model = model
        self.id = "resp_" + uuid.uuid4().hex[:24]
        self.item_id = "msg_" + uuid.uuid4().hex[:24]
        self.created = int(time.time())
        self.sequence = 0

    def item(self, text: str, status: str) -> dict:
        return {"id": self.item_id, "type": "message", "status": status, "role": "assistant",
                "content": [] if status == "in_progress" else [self.part(text)]}

    @staticmethod
    def part(text: str) -> dict:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}

    def response(self, status: str, *, text: str = "", usage: Mapping | None = None,
                 error: dict | None = None) -> dict:
        fmt = self.req.text.format.model_dump(by_alias=True, exclude_none=True) \
            if self.req.text is not None and self.req.text.format is not None else {"type": "text"}
        done = status in ("completed", "incomplete")
        return {
            "id": self.id, "object": "response", "created_at": self.created, "status": status,
            "error": error, "model": self.model,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": self.req.instructions, "max_output_tokens": self.req.max_output_tokens,
            "output": [self.item(text, status)] if done else [],
            "parallel_tool_calls": False, "previous_response_id": None, "store": False,
            "temperature": self.req.temperature, "top_p": self.req.top_p, "text": {"format": fmt},
            "tool_choice": "none", "tools": [], "truncation": "disabled", "metadata": {},
            "usage": self.usage(usage) if usage is not None else None,
        }

    @staticmethod
    def usage(chat: Mapping) -> dict:
        cached = (chat.get("prompt_tokens_details") or {}).get("cached_tokens", 0)
        return {"input_tokens": chat["prompt_tokens"], "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": chat["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": chat["total_tokens"]}

    def whole(self, completion: Mapping) -> dict:
        """The Responses object for a whole chat completion."""
        choice = completion["choices"][0]
        status = "incomplete" if choice["finish_reason"] == "length" else "completed"
        out = self.response(status, text=choice["message"].get("content") or "", usage=completion["usage"])
        if "structure" in choice:
            out["output"][0]["structure"] = choice["structure"]
        return out

    def event(self, kind: str, **fields: Any) -> str:
        obj = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return f"event: {kind}\ndata: {json.dumps(obj, ensure_ascii=False)}\n\n"

    async def events(self, chunks: AsyncIterator[Any]) -> AsyncIterator[str]:
        """The Responses events of a streamed chat completion (``chunks``: its SSE text)."""
        where = {"item_id": self.item_id, "output_index": 0, "content_index": 0}
        yield self.event("response.created", response=self.response("in_progress"))
        yield self.event("response.in_progress", response=self.response("in_progress"))
        yield self.event("response.output_item.added", output_index=0, item=self.item("", "in_progress"))
        yield self.event("response.content_part.added", **where, part=self.part(""))
        text, finish, usage = "", None, None
        async for raw in chunks:
            for line in (raw.decode() if isinstance(raw, bytes) else raw).splitlines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                chunk = json.loads(line[len("data: "):])
                if "error" in chunk:
                    err = chunk["error"]
                    yield self.event("error", code=err.get("code"), message=err.get("message"),
                                     param=err.get("param"))
                    yield self.event("response.failed", response=self.response(
                        "failed", error={"code": err.get("code") or "server_error", "message": err.get("message")}))
                    return
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices", []):
                    piece = choice.get("delta", {}).get("content")
                    if piece:
                        text += piece
                        yield self.event("response.output_text.delta", **where, delta=piece, logprobs=[])
                    finish = choice.get("finish_reason") or finish
        status = "incomplete" if finish == "length" else "completed"
        yield self.event("response.output_text.done", **where, text=text, logprobs=[])
        yield self.event("response.content_part.done", **where, part=self.part(text))
        yield self.event("response.output_item.done", output_index=0, item=self.item(text, status))
        yield self.event(f"response.{status}", response=self.response(status, text=text, usage=usage))


def add_routes(app: FastAPI, api: Api) -> None:
    """``POST /v1/responses`` and ``/responses``."""

    @app.post("/v1/responses")
    @app.post("/responses")
    async def responses(request: Request) -> Response:
        api.check_key(request)
        req = _parse(await api.read_body(request))
        body = json.dumps(req.chat_body()).encode()
        try:
            answer = await api.chat(request, body)
        except ApiError as e:
            raise _renamed(e) from None
        build = ResponseBuilder(req, api.model_id)
        if isinstance(answer, StreamingResponse):
            return StreamingResponse(_closing(build.events(answer.body_iterator), answer.body_iterator),
                                     media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return JSONResponse(build.whole(json.loads(bytes(answer.body))))


async def _closing(events: Any, inner: Any) -> AsyncIterator[str]:
    """``events``, and the chat stream under them closed however they end (a hang-up
    included): the chat stream's own clean-up stops the generation."""
    try:
        async for e in events:
            yield e
    finally:
        for gen in (events, inner):
            close = getattr(gen, "aclose", None)
            if close is not None:
                await close()
