"""The JSON layout a schema compiles to (issue 28, item 2).

The default is the spaced layout (``", "`` and ``": "``, as ``json.dumps`` and the
Qwen2.5-Coder models write JSON): held to compact separators, the 1.5B repeated an enum
value in an array without ``maxItems`` until ``max_tokens``. Compact and flexible stay
available through the schema's ``x-guidance`` (``with_layout``), and ``lark_json``
follows the same default. The unit tests use the tiny test model's tokenizer; the last
test runs the real 0.5B (integration).
"""

from __future__ import annotations

import json

import pytest

from edgespec.constraints import (
    DEFAULT_LAYOUT,
    JSON_LAYOUT,
    JSON_LAYOUTS,
    compile_constraint,
    compile_lark,
    lark_json,
    with_layout,
)
from edgespec.errors import ConstraintError
from edgespec.llama import Model

TICKET = {
    "type": "object",
    "properties": {
        "priority": {"enum": ["low", "high"]},
        "topics": {"type": "array", "items": {"type": "string", "enum": ["billing", "refund", "other"]}},
    },
    "required": ["priority", "topics"],
    "additionalProperties": False,
}
VALUE = {"priority": "high", "topics": ["billing", "refund"]}
TEXT = {
    "spaced": json.dumps(VALUE),
    "compact": json.dumps(VALUE, separators=(",", ":")),
    "indented": json.dumps(VALUE, indent=2),
}


@pytest.fixture(scope="module")
def model(tiny_target):
    m = Model(tiny_target, vocab_only=True)
    yield m
    m.close()


def js(schema):
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema}}


def takes(constraint, model, text: str) -> bool:
    """Whether the whole of ``text`` is allowed and completes the structure."""
    ids = model.tokenize(text, add_special=False)
    m = constraint.matcher()
    if m.validate(ids) != len(ids):
        return False
    m.consume(ids)
    return m.is_accepting()


def test_the_default_layout_is_the_spaced_one_as_json_dumps_writes():
    assert DEFAULT_LAYOUT == "spaced" and JSON_LAYOUT is JSON_LAYOUTS["spaced"]
    assert (JSON_LAYOUT["item_separator"], JSON_LAYOUT["key_separator"]) == (", ", ": ")
    assert JSON_LAYOUT["whitespace_flexible"] is False
    assert (JSON_LAYOUTS["compact"]["item_separator"], JSON_LAYOUTS["compact"]["key_separator"]) == (",", ":")
    assert JSON_LAYOUTS["flexible"]["whitespace_flexible"] is True


def test_a_schema_compiles_to_the_spaced_layout_by_default(model):
    c = compile_constraint(js(TICKET), model)
    assert takes(c, model, TEXT["spaced"])
    assert not takes(c, model, TEXT["compact"])
    assert not takes(c, model, TEXT["indented"])
    # the separators are the grammar's: after a key, ": " is forced whole
    m = c.matcher()
    m.consume(model.tokenize('{"priority', add_special=False))
    assert model.detokenize(m.forced()).startswith('": "')


@pytest.mark.parametrize(
    "layout, accepted",
    [("spaced", {"spaced"}), ("compact", {"compact"}), ("flexible", {"spaced", "compact", "indented"})],
)
def test_with_layout_chooses_the_layout_through_the_schema(model, layout, accepted):
    c = compile_constraint(js(with_layout(TICKET, layout)), model)
    assert {name for name, text in TEXT.items() if takes(c, model, text)} == accepted


def test_with_layout_keeps_the_schema_and_its_other_guidance():
    schema = {**TICKET, "x-guidance": {"item_separator": " , ", "lenient": True}}
    out = with_layout(schema, "compact")
    assert out["x-guidance"] == {**JSON_LAYOUTS["compact"], "lenient": True}
    assert {k: v for k, v in out.items() if k != "x-guidance"} == TICKET
    assert schema["x-guidance"]["item_separator"] == " , "  # not changed in place
    assert with_layout(True, "compact") == {"x-guidance": JSON_LAYOUTS["compact"]}
    with pytest.raises(ConstraintError, match="unknown JSON layout 'tight'"):
        with_layout(TICKET, "tight")


def test_a_schemas_own_x_guidance_wins_over_the_default(model):
    # the documented way to ask for compact JSON from the command line or the server
    schema = {**TICKET, "x-guidance": {"item_separator": ",", "key_separator": ":"}}
    c = compile_constraint(js(schema), model)
    assert takes(c, model, TEXT["compact"]) and not takes(c, model, TEXT["spaced"])


def test_lark_json_takes_the_same_default_and_any_named_layout(model):
    def grammar(term):
        return compile_lark(f'start: "<call>" {term} "</call>"', model)

    spaced, compact = grammar(lark_json(TICKET)), grammar(lark_json(TICKET, layout="compact"))
    assert takes(spaced, model, f"<call>{TEXT['spaced']}</call>")
    assert not takes(spaced, model, f"<call>{TEXT['compact']}</call>")
    assert takes(compact, model, f"<call>{TEXT['compact']}</call>")
    own = grammar(lark_json(TICKET, layout=None))  # llguidance's defaults: free white space
    assert takes(own, model, f"<call>{TEXT['indented']}</call>")
    with pytest.raises(ConstraintError, match="unknown JSON layout"):
        lark_json(TICKET, layout="tight")


@pytest.mark.integration
def test_the_real_model_writes_the_default_layout_under_a_schema():
    """On the real 0.5B, a schema with an enum-string array and no ``maxItems`` (the
    shape that looped in compact): the answer ends, follows the schema, and is written
    the way ``json.dumps`` writes it, every separator forced by the grammar."""
    from edgespec import Engine
    from edgespec.catalog import resolve_model

    prompt = (
        "Which topics does this message raise? 'I was charged twice for my order and "
        "I want the extra payment refunded.' Priority low or high?"
    )
    with Engine(resolve_model("qwen2.5-coder-0.5b"), draft="ngram", n_ctx=1024) as e:
        r = e.generate(prompt, max_tokens=96, response_format=js(TICKET))
    assert r.finish_reason == "stop" and r.structured_complete is True
    assert set(r.parsed) == {"priority", "topics"} and r.parsed["topics"]
    assert r.text == json.dumps(r.parsed)
    assert r.stats.forced_accepted > 0


RECIPE = (
    "Turn this recipe note into structured data: the dish, the number of servings and every "
    "ingredient with its quantity and unit.\n\nLemon lentil soup (serves 4): 250 g red lentils, "
    "1 onion, 2 carrots, 3 cloves garlic,\n1.2 l vegetable stock, 1 lemon (juice), 2 tbsp olive oil. "
    "Fry onion, carrot and garlic in\nthe oil, add lentils and stock, simmer 25 minutes, blend, finish "
    "with the lemon juice.\n\n"
)
RECIPE_SCHEMA = {
    "type": "object",
    "properties": {
        "dish": {"type": "string"},
        "servings": {"type": "integer"},
        "ingredients": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "quantity": {"type": "number"},
                    "unit": {"enum": ["g", "kg", "ml", "l", "tbsp", "tsp", "piece", "clove"]},
                },
                "required": ["name", "quantity", "unit"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["dish", "servings", "ingredients"],
    "additionalProperties": False,
}


@pytest.mark.integration
def test_the_real_model_ends_an_array_without_max_items_where_the_text_does():
    """The held-out recipe of benchmarks/layout_tasks.py on the 0.5B: in the default
    (spaced) layout the ingredient list ends after the seven the note names; in compact
    (the default before issue 28) the model went on with an eighth, made of the unit
    enum's values (`{"name":"piece","quantity":1,"unit":"piece"}`): the start of the
    degeneration that ran the 1.5B into ``max_tokens``."""
    from edgespec import Engine
    from edgespec.catalog import resolve_model

    prompt = RECIPE + "Answer with JSON that follows this schema:\n" + json.dumps(RECIPE_SCHEMA)
    with Engine(resolve_model("qwen2.5-coder-0.5b"), draft="ngram", n_ctx=2048, exact=True) as e:
        r = e.generate(prompt, max_tokens=400, response_format=js(RECIPE_SCHEMA))
    assert r.finish_reason == "stop" and r.structured_complete is True
    assert len(r.parsed["ingredients"]) == 7, r.text
