"""The docs' pointers stay true (README.md, docs/*.md and what tests/test_docs.py reads):

- Every relative link (and its #anchor, for Markdown targets) resolves, with GitHub's slugs.
- Every module path they name exists: in docs/, README.md, ARCHITECTURE.md and the
  docstrings and comments of edgespec/, each dotted ``edgespec.x.y`` name imports (or is
  an attribute of what does), each ``edgespec/x/y.py`` path is a file, and each
  ``wing.module.name`` in backticks (``costmodel.costs.OnlineCost``) resolves under
  ``edgespec``: no pointer to where code used to be.
- docs/api.md shows only the public names: what ``edgespec`` exports, and its errors.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from docs_support import DOC_FILES, INLINE, LINK, ROOT, blocks

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
            para = INLINE.sub("", para)
            for _, target in LINK.findall(para):
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
