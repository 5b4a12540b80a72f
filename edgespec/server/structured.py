"""What a request asks for beyond free text, compiled before any model work.

``plan_chat`` / ``plan_completion`` turn a validated request into a ``Structure``: the
prompt the engine gets, the ``edgespec.constraints.Constraint`` that holds the answer
(or None), and how the answer is read back (plain text, or tool calls). Everything that
can be wrong with the request is found here and answered with a 400 whose ``param``
names the field: a schema, regex or grammar that does not compile, a schema keyword the
constraint engine does not implement (unless the request sets ``lenient_schema``), tools
on a model whose chat template writes no tool calls, combinations we do not serve.

Tool calls (``edgespec.server.tools`` knows the format): ``tools`` go to the chat
template, which describes them to the model. ``tool_choice`` ``auto`` lets the model
write freely until it opens a call, and from the opening tag on the grammar holds it to
the tools' parameter schemas (free text is one lexeme of the grammar that every token
but a special one continues, so it costs a cheap mask and nothing else; see
``tools.call_grammar``); ``required`` and a named function constrain the answer from its
first token; ``none`` keeps the tools in the prompt (OpenAI's "do not call", as vLLM
reads it: the conversation may hold their calls and results) and holds the answer to
free text that opens no call (``tools.no_call_grammar``), on a template whose format
this server knows; on another template it leaves them out, as nothing could stop a call. ``parallel_tool_calls``
false allows one call per answer.

Compiling takes milliseconds, except the first time for a model: llguidance's tokenizer
over a 152k vocabulary takes about a second (then cached). The app calls these
functions off the event loop. ``edgespec.constraints`` is imported when a request first
asks for a structure, so free-text serving never loads llguidance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgespec.errors import InputError
from edgespec.llama.chat_template import render, tokenize_rendered

from .fim_prompt import suffix_prompt
from .schema import ApiError, ChatRequest, CompletionRequest
from .tools import NoToolFormat, call_grammar, no_call_grammar, tool_format


@dataclass(frozen=True)
class Structure:
    """A request's prompt and the structure of its answer.

    ``kind``: None (free text), a ``response_format`` type (``json_object``,
    ``json_schema``, ``regex``, ``grammar``) or ``"tool_calls"``; ``param``: the field
    that asked for it; ``constraint``: what the engine holds the answer to; ``tools``:
    the answer is read for tool calls; ``optional``: free text is a whole answer too
    (``tool_choice`` auto), so there is a structure only where a call began."""

    prompt: Any
    kind: str | None = None
    param: str | None = None
    constraint: Any = None
    tools: bool = False
    optional: bool = False


def _compile_format(response_format: dict, model: Any, *, lenient: bool, field: str) -> Any:
    from edgespec.constraints import ConstraintError, compile_constraint

    try:
        return compile_constraint(response_format, model, lenient=lenient)
    except ConstraintError as e:
        raise _bad(e, field) from None


def _bad(e: InputError, field: str) -> ApiError:
    """The 400 for a constraint that does not compile; ``param`` as the request named it."""
    param = getattr(e, "param", None) or field
    if field != "response_format" and param.startswith("response_format"):
        param = field  # llama-server's json_schema / grammar: the field itself
    message = str(e).replace("(--lenient-schema)", '("lenient_schema": true in the request)')
    return ApiError(400, message, param=param)


def plan_completion(engine: Any, req: CompletionRequest) -> Structure:
    prompt = req.engine_prompt()
    if req.suffix is not None:  # OpenAI's insertion, in the model's FIM format
        prompt = suffix_prompt(engine, prompt, req.suffix, max_tokens=-1)
    fmt, field = req.constraint_format()
    if fmt is None:
        return Structure(prompt=prompt)
    constraint = _compile_format(fmt, engine.target_model, lenient=req.lenient_schema, field=field)
    return Structure(prompt=prompt, kind=fmt["type"], param=field, constraint=constraint)


def _continued(model: Any, messages: list[dict]) -> list[int]:
    """The prompt ids of a conversation whose final assistant message the model goes on
    writing (``ChatRequest.continues``)."""
    try:
        return tokenize_rendered(model, render(model, messages, continue_final=True))
    except InputError as e:
        raise ApiError(400, str(e), param="messages") from None


def plan_chat(engine: Any, req: ChatRequest) -> Structure:
    messages = [m.to_engine() for m in req.messages]
    mode = req.tool_mode()
    fmt, field = req.constraint_format()
    if mode == "none":
        if req.tools and _writes_calls(engine.target_model):
            return _plan_no_call(engine.target_model, req, messages, fmt, field)
        prompt = _continued(engine.target_model, messages) if req.continues() else messages
        if fmt is None:
            return Structure(prompt=prompt)
        constraint = _compile_format(fmt, engine.target_model, lenient=req.lenient_schema, field=field)
        return Structure(prompt=prompt, kind=fmt["type"], param=field, constraint=constraint)
    if fmt is not None:
        raise ApiError(
            400,
            f"{field} cannot be combined with tools: a tool call has its own structure "
            '(send tool_choice "none" to answer in this format instead)',
            param=field,
        )
    model = engine.target_model
    try:
        tool_format(model.chat_template)
    except NoToolFormat as e:
        raise ApiError(400, str(e), param="tools", code="tools_not_supported") from None
    tools = list(req.tools or ())
    try:
        grammar = call_grammar(
            tools,
            model,
            only=None if mode in ("auto", "required") else mode,
            parallel=req.parallel_tool_calls is not False,
            free=mode == "auto",
            lenient=req.lenient_schema,
        )
    except InputError as e:
        raise ApiError(400, str(e), param="tools") from None
    from edgespec.constraints import ConstraintError, compile_lark

    try:
        constraint = compile_lark(grammar, model, lenient=req.lenient_schema)
    except ConstraintError as e:
        raise ApiError(
            400,
            f"the tools' parameters do not compile: {e}".replace(
                "(--lenient-schema)", '("lenient_schema": true in the request)'
            ),
            param="tools",
        ) from None
    try:
        text = render(
            model, messages, tools=[t.model_dump(exclude_none=True) for t in tools], continue_final=req.continues()
        )
    except InputError as e:
        raise ApiError(400, str(e), param="messages") from None
    return Structure(
        prompt=tokenize_rendered(model, text),
        kind="tool_calls",
        param="tools",
        constraint=constraint,
        tools=True,
        optional=mode == "auto",
    )


def _writes_calls(model: Any) -> bool:
    """Whether the target's chat template writes tool calls in a format this server knows."""
    try:
        tool_format(model.chat_template)
    except NoToolFormat:
        return False
    return True


def _plan_no_call(model: Any, req: ChatRequest, messages: list[dict], fmt: dict | None, field: str | None) -> Structure:
    """``tool_choice`` none with tools: OpenAI's "do not call", not "forget the tools".
    The tools stay in the prompt (the conversation may hold their calls and results),
    and the answer is held to free text without a call (``tools.no_call_grammar``), or
    to the request's ``response_format``, which cannot open a call either."""
    from edgespec.constraints import ConstraintError, compile_lark

    try:
        text = render(
            model,
            messages,
            tools=[t.model_dump(exclude_none=True) for t in req.tools or ()],
            continue_final=req.continues(),
        )
    except InputError as e:
        raise ApiError(400, str(e), param="messages") from None
    prompt = tokenize_rendered(model, text)
    if fmt is not None:
        constraint = _compile_format(fmt, model, lenient=req.lenient_schema, field=field)
        return Structure(prompt=prompt, kind=fmt["type"], param=field, constraint=constraint)
    try:
        constraint = compile_lark(no_call_grammar(), model)
    except ConstraintError as e:  # pragma: no cover - the grammar is fixed
        raise ApiError(400, f"the answer without tool calls does not compile: {e}", param="tool_choice") from None
    return Structure(prompt=prompt, constraint=constraint)
