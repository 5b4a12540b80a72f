"""Tool calls in the target's own format: whether a chat template writes them, the
grammar that holds each call to its tool's parameter schema, and the calls read back out
of the generated text, whole or piece by piece while it streams.

One format is known: Hermes-style blocks, which Qwen2.5 (and Hermes, and many others
trained after them) write and their templates document::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

several calls one after another, separated by a newline. The grammar writes the text
around the arguments itself (the tag, the name, the separators), so those tokens are
forced, and the arguments follow the tool's ``parameters`` schema with the layout the
model was trained on (``json.dumps``: ``", "`` and ``": "``, no other white space). Where
the tag is one token of the vocabulary (``<tool_call>`` is in Qwen2.5's), the grammar
asks for that token, as the model writes it.

``CallStream`` reads the text back: content before the first call, then each call's
name (as soon as it is complete) and its arguments as they grow. It tracks the JSON
nesting of the arguments, so a brace inside a string value does not end a call. The
whole answer of a non-streamed request is read by the same parser, so a streamed answer
and a whole one always agree. This module knows nothing of HTTP; the server turns its
``Piece`` records into ``delta.tool_calls`` and ``message.tool_calls``.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any, Sequence

from edgespec.errors import InputError

OPEN, CLOSE = "<tool_call>", "</tool_call>"
END = "}\n"  # after the arguments: the end of the call's object, before the closing tag
# the layout of the arguments, as json.dumps writes them (what the templates render)
ARGUMENT_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}
_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*"([A-Za-z0-9_-]{1,64})"\s*,\s*"arguments"\s*:\s*(?=\S)')
_TAIL = re.compile(r"\s*\}\s*" + re.escape(CLOSE))
# a call written without its tags, at the start of an answer: its object, maybe fenced,
# maybe in doubled braces (as the example in Qwen2.5-Coder-1.5B's template writes it)
_BARE_HEAD = re.compile(
    r'\s*(?:(```(?:json)?\s*)|(\{\s*))?\{\s*"name"\s*:\s*"([A-Za-z0-9_-]{1,64})"\s*,\s*'
    r'"arguments"\s*:\s*(?=\S)'
)
_BARE_TAIL = re.compile(r"\s*\}")
_DOUBLE_TAIL = re.compile(r"\s*\}\s*\}")
_FENCED_TAIL = re.compile(r"\s*\}\s*```")
_BARE_STARTS = ('```json{"name":"', '```{"name":"', '{"name":"', '{{"name":"')  # without white space
_WS = r"[ \t\n]*"
# free text: no opening tag anywhere, and no start like a call written without its tags
_FREE = (
    f'FREE: /(.|\\n)+/ & ~/{_WS}(```(json)?{_WS}|\\{{{_WS})?\\{{{_WS}"name"(.|\\n)*/ & ~/(.|\\n)*<tool_call>(.|\\n)*/'
)


class NoToolFormat(InputError):
    """The target's chat template has no tool-call format this server knows."""


def tool_format(template: str | None) -> str:
    """The tool-call format a chat template writes (``"hermes"``); ``NoToolFormat``
    when it writes none that edgespec knows."""
    if template and "tools" in template and OPEN in template and CLOSE in template:
        return "hermes"
    why = (
        "the model has no chat template"
        if not template
        else "its chat template does not render tools in a format edgespec knows"
    )
    raise NoToolFormat(
        f"this model cannot call tools: {why} (edgespec knows the Hermes-style "
        f"{OPEN} blocks of Qwen2.5 and Hermes templates)"
    )


def _literal(text: str) -> str:
    return json.dumps(text)


def _tag(model: Any, text: str) -> str:
    """``text`` as a grammar item: the special token when the vocabulary has it as one
    token (Lark's ``<name>``), else the literal text."""
    ids = model.tokenize(text, add_special=False, parse_special=True)
    return text if len(ids) == 1 and model.token_text(ids[0]) == text else _literal(text)


def argument_schema(i: int, function: Any, *, lenient: bool = False) -> dict:
    """The JSON Schema a call's arguments must follow: the tool's ``parameters`` (an
    object; no parameters: any object), in the model's layout."""
    schema = dict(function.parameters) if function.parameters is not None else {"type": "object"}
    kind = schema.setdefault("type", "object")
    if kind != "object":
        raise InputError(f"tools[{i}].function.parameters must describe an object (its type is {kind!r})")
    from edgespec.constraints.formats import schema_options  # llguidance: only once a request has tools

    extra = schema_options(schema, param="tools", what=f"tools[{i}].function.parameters schema")
    guidance = {**ARGUMENT_LAYOUT, **extra, **({"lenient": True} if lenient else {})}
    schema["x-guidance"] = {**guidance, **(schema.get("x-guidance") or {})}
    return schema


def call_grammar(
    tools: Sequence[Any],
    model: Any,
    *,
    only: str | None = None,
    parallel: bool = True,
    free: bool = False,
    lenient: bool = False,
) -> str:
    """The Lark grammar of an answer that calls tools: one call (``parallel`` False, or
    ``only`` a function's name) or several, each to one of ``tools`` (OpenAI's tool
    objects, pydantic's ``messages.Tool``) with arguments that follow its parameters.

    ``free`` (``tool_choice`` auto): the answer may be free text instead, and calls may
    follow the text. The free text is one lexeme that cannot hold the opening tag (so a
    call is always held to the grammar) and cannot start like a call written without its
    tags, ``{"name": ...`` or the same in a ```json fence: the Qwen2.5-Coder models
    often write their calls so (the 0.5B bare, the 1.5B fenced and indented), and such
    an answer is held to the tools as a call too, in the model's own layout, as llama.cpp
    does. Every other token but the special ones continues free text: it costs a mask
    (0.2 ms per token on average for a 152k vocabulary, most of it on the first tokens)
    and nothing else."""
    open_tag, close_tag = _tag(model, OPEN), _tag(model, CLOSE)
    rules, calls, bare = [], [], []
    for i, tool in enumerate(tools):
        fn = tool.function
        if only is not None and fn.name != only:
            continue
        head = '{"name": "' + fn.name + '", "arguments": '
        rules.append(f"call_{i}: {open_tag} {_literal(chr(10) + head)} args_{i} {_literal(END)} {close_tag}")
        rules.append(f"args_{i}: %json {json.dumps(argument_schema(i, fn, lenient=lenient))}")
        calls.append(f"call_{i}")
        if free:
            # untagged, in whatever layout the model writes: one lexeme up to the arguments
            loose = argument_schema(i, fn, lenient=lenient)
            loose["x-guidance"] = {**loose["x-guidance"], "whitespace_flexible": True}
            loose["x-guidance"].pop("item_separator", None)
            loose["x-guidance"].pop("key_separator", None)
            key = _WS.join(["", "\\{", '"name"', ":", f'"{fn.name}"', ",", '"arguments"', ":", ""])
            rules += [
                f"bare_{i}: HEAD_{i} loose_{i} END",
                f"fenced_{i}: FHEAD_{i} loose_{i} FEND",
                f"double_{i}: DHEAD_{i} loose_{i} DEND",
                f"HEAD_{i}: /{key}/",
                f"FHEAD_{i}: /{_WS}```(json)?{key}/",
                f"DHEAD_{i}: /{_WS}\\{{{key}/",
                f"loose_{i}: %json {json.dumps(loose)}",
            ]
            bare += [f"bare_{i}", f"fenced_{i}", f"double_{i}"]
    one = only is not None or not parallel

    def several(item: str) -> str:
        # a newline may follow the last call: the models write one before their end of turn
        return f'{item} "\\n"?' if one else f'{item} ("\\n" {item})* "\\n"?'

    lines = [f"calls: {several('call')}", "call: " + " | ".join(calls), *rules]
    if not free:
        return "\n".join(["start: calls", *lines]) + "\n"
    return (
        "\n".join(
            [
                "start: bare_calls | FREE? calls?",
                f"bare_calls: {several('bare')}",
                "bare: " + " | ".join(bare),
                *lines,
                f"END: /{_WS}\\}}/",
                f"FEND: /{_WS}\\}}{_WS}```/",
                f"DEND: /{_WS}\\}}{_WS}\\}}/",
                _FREE,
            ]
        )
        + "\n"
    )


# tool_choice none: no opening tag anywhere, and no start like a call's head in any
# spelling, after a fence or not: {"name", {{"name ", {'name ... (Qwen2.5-Coder-1.5B, told
# not to call after a tool result, wrote {{"name ": ... when only auto's exact forms were
# refused, and then the result itself: {{"temperature_c": 21, ...}})
_NO_CALL = (
    f"FREE: /(.|\\n)+/ & ~/{_WS}(```[a-z]*{_WS})?\\{{{_WS}\\{{?{_WS}[\"']?{_WS}name(.|\\n)*/"
    " & ~/(.|\\n)*<tool_call>(.|\\n)*/"
)


def no_call_grammar() -> str:
    """The Lark grammar of an answer that calls no tool (``tool_choice`` none, the tools
    still described in the prompt): free text that never holds the opening tag nor starts
    like a call's head in any spelling (``_NO_CALL``, broader than ``call_grammar``'s free
    text, which must leave those to the call rules), and no special token (the tag, when
    it is one) can be taken."""
    return "start: FREE?\n" + _NO_CALL + "\n"


@dataclass(frozen=True)
class Piece:
    """A piece of the answer: ``content`` text, or part of tool call ``index``: its
    start (``id`` and ``name``) or more of its ``arguments`` (JSON text)."""

    content: str = ""
    index: int = -1
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class Call:
    """One tool call as read so far."""

    id: str
    name: str
    arguments: str = ""
    complete: bool = False


@dataclass
class CallStream:
    """Reads Hermes tool-call blocks out of text that arrives in pieces: ``push`` a
    piece, get the ``Piece`` records it completes; ``finish`` at the end."""

    calls: list[Call] = field(default_factory=list)
    content: str = ""
    _buf: str = ""
    _at: int = 0  # what is before it has been read
    _state: str = "text"  # text -> head -> args -> tail -> text ...
    _bare: str = ""  # the current call came without its tags: "bare", "double" or "fenced"
    _depth: int = 0  # the arguments' JSON nesting, and whether in a string
    _in_string: bool = False
    _escaped: bool = False

    def push(self, text: str) -> list[Piece]:
        self._buf += text
        out: list[Piece] = []
        while self._step(out):
            pass
        return out

    def finish(self) -> list[Piece]:
        """What is still held back at the end of the text: white space that did not
        precede a call, a partial tag that was text after all. A call cut off before its
        name is complete is dropped (the reply ends with ``length``)."""
        out: list[Piece] = []
        if self._state == "text" and not (self.calls and self._bare):
            rest = self._buf[self._at :]
            self._say(out, rest.strip() if self.calls else rest)
        self._at = len(self._buf)
        return out

    def _say(self, out: list[Piece], text: str) -> None:
        if text:
            self.content += text
            out.append(Piece(content=text))

    def _step(self, out: list[Piece]) -> bool:
        """Read what the current state can read; False when it needs more text."""
        buf, at = self._buf, self._at
        if self._state == "text":
            if not self.content and (not self.calls or self._bare):
                m = _BARE_HEAD.match(buf, at)
                if m is not None:  # a call without its tags, at the start of the answer
                    self._bare = "fenced" if m.group(1) else "double" if m.group(2) else "bare"
                    self._start_call(out, m.group(3), m.end())
                    return True
                rest = re.sub(r"\s+", "", buf[at:])
                if rest and any(b.startswith(rest) or rest.startswith(b) for b in _BARE_STARTS):
                    return False  # it may be one: wait for its name
            j = buf.find(OPEN, at)
            if j >= 0:
                # the white space between text and a call belongs to neither
                self._say(out, buf[at:j].strip() if self.calls else buf[at:j].rstrip())
                self._at, self._state = j + len(OPEN), "head"
                return True
            end = len(buf)
            for n in range(min(len(OPEN) - 1, end - at), 0, -1):
                if OPEN.startswith(buf[end - n :]):
                    end -= n  # held: it may be the start of a tag
                    break
            while end > at and buf[end - 1].isspace():
                end -= 1  # held: it may precede a call
            if end > at and not (self.calls and not buf[at:end].strip()):
                self._say(out, buf[at:end].lstrip() if self.calls and not self.content else buf[at:end])
                self._at = end
            return False
        if self._state == "head":
            m = _HEAD.match(buf, at)
            if m is None:
                return False
            self._bare = ""
            self._start_call(out, m.group(1), m.end())
            return True
        if self._state == "args":
            end, closed = self._scan_arguments(at)
            if end > at:
                self.calls[-1].arguments += buf[at:end]
                out.append(Piece(index=len(self.calls) - 1, arguments=buf[at:end]))
                self._at = end
            if closed:
                self._state = "tail"
            return closed
        # tail: the end of the call's object (and the closing tag)
        m = {"": _TAIL, "bare": _BARE_TAIL, "double": _DOUBLE_TAIL, "fenced": _FENCED_TAIL}[self._bare].match(buf, at)
        if m is None:
            return False
        self.calls[-1].complete = True
        self._at, self._state = m.end(), "text"
        return True

    def _start_call(self, out: list[Piece], name: str, end: int) -> None:
        call = Call(id="call_" + uuid.uuid4().hex[:24], name=name)
        self.calls.append(call)
        out.append(Piece(index=len(self.calls) - 1, id=call.id, name=call.name))
        self._at, self._state = end, "args"
        self._depth, self._in_string, self._escaped = 0, False, False

    def _scan_arguments(self, at: int) -> tuple[int, bool]:
        """Advance through the arguments' JSON from ``at``: the index after the last
        character read, and whether that was the bracket that closes them."""
        buf = self._buf
        for i in range(at, len(buf)):
            c = buf[i]
            if self._in_string:
                if self._escaped:
                    self._escaped = False
                elif c == "\\":
                    self._escaped = True
                elif c == '"':
                    self._in_string = False
            elif c == '"':
                self._in_string = True
            elif c in "{[":
                self._depth += 1
            elif c in "}]":
                self._depth -= 1
                if self._depth == 0:
                    return i + 1, True
        return len(buf), False


def read_calls(text: str) -> tuple[str, list[Call]]:
    """The content and the tool calls of a whole answer."""
    stream = CallStream()
    stream.push(text)
    stream.finish()
    return stream.content, stream.calls
