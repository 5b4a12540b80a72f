"""What a schema or grammar is checked for before any generation, beyond compiling.

- A schema no finite value satisfies (it requires itself without end) is refused by
  ``grammar_spec``, without a model, in words that say so; the same schema made
  optional, or given a way out, compiles (the check is a fixpoint over the schema, not a
  match on two examples).
- ``oneOf`` whose branches are disjoint compiles (as ``anyOf``, which it then is
  exactly: llguidance's ``coerce_one_of``), also where llguidance cannot prove it
  itself; one whose branches may overlap is refused with a message that names
  ``--lenient-schema``, and lenient mode holds it as ``anyOf`` with a warning.
- ``bind`` checks the grammar with the model's tokenizer: a special token the model
  lacks, or a grammar whose start allows nothing, is a ``ConstraintError`` (400 / exit
  2) naming the field, not a ``ConstraintStateError`` mid-generation.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from edgespec.constraints import bind, compile_constraint, grammar_spec, lark_grammar, lark_json
from edgespec.constraints.schema_check import infinite_recursion, overlapping_one_of
from edgespec.errors import ConstraintError
from edgespec.llama import Model

pytest.importorskip("llguidance")


def js(schema):
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def model(tiny_target):
    m = Model(tiny_target, vocab_only=True)
    yield m
    m.close()


SELF = {"$ref": "#"}
REQUIRED_SELF = {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]}
MUTUAL = {
    "$defs": {
        "A": {"type": "object", "properties": {"b": {"$ref": "#/$defs/B"}}, "required": ["b"]},
        "B": {"type": "array", "items": {"$ref": "#/$defs/A"}, "minItems": 1},
    },
    "type": "object",
    "properties": {"root": {"$ref": "#/$defs/A"}},
    "required": ["root"],
}


@pytest.mark.parametrize(
    "schema", [SELF, REQUIRED_SELF, MUTUAL, {"allOf": [{"type": "object"}, SELF]}, {"anyOf": [SELF, REQUIRED_SELF]}]
)
def test_a_schema_without_a_finite_value_is_refused_before_any_model(schema):
    with pytest.raises(ConstraintError) as info:
        grammar_spec(js(schema))
    message = str(info.value)
    assert "no finite value" in message and "refers to" in message and "\n" not in message
    assert "NoExtensionBias" not in message and "Too many" not in message
    assert info.value.param == "response_format.json_schema.schema"


@pytest.mark.parametrize(
    "schema",
    [
        {"type": "object", "properties": {"a": {"$ref": "#"}}},  # optional
        {"type": "object", "properties": {"a": {"anyOf": [{"$ref": "#"}, {"type": "null"}]}}, "required": ["a"]},
        {"type": ["object", "null"], "properties": {"a": {"$ref": "#"}}, "required": ["a"]},  # null ends it
        {"type": "array", "items": {"$ref": "#"}},  # [] ends it
        {
            "$defs": {
                "node": {
                    "type": "object",
                    "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                    "required": ["kids"],
                }
            },
            "$ref": "#/$defs/node",
        },  # a tree
    ],
)
def test_recursion_with_a_way_out_compiles(schema):
    assert infinite_recursion(schema) is None
    assert grammar_spec(js(schema)).kind == "json"


def test_a_deeply_nested_schema_is_checked_without_python_recursion():
    schema: dict = {"type": "integer"}
    for _ in range(3000):
        schema = {"type": "array", "items": schema, "minItems": 1}
    assert infinite_recursion(schema) is None and overlapping_one_of(schema) is None


def test_tool_parameters_that_require_themselves_are_refused_too():
    with pytest.raises(ConstraintError, match="no finite value"):
        lark_json(REQUIRED_SELF)


PET = {
    "$defs": {
        "Cat": {
            "type": "object",
            "properties": {"kind": {"$ref": "#/$defs/CatKind"}, "meows": {"type": "integer"}},
            "required": ["kind", "meows"],
            "additionalProperties": False,
        },
        "Dog": {
            "type": "object",
            "properties": {"kind": {"$ref": "#/$defs/DogKind"}, "barks": {"type": "boolean"}},
            "required": ["kind", "barks"],
            "additionalProperties": False,
        },
        "CatKind": {"const": "cat"},
        "DogKind": {"const": "dog"},
    },
    "type": "object",
    "properties": {"pet": {"oneOf": [{"$ref": "#/$defs/Cat"}, {"$ref": "#/$defs/Dog"}]}},
    "required": ["pet"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    "schema",
    [
        PET,  # a discriminator behind $refs
        {"oneOf": [{"const": 1}, {"const": 2}]},
        {"oneOf": [{"type": "string"}, {"type": "integer"}, {"type": "null"}]},
        {
            "oneOf": [
                {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
                {
                    "type": "object",
                    "properties": {"b": {"type": "string"}},
                    "required": ["b"],
                    "additionalProperties": False,
                },
            ]
        },
    ],
)
def test_one_of_with_disjoint_branches_compiles(schema, model):
    assert overlapping_one_of(schema) is None
    spec = grammar_spec(js(schema))
    assert spec.warnings == ()
    assert compile_constraint(js(schema), model) is not None


def test_a_disjoint_one_of_holds_exactly_the_values_of_one_branch(model):
    c = compile_constraint(js(PET), model)
    # written in the default (spaced) layout, as json.dumps writes it
    for text, ok in (
        ('{"pet": {"kind": "cat", "meows": 3}}', True),
        ('{"pet": {"kind": "dog", "barks": true}}', True),
        ('{"pet": {"kind": "cat", "barks": true}}', False),
    ):
        m = c.matcher()
        ids = c.tokenizer.tokenize_str(text)
        assert (m.validate(ids) == len(ids)) is ok, text
        if ok:
            jsonschema.validate(json.loads(text), PET)


@pytest.mark.parametrize(
    "schema",
    [
        {"oneOf": [{"type": "string"}, {"type": "string", "maxLength": 3}]},
        {"oneOf": [{"type": "number"}, {"type": "integer"}]},
        {"type": "object", "properties": {"v": {"oneOf": [{"type": "object"}, {"type": "object", "required": ["x"]}]}}},
    ],
)
def test_one_of_that_may_overlap_is_refused_naming_lenient_mode(schema):
    assert overlapping_one_of(schema) is not None
    with pytest.raises(ConstraintError) as info:
        grammar_spec(js(schema))
    message = str(info.value)
    assert "'oneOf'" in message and "--lenient-schema" in message and "coerce_one_of" not in message
    spec = grammar_spec(js(schema), lenient=True)
    assert any("anyOf" in w for w in spec.warnings)


def test_a_special_token_the_model_lacks_is_refused_when_bound(model):
    spec = lark_grammar('start: <tool_call> "x"', param="grammar")  # no tokenizer yet: it cannot tell
    with pytest.raises(ConstraintError) as info:
        bind(spec, model)
    assert "<tool_call>" in str(info.value) and info.value.param == "grammar" and "\n" not in str(info.value)
    assert info.value.exit_code == 2


def test_a_grammar_that_allows_nothing_is_refused_when_bound(model):
    spec = lark_grammar("start: x\nx: x")
    with pytest.raises(ConstraintError, match="can never be satisfied") as info:
        bind(spec, model)
    assert info.value.param == "response_format.grammar"
    assert bind(lark_grammar('start: "yes" | "no"'), model).kind == "grammar"
