"""The OpenAI request bodies we accept, and the error objects we answer with.

Requests are validated by pydantic in strict mode (a number where a string belongs is an
error, not a guess). Which fields are honoured, refused (a 400 naming the field) or
ignored is the one table in ``fields``; the models here declare exactly the honoured
ones (OpenAI's, and llama-server's ``top_k``, ``min_p``, ``repeat_penalty``,
``repeat_last_n``, ``n_predict``, ``ignore_eos``, ``logit_bias``, ``return_tokens``),
and ``refusal()`` checks the rest against the table. ``logprobs`` differs by endpoint:
chat's is OpenAI's bool (with ``top_logprobs``), completions' the legacy count
(``logprob_count()`` reads either); ``n`` is the number of choices (``choices()``).

Structured output: ``response_format`` (OpenAI's ``text`` / ``json_object`` /
``json_schema``, and edgespec's ``regex`` / ``grammar``), llama-server's top-level
``json_schema`` and ``grammar`` (GBNF), edgespec's ``lenient_schema``, and on chat
``tools`` / ``tool_choice`` / ``parallel_tool_calls``. Their shapes are checked here;
whether a schema or grammar compiles is ``edgespec.server.structured``'s question (still
a 400 before any model work). The messages and tool shapes a chat request holds are
``messages``'.

``ApiError`` carries an HTTP status and an OpenAI-style error object
(``{"error": {"message", "type", "param", "code"}}``, defined in ``bodies`` with the
one message naming the field that pydantic's report on a body becomes).
"""

from __future__ import annotations

import json
import math
from typing import Any, Callable, ClassVar, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from edgespec.decoding.params import SAMPLING_KEYS
from edgespec.llama.fim import suffix_stop

from .bodies import ApiError, describe_validation_error  # noqa: F401 - ApiError is re-exported
from .fields import refused_field
from .messages import Message, NamedToolChoice, Tool

MAX_STOP_STRINGS = 16
MAX_CHOICES = 16  # n
MAX_TOP_LOGPROBS = 20  # top_logprobs (OpenAI's limit), and the legacy logprobs: N


RESPONSE_FORMATS = ("text", "json_object", "json_schema", "regex", "grammar")


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    include_usage: bool = False


class _Request(BaseModel):
    """What both endpoints share: sampling, limits, stop strings, streaming.

    The declared fields are the ``HONOURED`` ones of ``fields``; everything else lands in
    ``model_extra``, where ``refusal()`` finds the refused ones."""

    model_config = ConfigDict(extra="allow", strict=True)
    endpoint: ClassVar[str] = ""

    max_tokens: Optional[int] = Field(None, ge=1)
    n_predict: Optional[int] = Field(None, ge=-1)
    temperature: Optional[float] = Field(None, ge=0.0, le=2.0)
    top_p: Optional[float] = Field(None, gt=0.0, le=1.0)
    top_k: Optional[int] = Field(None, ge=-1)
    min_p: Optional[float] = Field(None, ge=0.0, le=1.0)
    repeat_penalty: Optional[float] = Field(None, gt=0.0)
    repeat_last_n: Optional[int] = Field(None, ge=-1)
    frequency_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    presence_penalty: Optional[float] = Field(None, ge=-2.0, le=2.0)
    seed: Optional[int] = Field(None, ge=-1)
    logit_bias: Optional[Union[dict[str, Union[float, bool]], list[list[Union[int, float, str, bool]]]]] = None
    ignore_eos: Optional[bool] = None
    min_tokens: Optional[int] = Field(None, ge=0)
    stop: Optional[Union[str, list[str]]] = None
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    return_tokens: bool = False
    n: Optional[int] = Field(None, ge=1, le=MAX_CHOICES)
    top_logprobs: Optional[int] = Field(None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: Optional[dict[str, Any]] = None
    json_schema: Optional[dict[str, Any]] = None  # llama-server: a bare JSON Schema
    grammar: Optional[str] = None  # llama-server: a GBNF grammar
    lenient_schema: bool = False  # edgespec: relax schema keywords the constraint engine lacks
    n_cache_reuse: Optional[int] = Field(None, ge=0)  # llama-server: shifted KV reuse (Context.reuse_chunks)

    @field_validator("response_format")
    @classmethod
    def _known_format(cls, v: dict | None) -> dict | None:
        if v is not None and v.get("type") not in RESPONSE_FORMATS:
            raise ValueError(f"type must be one of {', '.join(RESPONSE_FORMATS)} (got {v.get('type')!r})")
        return v

    def constraint_format(self) -> tuple[dict | None, str]:
        """The structure asked for, in ``response_format``'s shape, and the field that
        asked for it (for a 400's ``param``); ``(None, "")`` for free text."""
        given = [
            (name, getattr(self, name))
            for name in ("response_format", "json_schema", "grammar")
            if getattr(self, name) is not None
        ]
        given = [(n, v) for n, v in given if not (n == "response_format" and v.get("type") == "text")]
        if len(given) > 1:
            raise ApiError(
                400,
                f"give one of response_format, json_schema and grammar, not {' and '.join(n for n, _ in given)}",
                param=given[1][0],
            )
        if not given:
            return None, ""
        name, value = given[0]
        if name == "json_schema":
            return {"type": "json_schema", "json_schema": {"name": "json_schema", "schema": value}}, name
        if name == "grammar":
            return {"type": "grammar", "grammar": value}, name
        return value, name

    @field_validator("n_predict")
    @classmethod
    def _some_tokens(cls, v: int | None) -> int | None:
        if v == 0:
            raise ValueError("n_predict must be at least 1, or -1 for as many as the context holds")
        return v

    @field_validator("stop")
    @classmethod
    def _few_stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > MAX_STOP_STRINGS:
            raise ValueError(f"at most {MAX_STOP_STRINGS} stop strings (got {len(v)})")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias_pairs(cls, v: Any) -> Any:
        if isinstance(v, list):
            for pair in v:
                if len(pair) != 2 or isinstance(pair[0], (bool, float)) or isinstance(pair[1], str) or pair[1] is True:
                    raise ValueError("each entry must be [token id or text, bias] (bias a number or false)")
        elif isinstance(v, dict) and any(b is True for b in v.values()):
            raise ValueError("a bias must be a number, or false to ban the token")
        return v

    def refusal(self) -> ApiError | None:
        """The 400 for the first refused field this request uses (``fields.FIELDS``)."""
        extra = self.model_extra or {}
        f = refused_field(dict(self), self.endpoint, [k for k in extra])
        if f is None:
            return None
        value = json.dumps(extra[f.name], ensure_ascii=False)
        value = value if len(value) <= 60 else value[:57] + "..."
        return ApiError(
            400,
            f"{f.name}={value} is not supported by this server: {f.note}",
            param=f.name,
            code="unsupported_parameter",
        )

    def stops(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def limit(self) -> int | None:
        """The requested reply length: None for the server's default, -1 for as many as
        the context holds (llama-server's ``n_predict: -1``)."""
        return self.n_predict if self.n_predict is not None else self.max_tokens

    def sampling_options(self, tokenize: Callable[[str], list[int]]) -> dict:
        """The ``Engine.stream`` sampling options this request sets, llama-server's
        conventions turned into the engine's: ``top_k: -1`` is off (0), ``seed: -1`` is a
        random seed (None), ``repeat_last_n`` is ``penalty_last_n``."""
        own = ("penalty_last_n", "logit_bias")  # the request spells these its own way, below
        names = [name for name in SAMPLING_KEYS if name not in own]
        opts = {name: getattr(self, name) for name in names if getattr(self, name) is not None}
        if opts.get("top_k") == -1:
            opts["top_k"] = 0
        if opts.get("seed") == -1:
            opts["seed"] = None
        if self.repeat_last_n is not None:
            opts["penalty_last_n"] = self.repeat_last_n
        if self.logit_bias:
            opts["logit_bias"] = self.bias_pairs(tokenize)
        if (count := self.logprob_count()) is not None:
            opts["logprobs"] = count
        return opts

    def choices(self) -> int:
        """How many choices to generate (``n``)."""
        return self.n or 1

    def logprob_count(self) -> int | None:
        """None when no logprobs are asked for, else the alternatives per token."""
        raise NotImplementedError

    def bias_pairs(self, tokenize: Callable[[str], list[int]]) -> tuple[tuple[int, float], ...]:
        """``logit_bias`` as (token id, bias) pairs, llama-server's way: a key or entry
        that is not a number is text, each of its tokens biased; ``false`` bans."""
        if not self.logit_bias:
            return ()
        items = self.logit_bias.items() if isinstance(self.logit_bias, dict) else self.logit_bias
        out: list[tuple[int, float]] = []
        for key, bias in items:
            value = -math.inf if bias is False else float(bias)
            if isinstance(key, str) and key.strip().lstrip("-").isdecimal() and key.strip().isascii():
                key = int(key)
            ids = [key] if isinstance(key, int) else tokenize(key)
            out.extend((int(t), value) for t in ids)
        return tuple(out)


class ChatRequest(_Request):
    endpoint: ClassVar[str] = "chat"
    messages: list[Message] = Field(min_length=1)
    max_completion_tokens: Optional[int] = Field(None, ge=1)
    tools: Optional[list[Tool]] = None
    tool_choice: Optional[Any] = None  # "none" | "auto" | "required" | NamedToolChoice
    parallel_tool_calls: Optional[bool] = None
    logprobs: Optional[bool] = None
    continue_final_message: Optional[bool] = None

    def logprob_count(self) -> int | None:
        """OpenAI's chat rule: ``logprobs: true`` asks, ``top_logprobs`` says how many
        alternatives (and needs ``logprobs: true``)."""
        if not self.logprobs:
            if self.top_logprobs:
                raise ApiError(400, "top_logprobs needs logprobs: true", param="top_logprobs")
            return None
        return self.top_logprobs or 0

    def continues(self) -> bool:
        """Whether the answer continues the final message (a prefill) instead of opening a
        new turn: by default when the conversation ends with an assistant message (without
        tool calls), as llama-server does; ``continue_final_message: false`` opens a new
        turn after it, ``true`` insists (a 400 when there is nothing to continue)."""
        last = self.messages[-1]
        ends = last.role == "assistant" and not last.tool_calls
        if self.continue_final_message and not ends:
            raise ApiError(
                400,
                "continue_final_message: the last message must be an assistant message "
                "(without tool calls) to continue",
                param="continue_final_message",
            )
        if (
            ends
            and self.continue_final_message is None
            and len(self.messages) > 1
            and self.messages[-2].role == "assistant"
        ):
            raise ApiError(
                400,
                "messages: the conversation ends with two assistant messages, so which one to "
                "continue is unclear (llama-server refuses it too); send continue_final_message: "
                "true to continue the last one, or false to answer in a new turn after them",
                param="messages",
            )
        return ends and self.continue_final_message is not False

    def refusal(self) -> ApiError | None:
        """``_Request.refusal``, after llama-server's and vLLM's rule that a reply cannot both
        open a new turn (``add_generation_prompt``) and continue the final message."""
        if self.continue_final_message is True and (self.model_extra or {}).get("add_generation_prompt") is True:
            return ApiError(
                400,
                "add_generation_prompt and continue_final_message cannot both be true: the reply "
                "either opens a new assistant turn or continues the final message; drop one",
                param="add_generation_prompt",
            )
        return super().refusal()

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, v: Any) -> Any:
        if v is None or v in ("none", "auto", "required"):
            return v
        if isinstance(v, dict):
            try:
                return NamedToolChoice.model_validate(v)
            except ValidationError as e:
                raise ValueError(
                    'a named tool_choice is {"type": "function", "function": {"name": ...}} '
                    f"({describe_validation_error(e)[0]})"
                ) from None
        raise ValueError(f'tool_choice must be "none", "auto", "required" or a named function (got {v!r})')

    @field_validator("tools")
    @classmethod
    def _distinct_tools(cls, v: list[Tool] | None) -> list[Tool] | None:
        names = [t.function.name for t in v or ()]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise ValueError(f"two tools are named {twice[0]!r}: tool names must be distinct")
        return v

    def tool_mode(self) -> str:
        """``"none"``, ``"auto"``, ``"required"`` or the name of the function to call."""
        choice = self.tool_choice
        if not self.tools:
            if choice not in (None, "none"):
                raise ApiError(400, "tool_choice needs tools: this request gives none", param="tool_choice")
            return "none"
        if isinstance(choice, NamedToolChoice):
            if choice.function.name not in {t.function.name for t in self.tools}:
                raise ApiError(
                    400,
                    f"tool_choice names {choice.function.name!r}, which is not one of the tools",
                    param="tool_choice",
                )
            return choice.function.name
        return choice or "auto"

    def limit(self) -> int | None:
        if self.n_predict is not None:
            return self.n_predict
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens


class CompletionRequest(_Request):
    endpoint: ClassVar[str] = "completions"
    prompt: Union[str, list[str], list[int]]
    logprobs: Optional[Union[bool, int]] = None  # the legacy count of alternatives
    suffix: Optional[str] = None  # OpenAI's insertion: the text after; the model's FIM format (``infill``)

    def stops(self) -> list[str]:
        """The stop strings; with ``suffix``, also where the middle reaches its text."""
        stops = super().stops()
        at = suffix_stop(self.suffix) if self.suffix else None
        return [*stops, at] if at is not None and at not in stops else stops

    @field_validator("logprobs")
    @classmethod
    def _logprob_count(cls, v: bool | int | None) -> bool | int | None:
        if isinstance(v, int) and not isinstance(v, bool) and not 0 <= v <= MAX_TOP_LOGPROBS:
            raise ValueError(f"logprobs must be from 0 to {MAX_TOP_LOGPROBS} (got {v})")
        return v

    def logprob_count(self) -> int | None:
        """The legacy rule: ``logprobs: N`` (N alternatives per token; true is 0);
        ``top_logprobs: N`` counts the same, for clients that send the chat name."""
        given, top = self.logprobs, self.top_logprobs
        if given is None:
            return top
        if given is False:
            if top:
                raise ApiError(400, "top_logprobs needs logprobs", param="top_logprobs")
            return None
        if given is True:
            return top or 0
        if top is not None and top != given:
            raise ApiError(400, f"logprobs={given} and top_logprobs={top} disagree: give one", param="top_logprobs")
        return given

    @field_validator("prompt")
    @classmethod
    def _one_prompt(cls, v: Any) -> Any:
        if isinstance(v, list) and v and isinstance(v[0], str):
            if len(v) != 1:
                raise ValueError(f"one prompt per request is supported (got {len(v)})")
        if isinstance(v, list) and not v:
            raise ValueError("the prompt is empty")
        return v

    def engine_prompt(self) -> str | list[int]:
        if isinstance(self.prompt, list) and self.prompt and isinstance(self.prompt[0], str):
            return self.prompt[0]
        return self.prompt
