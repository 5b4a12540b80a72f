"""``generate --fim-prefix FILE --fim-suffix FILE``: fill in the middle from the command line.

The two files are the text before and after the cursor; the model writes the middle, in
its own FIM format (``edgespec.llama.fim``: the tokens read from the GGUF, the prompt
llama-server's ``/infill`` builds), and ``generate`` prints it like any answer (text, or
``--json``). The middle stops where it reaches the suffix's text (``fim.suffix_stop``),
at an end-of-generation token, or at ``--max-tokens``. A model without FIM tokens is an
input error (exit 2) naming what it lacks. For scripts and tests; editors use ``serve``'s
``/infill``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from edgespec.cli.common import read_text_file
from edgespec.errors import InputError

FimPrefixOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--fim-prefix",
        help="Fill in the middle: the file's text before the cursor (with --fim-suffix); "
        "prints the middle the model writes.",
    ),
]
FimSuffixOpt = Annotated[
    Optional[Path],
    typer.Option("--fim-suffix", help="Fill in the middle: the file's text after the cursor (with --fim-prefix)."),
]


def read_fim(prefix: Path | None, suffix: Path | None, *, has_prompt: bool, batch: bool) -> tuple[str, str] | None:
    """The prefix and suffix texts, or None without the options; an ``InputError`` for
    one without the other, or beside a prompt or a batch (checked before any model loads)."""
    if prefix is None and suffix is None:
        return None
    if prefix is None or suffix is None:
        raise InputError("--fim-prefix and --fim-suffix go together: give both (an empty file for an empty side)")
    if has_prompt or batch:
        raise InputError("--fim-prefix/--fim-suffix replace the prompt: give no prompt, --prompt-file or --input")
    return read_text_file(prefix, "--fim-prefix file"), read_text_file(suffix, "--fim-suffix file")


def fim_request(engine: Any, fim: tuple[str, str], options: dict) -> tuple[list[int], dict]:
    """The prompt ids of the middle between ``fim``'s texts, and ``options`` with the
    suffix's stop string added."""
    from edgespec.llama.fim import fim_tokens, infill_prompt, suffix_stop

    prefix, suffix = fim
    model = engine.target_model
    ids = infill_prompt(
        model, fim_tokens(model), prefix=prefix, suffix=suffix, n_ctx=engine.n_ctx, n_predict=options["max_tokens"]
    )
    at = suffix_stop(suffix)
    stops = tuple(options.get("stop") or ())
    return ids, {**options, "stop": stops + ((at,) if at is not None and at not in stops else ())}
