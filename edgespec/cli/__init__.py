"""The `edgespec` command: a thin Typer app over the library.

Each command parses its options, calls the API, renders, and maps ``EdgespecError`` to a
one-line message and an exit code (``common.cli_errors``). The commands live in the
modules of this package; this file only assembles them.
"""

from __future__ import annotations

import typer

from edgespec import __version__

from .bench import bench
from .chat import chat
from .generate import generate
from .memory import memory_app
from .profiles import models_app, profiles_app
from .rpc import rpc_server
from .serve import serve
from .tune import tune

app = typer.Typer(
    name="edgespec",
    help="Speculative decoding for local LLMs on the machine you own (llama.cpp, GGUF).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"edgespec {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Speculative decoding for local LLMs on the machine you own."""


app.command("generate")(generate)
app.command("chat")(chat)
app.command("serve")(serve)
app.command("bench")(bench)
app.command("tune")(tune)
app.command("rpc-server")(rpc_server)
app.add_typer(profiles_app, name="profiles", help="Device profiles and the choice they make.")
app.add_typer(models_app, name="models", help="The model catalog: list, pull, check a pair.")
app.add_typer(memory_app, name="memory", help="The memory of earlier answers --remember keeps: show, clear.")


def main() -> None:
    app()
