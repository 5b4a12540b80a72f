"""The structured-output options of ``generate``: ``--schema``, ``--grammar``, ``--regex``
and ``--lenient-schema`` read into a ``response_format`` and checked before any model is
loaded (a bad schema, grammar or regex is one line and exit code 2)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer

from edgespec.constraints import GrammarSpec, grammar_spec
from edgespec.errors import ConstraintError, InputError

SchemaOpt = Annotated[Optional[Path], typer.Option(
    "--schema", help="Structured output: the reply is JSON valid against this JSON Schema file.")]
GrammarOpt = Annotated[Optional[Path], typer.Option(
    "--grammar", help="Structured output: the reply follows this grammar (.lark, or llama.cpp's .gbnf).")]
RegexOpt = Annotated[Optional[str], typer.Option(
    "--regex", help="Structured output: the reply matches this regular expression.")]
LenientOpt = Annotated[bool, typer.Option(
    "--lenient-schema", help="Ignore schema keywords the constraint engine does not implement "
                             "(uniqueItems, ...), with a warning, instead of refusing the schema.")]


def _read(path: Path, what: str) -> str:
    try:
        return path.expanduser().read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what} file {path}: {getattr(exc, 'strerror', None) or exc}") from None


def response_format_from_options(schema: Path | None, grammar: Path | None, regex: str | None,
                                 lenient: bool) -> tuple[dict | None, GrammarSpec | None]:
    """The ``response_format`` the options ask for and its checked spec (both None when
    none is given). Raises ``InputError`` / ``ConstraintError`` with one line."""
    given = [name for name, v in (("--schema", schema), ("--grammar", grammar), ("--regex", regex)) if v is not None]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)} cannot be combined: give one constraint")
    if lenient and schema is None:
        raise InputError("--lenient-schema applies to --schema only")
    if schema is not None:
        text = _read(schema, "schema")
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConstraintError(f"{schema}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
                                  param="response_format.json_schema.schema") from None
        rf = {"type": "json_schema", "json_schema": {"name": schema.stem, "schema": obj, "strict": True}}
    elif grammar is not None:
        syntax = {".lark": "lark", ".gbnf": "gbnf"}.get(grammar.suffix.lower())
        rf = {"type": "grammar", "grammar": _read(grammar, "grammar"), **({"syntax": syntax} if syntax else {})}
    elif regex is not None:
        rf = {"type": "regex", "regex": regex}
    else:
        return None, None
    try:
        return rf, grammar_spec(rf, lenient=lenient)
    except ConstraintError as exc:
        source = schema or grammar or "--regex"
        raise ConstraintError(f"{source}: {exc}", param=exc.param) from None
