"""OpenAI's Responses API (``POST /v1/responses``), its text and tool subset, over the chat path.

A Responses request becomes the chat completion it means, answered by the app's own chat
handler (``Api.chat``: the same queue, key, guard, limits, prefix reuse, hang-ups,
structured output and tool calls); the answer is rewritten as a Responses object, its
chunks as Responses events. Served:

* ``input``: a string (one user message) or a list of items: messages (``role`` user,
  assistant, system or developer; ``content`` a string or ``input_text`` /
  ``output_text`` parts; ``"type": "message"`` optional), ``function_call`` items (a call
  the model made, sent back) and ``function_call_output`` items (its result);
  ``instructions`` (a system message first); ``max_output_tokens``, ``temperature``,
  ``top_p``; ``text.format`` ``text`` / ``json_object`` / ``json_schema`` (the chat path's
  ``response_format``); function ``tools``, ``tool_choice`` (none, auto, required,
  ``{"type": "function", "name"}``), ``parallel_tool_calls``; the chat path's extra
  sampling fields (``seed``, ``top_k``, ``stop`` ...) pass through.
* ``output``: a ``message`` item (one ``output_text`` part) for text, a ``function_call``
  item (``call_id``, ``name``, ``arguments``) per call; ``usage`` (``input_tokens`` with
  ``cached_tokens``, ``output_tokens``, ``total_tokens``); ``status`` ``completed``, or
  ``incomplete`` with ``incomplete_details.reason: "max_output_tokens"``.
* ``stream``: ``response.created``, ``response.in_progress``, per item
  ``response.output_item.added``, then for text ``response.content_part.added``,
  ``response.output_text.delta`` ..., ``.done``, ``response.content_part.done``, for a
  call ``response.function_call_arguments.delta`` ..., ``.done``, and
  ``response.output_item.done``; last ``response.completed`` or ``response.incomplete``
  (``response.failed`` after an ``error`` event if the generation fails midway); each
  event has its ``sequence_number``.

Refused with a 400 naming the field (``REFUSED`` and the input checks): tools that are
not functions, what needs stored state (``previous_response_id``, ``conversation``,
``store: true``, ``background``), ``include``, ``prompt`` templates, ``top_logprobs``,
``truncation: "auto"``, input that is not text, calls or results (images, files).
Metadata and hints (``model``, ``metadata``, ``user``, ``reasoning`` ...) are ignored.
"""

from __future__ import annotations

import json
from typing import Any, AsyncIterator, Callable, Optional, Union

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from .bodies import parse_request
from .responses_events import ResponseBuilder
from .routes_extra import Api
from .schema import ApiError

ROUTES = ("/responses",)
ROLES = ("user", "assistant", "system", "developer")
PASS_THROUGH = (
    "seed",
    "top_k",
    "min_p",
    "repeat_penalty",
    "repeat_last_n",
    "frequency_penalty",
    "presence_penalty",
    "stop",
    "logit_bias",
    "min_tokens",
    "ignore_eos",
    "lenient_schema",
)


def _none_or(*inert: Any) -> Callable[[Any], bool]:
    return lambda v: v is None or any(v == i and type(v) is type(i) for i in inert)


# field -> (asks for nothing with this value, why it is refused)
REFUSED: dict[str, tuple[Callable[[Any], bool], str]] = {
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
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Union[str, dict[str, Any]]] = None
    parallel_tool_calls: Optional[bool] = None

    def refusal(self) -> ApiError | None:
        for name, value in (self.model_extra or {}).items():
            rule = REFUSED.get(name)
            if rule is not None and not rule[0](value):
                shown = json.dumps(value, ensure_ascii=False)
                shown = shown if len(shown) <= 60 else shown[:57] + "..."
                return ApiError(
                    400,
                    f"{name}={shown} is not supported by this server: {rule[1]}",
                    param=name,
                    code="unsupported_parameter",
                )
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
        raise ApiError(
            400,
            f"text.format.type must be text, json_object or json_schema (got {fmt.type!r})",
            param="text.format.type",
        )

    def messages(self) -> list[dict]:
        out = [{"role": "system", "content": self.instructions}] if self.instructions else []
        if isinstance(self.input, str):
            return [*out, {"role": "user", "content": self.input}]
        if not self.input:
            raise ApiError(400, "input: the input is empty", param="input")
        for i, item in enumerate(self.input):
            kind = item.get("type", "message")
            if kind == "function_call":
                call = {
                    "id": _text(item, "call_id", i),
                    "type": "function",
                    "function": {"name": _text(item, "name", i), "arguments": _text(item, "arguments", i)},
                }
                if out and out[-1]["role"] == "assistant":  # the calls of one turn: one message
                    out[-1].setdefault("tool_calls", []).append(call)
                else:
                    out.append({"role": "assistant", "content": None, "tool_calls": [call]})
            elif kind == "function_call_output":
                result = _parts_text(i, item.get("output") or "", "output")
                out.append({"role": "tool", "tool_call_id": _text(item, "call_id", i), "content": result})
            else:
                out.append(_message(i, item))
        return out

    def chat_tools(self) -> dict:
        """``tools``, ``tool_choice`` and ``parallel_tool_calls`` in the chat path's shape."""
        out: dict[str, Any] = {}
        if self.tools:
            out["tools"] = [_tool(i, t) for i, t in enumerate(self.tools)]
        choice = self.tool_choice
        if isinstance(choice, dict):
            if choice.get("type") != "function" or not isinstance(choice.get("name"), str):
                raise ApiError(
                    400, 'tool_choice: a named choice is {"type": "function", "name": ...}', param="tool_choice"
                )
            choice = {"type": "function", "function": {"name": choice["name"]}}
        if choice is not None and not (choice in ("none", "auto") and not self.tools):
            out["tool_choice"] = choice
        if self.parallel_tool_calls is not None:
            out["parallel_tool_calls"] = self.parallel_tool_calls
        return out

    def chat_body(self) -> dict:
        body: dict[str, Any] = {"messages": self.messages(), "stream": self.stream}
        for ours, theirs in (("max_output_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p")):
            if getattr(self, ours) is not None:
                body[theirs] = getattr(self, ours)
        fmt = self.response_format()
        if fmt is not None:
            body["response_format"] = fmt
        body.update(self.chat_tools())
        if self.stream:
            body["stream_options"] = {"include_usage": True}
        extra = self.model_extra or {}
        body.update({k: extra[k] for k in PASS_THROUGH if k in extra})
        return body


def _text(item: dict, key: str, i: int) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ApiError(400, f"input.{i}.{key}: a string is required", param=f"input.{i}.{key}")
    return value


def _tool(i: int, tool: dict) -> dict:
    """A Responses function tool as a chat tool; a 400 naming ``tools.i`` for other kinds."""
    if tool.get("type") != "function":
        raise ApiError(
            400,
            f"tools.{i}.type: {tool.get('type')!r} tools are not supported: this server calls functions",
            param=f"tools.{i}.type",
            code="unsupported_parameter",
        )
    fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if tool.get(k) is not None}
    return {"type": "function", "function": fn}


def _message(i: int, item: dict) -> dict:
    """One input item as a chat message; a 400 naming ``input.i...`` for what is not text."""
    kind = item.get("type", "message")
    if kind != "message":
        raise ApiError(
            400,
            f"input.{i}.type: {kind!r} items are not supported: this server takes text "
            "messages, function calls and their outputs",
            param=f"input.{i}.type",
            code="unsupported_parameter",
        )
    role = item.get("role")
    if role not in ROLES:
        raise ApiError(400, f"input.{i}.role must be one of {', '.join(ROLES)} (got {role!r})", param=f"input.{i}.role")
    return {"role": role, "content": _parts_text(i, item.get("content"), "content")}


def _parts_text(i: int, content: Any, key: str) -> str:
    """A string, or the text of a list of text parts (a 400 for anything else)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise ApiError(400, f"input.{i}.{key} must be a string or a list of text parts", param=f"input.{i}.{key}")
    texts = []
    for j, part in enumerate(content):
        ptype = part.get("type") if isinstance(part, dict) else None
        if ptype not in ("input_text", "output_text", "text") or not isinstance(part.get("text"), str):
            raise ApiError(
                400,
                f"input.{i}.{key}.{j}: {ptype!r} parts are not supported: this server takes text (input_text)",
                param=f"input.{i}.{key}.{j}.type",
                code="unsupported_parameter",
            )
        texts.append(part["text"])
    return "".join(texts)


# the chat request's field -> the Responses request's, for a 400 the chat path gives
CHAT_PARAMS = {
    "max_tokens": "max_output_tokens",
    "response_format": "text.format",
    "messages": "input",
    "tools": "tools",
    "tool_choice": "tool_choice",
}


def _renamed(e: ApiError) -> ApiError:
    if e.param is not None:
        head, dot, rest = e.param.partition(".")
        if head in CHAT_PARAMS:
            e.param = CHAT_PARAMS[head] + (dot + rest if head != "messages" else "")
            e.message = e.message.replace(head, e.param, 1) if e.message.startswith(head) else e.message
    return e


def add_routes(app: FastAPI, api: Api) -> None:
    """``POST /v1/responses`` and ``/responses``."""

    @app.post("/v1/responses")
    @app.post("/responses")
    async def responses(request: Request) -> Response:
        api.check_key(request)
        req = parse_request(ResponsesRequest, await api.read_body(request))
        body = json.dumps(req.chat_body()).encode()
        try:
            answer = await api.chat(request, body)
        except ApiError as e:
            raise _renamed(e) from None
        build = ResponseBuilder(req, api.model_id)
        if isinstance(answer, StreamingResponse):
            return StreamingResponse(
                _closing(build.events(answer.body_iterator), answer.body_iterator),
                media_type="text/event-stream",
                headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
            )
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
