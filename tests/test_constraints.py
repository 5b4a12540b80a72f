"""edgespec.constraints on its own: request shapes, errors, and the matcher's state.

Every bad schema, regex or grammar is a one-line ``ConstraintError`` naming the field;
a keyword llguidance does not implement is refused by name unless lenient; the matcher
consumes, rolls back (also over end-of-generation and a lazy trigger), validates and
masks as documented. The tokenizer comes from the tiny test model.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgespec.constraints import (
    Matcher,
    allowed_array,
    apply_mask,
    compile_constraint,
    compile_lark,
    grammar_spec,
    tokenizer_for,
)
from edgespec.errors import ConstraintError, ConstraintStateError, InputError
from edgespec.llama import Model

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 8},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def js(schema):
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}


@pytest.fixture(scope="module")
def model(tiny_target):
    m = Model(tiny_target, vocab_only=True)
    yield m
    m.close()


@pytest.mark.parametrize(
    "rf, param, words",
    [
        ("json", "response_format", "must be an object"),
        ({"type": "xml"}, "response_format.type", "unknown response_format type 'xml'"),
        ({"type": "json_schema"}, "response_format.json_schema", "must be an object"),
        ({"type": "json_schema", "json_schema": {"name": "x"}}, "response_format.json_schema.schema", "no schema"),
        (js({"type": "strin"}), "response_format.json_schema.schema", "invalid JSON schema: Invalid type: strin"),
        (js({"type": "array", "uniqueItems": True}), "response_format.json_schema.schema", "keyword 'uniqueItems'"),
        (js({"type": "string", "pattern": "[a-"}), "response_format.json_schema.schema", "unclosed character class"),
        (js({"$ref": "#/defs/nope"}), "response_format.json_schema.schema", "does not exist"),
        ({"type": "regex", "regex": "a(b"}, "response_format.regex", "unclosed group"),
        ({"type": "regex"}, "response_format.regex", "non-empty string"),
        ({"type": "grammar", "grammar": "start: foo"}, "response_format.grammar", 'unknown name: "foo"'),
        ({"type": "grammar", "grammar": 'root ::= "a" | x'}, "response_format.grammar", "invalid GBNF grammar"),
        (
            {"type": "grammar", "grammar": 'start: "a"', "syntax": "yacc"},
            "response_format.syntax",
            "unknown grammar syntax",
        ),
    ],
)
def test_a_bad_request_is_one_line_naming_the_field(rf, param, words):
    with pytest.raises(ConstraintError) as info:
        grammar_spec(rf)
    err = info.value
    assert isinstance(err, InputError) and err.exit_code == 2
    assert err.param == param
    assert words in str(err)
    assert "\n" not in str(err)


def test_an_unimplemented_keyword_is_refused_unless_lenient_and_then_reported():
    schema = js({"type": "array", "items": {"type": "integer"}, "uniqueItems": True})
    with pytest.raises(ConstraintError, match="uniqueItems.*lenient"):
        grammar_spec(schema)
    spec = grammar_spec(schema, lenient=True)
    assert spec.kind == "json" and any("uniqueItems" in w for w in spec.warnings)
    assert grammar_spec(js(PERSON)).warnings == ()


def test_text_is_no_constraint_and_every_shape_compiles(model):
    assert compile_constraint({"type": "text"}, model) is None
    assert compile_constraint(None, model) is None
    kinds = [
        compile_constraint(rf, model).kind
        for rf in (
            {"type": "json_object"},
            {"type": "json_object", "schema": PERSON},
            js(PERSON),
            {"type": "regex", "regex": "[a-c]{3}"},
            {"type": "grammar", "grammar": 'start: "yes" | "no"'},
            {"type": "grammar", "grammar": 'root ::= "yes" | "no"'},
        )
    ]
    assert kinds == ["json", "json", "json", "regex", "grammar", "grammar"]


def test_the_tokenizer_is_built_once_per_model(model):
    assert tokenizer_for(model) is tokenizer_for(model)
    assert tokenizer_for(model).vocab_size == model.n_vocab


def ids_of(model, text):
    return model.tokenize(text, add_special=False, parse_special=False)


def test_consume_rollback_validate_and_masks_stay_in_step(model):
    c = compile_constraint(js(PERSON), model)
    m = c.matcher()
    good = ids_of(model, '{"name": "Ann", "age": 41}')
    assert m.validate(good) == len(good) and m.consumed == 0  # validation leaves the state
    assert m.validate(ids_of(model, '{"nome"')) < len(ids_of(model, '{"nome"'))
    assert m.forced()  # '{"' at least is forced
    masks = m.masks(good, model.is_eog)
    assert len(masks) == len(good) + 1 and m.consumed == 0
    for i, t in enumerate(good):  # row i allows the token that follows it
        assert allowed_array(masks[i], model.n_vocab)[t]
    m.consume(good)
    assert m.consumed == len(good) and m.is_accepting() and m.complete()
    eos = model.eos
    assert allowed_array(m.fill_mask(), model.n_vocab)[eos]
    m.consume([eos])  # end of generation; rolling it back keeps the structure complete
    m.rollback(1)
    assert m.consumed == len(good) and m.is_accepting()
    m.rollback(3)
    assert m.consumed == len(good) - 3 and not m.is_accepting()
    m.consume(good[-3:])
    assert m.is_accepting()


def test_a_refused_token_or_an_early_end_is_an_error_never_ignored(model):
    m = compile_constraint(js(PERSON), model).matcher()
    with pytest.raises(ConstraintStateError, match="refused token"):
        m.consume(ids_of(model, "hello"))
    m = compile_constraint(js(PERSON), model).matcher()
    m.consume(ids_of(model, '{"name": '))
    with pytest.raises(ConstraintStateError, match="not complete"):
        m.consume([model.eos])


def test_apply_mask_puts_forbidden_tokens_at_minus_infinity(model):
    m = compile_constraint({"type": "regex", "regex": "[a-c]+"}, model).matcher()
    row = np.arange(model.n_vocab, dtype=np.float32)
    masked = apply_mask(m.fill_mask(), row)
    allowed = {model.detokenize([t]) for t in np.flatnonzero(np.isfinite(masked))}
    assert allowed and all(set(s) <= set("abc") for s in allowed)
    assert row[5] == 5.0  # the input row is never written
    assert apply_mask(None, row) is row


TOOL = (
    'start: "<call>" %json{"type":"object","properties":{"x":{"type":"integer"}},'
    '"required":["x"],"additionalProperties":false} "</call>"'
)


def test_a_lazy_trigger_frees_text_until_it_appears_and_rolls_back_across_it(model):
    c = compile_lark(TOOL, model, trigger="<call>")
    m = c.matcher()
    free = ids_of(model, "so I call it: ")
    m.consume(free)
    assert not m.active and m.fill_mask() is None and m.forced() == [] and m.complete() is None
    call = ids_of(model, '<call>{"x":12}</call>')
    assert m.validate(call) == len(call) and m.consumed == len(free)
    n = 0
    while not m.active:
        m.consume([call[n]])
        n += 1
    assert m.started_at == len(free) and m.forced()  # '{"x":' is forced
    m.rollback(n)  # back before the trigger: free again
    assert not m.active and m.consumed == len(free)
    m.consume(call)
    assert m.complete() is True
    bad = ids_of(model, "<call>oops")
    m2 = c.matcher()
    assert m2.validate(bad) < len(bad)  # a draft that opens the call wrongly is cut
    assert m2.consumed == 0 and not m2.active


def test_a_trigger_inside_a_token_starts_the_grammar_at_its_first_byte(model):
    c = compile_lark('start: "ab" /[0-9]+/', model, trigger="ab")
    m = c.matcher()
    ids = ids_of(model, "xab")  # 'x', 'a', 'b' or merged: the trigger starts mid-text
    m.consume(ids)
    assert m.active
    m.consume(ids_of(model, "12"))
    assert m.is_accepting()
    m.rollback(m.consumed)
    assert not m.active and m.consumed == 0


def test_a_matcher_needs_a_constraint_of_its_model(model):
    c = compile_constraint({"type": "regex", "regex": "a+"}, model)
    assert isinstance(c.matcher(), Matcher)
    assert c.outcome('{"a":1}', True) == (True, None)  # only JSON is parsed
    cj = compile_constraint({"type": "json_object"}, model)
    assert cj.outcome('{"a":1}', True) == (True, {"a": 1})
    assert cj.outcome('{"a":', False) == (False, None)


def test_before_the_trigger_only_tokens_that_would_break_the_grammar_are_masked(model):
    c = compile_lark('start: "th" /[0-9]+/', model, trigger="th")
    m = c.matcher()
    pieces = {t: model.token_to_bytes(t) for t in range(model.n_vocab)}
    # at the start: only tokens holding the whole trigger with letters after it ("the")
    allowed = allowed_array(m.fill_mask(), model.n_vocab)
    tails = {t: b.split(b"th", 1)[1] for t, b in pieces.items() if b"th" in b}
    within = {t for t, tail in tails.items() if tail and not tail.isdigit()}
    assert within and set(np.flatnonzero(~allowed)) == within
    m.consume(ids_of(model, "xt"))
    allowed = allowed_array(m.fill_mask(), model.n_vocab)
    h_plus = [t for t, b in pieces.items() if b.startswith(b"h") and len(b) > 1 and not b[1:].isdigit()]
    assert h_plus, "the tiny vocabulary has a merge starting with 'h'"
    assert not allowed[h_plus].any()  # 'th' + letters: the grammar wants digits
    assert allowed[ids_of(model, "h")[0]] and allowed[ids_of(model, "q")[0]]
    m.consume(ids_of(model, "h"))
    assert m.active


def test_lark_json_embeds_a_schema_in_the_default_layout_and_keywords_are_checked(model):
    from edgespec.constraints import lark_json

    params = {
        "type": "object",
        "properties": {"x": {"type": "integer"}},
        "required": ["x"],
        "additionalProperties": False,
    }
    c = compile_lark('start: "<call>" ' + lark_json(params) + ' "</call>"', model)
    m = c.matcher()
    assert m.validate(ids_of(model, '<call>{"x": 1}</call>')) == len(ids_of(model, '<call>{"x": 1}</call>'))
    assert m.validate(ids_of(model, '<call>{"x":1}')) < len(ids_of(model, '<call>{"x":1}'))
    loose = compile_lark('start: "<call>" ' + lark_json(params, layout=None) + ' "</call>"', model).matcher()
    assert loose.validate(ids_of(model, '<call>{"x":1}')) == len(ids_of(model, '<call>{"x":1}'))
    unique = lark_json({"type": "array", "uniqueItems": True})
    with pytest.raises(ConstraintError, match="uniqueItems"):
        compile_lark("start: " + unique, model)
    relaxed = "start: " + lark_json({"type": "array", "uniqueItems": True}, lenient=True)
    with pytest.raises(ConstraintError, match="uniqueItems"):  # relaxed, but warned: refused
        compile_lark(relaxed, model)
    assert any("uniqueItems" in w for w in compile_lark(relaxed, model, lenient=True).warnings)


def test_prompt_lookup_forgets_a_few_unkept_ids_without_rebuilding_its_index():
    from edgespec.decoding.drafters import NgramDrafter

    rng = np.random.default_rng(0)
    base = [int(t) for t in rng.integers(0, 6, 200)]
    d = NgramDrafter()
    d.begin(base + [1, 2, 3, 4], None, None)  # the grammar's drafts in flight ...
    d.lookup(base + [1, 5], 4)  # ... and what was kept instead
    fresh = NgramDrafter()
    fresh.begin(base + [1, 5], None, None)
    assert d._tokens == fresh._tokens and d._index == fresh._index
    assert d.lookup(base + [1, 5], 6) == fresh.lookup(base + [1, 5], 6)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_mask_logits_is_row_plus_zero_or_minus_infinity(dtype):
    from edgespec.constraints import mask_logits

    rng = np.random.default_rng(1)
    row = rng.normal(size=1000).astype(dtype)
    allowed = rng.random(1000) < 0.3
    out = mask_logits(row, allowed)
    assert out.dtype == row.dtype and out is not row
    assert np.array_equal(out[allowed], row[allowed]) and np.isneginf(out[~allowed]).all()
    bits = np.packbits(allowed, bitorder="little")
    bits = np.concatenate([bits, np.zeros((-len(bits)) % 4, np.uint8)]).view(np.int32)
    assert np.array_equal(apply_mask(bits, row), out)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.integers(0, 40), st.lists(st.integers(0, 4), max_size=12)), min_size=1, max_size=12))
def test_prompt_lookup_index_after_any_history_equals_a_fresh_one(steps):
    """Whatever the drafter saw before (extensions, a few ids taken back, a new text),
    its index is the one a fresh drafter builds from the current tokens."""
    from edgespec.decoding.drafters import NgramDrafter

    d = NgramDrafter()
    tokens: list[int] = []
    for back, new in steps:
        tokens = tokens[: max(0, len(tokens) - back)] + new
        d.lookup(tokens, 4)
        fresh = NgramDrafter()
        fresh.begin(tokens, None, None)
        assert d._tokens == fresh._tokens and d._index == fresh._index
