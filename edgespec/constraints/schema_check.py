"""Two questions about a JSON Schema that llguidance does not answer before generating.

**Is there a finite value?** ``{"$ref": "#"}``, or an object that requires a property
whose schema is that object again, is satisfied by no finite JSON value: every value
would have to contain itself without end. llguidance compiles such a schema and fails
only while generating (no token allowed, or forced tokens without end), after the model
has loaded. ``infinite_recursion`` finds it first, as the least fixpoint of "this schema
has a finite value" over the schema's subschemas (a ``$ref`` has one if its target has
one; an object if each required property has one; an array if its first ``minItems``
items have one; ``anyOf`` / ``oneOf`` if a branch has one; ``allOf`` if every member
has; a type list if one of its types has; any other value is finite). It answers "no"
only where the schema certainly has no finite value: a ``$ref`` it cannot resolve here
(another document, an anchor) counts as finite.

**Are a ``oneOf``'s branches disjoint?** llguidance implements ``oneOf`` only as
``anyOf`` (its ``coerce_one_of`` option), which is the same constraint exactly when no
value can match two branches. ``overlapping_one_of`` proves that branch by branch: two
branches are disjoint if their types cannot meet (``integer`` is a ``number``), if both
are value lists (``const``, ``enum``) with nothing in common, or if both are objects
that require one property whose values (``const`` / ``enum``: pydantic's discriminated
unions) have nothing in common, or if one allows no other keys than its ``properties``
and the other requires a key outside them. Where it cannot prove it, the ``oneOf`` is
reported.

Pure functions over the parsed schema (no llguidance, no model); iterative, so a deeply
nested schema does not exhaust Python's recursion limit.
"""

from __future__ import annotations

import json
from typing import Any, Iterator
from urllib.parse import unquote

TYPES = ("null", "boolean", "number", "integer", "string", "array", "object")
_CHILD_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_CHILD_ONE = (
    "additionalProperties",
    "items",
    "additionalItems",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_CHILD_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")


def _esc(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _children(schema: dict, ptr: str) -> Iterator[tuple[str, Any]]:
    for name in _CHILD_MAPS:
        sub = schema.get(name)
        if isinstance(sub, dict):
            for key, value in sub.items():
                yield f"{ptr}/{name}/{_esc(key)}", value
    for name in _CHILD_ONE:
        if name in schema:
            yield f"{ptr}/{name}", schema[name]
    for name in _CHILD_LISTS + ("items",):
        sub = schema.get(name)
        if isinstance(sub, list):
            for i, value in enumerate(sub):
                yield f"{ptr}/{name}/{i}", value


def _subschemas(root: Any) -> dict[str, Any]:
    """Every subschema of ``root`` (dicts and booleans) by its JSON pointer ("" = root),
    parents before children."""
    out: dict[str, Any] = {}
    todo = [("", root)]
    while todo:
        ptr, schema = todo.pop()
        if ptr in out or not isinstance(schema, (dict, bool)):
            continue
        out[ptr] = schema
        if isinstance(schema, dict):
            todo.extend(reversed(list(_children(schema, ptr))))
    return out


def _resolve(root: Any, ref: Any) -> tuple[str, Any] | None:
    """A local ``$ref`` (``#`` or ``#/json/pointer``) as (pointer, schema); None for one
    this document cannot answer (another document, an anchor, a pointer to nothing)."""
    if not isinstance(ref, str) or not ref.startswith("#") or (len(ref) > 1 and ref[1] != "/"):
        return None
    node, ptr = root, ""
    for raw in unquote(ref[2:]).split("/") if len(ref) > 1 else ():
        key = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and key in node:
            node = node[key]
        elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
            node = node[int(key)]
        else:
            return None
        ptr += "/" + _esc(key)
    return (ptr, node) if isinstance(node, (dict, bool)) else None


class _Graph:
    """The subschemas of one document, with its local references resolved."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.nodes = _subschemas(root)
        self.refs: dict[str, str | None] = {}
        pending = list(self.nodes.items())
        while pending:  # a $ref may point outside the usual places: take its subtree in too
            ptr, schema = pending.pop()
            if not isinstance(schema, dict) or "$ref" not in schema:
                continue
            target = _resolve(root, schema["$ref"])
            self.refs[ptr] = target[0] if target else None
            if target and target[0] not in self.nodes:
                extra = {target[0] + p: s for p, s in _subschemas(target[1]).items()}
                extra = {p: s for p, s in extra.items() if p not in self.nodes}
                self.nodes.update(extra)
                pending.extend(extra.items())

    def deref(self, ptr: str, limit: int = 32) -> tuple[str, Any]:
        """The schema at ``ptr`` after following a chain of plain ``$ref``s."""
        for _ in range(limit):
            schema = self.nodes[ptr]
            target = self.refs.get(ptr) if isinstance(schema, dict) else None
            if target is None or set(schema) - {"$ref", "title", "description", "$comment"}:
                break
            ptr = target
        return ptr, self.nodes[ptr]


def _types(schema: dict) -> set[str]:
    t = schema.get("type")
    if isinstance(t, str):
        return {t}
    if isinstance(t, list) and t and all(isinstance(x, str) for x in t):
        return set(t)
    return set(TYPES)


def _finite_now(graph: _Graph, ptr: str, finite: set[str]) -> bool:
    """Whether the schema at ``ptr`` has a finite value, given the subschemas already
    known to have one (``finite``): one step of the fixpoint."""
    schema = graph.nodes[ptr]
    if isinstance(schema, bool):
        return schema
    if "$ref" in schema and graph.refs.get(ptr) is not None and graph.refs[ptr] not in finite:
        return False
    for i, _ in enumerate(schema.get("allOf") or ()):
        if f"{ptr}/allOf/{i}" in graph.nodes and f"{ptr}/allOf/{i}" not in finite:
            return False
    for name in ("anyOf", "oneOf"):
        branches = schema.get(name)
        if (
            isinstance(branches, list)
            and branches
            and not any(
                f"{ptr}/{name}/{i}" in finite or f"{ptr}/{name}/{i}" not in graph.nodes for i in range(len(branches))
            )
        ):
            return False
    if "const" in schema or (isinstance(schema.get("enum"), list) and schema["enum"]):
        return True
    return any(_type_finite(graph, schema, ptr, t, finite) for t in _types(schema))


def _type_finite(graph: _Graph, schema: dict, ptr: str, kind: str, finite: set[str]) -> bool:
    def has(sub: str) -> bool:
        return sub not in graph.nodes or sub in finite

    if kind == "object":
        props = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
        required = schema.get("required") if isinstance(schema.get("required"), list) else []
        return all(
            has(f"{ptr}/properties/{_esc(name)}") for name in required if isinstance(name, str) and name in props
        )
    if kind == "array":
        n = schema.get("minItems", 0)
        n = n if isinstance(n, int) and not isinstance(n, bool) else 0
        prefix = schema.get("prefixItems")
        name = "prefixItems"
        if prefix is None and isinstance(schema.get("items"), list):  # draft 4-7 tuples
            prefix, name = schema["items"], "items"
        prefix = prefix if isinstance(prefix, list) else []
        if not all(has(f"{ptr}/{name}/{i}") for i in range(min(n, len(prefix)))):
            return False
        rest = "items" if name == "prefixItems" else "additionalItems"
        return n <= len(prefix) or has(f"{ptr}/{rest}")
    return True


def infinite_recursion(schema: Any) -> str | None:
    """None if ``schema`` has a finite value (or this check cannot tell), else a plain
    description of where it recurses without end."""
    if not isinstance(schema, dict):
        return None
    graph = _Graph(schema)
    order = list(reversed(graph.nodes))  # children before parents: most settle in one pass
    finite: set[str] = set()
    changed = True
    while changed:
        changed = False
        for ptr in order:
            if ptr not in finite and _finite_now(graph, ptr, finite):
                finite.add(ptr)
                changed = True
    if "" in finite:
        return None
    for ptr in graph.nodes:  # document order: name the first reference without a way out
        if ptr not in finite and graph.refs.get(ptr) is not None and graph.refs[ptr] not in finite:
            return f"'#{ptr}' refers to '#{graph.refs[ptr]}', which must contain itself again"
    return "a required part contains itself"


def _values(schema: dict) -> list | None:
    """The values a schema allows when it lists them (``const``, ``enum``), else None."""
    if "const" in schema:
        return [schema["const"]]
    if isinstance(schema.get("enum"), list):
        return list(schema["enum"])
    return None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer()):
        return "integer"
    if isinstance(value, (int, float)):
        return "number"
    return {str: "string", list: "array", dict: "object"}.get(type(value), "object")


def _kinds(schema: dict) -> set[str]:
    """The JSON types a schema's values can have, ``integer`` counted as a ``number``."""
    values = _values(schema)
    kinds = {_json_type(v) for v in values} if values is not None else _types(schema)
    return {"number" if k == "integer" else k for k in kinds}


def _list(value: Any) -> list:
    return value if isinstance(value, list) else []


def _key(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def _disjoint_values(a: list | None, b: list | None) -> bool:
    return a is not None and b is not None and not {_key(v) for v in a} & {_key(v) for v in b}


def _disjoint(graph: _Graph, pa: str, pb: str) -> bool:
    pa, a = graph.deref(pa)
    pb, b = graph.deref(pb)
    if a is False or b is False:
        return True
    if not isinstance(a, dict) or not isinstance(b, dict):
        return False
    if not _kinds(a) & _kinds(b) or _disjoint_values(_values(a), _values(b)):
        return True
    if _kinds(a) != {"object"} or _kinds(b) != {"object"}:
        return False
    pa_props, pb_props = a.get("properties") or {}, b.get("properties") or {}
    if not isinstance(pa_props, dict) or not isinstance(pb_props, dict):
        return False
    for x, x_props, y in ((a, pa_props, b), (b, pb_props, a)):
        # x allows no other keys than its properties, and y requires one of those others
        if (
            x.get("additionalProperties") is False
            and not x.get("patternProperties")
            and any(isinstance(n, str) and n not in x_props for n in _list(y.get("required")))
        ):
            return True
    both = set(_list(a.get("required"))) & set(_list(b.get("required")))
    for name in sorted(n for n in both if isinstance(n, str) and n in pa_props and n in pb_props):
        _, va = graph.deref(f"{pa}/properties/{_esc(name)}")
        _, vb = graph.deref(f"{pb}/properties/{_esc(name)}")
        if isinstance(va, dict) and isinstance(vb, dict) and _disjoint_values(_values(va), _values(vb)):
            return True
    return False


def overlapping_one_of(schema: Any) -> str | None:
    """None if every ``oneOf`` in ``schema`` has disjoint branches (there is no ``oneOf``
    at all, or each is exactly an ``anyOf``), else the pointer of the first that may
    not (``'#/properties/pet'``)."""
    if not isinstance(schema, dict):
        return None
    graph = _Graph(schema)
    for ptr, node in graph.nodes.items():
        branches = node.get("oneOf") if isinstance(node, dict) else None
        if not isinstance(branches, list):
            continue
        subs = [f"{ptr}/oneOf/{i}" for i in range(len(branches)) if f"{ptr}/oneOf/{i}" in graph.nodes]
        if len(subs) != len(branches):
            return f"'#{ptr}'"
        if not all(_disjoint(graph, subs[i], subs[j]) for i in range(len(subs)) for j in range(i + 1, len(subs))):
            return f"'#{ptr}'"
    return None


def has_one_of(schema: Any) -> bool:
    """Whether any subschema of ``schema`` uses ``oneOf``."""
    return isinstance(schema, dict) and any(
        isinstance(node, dict) and "oneOf" in node for node in _Graph(schema).nodes.values()
    )
