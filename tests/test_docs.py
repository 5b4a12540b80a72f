"""The docs stay true: README.md and docs/*.md against the real command line.

- Every `edgespec ...` command line they show (in shell code blocks and in inline code)
  runs with `--help` appended and exits 0: the command exists and every option shown is
  one it takes (Typer exits 2 on an unknown command or option). `--help` loads no model,
  so this is fast.
- Every option a command's `--help` lists is named in that command's section of
  docs/cli.md, so the reference lists them all; and its table of exit codes has every
  code an ``EdgespecError`` carries.
- Python and JSON examples parse.

Links, module paths and docs/api.md's names are tests/test_docs_links.py.

``PENDING`` lists options the docs already show that land on other branches this
session; command lines using them are skipped until those branches are merged, and a
test fails once they exist, so that the list is emptied then.
"""

from __future__ import annotations

import ast
import json
import re
import shlex
from dataclasses import dataclass

import pytest
import typer
from typer.testing import CliRunner

from docs_support import DOC_FILES, INLINE, ROOT, blocks
from edgespec.cli import app as edgespec_app

CLI_PAGE = ROOT / "docs" / "cli.md"

# Commands and options the docs show that other branches add this session: each entry is
# a command path, optionally with one option ("generate --schema": a `generate` line
# using --schema). Empty this once they are merged: test_pending_... says when.
PENDING: set[str] = set()

SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh"}
WRAPPERS = {"flock", "time", "nice", "timeout", "env", "sudo"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
UNPARSABLE = "<unparsable>"


@dataclass(frozen=True)
class Shown:
    """A command line as a page shows it: where, the text, and edgespec's arguments."""

    where: str
    text: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


def edgespec_args(text: str) -> list[tuple[str, ...]]:
    """edgespec's arguments in each command of a shell line (pipes, `&&` and `;`
    separate commands; `VAR=value`, `flock LOCK` and `python -m edgespec` are understood).
    A line the shell could not parse either is one command ``("<unparsable>", reason)``."""
    lex = shlex.shlex(text, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    try:
        tokens = list(lex)
    except ValueError as e:
        return [(UNPARSABLE, str(e))]
    found, segment = [], []
    for tok in [*tokens, ";"]:
        if tok and set(tok) <= set("();<>|&"):
            while segment and _ASSIGNMENT.match(segment[0]):
                segment.pop(0)
            if segment and (segment[0] == "edgespec" or (segment[0] in WRAPPERS and "edgespec" in segment)):
                found.append(tuple(segment[segment.index("edgespec") + 1 :]))
            elif segment[:3] in (["python", "-m", "edgespec"], ["python3", "-m", "edgespec"]):
                found.append(tuple(segment[3:]))
            segment = []
        else:
            segment.append(tok)
    return found


def shown_commands() -> list[Shown]:
    shown = []
    for path in DOC_FILES:
        rel = path.relative_to(ROOT)
        code, prose = blocks(path)
        for start, lang, body in code:
            if lang not in SHELL_LANGS:
                continue
            lines = body.replace("\\\n", " ").splitlines()
            for offset, line in enumerate(lines):
                text = line.strip()
                if text.startswith("$ "):
                    text = text[2:]
                if "edgespec" in text:
                    where = f"{rel}:{start + 1 + offset}"
                    shown += [Shown(where, text, args) for args in edgespec_args(text)]
        for start, para in prose:
            for span in INLINE.findall(para):
                text = span.strip()
                if text == "edgespec" or text.startswith("edgespec "):
                    shown += [Shown(f"{rel}:{start}", text, args) for args in edgespec_args(text)]
    return shown


def pending_entry(args: tuple[str, ...]) -> str | None:
    """The PENDING entry a command line uses, if any."""
    options = {a.split("=", 1)[0] for a in args if a.startswith("-")}
    for entry in PENDING:
        words = entry.split()
        path = [w for w in words if not w.startswith("-")]
        if list(args[: len(path)]) == path and {w for w in words if w.startswith("-")} <= options:
            return entry
    return None


SHOWN = shown_commands()


def run_help(args: tuple[str, ...]):
    return CliRunner().invoke(edgespec_app, [*args, "--help"])


# -- commands and options shown ------------------------------------------------------------


def test_the_docs_show_commands():
    # the extraction itself works: the pages are full of commands
    assert len(SHOWN) > 50
    commands = {s.args[0] for s in SHOWN if s.args}
    assert {"generate", "chat", "serve", "bench", "tune", "profiles", "models", "rpc-server"} <= commands


@pytest.mark.parametrize("shown", [s for s in SHOWN if not pending_entry(s.args)], ids=str)
def test_every_command_shown_exists_with_its_options(shown):
    assert shown.args[:1] != (UNPARSABLE,), f"{shown}: not a shell command line ({shown.args[1]})"
    r = run_help(shown.args)
    assert r.exit_code == 0, f"{shown}\n{r.output}"


def test_pending_entries_do_not_exist_yet():
    for entry in sorted(PENDING):
        uses = [s for s in SHOWN if pending_entry(s.args) == entry]
        assert uses, f"PENDING has {entry!r} but no page shows it: remove it from PENDING"
        r = run_help(uses[0].args)
        assert r.exit_code != 0, f"{entry!r} exists now ({uses[0]}): remove it from PENDING in {__file__}"


def _leaf_commands():
    root = typer.main.get_command(edgespec_app)

    def walk(cmd, path):
        subs = getattr(cmd, "commands", None)
        if subs:
            for name, sub in subs.items():
                yield from walk(sub, (*path, name))
        else:
            yield path, cmd

    return list(walk(root, ()))


def _section(page: str, command: str) -> str:
    """The part of docs/cli.md under the heading "## `edgespec COMMAND`" (or, for "exit
    codes", under "## Exit codes and errors")."""
    heading = "Exit codes and errors" if command == "exit codes" else f"`edgespec {re.escape(command)}`"
    m = re.search(rf"^## {heading}\s*$(.*?)(?=^## |\Z)", page, re.M | re.S)
    return m.group(1) if m else ""


@pytest.mark.parametrize("path,cmd", [pytest.param(p, c, id=" ".join(p)) for p, c in _leaf_commands()])
def test_cli_page_names_every_option(path, cmd):
    page = CLI_PAGE.read_text(encoding="utf-8")
    section = _section(page, path[0])
    assert section, f"docs/cli.md has no section '## `edgespec {path[0]}`'"
    if len(path) > 1:
        assert re.search(rf"\b{re.escape(' '.join(path))}\b", section), (
            f"docs/cli.md does not describe {' '.join(path)}"
        )
    missing = []
    for p in cmd.params:
        if p.param_type_name != "option" or getattr(p, "hidden", False):
            continue
        flag = next((o for o in p.opts if o.startswith("--")), p.opts[0])
        if flag == "--help":
            continue
        if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", section):
            missing.append(flag)
    assert not missing, f"docs/cli.md's `edgespec {path[0]}` section does not name {' '.join(path)} {missing}"


def test_cli_page_lists_every_exit_code():
    import edgespec.errors as errors

    def subclasses(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from subclasses(sub)

    codes = {errors.EdgespecError.exit_code} | {c.exit_code for c in subclasses(errors.EdgespecError)}
    table = _section(CLI_PAGE.read_text(encoding="utf-8"), "exit codes")
    listed = {int(m) for m in re.findall(r"^\|\s*(\d+)\s*\|", table, re.M)}
    assert codes <= listed, f"docs/cli.md's exit code table lacks {sorted(codes - listed)}"


def test_the_readme_test_command_is_the_one_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    command = ci[ci.index("# The README's test command:") + 1].strip()
    readme_code = [body for _, _, body in blocks(ROOT / "README.md")[0]]
    assert any(command in body.splitlines() for body in readme_code), command


# -- code that is not a command -------------------------------------------------------------


def _code(lang: str) -> list[tuple[str, str]]:
    return [
        (f"{path.relative_to(ROOT)}:{start}", body)
        for path in DOC_FILES
        for start, block_lang, body in blocks(path)[0]
        if block_lang == lang
    ]


@pytest.mark.parametrize("where,body", [pytest.param(*c, id=c[0]) for c in _code("python")])
def test_python_examples_are_python(where, body):
    ast.parse(body, filename=where)


@pytest.mark.parametrize("where,body", [pytest.param(*c, id=c[0]) for c in _code("json")])
def test_json_examples_are_json_or_json_lines(where, body):
    try:
        json.loads(body)
    except json.JSONDecodeError:
        for line in filter(str.strip, body.splitlines()):
            json.loads(line)
