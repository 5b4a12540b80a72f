"""What the CLI commands share: error mapping, engine construction from a plan, prompts.

The library raises ``EdgespecError`` subclasses and never prints; here they become one
line on stderr (``error: ...``) and the exit code named on the class. Ctrl-C becomes
exit 130. Nothing here knows how tokens are generated.
"""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.console import Console
from rich.text import Text

from edgespec.errors import EdgespecError, InputError

EXIT_INTERRUPTED = 130


# Model names come from users and from other tools' stores: Rich must print them as they
# are, never as markup or emoji codes ("ollama:tm:0.5b" is not "ollama™0.5b", and the
# brackets of an LM Studio repo "model[red]x[" stay). Styles are given as Text styles.
PLAIN = {"highlight": False, "markup": False, "emoji": False}
PIPE_WIDTH = 4096  # "no width limit" off a terminal: a table row stays one line


def err_console() -> Console:
    """A console on stderr (no escape codes unless stderr is a terminal)."""
    return Console(stderr=True, soft_wrap=True, **PLAIN)


def out_console() -> Console:
    """A console on stdout. Off a terminal (a pipe, a file) it has no width limit: a
    table keeps each row on one line, whole names and all, for ``grep`` and ``cut``
    (``--json`` is the interface for scripts)."""
    con = Console(**PLAIN)
    return con if con.is_terminal else Console(width=PIPE_WIDTH, **PLAIN)


def print_error(message: str) -> None:
    err_console().print(Text(f"error: {message}"), style="bold red" if sys.stderr.isatty() else None)


@contextmanager
def cli_errors() -> Iterator[None]:
    """Turn library errors into ``error: <msg>`` + exit code, and Ctrl-C into exit 130."""
    try:
        yield
    except EdgespecError as e:
        print_error(str(e))
        raise typer.Exit(e.exit_code) from None
    except KeyboardInterrupt:
        err_console().print(Text("interrupted", style="dim"))
        raise typer.Exit(EXIT_INTERRUPTED) from None


# Options shared by the commands that generate (defaults stay in each signature); the plan
# options (--profile, --target, ...) are in plan_options.
TemperatureOpt = Annotated[float, typer.Option("--temperature", "-t", min=0.0, help="0 = greedy.")]
TopKOpt = Annotated[int, typer.Option("--top-k", min=0, help="0 = off.")]
TopPOpt = Annotated[float, typer.Option("--top-p", min=0.0, max=1.0)]
MinPOpt = Annotated[float, typer.Option("--min-p", min=0.0, max=1.0)]
SeedOpt = Annotated[Optional[int], typer.Option("--seed", help="Seed for sampling (temperature > 0).")]
VerboseOpt = Annotated[
    bool, typer.Option("--verbose", "-v", help="Say in full why the profile chose this drafter and k.")
]
ShowRejectedOpt = Annotated[bool, typer.Option("--show-rejected", help="Show rejected drafts struck through.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object for scripts.")]


def report_lost_rpc_server(err: Exception) -> None:
    """Called from llama.cpp's failing thread when an RPC server is lost mid-generation
    (``edgespec.llama.rpc.on_server_lost``): one line, then exit. The process cannot go
    on; whatever was already written (each JSONL result is flushed whole) is kept."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed pipe: nothing to keep
            pass
    os.write(2, f"error: {err}. Output already written is kept; rerun to resume.\n".encode())
    os._exit(getattr(err, "exit_code", 1))


def describe_plan(p: Any, *, verbose: bool = False) -> list[str]:
    """The plan for stderr: its choice in one line; with ``verbose`` the full reason and
    the notes (detection, memory fit, pairs skipped)."""
    reason = getattr(p, "reason", "")
    if not reason:
        return []
    if not verbose:
        summary = getattr(p, "summary", reason)
        return [f"edgespec: {summary}" + (" (-v says why)" if summary != reason else "")]
    return [f"edgespec: {reason}", *(f"  {note}" for note in getattr(p, "notes", ()))]


def load_engine(p: Any, *, quiet: bool = False, verbose: bool = False, describe: bool = True, **overrides: Any) -> Any:
    """Build the Engine plan ``p`` describes (``edgespec.loading.engine_for``; ``overrides``
    go to ``Engine`` as they are), with a spinner on stderr while models load and, unless
    ``quiet`` or not ``describe``, the plan's line first. On the first use of the target
    file on this machine, its c(n) is measured before it returns (``measuring.first_use``:
    a few seconds, and one line saying so)."""
    from edgespec.loading import engine_for
    from edgespec.measuring import first_use

    if p.rpc:
        from edgespec.llama.rpc import on_server_lost

        on_server_lost(report_lost_rpc_server)
    err = err_console()
    if describe and not quiet:
        for line in describe_plan(p, verbose=verbose):
            err.print(Text(line, style="dim"))

    def spinner(text: str) -> Any:
        return err.status(Text(text), spinner="dots") if err.is_terminal and not quiet else nullcontext()

    name = store_name(p.target) or Path(p.target).name
    check_llama_build(p, spinner, n_threads=overrides.get("n_threads", p.n_threads))
    with spinner(f"loading {name}…"):
        engine = engine_for(p, **overrides)
    try:
        with spinner(f"measuring what a verify costs here (the first use of {name})…"):
            measured = first_use.measure_first_use(engine)
    except BaseException:
        engine.close()
        raise
    if measured and not quiet:
        err.print(Text(measured, style="dim"))
    return engine


def check_llama_build(p: Any, spinner: Any = nullcontext, *, n_threads: int | None = None) -> None:
    """Before the first decode with this llama.cpp build: decode a few tokens of the plan's
    model in a child process (``edgespec.llama.build_check``), so that a build this CPU
    cannot run (SIGILL: "Illegal instruction") ends in one line that names the command
    that rebuilds it, not in a crash. A pass is kept per build: later runs only compare
    the library files. ``spinner(text)``: what to show meanwhile."""
    from edgespec.catalog import resolve_model
    from edgespec.llama import build_check

    if build_check.passed():
        return
    # over RPC the target's layers run on the servers: the local kernels run the draft model's
    model, n_gpu_layers = (p.draft, 0) if p.rpc else (p.target, p.n_gpu_layers)
    if model is None or (p.rpc and p.drafter != "model"):
        return
    with spinner(f"loading {store_name(model) or Path(model).name}…"):
        path = resolve_model(model)
    with spinner("checking that this llama.cpp build runs on this CPU (once per build)…"):
        build_check.check(path, n_gpu_layers=n_gpu_layers, n_threads=n_threads)


def store_name(target: str | None) -> str | None:
    """The name to show for a model found in another tool's store (an Ollama blob's file
    name says nothing); None for paths and catalog names (their file's stem says it).
    The planner's rule, ``planning.record.given_name``."""
    from edgespec.planning.record import given_name

    return given_name(target)


def read_prompt(prompt: str | None, prompt_file: Path | None) -> str:
    """The prompt from the argument, ``--prompt-file`` (``-`` = stdin), or piped stdin."""
    if prompt is not None and prompt_file is not None:
        raise InputError("give the prompt either as an argument or with --prompt-file, not both")
    if prompt_file is not None:
        return read_stdin() if str(prompt_file) == "-" else read_text_file(prompt_file, "prompt file")
    if prompt is not None:
        return ensure_utf8(prompt, "the prompt argument")
    if sys.stdin is not None and not sys.stdin.isatty():
        text = read_stdin()
        if text:
            return text
    raise InputError("no prompt: give it as an argument, with --prompt-file, or on stdin")


def read_text_file(path: Path, what: str) -> str:
    """A UTF-8 text file, or an ``InputError`` naming it."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError(f"{what} not found: {path}") from None
    except OSError as e:
        raise InputError(f"cannot read {what} {path}: {e.strerror or e}") from None
    return decode_utf8(data, f"{what} {path}")


def read_stdin() -> str:
    """Standard input as UTF-8 text, decoded here rather than by the locale: under a C or
    POSIX locale Python would let undecodable bytes through as surrogates."""
    if sys.stdin is None:
        return ""
    buffer = getattr(sys.stdin, "buffer", None)
    if buffer is None:  # a text-only stream (embedding, some test runners)
        return ensure_utf8(sys.stdin.read(), "stdin")
    return decode_utf8(buffer.read(), "stdin")


_NOT_UTF8_HINT = "edgespec reads UTF-8 text; convert it first, e.g. iconv -f latin1 -t utf-8"


def decode_utf8(data: bytes, what: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            f"{what} is not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start}); {_NOT_UTF8_HINT}"
        ) from None


def ensure_utf8(text: str, what: str) -> str:
    """``text`` if it can be written as UTF-8. Command-line arguments and terminal input
    that were not UTF-8 arrive as lone surrogates (Python's surrogateescape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        code = ord(text[e.start])
        byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"character U+{code:04X}"
        raise InputError(f"{what} is not UTF-8 text ({byte} at character {e.start}); {_NOT_UTF8_HINT}") from None
    return text


def parse_parallel(value: str) -> int | str:
    """``--parallel``: 'auto' or a positive number."""
    v = value.strip().lower()
    if v == "auto":
        return "auto"
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise InputError(f"--parallel must be a positive number or 'auto' (got {value!r})")
    return n
