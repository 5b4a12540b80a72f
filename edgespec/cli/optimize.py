"""``edgespec models optimize MODEL``: a copy of MODEL in the weight type whose verify is
cheapest here, with the perplexity change and the verify curve before and after.

Thin: resolve the name, call ``edgespec.measuring.optimize``, print a short table for
people or one JSON object for scripts. Registered on ``models`` by ``cli/profiles.py``.
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from edgespec.cli.common import JsonOpt, cli_errors, err_console, out_console, store_name

SHOWN_N = (2, 3, 4, 8, 16)


def models_optimize(
    model: Annotated[str, typer.Argument(help="The model: a GGUF path, a catalog name, or a model found here.")],
    type_name: Annotated[
        Optional[str],
        typer.Option(
            "--type",
            help="The weight type of the copy (Q4_0, IQ4_NL, Q8_0, ...). Default: the type "
            "whose verify is cheapest on this machine.",
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Write the copy again if it exists.")] = False,
    threads: Annotated[
        Optional[int], typer.Option("--threads", min=1, help="CPU threads (default: one per physical core).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a copy of MODEL in the weight type whose verify is cheapest here (Q4_0 on a CPU),
    with its perplexity change on a held-out text and its verify cost before and after."""
    from edgespec import catalog
    from edgespec.measuring import optimize as lib

    with cli_errors():
        path = catalog.resolve_model(model)
        err = err_console()  # what is being done, on stderr (with --json too: it takes minutes)
        result = lib.optimize(
            path, type_name=type_name, force=force, threads=threads, phase=lambda m: err.print(Text(m, style="dim"))
        )
        data = result.to_dict()
        data["name"] = store_name(model) or result.source_name
        if as_json:
            typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            _render(data)


def _curve(c: dict) -> str:
    return "  ".join(f"c({n})={c[str(n)]:.2f}" for n in SHOWN_N if str(n) in c)


def _render(d: dict) -> None:
    out = out_console()
    t = Table(title=f"edgespec models optimize {d['name']}", title_justify="left", show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    gb = 1e9
    t.add_row("type", d["reason"])
    t.add_row("original", f"{d['source']} ({d['source_type']}, {d['size_bytes_before'] / gb:.2f} GB)")
    t.add_row("copy", f"{d['path']} ({d['type']}, {d['size_bytes_after'] / gb:.2f} GB)")
    t.add_row(
        "perplexity",
        f"{d['perplexity_before']:.3f} -> {d['perplexity_after']:.3f} "
        f"({d['perplexity_change_percent']:+.1f}%) on the held-out text ({d['heldout_tokens']} tokens)",
    )
    t.add_row("verify before", f"{_curve(d['c_before'])}  (step {d['step_ms_before']:.1f} ms)")
    t.add_row("verify after", f"{_curve(d['c_after'])}  (step {d['step_ms_after']:.1f} ms)")
    out.print(t)
    for note in d["notes"]:
        out.print(Text(note, style="yellow"))
    out.print(
        Text(
            f"timings are the fastest of 5 sweeps on a machine that may be busy; `edgespec tune --target "
            f"{d['path']}` measures more. `edgespec models list` shows the copy.",
            style="dim",
        )
    )
