"""The JSONL output of a batch: one result per line, a crash never tears a line, a run resumes.

The output file is append-only, one ``{"id", "text", "finish_reason", "stats"}`` object
per line (under a constraint followed by ``structured_complete``, ``parsed`` and, where
they apply, ``structure_error`` and ``relaxed``; ``result_record`` builds it). Each line
goes to the kernel in a single ``write`` on an ``O_APPEND`` descriptor (and is fsynced),
so a ``kill -9`` loses at most the line in flight. ``ResultWriter`` reads the ids already
in the output on opening, so a run resumes by skipping them. A torn last line left by a
crash of some other kind (power loss, a full disk, another writer) is repaired or cut
before anything is appended, but only when it reads as the start of a result line and
every line before it is a result: a file holding anything else is refused and left byte
for byte as it was, and so is an output that is the input file itself. A lock on the
output file keeps two runs from writing the same results twice.

This module knows results only through their ``text``, ``finish_reason``, ``stats`` and
``structure_dict``; it knows nothing of engines, of which jobs are run, or in what order
(``edgespec.batching.results`` does that), nor of the input file beyond its identity.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from edgespec.batching.jobs import InputFile, Job, id_key
from edgespec.errors import InputError

try:  # POSIX; on other systems the output simply isn't locked.
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

__all__ = ["RESULT_KEYS", "STRUCTURE_KEYS", "ResultWriter", "result_record"]


# The keys of a result line, in the order ``ResultWriter.write`` puts them; a
# constrained one has some of STRUCTURE_KEYS after them, in that order.
RESULT_KEYS = ("id", "text", "finish_reason", "stats")
STRUCTURE_KEYS = ("structured_complete", "parsed", "structure_error", "relaxed")
_RESULT_TYPES: dict[str, tuple[type, ...]] = {
    "id": (str, int),
    "text": (str,),
    "finish_reason": (str,),
    "stats": (dict,),
}
_VALUE_START = {"id": '"-0123456789', "text": '"', "finish_reason": '"', "stats": "{"}
_JSON_WS = " \t\r"
_decoder = json.JSONDecoder()


def _torn_result(raw: bytes) -> bool:
    """Whether an unterminated last line reads as the beginning of a result line.

    A result line is ``{"id": ..., "text": ..., "finish_reason": ..., "stats": {...}}``
    with its keys in that order. ``raw`` qualifies if it is a prefix of such a line as
    far as it goes: the keys in order, each whole value of the right type, the text
    ending anywhere (inside a key, a value, or a multi-byte character). A line torn
    inside a value is not checked past the value's first character. Anything else (a
    note without a newline, a prompt line, an object with other keys) does not.
    """
    text = raw.decode("utf-8", errors="ignore") if _utf8_prefix(raw) else None
    if text is None or not text.startswith("{"):
        return False
    pos, end = 1, len(text)

    def skip_ws(i: int) -> int:
        while i < end and text[i] in _JSON_WS:
            i += 1
        return i

    def literal(i: int, lit: str) -> int | None:
        """Position after ``lit`` at ``i``; ``end`` if the text stops inside it; None if
        the text differs from it."""
        piece = text[i : i + len(lit)]
        if not lit.startswith(piece):
            return None
        return i + len(lit) if len(piece) == len(lit) else end

    for i, key in enumerate(RESULT_KEYS):
        for lit in ([","] if i else []) + [json.dumps(key), ":"]:
            pos = skip_ws(pos)
            if pos >= end:
                return True
            pos = literal(pos, lit)
            if pos is None:
                return False
        pos = skip_ws(pos)
        if pos >= end:
            return True
        if text[pos] not in _VALUE_START[key]:
            return False
        try:
            value, pos = _decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return True  # torn inside the value
        if isinstance(value, bool) or not isinstance(value, _RESULT_TYPES[key]):
            return False
    # all four values are whole: what is left can only be the structure's keys, in
    # order (any JSON value each), and the closing brace, torn off
    for key in STRUCTURE_KEYS:
        pos = skip_ws(pos)
        if pos >= end:
            return True
        start = pos
        for lit in (",", json.dumps(key)):
            pos = skip_ws(pos)
            if pos >= end:
                return True
            pos = literal(pos, lit)
            if pos is None:
                break
        if pos is None:
            pos = start  # not this key: perhaps a later one
            continue
        pos = skip_ws(pos)
        if pos >= end:
            return True
        pos = literal(pos, ":")
        if pos is None:
            return False
        pos = skip_ws(pos)
        if pos >= end:
            return True
        try:
            _, pos = _decoder.raw_decode(text, pos)
        except (ValueError, RecursionError):
            return True  # torn inside the value
    return skip_ws(pos) >= end


def _utf8_prefix(raw: bytes) -> bool:
    """Whether ``raw`` is valid UTF-8 except perhaps for a character cut at its end."""
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError as e:
        return e.reason == "unexpected end of data" and e.end == len(raw)


class ResultWriter:
    """Append-only JSONL results, one whole line per ``write``; resumable.

    Opening scans the existing file: ``done`` holds the id keys already written. Every
    line must be a result (blank lines aside); anything else is refused with an
    ``InputError`` and the file is left untouched. If the file does not end with a
    newline, its last line was torn by a crash: a torn line that still parses as a
    result is completed with its newline (``repaired``), or cut off if its id is
    already there; one that reads as the start of a result line (see
    ``_torn_result``) is cut off (``dropped``), and its id is generated again.
    ``torn_line`` is the line number of that line, or None. Only such a line is ever
    cut: a last line that is not the beginning of a result (a note, someone's JSON) is
    refused like any foreign line.

    ``input`` is the batch's ``InputFile``: the writer refuses to open the very file
    it was read from (also through a symbolic or hard link).
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = True, input: InputFile | None = None):
        self.path = Path(path)
        self.fsync = fsync
        self.input = input
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
        try:
            st = os.fstat(fd)
            if self.input is not None and self.input.identity == (st.st_dev, st.st_ino):
                raise InputError(
                    f"--output {self.path} is the input file {self.input.source}; results "
                    "would overwrite the prompts: choose another --output"
                )
            if not stat.S_ISREG(st.st_mode):
                raise InputError(f"--output {self.path} is not a regular file; choose a file")
        except BaseException:
            os.close(fd)
            raise
        if fcntl is not None:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise InputError(
                    f"{self.path} is being written by another edgespec run; wait for it or choose another --output"
                ) from None
        self._fd = fd
        try:
            self._scan()
        except BaseException:
            self.close()
            raise

    def _scan(self) -> None:
        """Read the ids already written; refuse foreign content; mend a torn last line.

        Everything is checked before anything is changed, so a refused file keeps
        every byte.
        """
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
                raise self._foreign(n)
            self.done.add(key)
        if not tail:
            return
        n = len(lines) + 1
        key = self._result_key(tail)
        if key is not None and key not in self.done:
            self._write_all(b"\n")  # the object is whole; only its newline was lost
            self.done.add(key)
            action = "repaired"
        elif key is not None or _torn_result(tail):
            # a duplicate of a result already there, or the first part of one
            os.ftruncate(self._fd, len(data) - len(tail))
            action = "dropped"
        else:
            raise self._foreign(n, unterminated=True)
        self.torn_line, self.torn_action = n, action
        self._sync()

    def _foreign(self, line: int, unterminated: bool = False) -> InputError:
        what = "an unfinished line that is not" if unterminated else "not"
        return InputError(
            f"{self.path}:{line}: {what} a result line written by edgespec; the file is left "
            "as it was: move it away or choose another --output"
        )

    @staticmethod
    def _result_key(raw: bytes) -> str | None:
        """The id key of a whole result line, or None if ``raw`` is not one: a JSON
        object with every key of ``RESULT_KEYS``, its values of the right types."""
        try:
            obj = json.loads(raw)
        except (ValueError, RecursionError):  # not JSON, not UTF-8, a 5000-digit number
            return None
        if not isinstance(obj, dict) or not all(
            k in obj and isinstance(obj[k], _RESULT_TYPES[k]) and not isinstance(obj[k], bool) for k in RESULT_KEYS
        ):
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
    """The output line for one finished job; under a constraint, after ``stats``, the
    structure's keys of ``Result.to_dict`` (``structured_complete``, ``parsed``, and
    ``structure_error`` / ``relaxed`` where they apply)."""
    structure = result.structure_dict() if hasattr(result, "structure_dict") else {}
    return {
        "id": job.id,
        "text": result.text,
        "finish_reason": result.finish_reason,
        "stats": result.stats.to_dict(),
        **{k: structure[k] for k in STRUCTURE_KEYS if k in structure},
    }
