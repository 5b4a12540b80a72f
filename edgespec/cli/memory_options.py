"""The memory options, declared once: ``--memory/--no-memory``, ``--memory-cap`` and
``--remember``, and what ``--remember`` does.

The memory (``edgespec.decoding.memory``) is the index of the answers an engine wrote
before, that prompt lookup also drafts from: on by default, within one run (a batch's
lines, a chat's turns, bench's prompts). ``--no-memory`` turns it off (each request
drafts from itself alone) and ``--memory-cap`` bounds it in tokens; both reach the
engine through the plan (``MemoryOptions.apply``: the plan options' ``memory``/``memory_cap``).
``generate``, ``chat`` and ``bench`` take all three; ``serve`` takes ``MemoryOpt``.

``--remember`` (opt-in) keeps the memory on disk between runs
(``edgespec.decoding.suffix_store``): ``remembering(engine, ...)`` loads the store of
the target's tokenizer into ``engine.memory`` once the engine is built (a warm start)
and saves it when the block ends, Ctrl-C and SIGTERM included (SIGTERM raises
``SystemExit(143)`` inside the block, so its ``finally`` saves, as a batch's results are
already written line by line). The store is named by the
tokenizer's identity from the GGUF header (``catalog.ident.Tokenizer``: two models with
one vocabulary share it). A store that cannot be used is one warning line and a cold
start, and a save that cannot be made one warning line naming the path; a model whose
tokenizer cannot be read runs without remembering, and says so. A ``--memory-cap`` below
the tokens the store holds is one warning at the start: the save shrinks the store to the
cap. Warnings print the control characters of what they quote as escapes. ``--memory-cap`` is
bounded where it is parsed (``MAX_CAP``: the largest store the file format holds).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated, Any, Iterator, Optional

import typer
from rich.text import Text

from edgespec.errors import EdgespecError, InputError

MAX_CAP = 1 << 24  # = edgespec.decoding.suffix_codec.MAX_CAP (not imported: the CLI's options load no numpy)

MemoryOpt = Annotated[
    bool,
    typer.Option(
        "--memory/--no-memory",
        help="Draft from the answers written earlier in this run too (prompt lookup across requests; on by "
        "default). --no-memory: each request drafts from itself alone.",
    ),
]
MemoryCapOpt = Annotated[
    Optional[int],
    typer.Option(
        "--memory-cap",
        min=1,
        max=MAX_CAP,
        metavar="TOKENS",
        help=f"The most tokens the memory holds, the oldest dropped first (default 262,144, about 50 MB; at most "
        f"{MAX_CAP:,}).",
    ),
]
RememberOpt = Annotated[
    bool,
    typer.Option(
        "--remember",
        help="Keep the memory on disk: start from the one saved for this model's tokenizer and save it at the "
        "end (`edgespec memory show` lists it, `edgespec memory clear` deletes it).",
    ),
]


@dataclass(frozen=True)
class MemoryOptions:
    """The memory options as the command line gave them."""

    memory: bool = True
    cap: int | None = None
    remember: bool = False

    def __post_init__(self) -> None:
        if self.remember and not self.memory:
            raise InputError("--remember keeps the memory that --no-memory turns off: drop one of them")
        if self.cap is not None and not 1 <= self.cap <= MAX_CAP:
            raise InputError(f"--memory-cap must be from 1 to {MAX_CAP:,} tokens (got {self.cap:,})")

    def apply(self, options: Any) -> Any:
        """The plan options (``cli.plan_options.PlanOptions``) with these in them."""
        return replace(options, memory=self.memory, memory_cap=self.cap)


def tokenizer_identity(model_path: str | os.PathLike) -> str:
    """The name of a model's memory: its tokenizer's type, size and digest (equal for two
    models with one vocabulary). ``ModelFileError`` if the header cannot be read."""
    from edgespec import catalog
    from edgespec.errors import ModelFileError

    tok = catalog.describe_file(model_path).header.tokenizer
    if tok is None:
        raise ModelFileError(f"{model_path} has no tokenizer in its header")
    return f"{tok.pre or tok.model}-{tok.n_tokens}-{tok.digest[:16]}"


def model_label(engine: Any) -> str:
    """How the store names the model that wrote it: the name it was given."""
    label = getattr(getattr(engine, "target_model", None), "label", None)
    return str(label or Path(str(getattr(engine, "target_path", "model"))).name)


@contextmanager
def remembering(engine: Any, options: MemoryOptions, *, err: Any, quiet: bool = False) -> Iterator[Any]:
    """With ``--remember``: the saved memory in ``engine.memory`` for the block, saved
    when it ends (also on Ctrl-C, SIGTERM and errors). Yields the store's path, or None
    when nothing is remembered."""
    if not options.remember or engine.memory is None:
        yield None
        return
    from edgespec.decoding import suffix_store
    from edgespec.decoding.store_files import printable

    def warn(message: str) -> None:
        err.print(Text(f"warning: {printable(message)}", style="yellow" if err.is_terminal else ""), soft_wrap=True)

    try:
        identity = tokenizer_identity(engine.target_path)
    except EdgespecError as e:
        warn(f"--remember: cannot name this model's memory ({e}); it is not kept")
        yield None
        return
    t0 = time.perf_counter()
    engine.memory = suffix_store.load(identity, cap=options.cap, warn=warn)
    path = suffix_store.store_path(identity)
    held = suffix_store.loaded_tokens(engine.memory)
    if options.cap is not None and held > options.cap:
        warn(
            f"--memory-cap {options.cap:,} is below the {held:,} tokens the memory {path} holds: this run keeps "
            f"the newest {options.cap:,}, and its save shrinks the store to them for good (run without "
            f"--memory-cap, or with {held:,} or more, to keep them all)"
        )
    if not quiet and len(engine.memory):
        err.print(
            Text(
                f"memory: {len(engine.memory):,} tokens of earlier answers from {path} "
                f"({1000 * (time.perf_counter() - t0):.0f} ms)",
                style="dim",
            )
        )
    try:
        with _terminated_exits():
            yield path
    finally:
        _save(engine, identity, warn, quiet, err)


@contextmanager
def _terminated_exits() -> Iterator[None]:
    """SIGTERM, inside the block, as ``SystemExit(143)`` (128 + 15, the status a shell
    reports): the block unwinds and the memory is saved, as on Ctrl-C. Off the main
    thread (where no handler can be set) nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signal.SIGTERM)

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _save(engine: Any, identity: str, warn: Any, quiet: bool, err: Any) -> None:
    from edgespec.decoding import suffix_store

    index = engine.memory
    if index is None:
        return
    try:
        path = suffix_store.save(index, identity, model=model_label(engine))
    except EdgespecError as e:  # MemoryStoreError: it names the path and why
        warn(f"--remember: {e}")
        return
    if path is not None and not quiet:
        err.print(Text(f"memory: saved {len(index):,} tokens to {path}", style="dim"))
