"""The structured-output options of ``generate``: ``--schema``, ``--grammar``, ``--regex``
and ``--lenient-schema`` read into a ``response_format`` and checked before any model is
loaded (a bad schema, grammar or regex is one line and exit code 2; a file over 4 MiB
too), and the answer's end: a structured answer that is not complete is exit code 10,
after its partial text is written."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, Callable, Optional

import typer

from edgespec.constraints import GrammarSpec, grammar_spec
from edgespec.errors import ConstraintError, IncompleteStructureError, InputError

SchemaOpt = Annotated[
    Optional[Path],
    typer.Option("--schema", help="Structured output: the reply is JSON valid against this JSON Schema file."),
]
GrammarOpt = Annotated[
    Optional[Path],
    typer.Option("--grammar", help="Structured output: the reply follows this grammar (.lark, or llama.cpp's .gbnf)."),
]
RegexOpt = Annotated[
    Optional[str], typer.Option("--regex", help="Structured output: the reply matches this regular expression.")
]
LenientOpt = Annotated[
    bool,
    typer.Option(
        "--lenient-schema",
        help="Ignore schema keywords the constraint engine does not implement "
        "(uniqueItems, ...), with a warning, instead of refusing the schema "
        "(in a batch: every line's schema).",
    ),
]


MAX_FILE_BYTES = 4 * 1024 * 1024
"""The largest --schema / --grammar file read (the server's request body limit): a bigger
one, or a device without end (/dev/zero), is refused after reading this much."""


def _read(path: Path, what: str) -> str:
    try:
        with path.expanduser().open("rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
        if len(data) > MAX_FILE_BYTES:
            raise InputError(
                f"the {what} file {path} is larger than {MAX_FILE_BYTES // 2**20} MiB, the limit for a {what}"
            )
        return data.decode("utf-8")
    except FileNotFoundError:
        raise InputError(f"{what} file not found: {path}") from None
    except IsADirectoryError:
        raise InputError(f"cannot read {what} file {path}: it is a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read {what} file {path}: {getattr(exc, 'strerror', None) or exc}") from None


def response_format_from_options(
    schema: Path | None, grammar: Path | None, regex: str | None, lenient: bool, *, batch: bool = False
) -> tuple[dict | None, GrammarSpec | None]:
    """The ``response_format`` the options ask for and its checked spec (both None when
    none is given). Raises ``InputError`` / ``ConstraintError`` with one line. In a
    ``batch``, ``--lenient-schema`` also applies to the lines' own schemas, so it may
    come without ``--schema``."""
    given = [name for name, v in (("--schema", schema), ("--grammar", grammar), ("--regex", regex)) if v is not None]
    if len(given) > 1:
        raise InputError(f"{' and '.join(given)} cannot be combined: give one constraint")
    if lenient and schema is None and not batch:
        raise InputError("--lenient-schema applies to --schema only")
    if schema is not None:
        text = _read(schema, "schema")
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConstraintError(
                f"{schema}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})",
                param="response_format.json_schema.schema",
            ) from None
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


def bind_option(bind: Callable[[GrammarSpec, Any], Any], spec: GrammarSpec, model: Any, source: object) -> Any:
    """``bind(spec, model)``, a ``ConstraintError`` (a special token the model lacks, a
    grammar that allows no output) naming the option's file as the checks above do."""
    try:
        return bind(spec, model)
    except ConstraintError as exc:
        raise ConstraintError(f"{source}: {exc}", param=exc.param) from None


def check_complete(done: Any) -> None:
    """After the answer is written: a structured answer that is not complete (``done``: a
    ``Done`` or ``Result``) is an ``IncompleteStructureError`` (exit code 10), so that
    neither a script nor ``-q`` takes the partial text for the value."""
    if done is None or getattr(done, "structured_complete", None) is not False:
        return
    hint = {"length": "raise --max-tokens (-n), or --n-ctx", "stop": "drop the --stop string that cut it"}.get(
        done.finish_reason, "run it again"
    )
    raise IncompleteStructureError(
        f"the structured answer is incomplete: {done.structure_error} (the partial text was written; {hint})"
    )
