"""The shape of the code, checked: edgespec's imports form no circle, no module is over
450 lines, no function in the planner or the profiles is over 60, and llama_cpp is
imported in one place only. Read from the source with ``ast``; nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "edgespec"
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The edgespec modules ``name`` imports, anywhere in it (function-level imports
    count: they make a circle as much as top-level ones, only later)."""
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            # "from . import x" depends on the module x; "from .m import name" on m
            targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in known else mod for a in node.names]
        else:
            continue
        for t in targets:
            # the longest known module the import names (edgespec.catalog.fit, not edgespec)
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def import_graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a path ``a -> b -> ... -> a``, or None."""
    WHITE, GREY, BLACK = 0, 1, 2
    colour = dict.fromkeys(graph, WHITE)
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        colour[n] = GREY
        stack.append(n)
        for m in sorted(graph.get(n, ())):
            if colour.get(m) == GREY:
                return stack[stack.index(m) :] + [m]
            if colour.get(m) == WHITE:
                found = visit(m)
                if found:
                    return found
        stack.pop()
        colour[n] = BLACK
        return None

    for n in sorted(graph):
        if colour[n] == WHITE:
            found = visit(n)
            if found:
                return found
    return None


def test_the_import_graph_has_no_circle():
    graph = import_graph()
    assert len(graph) > 30  # the whole package was read
    assert "edgespec.planning.planner" in graph["edgespec.cli.plan_options"]
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_circle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_detection_knows_nothing_of_profiles_and_the_layers_point_down():
    graph = import_graph()

    def reaches(a: str, b: str) -> bool:
        seen, todo = set(), [a]
        while todo:
            n = todo.pop()
            if n == b:
                return True
            if n not in seen:
                seen.add(n)
                todo.extend(graph.get(n, ()))
        return False

    assert not any(m.startswith("edgespec.profiles") for m in graph["edgespec.detect"])
    for low, high in [
        ("edgespec.profiles", "edgespec.planning.planner"),
        ("edgespec.catalog", "edgespec.profiles"),
        ("edgespec.engine", "edgespec.cli"),
        ("edgespec.llama", "edgespec.engine"),
    ]:
        assert not reaches(low, high), f"{low} imports {high}, a layer above it"


def test_llama_cpp_is_imported_only_behind_the_llama_door():
    where = []
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            )
            if any(n == "llama_cpp" or n.startswith("llama_cpp.") for n in names):
                where.append(name)
    assert set(where) == {"edgespec.llama.backend"}


def test_llguidance_is_imported_only_behind_the_constraints_door():
    where = set()
    for name, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else ([node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            )
            if any(n == "llguidance" or n.startswith("llguidance.") for n in names):
                where.add(name)
    assert where and all(n.startswith("edgespec.constraints.") for n in where), where


def test_no_module_is_over_450_lines():
    sizes = {name: len(path.read_text(encoding="utf-8").splitlines()) for name, path in modules().items()}
    assert {n: s for n, s in sizes.items() if s > MAX_MODULE_LINES} == {}


def test_no_function_in_the_planner_or_the_profiles_is_over_60_lines():
    long = {}
    for name, path in modules().items():
        if not (name == "edgespec.planning.planner" or name.startswith("edgespec.profiles")):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                if n > MAX_FUNCTION_LINES:
                    long[f"{name}.{node.name}"] = n
    assert long == {}


def test_every_module_opens_with_a_docstring():
    missing = [
        name for name, path in modules().items() if not ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    ]
    assert missing == []


# ---- the wings (issue 26): the rooms of the house, and what each may never reach ----
# A room is a top-level module (engine, errors, ...) or a package (decoding/, batching/,
# ...). Bottom up: the ground (errors, events, the cost model, the machine probe), the
# doors (llama/, constraints/), one stream (decoding/), many per decode (batching/), the
# models and profiles (catalog/, profiles/), the choice (planning/), measuring/, the
# public face (engine, loading, edgespec/__init__), then server/ and cli/. "Never
# reaches" counts imports through other rooms too, and function-level imports.

MAX_TOP_LEVEL_MODULES = 8
NOBODY_BUT_THE_FACE = {"engine", "loading", "edgespec"}  # the public face: imported only from above
NEVER_REACHES: dict[str, set[str]] = {
    "errors": {"*"},
    "events": {"*"},
    "profile_data": {"*"},
    "costmodel": {"*"},  # pure arithmetic (errors allowed)
    "llama": {
        "costmodel",
        "detect",
        "constraints",
        "decoding",
        "batching",
        "catalog",
        "profiles",
        "planning",
        "measuring",
        "server",
        "cli",
    }
    | NOBODY_BUT_THE_FACE,
    "detect": {
        "costmodel",
        "constraints",
        "decoding",
        "batching",
        "catalog",
        "profiles",
        "planning",
        "measuring",
        "server",
        "cli",
    }
    | NOBODY_BUT_THE_FACE,
    "constraints": {"decoding", "batching", "catalog", "profiles", "planning", "measuring", "server", "cli"}
    | NOBODY_BUT_THE_FACE,
    "decoding": {"batching", "catalog", "profiles", "planning", "measuring", "server", "cli"} | NOBODY_BUT_THE_FACE,
    "batching": {"catalog", "profiles", "planning", "measuring", "server", "cli"} | NOBODY_BUT_THE_FACE,
    "catalog": {"constraints", "decoding", "batching", "profiles", "planning", "measuring", "server", "cli"}
    | NOBODY_BUT_THE_FACE,
    "profiles": {"constraints", "decoding", "batching", "planning", "measuring", "server", "cli"} | NOBODY_BUT_THE_FACE,
    "planning": {"constraints", "decoding", "batching", "measuring", "server", "cli"} | NOBODY_BUT_THE_FACE,
    "measuring": {"planning", "server", "cli"} | NOBODY_BUT_THE_FACE,
    "engine": {"catalog", "profiles", "planning", "measuring", "loading", "edgespec", "server", "cli"},
    "loading": {"measuring", "server", "cli"},
    "edgespec": {"measuring", "server", "cli"},
    "server": {"measuring", "cli"},
    "cli": set(),
    "__main__": set(),
}
MAY_ALWAYS_REACH = {"costmodel": {"errors"}}


def room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def chain_to(graph: dict[str, set[str]], start: str, bad) -> list[str] | None:
    """The import chain from ``start`` to the first module ``bad`` accepts, or None."""
    came: dict[str, str | None] = {start: None}
    todo = [start]
    while todo:
        n = todo.pop(0)
        if n != start and bad(n):
            path = [n]
            while came[path[-1]] is not None:
                path.append(came[path[-1]])
            return path[::-1]
        for m in sorted(graph.get(n, ())):
            if m not in came:
                came[m] = n
                todo.append(m)
    return None


def test_the_top_level_holds_8_modules_at_most():
    """The public face (__init__, engine, loading), errors, events, detect: the rest lives in
    a room of its own (a wing, a door, the cost model)."""
    top = sorted(p.name for p in PACKAGE.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} modules at the top of edgespec/: {top}"


def test_every_room_has_a_rule():
    rooms = {room(m) for m in modules()}
    assert rooms - set(NEVER_REACHES) == set(), "a new room: say in NEVER_REACHES what it may never reach"
    assert {"decoding", "batching", "planning", "measuring", "costmodel"} <= rooms


def test_no_wing_reaches_a_room_it_must_never_import():
    graph = import_graph()
    broken = []
    for module in sorted(graph):
        own = room(module)
        banned = NEVER_REACHES[own]
        allowed = MAY_ALWAYS_REACH.get(own, set()) | {own}

        def bad(m: str, banned=banned, allowed=allowed) -> bool:
            r = room(m)
            return r not in allowed and ("*" in banned or r in banned)

        found = chain_to(graph, module, bad)
        if found:
            broken.append(" -> ".join(found))
    assert broken == [], "imports running against the wings' order:\n" + "\n".join(broken)


def test_the_wing_rules_catch_an_import_running_back_up():
    graph = {
        "edgespec.decoding.policy": {"edgespec.costmodel.costs"},
        "edgespec.costmodel.costs": {"edgespec.batching.runner"},
        "edgespec.batching.runner": set(),
    }
    found = chain_to(graph, "edgespec.decoding.policy", lambda m: room(m) in NEVER_REACHES["decoding"])
    assert found == ["edgespec.decoding.policy", "edgespec.costmodel.costs", "edgespec.batching.runner"]
    assert chain_to(graph, "edgespec.batching.runner", lambda m: True) is None
