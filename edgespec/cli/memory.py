"""``edgespec memory show`` and ``edgespec memory clear``: the memory ``--remember`` keeps.

Thin: ``edgespec.decoding.suffix_store`` lists and deletes the store files (one per
tokenizer, in ``$EDGESPEC_MEMORY_DIR`` or edgespec's XDG cache); this prints them as a
table for people or one JSON object for scripts. ``clear`` asks first on a terminal
(``--yes`` does not), not off one (a script said what it wants), and prints each file
it removed. ``--model NAME`` picks the store of one model: by the names the stores
recorded, else by the tokenizer of the model NAME names on this machine; a NAME that
picks no store exits 1. A folder that is refused (another user's, writable by others, a
file) or a store that cannot be removed (a folder at its name, a read-only folder) is
one ``error:`` line naming the path, never a traceback. What a file says (its model
names, its tokenizer, why it is unusable) and the paths are printed with their control
characters as escapes (``store_files.printable``; in ``--json``, as JSON escapes), so a
crafted file cannot send a terminal commands.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from edgespec.cli.common import JsonOpt, cli_errors, err_console, out_console
from edgespec.errors import MemoryStoreError

# What json.dumps(ensure_ascii=False) leaves raw that a terminal acts on: DEL, C1 (CSI among
# them), the line separators and the bidi controls (C0 it escapes itself)
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")

memory_app = typer.Typer(
    name="memory",
    help="The memory of earlier answers that --remember keeps on disk: show it, clear it.",
    no_args_is_help=True,
    add_completion=False,
)

ModelOpt = Annotated[
    Optional[str],
    typer.Option(
        "--model",
        "-m",
        help="Only the memory of this model's tokenizer (a name it was saved by, a catalog name or a GGUF path).",
    ),
]


def _row(s: Any) -> dict:
    return {
        "path": str(s.path),
        "identity": s.identity,
        "models": list(s.models),
        "tokens": s.tokens,
        "cap": s.cap,
        "documents": s.documents,
        "file_bytes": s.file_bytes,
        "proposals": s.proposals,
        "hits": s.hits,
        "hit_rate": round(s.hit_rate, 4),
        "proposed": s.proposed,
        "accepted": s.accepted,
        "kept": round(s.acceptance, 4),
        "saved_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(s.saved_at)) if s.saved_at else None,
        "problem": s.problem,
    }


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MB" if n >= 2**20 / 10 else f"{n / 1024:.0f} KB"


@memory_app.command("show")
def memory_show(as_json: JsonOpt = False) -> None:
    """Each saved memory: its model and tokenizer, tokens held, size, hit rate and what was kept."""
    from edgespec.decoding import suffix_store
    from edgespec.decoding.store_files import printable

    with cli_errors():
        directory = suffix_store.store_dir()
        rows = suffix_store.stats(directory)
        if as_json:
            text = json.dumps(
                {"directory": str(directory), "stores": [_row(s) for s in rows]}, indent=2, ensure_ascii=False
            )
            typer.echo(_JSON_UNSAFE.sub(lambda m: f"\\u{ord(m[0]):04x}", text))  # (json escapes C0 itself)
            return
        out = out_console()
        if not rows:
            out.print(Text(f"no memory saved in {printable(str(directory))} (a run with --remember saves one)"))
            return
        t = Table(title=f"edgespec memory ({printable(str(directory))})", title_justify="left")
        for col, just in (
            ("model", "left"),
            ("tokenizer", "left"),
            ("tokens", "right"),
            ("documents", "right"),
            ("on disk", "right"),
            ("hit rate", "right"),
            ("kept", "right"),
            ("saved", "left"),
        ):
            t.add_column(col, justify=just)  # type: ignore[arg-type]
        for s in rows:
            if s.problem:
                t.add_row(
                    Text(printable(s.path.name)),
                    Text(f"unusable: {printable(s.problem)}", style="yellow"),
                    "-",
                    "-",
                    _mib(s.file_bytes),
                    "-",
                    "-",
                    "-",
                )
                continue
            t.add_row(
                Text(printable(", ".join(s.models)) or "?"),
                Text(printable(s.identity)),
                f"{s.tokens:,} of {s.cap:,}",
                f"{s.documents:,}",
                _mib(s.file_bytes),
                f"{s.hit_rate:.0%} of {s.proposals:,}" if s.proposals else "-",
                f"{s.acceptance:.0%} of {s.proposed:,}" if s.proposed else "-",
                time.strftime("%Y-%m-%d %H:%M", time.localtime(s.saved_at)) if s.saved_at else "-",
            )
        out.print(t)
        out.print(
            Text("hit rate: proposals that drafted anything; kept: drafted tokens the model accepted", style="dim")
        )


@memory_app.command("clear")
def memory_clear(
    model: ModelOpt = None,
    yes: Annotated[
        bool, typer.Option("--yes", "-y", help="Do not ask first (a terminal asks; a script is not asked).")
    ] = False,
) -> None:
    """Delete the saved memory (every model's, or one model's with --model)."""
    from edgespec.decoding import suffix_store

    with cli_errors():
        directory = suffix_store.store_dir()
        rows = suffix_store.stats(directory)
        if model is not None:
            rows = _of_model(model, rows)
        if not rows:
            what = f" for {model}" if model is not None else ""
            err_console().print(Text(f"nothing to remove: no memory saved{what} in {directory}"))
            if model is not None:  # a name that picks nothing: say so with the exit status too
                raise typer.Exit(1)
            return
        if not yes and sys.stdin.isatty() and sys.stdout.isatty():
            size = sum(s.file_bytes for s in rows)
            if not typer.confirm(f"remove {len(rows)} memory file(s), {_mib(size)}, from {directory}?", default=False):
                err_console().print(Text("nothing removed"))
                raise typer.Exit(1)
        try:
            removed = suffix_store.clear(directory=directory, paths=[s.path for s in rows])
        except MemoryStoreError as e:
            _removed(getattr(e, "removed", []), rows)
            raise
        _removed(removed, rows)


def _removed(removed: list, rows: list) -> None:
    from edgespec.decoding.store_files import printable
    from edgespec.decoding.suffix_store import SUFFIX

    for path in removed:
        if path.suffix == SUFFIX:
            tokens = next((s.tokens for s in rows if s.path == path), 0)
            typer.echo(f"removed {printable(str(path))} ({tokens:,} tokens)")
        else:
            typer.echo(f"removed {printable(str(path))}")


def _of_model(name: str, rows: list) -> list:
    """The stores of the model ``name``: those saved by a model of that name, else the
    one of its tokenizer (the model found on this machine, nothing downloaded)."""
    key = name.strip().lower()
    named = [s for s in rows if any(m.lower() == key or Path(m).stem.lower() == key for m in s.models)]
    if named:
        return named
    from edgespec.catalog import resolve_model
    from edgespec.cli.memory_options import tokenizer_identity
    from edgespec.decoding.suffix_store import store_path
    from edgespec.errors import EdgespecError

    try:
        path = resolve_model(name, offline=True)
    except EdgespecError:
        return []  # no such model here: no store of its either
    wanted = store_path(tokenizer_identity(path), rows[0].path.parent if rows else None)
    return [s for s in rows if s.path == wanted]
