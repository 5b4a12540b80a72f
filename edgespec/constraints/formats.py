"""Request shapes -> llguidance grammars, checked without a model.

``grammar_spec(response_format)`` reads OpenAI's shapes (``{"type": "json_object"}``,
``{"type": "json_schema", "json_schema": {"name", "schema", "strict"}}``) and ours
(``{"type": "regex", "regex": ...}``, ``{"type": "grammar", "grammar": ..., "syntax":
"lark" | "gbnf"}``), builds the llguidance grammar and validates it, so a bad request
fails here with a one-line ``ConstraintError`` naming the field, before any model work.

JSON layout. A schema compiles with fixed separators and no free whitespace
(``JSON_LAYOUT``): every byte between values is then decided by the grammar, so it is
forced (drafted for free, see ``decoding/speculative.py``) instead of chosen by the model. The
default is the spaced layout, ``", "`` and ``": "``, the way ``json.dumps`` and these
models write JSON: held to compact separators (``","`` ``":"``, fewer tokens) the
models can leave their own habits and loop, e.g. repeating an enum value in an array
without ``maxItems`` until ``max_tokens`` (issue 28). ``JSON_LAYOUTS`` names the three
layouts; ``with_layout(schema, name)`` asks for one through the schema's own
``x-guidance``, which every door (Python, ``--schema``, the server) passes through and
which wins over the default. Measured with ``benchmarks/structured_layout.py`` (see
docs/structured-output.md for the table): validity and answers first, then speed.

A schema keyword llguidance does not implement (``uniqueItems``, ...) is an error that
names it, unless ``lenient``; the relaxations are then kept as warnings on the spec, for
the caller to show. Nothing is ever relaxed silently.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from llguidance import LLMatcher
from llguidance.gbnf_to_lark import any_to_lark

from ..errors import ConstraintError
from .schema_check import has_one_of, infinite_recursion, overlapping_one_of

# llguidance's JSON options per layout; a schema's "x-guidance" overrides the default
JSON_LAYOUTS = {
    "spaced": {"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False},
    "compact": {"item_separator": ",", "key_separator": ":", "whitespace_flexible": False},
    # any JSON white space around "," and ":": the model chooses it
    "flexible": {"item_separator": ",", "key_separator": ":", "whitespace_flexible": True},
}
DEFAULT_LAYOUT = "spaced"
JSON_LAYOUT = JSON_LAYOUTS[DEFAULT_LAYOUT]
RESPONSE_FORMAT_TYPES = ("text", "json_object", "json_schema", "regex", "grammar")
_GBNF_RULE = re.compile(r"^\s*[A-Za-z][\w-]*\s*::=", re.MULTILINE)
_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[([^\]]*)\]")
_ONE_OF_AS_ANY_OF = "oneOf not fully supported, falling back to anyOf"  # llguidance's warning


@dataclass(frozen=True)
class GrammarSpec:
    """A checked constraint before it meets a tokenizer: ``kind`` ("json", "regex" or
    "grammar"), the llguidance ``grammar`` (its JSON text), the JSON ``schema`` (None
    for the other kinds), a lazy ``trigger`` (free text until it appears, see
    ``matcher.py``), what lenient mode relaxed (``warnings``) and the request field it
    came from (``param``)."""

    kind: str
    grammar: str
    schema: object = None
    trigger: str | None = None
    warnings: tuple[str, ...] = ()
    param: str = "response_format"  # the request's field, for a later error (matcher.probe)


def one_line(message: str) -> str:
    """llguidance's multi-line diagnostics (source excerpts, carets) as one line."""
    keep = []
    for raw in message.splitlines():
        line = raw.strip()
        if not line or set(line) <= {"^", " "} or re.match(r"^\d+\s*\|", line):
            continue
        keep.append(line)
    text = "; ".join(keep) if keep else message.strip()
    return text.replace(":;", ":")[:400]


def check_grammar(
    grammar: str, *, param: str, what: str, lenient: bool = False, one_of_proven: bool = False
) -> tuple[str, ...]:
    """Validate a llguidance grammar; raise ``ConstraintError`` on an error, and on a
    warning unless ``lenient`` (a warning means something was relaxed). Returns the
    warnings that lenient mode let through. ``one_of_proven``: every ``oneOf`` is
    disjoint (``schema_options``), so holding it as ``anyOf`` relaxes nothing."""
    is_error, messages = LLMatcher.validate_grammar_with_warnings(grammar)
    # without a tokenizer llguidance cannot look up a special token (<tool_call>): that
    # warning relaxes nothing (the token is looked up when the grammar meets a model)
    messages = [
        m
        for m in messages
        if not m.startswith("no tokenizer - can't validate") and not (one_of_proven and m.startswith(_ONE_OF_AS_ANY_OF))
    ]
    if is_error or (messages and not lenient):
        raise ConstraintError(_explain(messages[0] if messages else "invalid", what, lenient), param=param)
    return tuple(one_line(m) for m in messages)


def _explain(message: str, what: str, lenient: bool) -> str:
    unimpl = _UNIMPLEMENTED.search(message)
    if unimpl:
        keys = [k.strip().strip('"') for k in unimpl.group(1).split(",") if k.strip()]
        words = ", ".join(repr(k) for k in keys)
        return (
            f"the {what} uses {'keyword' if len(keys) == 1 else 'keywords'} {words}, which "
            "the constraint engine (llguidance) does not implement; remove it, or ask for "
            "lenient mode (--lenient-schema) to ignore it"
        )
    if "coerce_one_of" in message:  # an option only we can set: say what the user can do
        return (
            f"the {what} uses 'oneOf' with branches that a value could match more than one of, "
            "which the constraint engine (llguidance) cannot hold exactly; make the branches "
            "disjoint (a required property with a different 'const' in each, or different types), "
            "use 'anyOf', or ask for lenient mode (--lenient-schema) to hold it as anyOf"
        )
    return f"invalid {what}: {one_line(message)}"


def schema_options(
    schema: object, *, param: str = "response_format.json_schema.schema", what: str = "JSON schema"
) -> dict:
    """Check what llguidance would only find while generating (``schema_check``), and
    return the compile options the schema needs: ``coerce_one_of`` where every
    ``oneOf`` has disjoint branches (then it is exactly an ``anyOf``; llguidance proves
    some of those itself, not all). A schema without a finite value is a
    ``ConstraintError``; a ``oneOf`` that may overlap is left to llguidance, which
    refuses it (``_explain`` words that) unless lenient."""
    detail = infinite_recursion(schema)
    if detail:
        raise ConstraintError(
            f"the {what} is satisfied by no finite value: {detail}; let the recursion "
            "end (make the property optional, or allow null with anyOf)",
            param=param,
        )
    if has_one_of(schema) and overlapping_one_of(schema) is None:
        return {"coerce_one_of": True}
    return {}


_PROVEN_ONE_OF = '"coerce_one_of": true'  # how lark_json marks a schema whose oneOfs are disjoint


def _check_layout(layout: object) -> None:
    if layout not in JSON_LAYOUTS:
        raise ConstraintError(f"unknown JSON layout {layout!r}: use one of " + ", ".join(JSON_LAYOUTS), param="layout")


def with_layout(schema: dict | bool, layout: str) -> dict:
    """``schema`` asking to be written in ``layout`` (a name in ``JSON_LAYOUTS``):
    the layout's options in its ``x-guidance``, over any it had. The way to choose a
    layout anywhere a schema goes (``--schema`` file, the server's ``json_schema``)."""
    _check_layout(layout)
    base = {} if schema is True else schema
    if not isinstance(base, dict):
        raise ConstraintError(f"the JSON schema must be an object, not {type(schema).__name__}")
    guidance = {
        k: v
        for k, v in (base.get("x-guidance") or {}).items()
        if k not in ("item_separator", "key_separator", "whitespace_flexible")
    }
    return {**base, "x-guidance": {**JSON_LAYOUTS[layout], **guidance}}


def lark_json(schema: dict | bool, *, layout: str | None = DEFAULT_LAYOUT, lenient: bool = False) -> str:
    """A JSON Schema as a Lark ``%json{...}`` term for a grammar of one's own (a tool
    call: ``start: <tool_call> "\\n" `` + lark_json(params) + ...), in ``layout`` (a
    name in ``JSON_LAYOUTS``; None: llguidance's own defaults); the schema's own
    ``x-guidance`` wins over either. ``lenient``: keywords llguidance lacks are ignored
    (with a warning that ``compile_lark(..., lenient=True)`` keeps) instead of refused."""
    if layout is not None:
        _check_layout(layout)
    extra = schema_options(schema, param="grammar")
    if isinstance(schema, dict) and (layout is not None or lenient or extra):
        options = {**(JSON_LAYOUTS[layout] if layout is not None else {}), **extra, **schema.get("x-guidance", {})}
        schema = {**schema, "x-guidance": {**options, **({"lenient": True} if lenient else {})}}
    return "%json" + json.dumps(schema)


def json_schema_grammar(
    schema: object, *, lenient: bool = False, param: str = "response_format.json_schema.schema"
) -> GrammarSpec:
    """A JSON Schema (a dict, or True for any JSON value) as a checked grammar spec."""
    if not isinstance(schema, (dict, bool)):
        raise ConstraintError(f"the JSON schema must be an object, not {type(schema).__name__}", param=param)
    extra = schema_options(schema, param=param)
    try:
        grammar = LLMatcher.grammar_from_json_schema(
            json.dumps(schema), defaults=dict(JSON_LAYOUT), overrides={"lenient": lenient, **extra}
        )
    except (ValueError, TypeError) as exc:
        raise ConstraintError(f"invalid JSON schema: {one_line(str(exc))}", param=param) from None
    warnings = check_grammar(
        grammar, param=param, what="JSON schema", lenient=lenient, one_of_proven=bool(extra.get("coerce_one_of"))
    )
    return GrammarSpec("json", grammar, schema=schema, warnings=warnings, param=param)


def regex_grammar(regex: object, *, param: str = "response_format.regex") -> GrammarSpec:
    if not isinstance(regex, str) or not regex:
        raise ConstraintError("the regex must be a non-empty string", param=param)
    grammar = LLMatcher.grammar_from_regex(regex)
    return GrammarSpec("regex", grammar, warnings=check_grammar(grammar, param=param, what="regex"), param=param)


def is_gbnf(text: str) -> bool:
    """llama.cpp's GBNF (``rule ::= ...``) rather than Lark (``rule: ...``)."""
    return bool(_GBNF_RULE.search(text))


def lark_grammar(
    text: object,
    *,
    syntax: str | None = None,
    trigger: str | None = None,
    param: str = "response_format.grammar",
    lenient: bool = False,
) -> GrammarSpec:
    """A Lark or GBNF grammar (``syntax`` None: told apart by ``::=``) as a checked spec;
    any llguidance warning (a JSON keyword it ignores) is an error unless ``lenient``.
    With ``trigger``, the grammar describes the text from the trigger on, trigger
    included (llguidance's Lark: a special token is written ``<tool_call>``)."""
    if not isinstance(text, str) or not text.strip():
        raise ConstraintError("the grammar must be a non-empty string", param=param)
    if syntax not in (None, "lark", "gbnf"):
        raise ConstraintError(
            f"unknown grammar syntax {syntax!r}: use 'lark' or 'gbnf'",
            param=param.rpartition(".")[0] + ".syntax" if "." in param else param,
        )
    if trigger is not None and (not isinstance(trigger, str) or not trigger):
        raise ConstraintError("a trigger must be a non-empty string", param=param)
    if syntax == "gbnf" or (syntax is None and is_gbnf(text)):
        try:
            text = any_to_lark(text)
        except Exception as exc:  # noqa: BLE001 - the converter raises plain Exceptions
            raise ConstraintError(f"invalid GBNF grammar: {one_line(str(exc))}", param=param) from None
    grammar = LLMatcher.grammar_from_lark(text)
    # a %json{...} inside may use a keyword llguidance lacks: refused unless lenient
    warnings = check_grammar(
        grammar, param=param, what="grammar", lenient=lenient, one_of_proven=_PROVEN_ONE_OF in text
    )
    return GrammarSpec("grammar", grammar, trigger=trigger, warnings=warnings, param=param)


def grammar_spec(response_format: object, *, lenient: bool = False) -> GrammarSpec | None:
    """The checked spec of an OpenAI-style ``response_format`` (None for ``text``)."""
    if response_format is None:
        return None
    if not isinstance(response_format, dict):
        raise ConstraintError('response_format must be an object such as {"type": "json_object"}')
    kind = response_format.get("type")
    if kind not in RESPONSE_FORMAT_TYPES:
        raise ConstraintError(
            f"unknown response_format type {kind!r}: use one of " + ", ".join(RESPONSE_FORMAT_TYPES),
            param="response_format.type",
        )
    if kind == "text":
        return None
    if kind == "json_object":
        # llama-cpp-python's shape {"type": "json_object", "schema": {...}} is accepted too
        schema = response_format.get("schema", {"type": "object"})
        return json_schema_grammar(schema, lenient=lenient, param="response_format.schema")
    if kind == "json_schema":
        js = response_format.get("json_schema")
        if not isinstance(js, dict):
            raise ConstraintError(
                'response_format.json_schema must be an object {"name", "schema", "strict"}',
                param="response_format.json_schema",
            )
        if "schema" not in js:
            raise ConstraintError(
                "response_format.json_schema has no schema", param="response_format.json_schema.schema"
            )
        return json_schema_grammar(js["schema"], lenient=lenient)
    if kind == "regex":
        return regex_grammar(response_format.get("regex"))
    return lark_grammar(response_format.get("grammar"), syntax=response_format.get("syntax"))
