"""What test_bench and test_tune share: short prompts for the tiny models, a prompt
file of them (the ``prompt_file`` fixture lives in conftest), and a CLI runner."""

from __future__ import annotations

import json

import typer
from typer.testing import CliRunner

from edgespec.measuring.prompts import BenchPrompt

# Short prompts for the tiny models (their byte-level vocabulary makes the built-in
# prompts ~1000 tokens long): two kinds, with repeats so prompt lookup finds matches.
TINY_PROMPTS = [
    BenchPrompt("a", "edit", "def f(x): return x + 1\ndef f(x): return x + 1\ndef f("),
    BenchPrompt("b", "chat", "hello there, how are you today? hello there, how"),
    BenchPrompt("c", "edit", "abc abc abc abc abc abc abc abc"),
]


def write_prompt_file(path, prompts=TINY_PROMPTS):
    path.write_text("\n".join(json.dumps({"id": p.id, "prompt": p.prompt}) for p in prompts) + "\n")
    return path


def cli(name, command, tmp_path, monkeypatch):
    """Invoke ``command`` as the subcommand ``name``, with user profiles in ``tmp_path``."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    app = typer.Typer()
    app.command(name)(command)
    app.command("other")(lambda: None)  # keep it a subcommand
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [name, *map(str, args)], catch_exceptions=False)

    return invoke
