"""JSONL batches: reading prompts, and writing results so that a crash never tears a line.

An input file has one JSON object per line: an ``id`` (string or integer), exactly one of
``prompt`` (a string) or ``messages`` (a list of ``{"role", "content"}``), and optional
per-line generation settings (``max_tokens``, ``temperature``, ``top_k``, ``top_p``,
``min_p``, ``seed``, ``stop``, ``raw``). Every problem is reported with its line number;
nothing is dropped silently.

The output file is append-only, one ``{"id", "text", "finish_reason", "stats"}`` object
per line. Each line goes to the kernel in a single ``write`` on an ``O_APPEND`` descriptor
(and is fsynced), so a ``kill -9`` loses at most the line in flight. A run resumes by
reading the ids already in the output and skipping them; a torn last line left by a
crash of some other kind (power loss, a full disk, another writer) is detected and
dropped or repaired before anything is appended. A lock on the output file keeps two
runs from writing the same results twice.

This module knows the engine only through ``engine.generate(prompt, **options)``; it
never prints: progress reaches the caller through ``BatchObserver`` callbacks.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from edgespec.errors import EdgespecError, InputError

try:  # POSIX; on other systems the output simply isn't locked.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

GENERATION_KEYS = ("max_tokens", "temperature", "top_k", "top_p", "min_p", "seed", "stop", "raw")
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


def _check_number(name: str, value: Any, lo: float, hi: float | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"'{name}' must be a number, not {json.dumps(value)}")
    if value < lo or (hi is not None and value > hi):
        bound = f"between {lo} and {hi}" if hi is not None else f"at least {lo}"
        raise ValueError(f"'{name}' must be {bound}, not {value}")


def _validate(obj: Any) -> Job:
    """Check one decoded line; raises ValueError with a message naming the key."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    unknown = sorted(set(obj) - ALLOWED_KEYS)
    if unknown:
        raise ValueError(
            f"unknown key {', '.join(repr(k) for k in unknown)} "
            f"(allowed: {', '.join(sorted(ALLOWED_KEYS))})"
        )
    if "id" not in obj:
        raise ValueError("missing 'id'")
    job_id = obj["id"]
    if isinstance(job_id, bool) or not isinstance(job_id, (str, int)) or job_id == "":
        raise ValueError(f"'id' must be a non-empty string or an integer, not {json.dumps(job_id)}")

    has_prompt, has_messages = "prompt" in obj, "messages" in obj
    if has_prompt == has_messages:
        raise ValueError("needs exactly one of 'prompt' or 'messages'")
    if has_prompt:
        prompt = obj["prompt"]
        if not isinstance(prompt, str) or not prompt:
            raise ValueError("'prompt' must be a non-empty string")
    else:
        prompt = obj["messages"]
        if not isinstance(prompt, list) or not prompt:
            raise ValueError("'messages' must be a non-empty list of {\"role\", \"content\"} objects")
        for i, m in enumerate(prompt):
            if (
                not isinstance(m, dict)
                or not isinstance(m.get("role"), str)
                or not isinstance(m.get("content"), str)
            ):
                raise ValueError(f"messages[{i}] must be an object with string 'role' and 'content'")
        prompt = [{"role": m["role"], "content": m["content"]} for m in prompt]

    options: dict[str, Any] = {}
    for name in GENERATION_KEYS:
        if name not in obj or obj[name] is None:
            continue
        value = obj[name]
        if name == "max_tokens":
            _check_int(name, value, 1)
        elif name == "top_k":
            _check_int(name, value, 0)
        elif name == "seed":
            _check_int(name, value)
        elif name == "temperature":
            _check_number(name, value, 0.0)
        elif name in ("top_p", "min_p"):
            _check_number(name, value, 0.0, 1.0)
        elif name == "raw":
            if not isinstance(value, bool):
                raise ValueError("'raw' must be true or false")
        elif name == "stop":
            if isinstance(value, str):
                value = [value]
            if not isinstance(value, list) or not all(isinstance(s, str) and s for s in value):
                raise ValueError("'stop' must be a string or a list of non-empty strings")
            value = tuple(value)
        options[name] = value
    if "raw" in options and not has_prompt:
        raise ValueError("'raw' applies to 'prompt' only (messages always use the chat template)")
    return Job(line=0, id=job_id, prompt=prompt, options=options)


def parse_line(text: str, line: int, source: str = "<input>") -> Job:
    """Parse and validate one input line (1-based ``line`` for messages)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputLineError(source, line, f"not valid JSON ({e.msg} at column {e.colno})") from None
    try:
        job = _validate(obj)
    except ValueError as e:
        raise InputLineError(source, line, str(e)) from None
    return Job(line=line, id=job.id, prompt=job.prompt, options=job.options)


@dataclass
class InputFile:
    """The result of reading an input: the valid jobs and every bad line, in file order."""

    source: str
    jobs: list[Job]
    errors: list[InputLineError]


def read_jobs(path: str | os.PathLike | IO[str]) -> InputFile:
    """Read a whole JSONL input. ``"-"`` reads standard input.

    Blank lines are ignored. A duplicate id is an error on the later line (the first one
    wins), so each id names exactly one result.
    """
    if isinstance(path, (str, os.PathLike)) and str(path) == "-":
        import sys

        return _read_jobs(sys.stdin, "<stdin>")
    if isinstance(path, (str, os.PathLike)):
        try:
            with open(path, encoding="utf-8", newline="") as f:
                return _read_jobs(f, str(path))
        except FileNotFoundError:
            raise InputError(f"input file not found: {path}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise InputError(f"cannot read input file {path}: {e}") from None
    return _read_jobs(path, getattr(path, "name", "<input>"))


def _read_jobs(f: Iterable[str], source: str) -> InputFile:
    jobs: list[Job] = []
    errors: list[InputLineError] = []
    first_line: dict[str, int] = {}
    for n, text in enumerate(f, start=1):
        if not text.strip():
            continue
        try:
            job = parse_line(text, n, source)
        except InputLineError as e:
            errors.append(e)
            continue
        if job.key in first_line:
            errors.append(
                InputLineError(source, n, f"duplicate id {job.key} (first on line {first_line[job.key]})")
            )
            continue
        first_line[job.key] = n
        jobs.append(job)
    return InputFile(source=source, jobs=jobs, errors=errors)


class ResultWriter:
    """Append-only JSONL results, one whole line per ``write``; resumable.

    Opening scans the existing file: ``done`` holds the id keys already written. If the
    file does not end with a newline, its last line was torn by a crash: a torn line that
    still parses as a result is completed with its newline (``repaired``); otherwise it is
    cut off (``dropped``), and its id will be generated again. ``torn_line`` is the line
    number of that line, or None.
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = True):
        self.path = Path(path)
        self.fsync = fsync
        self.done: set[str] = set()
        self.torn_line: int | None = None
        self.torn_action: str | None = None  # "dropped" | "repaired"
        self.written = 0
        self._fd: int | None = None

    def __enter__(self) -> "ResultWriter":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def open(self) -> None:
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
        except OSError as e:
            raise InputError(f"cannot open output file {self.path}: {e.strerror}") from None
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise InputError(
                    f"{self.path} is being written by another edgespec run; wait for it or "
                    "choose another --output"
                ) from None
        self._fd = fd
        try:
            self._scan()
        except BaseException:
            self.close()
            raise

    def _scan(self) -> None:
        assert self._fd is not None
        with open(os.dup(self._fd), "rb") as f:  # our own read handle; fd stays open
            data = f.read()
        if not data:
            return
        head, sep, tail = data.rpartition(b"\n")
        lines = head.split(b"\n") if sep else []
        for n, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            key = self._result_key(raw)
            if key is None:
                raise InputError(
                    f"{self.path}:{n}: not a result line written by edgespec; "
                    "move the file away or choose another --output"
                )
            self.done.add(key)
        if tail:
            self.torn_line = len(lines) + 1
            key = self._result_key(tail)
            if key is not None and key not in self.done:
                self._write_all(b"\n")  # the object is whole; only its newline was lost
                self.done.add(key)
                self.torn_action = "repaired"
            else:
                os.ftruncate(self._fd, len(data) - len(tail))
                self.torn_action = "dropped"
            self._sync()

    @staticmethod
    def _result_key(raw: bytes) -> str | None:
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None
        if not isinstance(obj, dict) or "id" not in obj or "text" not in obj:
            return None
        return id_key(obj["id"])

    def write(self, record: dict[str, Any]) -> None:
        """Append one result (must have an ``id``) as one whole line, then flush it to disk."""
        if self._fd is None:
            raise RuntimeError("ResultWriter is not open")
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
        self._write_all(line.encode("utf-8"))
        self._sync()
        self.done.add(id_key(record["id"]))
        self.written += 1

    def _write_all(self, data: bytes) -> None:
        assert self._fd is not None
        # One write() normally takes the whole line for a regular file; the loop only
        # matters for a short write (full disk), which the next open then repairs.
        view = memoryview(data)
        while view:
            n = os.write(self._fd, view)
            view = view[n:]

    def _sync(self) -> None:
        if self.fsync and self._fd is not None:
            os.fsync(self._fd)

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # also releases the flock
            self._fd = None


def result_record(job: Job, result: Any) -> dict[str, Any]:
    """The output line for one finished job."""
    return {
        "id": job.id,
        "text": result.text,
        "finish_reason": result.finish_reason,
        "stats": result.stats.to_dict(),
    }


class BatchObserver:
    """Callbacks through which a batch reports progress (all optional no-ops)."""

    def job_started(self, job: Job) -> None: ...

    def job_done(self, job: Job, record: dict[str, Any]) -> None: ...

    def job_failed(self, job: Job, error: EdgespecError) -> None: ...


@dataclass
class BatchSummary:
    total: int = 0          # valid jobs in the input
    skipped: int = 0        # already in the output (resumed)
    done: int = 0           # generated and written now
    failed: list[tuple[Job, EdgespecError]] = field(default_factory=list)


def pending_jobs(jobs: Iterable[Job], done: set[str]) -> Iterator[Job]:
    """The jobs whose id is not in ``done`` (the resume rule)."""
    return (job for job in jobs if job.key not in done)


def run_batch(
    engine: Any,
    jobs: list[Job],
    writer: ResultWriter,
    *,
    defaults: dict[str, Any] | None = None,
    on_error: str = "skip",
    observer: BatchObserver | None = None,
) -> BatchSummary:
    """Generate every job not yet in ``writer`` and append its result.

    ``defaults`` are the generation settings of the command line; a line's own settings
    override them. A job that fails with an ``EdgespecError`` (a prompt too long for the
    context, ...) is reported to the observer and skipped, or re-raised with
    ``on_error="stop"``; it is not written, so a rerun tries it again. KeyboardInterrupt
    propagates; everything written so far stays whole.
    """
    if on_error not in ("skip", "stop"):
        raise InputError(f"--on-error must be 'skip' or 'stop', not {on_error!r}")
    observer = observer or BatchObserver()
    defaults = dict(defaults or {})
    summary = BatchSummary(total=len(jobs))
    todo = list(pending_jobs(jobs, writer.done))
    summary.skipped = summary.total - len(todo)
    for job in todo:
        observer.job_started(job)
        options = {**defaults, **job.options}
        if not isinstance(job.prompt, str):
            options.pop("raw", None)
        try:
            result = engine.generate(job.prompt, **options)
        except EdgespecError as e:
            summary.failed.append((job, e))
            observer.job_failed(job, e)
            if on_error == "stop":
                raise
            continue
        record = result_record(job, result)
        writer.write(record)
        summary.done += 1
        observer.job_done(job, record)
    return summary


__all__ = [
    "ALLOWED_KEYS",
    "BatchObserver",
    "BatchSummary",
    "GENERATION_KEYS",
    "InputFile",
    "InputLineError",
    "Job",
    "ResultWriter",
    "id_key",
    "parse_line",
    "pending_jobs",
    "read_jobs",
    "result_record",
    "run_batch",
]
