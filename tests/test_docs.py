"""The docs stay true: README.md and docs/*.md against the real command line.

- Every `edgespec ...` command line they show (in shell code blocks and in inline code)
  runs with `--help` appended and exits 0: the command exists and every option shown is
  one it takes (Typer exits 2 on an unknown command or option). `--help` loads no model,
  so this is fast.
- Every option a command's `--help` lists is named in that command's section of
  docs/cli.md, so the reference lists them all; and its table of exit codes has every
  code an ``EdgespecError`` carries.
- Every relative link (and its #anchor, for Markdown targets) resolves.
- Every module path they name exists: in docs/, README.md, ARCHITECTURE.md and the
  docstrings and comments of edgespec/, each dotted ``edgespec.x.y`` name imports (or is
  an attribute of what does), each ``edgespec/x/y.py`` path is a file, and each
  ``wing.module.name`` in backticks (``costmodel.costs.OnlineCost``) resolves under
  ``edgespec``: no pointer to where code used to be.
- docs/api.md shows only the public names: what ``edgespec`` exports, and its errors.

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
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from edgespec.cli import app as edgespec_app

ROOT = Path(__file__).resolve().parents[1]
DOC_FILES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLI_PAGE = ROOT / "docs" / "cli.md"

# Commands and options the docs show that other branches add this session: each entry is
# a command path, optionally with one option ("generate --schema": a `generate` line
# using --schema). Empty this once they are merged: test_pending_... says when.
PENDING: set[str] = set()

SHELL_LANGS = {"", "bash", "sh", "shell", "console", "zsh"}
WRAPPERS = {"flock", "time", "nice", "timeout", "env", "sudo"}
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_FENCE = re.compile(r"^\s{0,3}(```+|~~~+)\s*([\w+-]*)")
_INLINE = re.compile(r"(?<!`)`([^`]+)`(?!`)")
UNPARSABLE = "<unparsable>"
_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


@dataclass(frozen=True)
class Shown:
    """A command line as a page shows it: where, the text, and edgespec's arguments."""

    where: str
    text: str
    args: tuple[str, ...]

    def __str__(self) -> str:
        return f"{self.where}: {self.text}"


# -- reading the pages ---------------------------------------------------------------------


def blocks(path: Path) -> tuple[list[tuple[int, str, str]], list[tuple[int, str]]]:
    """A page as (first line number, language, code) for each fenced block and
    (first line number, text) for each paragraph of prose (lines joined by spaces)."""
    code: list[tuple[int, str, str]] = []
    prose: list[tuple[int, str]] = []
    fence, lang, start, body = None, "", 0, []
    para: list[str] = []
    para_start = 0

    def end_paragraph() -> None:
        if para:
            prose.append((para_start, " ".join(para)))
            para.clear()

    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = _FENCE.match(line)
        if fence is None and m:
            end_paragraph()
            fence, lang, start, body = m.group(1), m.group(2).lower(), n, []
        elif fence is not None:
            if line.strip().startswith(fence) and line.strip().strip(fence[0]) == "":
                code.append((start, lang, "\n".join(body)))
                fence = None
            else:
                body.append(line)
        elif not line.strip():
            end_paragraph()
        else:
            if not para:
                para_start = n
            para.append(line.strip())
    end_paragraph()
    return code, prose


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
            for span in _INLINE.findall(para):
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


# -- links ---------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    code, _ = blocks(path)
    in_code = set()
    for start, _, body in code:
        in_code.update(range(start, start + body.count("\n") + 3))
    seen: dict[str, int] = {}
    out = set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m and n not in in_code:
            base = slug(m.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            out.add(base if count == 0 else f"{base}-{count}")
    return out


def links() -> list[tuple[Path, str, str]]:
    found = []
    for path in DOC_FILES:
        _, prose = blocks(path)
        for start, para in prose:
            para = _INLINE.sub("", para)
            for _, target in _LINK.findall(para):
                found.append((path, f"{path.relative_to(ROOT)}:{start}", target))
    return found


LINKS = links()


def test_the_docs_have_links():
    assert len(LINKS) > 30


@pytest.mark.parametrize("path,where,target", [pytest.param(*link, id=f"{link[1]} {link[2]}") for link in LINKS])
def test_every_relative_link_resolves(path, where, target):
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
        return
    file_part, _, anchor = target.partition("#")
    dest = (path.parent / file_part).resolve() if file_part else path
    assert dest.exists(), f"{where}: {target} does not exist"
    if anchor and dest.suffix == ".md":
        assert anchor in anchors(dest), f"{where}: {target}: no heading with anchor #{anchor} in {dest.name}"


def test_slugs_follow_github():
    assert slug("`edgespec bench --profile auto`") == "edgespec-bench---profile-auto"
    assert slug("Is it worth it on my machine? `tune` and `bench`") == "is-it-worth-it-on-my-machine-tune-and-bench"
    assert slug('Exactness: what "lossless" means here') == "exactness-what-lossless-means-here"


# Where module paths are named: the reference, the front page, the map, the package.
PATH_FILES = [*DOC_FILES, ROOT / "ARCHITECTURE.md", *sorted((ROOT / "edgespec").rglob("*.py"))]
_WINGS = (
    "batching",
    "catalog",
    "cli",
    "constraints",
    "costmodel",
    "decoding",
    "llama",
    "measuring",
    "planning",
    "profiles",
    "server",
)
_DOTTED = re.compile(r"\bedgespec(?:\.[A-Za-z_]\w*)+")
_FILE_PATH = re.compile(r"(?<![\w/.-])((?:edgespec|docs|tests|benchmarks)/[\w/.-]*\w\.(?:py|md|toml))\b")
_IN_TICKS = re.compile(r"`([^`\s]+)`")
_WING_DOTTED = re.compile(r"^(?:%s)(?:\.[A-Za-z_]\w*)+$" % "|".join(_WINGS))
_NOT_MODULES = {"llama.cpp"}  # the C++ project, not edgespec.llama


def _resolves(dotted: str) -> bool:
    """``dotted`` names a module, or an attribute (a class, a function, a submodule) of one."""
    import importlib

    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def _missing(text: str, here: Path = ROOT) -> list[str]:
    """The module paths ``text`` (a line of a file in ``here``) names that do not exist."""
    missing = []
    for name in _DOTTED.findall(text):
        if not name.endswith((".py", ".md", ".toml", ".json")) and not _resolves(name):
            missing.append(name)
    missing += [p for p in _FILE_PATH.findall(text) if not (ROOT / p).exists()]
    for quoted in _IN_TICKS.findall(text):
        name = quoted.rstrip("()")
        if re.fullmatch(
            r"[\w/]+\.py", name
        ):  # ``reply.py``, ``batching/run.py``: beside, in the package or the checkout
            if not any((base / name).exists() for base in (here, ROOT / "edgespec", ROOT)):
                missing.append(name)
        elif _WING_DOTTED.match(name) and name not in _NOT_MODULES and not _resolves(f"edgespec.{name}"):
            missing.append(name)
    return missing


def test_the_path_check_finds_old_paths():
    text = (
        "see edgespec/llama.py, ``edgespec.batchseq``, ``decoding.policy.CPU_VERIFY_PRIOR``, ``multiseq.py``; "
        "not edgespec/llama/kernels.py, ``costmodel.costs.CPU_VERIFY_PRIOR``, ``batching/run.py`` or llama.cpp"
    )
    assert _missing(text) == [
        "edgespec.batchseq",
        "edgespec/llama.py",
        "decoding.policy.CPU_VERIFY_PRIOR",
        "multiseq.py",
    ]
    assert _missing("``reply.py``", ROOT / "edgespec" / "decoding") == []


def test_every_module_path_named_exists():
    missing = [
        f"{path.relative_to(ROOT)}:{n}: {name}"
        for path in PATH_FILES
        for n, line in enumerate(path.read_text().splitlines(), 1)
        for name in _missing(line, path.parent)
    ]
    assert not missing, "names of modules that do not exist:\n" + "\n".join(missing)


API_PAGE = ROOT / "docs" / "api.md"
PUBLIC_MODULES = {"errors"}  # edgespec.errors: the EdgespecError subclasses


def _api_names(text: str) -> list[str]:  # sorted, each once
    """What a page reaches of edgespec: each ``edgespec.X`` and each ``from edgespec... import X``."""
    names = [m.split(".")[1] for m in _DOTTED.findall(text)]
    for module, imported in re.findall(r"from (edgespec(?:\.\w+)*) import ([\w, ]+)", text):
        names += [module.split(".")[1]] if "." in module else [n.strip() for n in imported.split(",")]
    return sorted(set(names))


def test_the_api_check_finds_inner_names():
    assert _api_names("from edgespec.planning.planner import plan; `edgespec.batching.runner`") == [
        "batching",
        "planning",
    ]
    assert _api_names("from edgespec import Engine, plan\n`edgespec.load(...)`") == ["Engine", "load", "plan"]


def test_the_api_page_shows_only_public_names():
    import edgespec

    for name in edgespec.__all__:
        assert getattr(edgespec, name) is not None, name
    inner = [n for n in _api_names(API_PAGE.read_text()) if n not in set(edgespec.__all__) | PUBLIC_MODULES]
    assert not inner, f"docs/api.md reaches inside edgespec: {inner}"
