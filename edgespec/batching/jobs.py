"""JSONL batch input: the jobs of a batch, read and checked line by line.

An input file has one JSON object per line: an ``id`` (string or integer), exactly one of
``prompt`` (a string) or ``messages`` (a list of ``{"role", "content"}``), and optional
per-line generation settings (``max_tokens``, ``temperature``, ``top_k``, ``top_p``,
``min_p``, ``seed``, ``stop``, ``raw``, and ``response_format`` in OpenAI's shape for
structured output, with ``lenient_schema``). The sampling settings are checked by
``SamplingParams.validate`` and a ``response_format`` is compiled by
``constraints.grammar_spec`` (strict unless the line or the batch is lenient: a schema
keyword the constraint engine lacks is an error), the very checks the engine runs, so a
line the engine would refuse is refused here, before the batch starts. Every bad line (not UTF-8, not JSON,
a bad value) is reported with its line number and skipped; nothing is dropped silently.
Knows nothing of engines or output files (``results``).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from typing import IO, Any, Iterable

from edgespec.constraints import grammar_spec
from edgespec.decoding.params import SAMPLING_KEYS, SamplingOptionError, SamplingParams
from edgespec.errors import ConstraintError, InputError

GENERATION_KEYS = (
    "max_tokens",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "seed",
    "stop",
    "raw",
    "response_format",
    "lenient_schema",
)
ALLOWED_KEYS = frozenset(("id", "prompt", "messages") + GENERATION_KEYS)


class InputLineError(InputError):
    """One line of a JSONL input is malformed. ``line`` is 1-based."""

    def __init__(self, source: str, line: int, message: str):
        self.source = source
        self.line = line
        self.detail = message
        super().__init__(f"{source}:{line}: {message}")


@dataclass(frozen=True)
class Job:
    """One valid input line: what to generate and with which per-line settings."""

    line: int
    id: str | int
    prompt: str | list[dict[str, str]]
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return id_key(self.id)


def id_key(value: Any) -> str:
    """The identity of an id: its JSON text, so ``1`` and ``"1"`` are different ids."""
    return json.dumps(value, ensure_ascii=False)


def _check_int(name: str, value: Any, minimum: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"'{name}' must be an integer, not {json.dumps(value)}")
    if minimum is not None and value < minimum:
        raise ValueError(f"'{name}' must be at least {minimum}, not {value}")


def _check_text(name: str, value: str) -> None:
    """A JSON string can hold a lone surrogate (``"\\ud800"``), which no UTF-8 text can:
    the tokenizer and the results file would both fail on it mid-batch."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        raise ValueError(
            f"{name} holds {value[e.start]!r} at character {e.start}, a lone surrogate "
            "that is not text (a broken \\u escape?)"
        ) from None


def _validate(obj: Any, lenient: bool = False) -> Job:
    """Check one decoded line; raises ValueError with a message naming the key."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - ALLOWED_KEYS)
    if unknown:
        raise ValueError(
            f"unknown key {', '.join(repr(k) for k in unknown)} (allowed: {', '.join(sorted(ALLOWED_KEYS))})"
        )
    if "id" not in obj:
        raise ValueError("missing 'id'")
    job_id = obj["id"]
    if isinstance(job_id, bool) or not isinstance(job_id, (str, int)) or job_id == "":
        raise ValueError(f"'id' must be a non-empty string or an integer, not {json.dumps(job_id)}")
    if isinstance(job_id, str):
        _check_text("'id'", job_id)

    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        raise ValueError("needs exactly one of 'prompt' or 'messages'")
    if has_prompt:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise ValueError("'prompt' must be a non-empty string")
        _check_text("'prompt'", prompt)
    else:
        prompt = obj["messages"]
        if not isinstance(prompt, list) or not prompt:
            raise ValueError('\'messages\' must be a non-empty list of {"role", "content"} objects')
        for i, m in enumerate(prompt):
            if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                raise ValueError(f"messages[{i}] must be an object with string 'role' and 'content'")
            _check_text(f"messages[{i}].role", m["role"])
            _check_text(f"messages[{i}].content", m["content"])
        prompt = [{"role": m["role"], "content": m["content"]} for m in prompt]

    options: dict[str, Any] = {}
    for name in GENERATION_KEYS:
        if name not in obj or obj[name] is None:
            continue
        value = obj[name]
        if name == "max_tokens":
            _check_int(name, value, 1)
        elif name in ("raw", "lenient_schema"):
            if not isinstance(value, bool):
                raise ValueError(f"'{name}' must be true or false")
        elif name == "response_format":
            _check_response_format(value, obj.get("lenient_schema", lenient) is True)
        elif name == "stop":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
                raise ValueError("'stop' must be a string or a list of non-empty strings")
            for i, stop in enumerate(value):
                _check_text(f"stop[{i}]", stop)
            value = tuple(value)
        options[name] = value
    # The sampling settings go through the engine's own check, so that every line that
    # passes here also passes there (a batch with --on-error stop must not halt halfway).
    try:
        SamplingParams(**{k: options[k] for k in SAMPLING_KEYS if k in options}).validate()
    except SamplingOptionError as e:
        raise ValueError(f"'{e.option}' {e.allowed}, not {_json_text(e.value)}") from None
    if "raw" in options and not has_prompt:
        raise ValueError("'raw' applies to 'prompt' only (messages always use the chat template)")
    return Job(line=0, id=job_id, prompt=prompt, options=options)


_checked_formats: dict[str, str | None] = {}  # a batch's lines usually share one schema


def _check_response_format(value: Any, lenient: bool = False) -> None:
    """Compile a line's ``response_format`` (without a model) or say why not, once per
    distinct value. ``lenient``: the line's ``lenient_schema``, else the batch's."""
    key = json.dumps([value, lenient], sort_keys=True)
    if key not in _checked_formats:
        try:
            grammar_spec(value, lenient=lenient)
            _checked_formats[key] = None
        except ConstraintError as e:
            _checked_formats[key] = f"'{e.param}': {e}"
        if len(_checked_formats) > 256:
            _checked_formats.pop(next(iter(_checked_formats)))
    if _checked_formats[key] is not None:
        raise ValueError(_checked_formats[key])


def _json_text(value: Any) -> str:
    try:
        return json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)


def parse_line(text: str | bytes, line: int, source: str = "<input>", *, lenient: bool = False) -> Job:
    """Parse and validate one input line (1-based ``line`` for messages).

    ``text`` may be the line's raw bytes, which must be UTF-8. ``lenient``: the batch's
    ``--lenient-schema``, for a line that does not set ``lenient_schema`` itself.
    """
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as e:
            raise InputLineError(
                source, line, f"not valid UTF-8 (byte 0x{text[e.start]:02x} at byte {e.start + 1})"
            ) from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputLineError(source, line, f"not valid JSON ({e.msg} at column {e.colno})") from None
    except ValueError as e:  # e.g. an integer of more than 4300 digits
        raise InputLineError(source, line, f"not valid JSON ({e})") from None
    except RecursionError:
        raise InputLineError(source, line, "not valid JSON (nested too deeply)") from None
    try:
        job = _validate(obj, lenient)
    except ValueError as e:
        raise InputLineError(source, line, str(e)) from None
    return Job(line=line, id=job.id, prompt=job.prompt, options=job.options)


@dataclass
class InputFile:
    """The result of reading an input: the valid jobs and every bad line, in file order."""

    source: str
    jobs: list[Job]
    errors: list[InputLineError]
    # (st_dev, st_ino) of the file read, when it is one: ResultWriter refuses to write to it
    identity: tuple[int, int] | None = None


def read_jobs(path: str | os.PathLike | IO[str] | IO[bytes], *, lenient: bool = False) -> InputFile:
    """Read a whole JSONL input. ``"-"`` reads standard input. ``lenient``: schemas are
    checked as ``--lenient-schema`` compiles them (a line's ``lenient_schema`` wins).

    Blank lines are ignored. A line that is not UTF-8 is a bad line like any other:
    reported with its number and skipped. A duplicate id is an error on the later line
    (the first one wins), so each id names exactly one result.
    """
    if isinstance(path, (str, os.PathLike)) and str(path) == "-":
        import sys

        stdin = getattr(sys.stdin, "buffer", sys.stdin)
        return _read_jobs(stdin, "<stdin>", _identity(stdin), lenient)
    if isinstance(path, (str, os.PathLike)):
        try:
            with open(path, "rb") as f:
                return _read_jobs(f, str(path), _identity(f), lenient)
        except FileNotFoundError:
            raise InputError(f"input file not found: {path}") from None
        except OSError as e:
            raise InputError(f"cannot read input file {path}: {e.strerror or e}") from None
    return _read_jobs(path, getattr(path, "name", "<input>"), _identity(path), lenient)


def _identity(f: Any) -> tuple[int, int] | None:
    """(device, inode) of an open regular file, or None (a pipe, a terminal, a StringIO)."""
    try:
        st = os.fstat(f.fileno())
    except (AttributeError, OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISREG(st.st_mode) else None


def _read_jobs(
    f: Iterable[str | bytes], source: str, identity: tuple[int, int] | None = None, lenient: bool = False
) -> InputFile:
    jobs: list[Job] = []
    errors: list[InputLineError] = []
    first_line: dict[str, int] = {}
    for n, text in enumerate(f, start=1):
        if n == 1 and isinstance(text, bytes) and text.startswith(b"\xef\xbb\xbf"):
            text = text[3:]  # a UTF-8 byte order mark, as some Windows editors write
        if not text.strip():
            continue
        try:
            job = parse_line(text, n, source, lenient=lenient)
        except InputLineError as e:
            errors.append(e)
            continue
        if job.key in first_line:
            errors.append(InputLineError(source, n, f"duplicate id {job.key} (first on line {first_line[job.key]})"))
            continue
        first_line[job.key] = n
        jobs.append(job)
    return InputFile(source=source, jobs=jobs, errors=errors, identity=identity)
