"""Structured output through the engine, on the tiny models.

Random JSON Schemas (hypothesis): every output that ends with ``stop`` validates against
its schema (``jsonschema``) and comes back parsed; under exact greedy decoding drafting
never changes the tokens (prompt lookup, the noisy model drafter, forced tokens); the
matcher stays in step with the KV cache after every round; a ``max_tokens`` cut inside
the structure says so.
"""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgespec import DraftingOptions, Engine
from edgespec.constraints import compile_constraint
from edgespec.decoding.speculative import SpeculativeLoop
from edgespec.errors import ConstraintError

NAMES = st.sampled_from(["id", "name", "tags", "ok", "score", "kind", "items", "note"])

leaves = st.one_of(
    st.just({"type": "boolean"}),
    st.just({"type": "null"}),
    st.tuples(st.integers(-50, 50), st.integers(0, 60)).map(
        lambda t: {"type": "integer", "minimum": t[0], "maximum": t[0] + t[1]}
    ),
    st.tuples(st.integers(-5, 5), st.integers(1, 9)).map(
        lambda t: {"type": "number", "minimum": t[0], "maximum": t[0] + t[1]}
    ),
    st.integers(0, 6).map(lambda n: {"type": "string", "maxLength": n}),
    st.lists(st.text("abcxyz ", min_size=1, max_size=5), min_size=1, max_size=4, unique=True).map(
        lambda v: {"enum": v}
    ),
    st.sampled_from(["^[a-c]{1,3}$", "^[0-9]{2}-[0-9]{2}$", "^(yes|no)$"]).map(
        lambda p: {"type": "string", "pattern": p}
    ),
)


def nullable(s):
    return st.one_of(s, s.map(lambda x: {"anyOf": [x, {"type": "null"}]}))


def containers(children):
    objects = st.dictionaries(NAMES, nullable(children), min_size=1, max_size=3).flatmap(
        lambda props: st.lists(st.sampled_from(sorted(props)), unique=True).map(
            lambda req: {"type": "object", "properties": props, "required": req, "additionalProperties": False}
        )
    )
    arrays = st.tuples(children, st.integers(0, 3)).map(lambda t: {"type": "array", "items": t[0], "maxItems": t[1]})
    return st.one_of(objects, arrays)


schemas = st.recursive(leaves, containers, max_leaves=6).filter(lambda s: s.get("type") in ("object", "array"))


def rf(schema):
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}


PROMPT = 'Answer in JSON. Example: {"id": 3, "name": "abc", "tags": ["x", "y"], "ok": true}'


@pytest.fixture(scope="module")
def engines(tiny_target, tiny_noisy):
    made = {
        name: Engine(tiny_target, draft=d, n_ctx=512, exact=True)
        for name, d in (("none", None), ("ngram", "ngram"), ("model", tiny_noisy))
    }
    # the noisy drafter at a fixed k: the learned policy may rightly decline it on a CPU
    made["model_k3"] = Engine(tiny_target, draft=tiny_noisy, n_ctx=512, exact=True, drafting=DraftingOptions(k=3))
    made["ngram_k3"] = Engine(tiny_target, draft="ngram", n_ctx=512, exact=True, drafting=DraftingOptions(k=3))
    yield made
    for e in made.values():
        e.close()


def check_result(r, schema):
    if r.finish_reason == "stop":
        value = json.loads(r.text)
        jsonschema.validate(value, schema)
        assert r.structured_complete is True and r.parsed == value
    elif r.structured_complete:
        jsonschema.validate(json.loads(r.text), schema)
    else:
        assert r.parsed is None


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=schemas, seed=st.integers(0, 2**16), temperature=st.sampled_from([0.0, 0.8]))
def test_every_finished_output_validates_against_its_random_schema(engines, schema, seed, temperature):
    for name in ("ngram_k3", "model_k3"):
        r = engines[name].generate(
            PROMPT, max_tokens=60, response_format=rf(schema), temperature=temperature, seed=seed
        )
        check_result(r, schema)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(schema=schemas)
def test_under_exact_greedy_drafting_never_changes_the_tokens(engines, schema):
    ref = engines["none"].generate(PROMPT, max_tokens=48, response_format=rf(schema))
    check_result(ref, schema)
    assert ref.stats.forced == 0  # no drafter, no forced drafts: the reference is plain
    for name in ("ngram", "ngram_k3", "model", "model_k3"):
        r = engines[name].generate(PROMPT, max_tokens=48, response_format=rf(schema))
        assert r.token_ids == ref.token_ids, name
        assert (r.finish_reason, r.structured_complete, r.parsed) == (
            ref.finish_reason,
            ref.structured_complete,
            ref.parsed,
        )


def test_forced_tokens_are_drafted_for_free_and_accepted(engines):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 4}, "kind": {"enum": ["alpha", "beta"]}},
        "required": ["name", "kind"],
        "additionalProperties": False,
    }
    # fixed k: the learned policy may (rightly) decline even forced tokens when its
    # measured c(2) is over 1.98 plain steps, which a loaded machine can make it
    for name in ("ngram_k3", "model_k3"):
        r = engines[name].generate(PROMPT, max_tokens=40, response_format=rf(schema))
        s = r.stats
        assert s.forced_accepted > 0 and s.forced >= s.forced_accepted  # likely tokens may miss
        assert s.t_mask > 0
    # the same schema unconstrained comes out as free text, not this JSON
    assert engines["none"].generate(PROMPT, max_tokens=40).text != r.text


def test_max_tokens_inside_the_structure_is_length_and_incomplete(engines):
    schema = {"type": "object", "properties": {"note": {"type": "string"}}, "required": ["note"]}
    r = engines["ngram"].generate(PROMPT, max_tokens=5, response_format=rf(schema))
    assert r.finish_reason == "length" and r.structured_complete is False and r.parsed is None
    d = r.to_dict()
    assert d["structured_complete"] is False and d["parsed"] is None
    # the reason, on the result and in its dict (what --json and a batch line show)
    assert r.structure_error == "max_tokens (5) ran out before the JSON was complete"
    assert d["structure_error"] == r.structure_error and "relaxed" not in d
    free = engines["ngram"].generate(PROMPT, max_tokens=5)
    assert free.structured_complete is None and "structured_complete" not in free.to_dict()
    assert free.structure_error is None and "structure_error" not in free.to_dict()


def test_a_stop_string_that_cuts_the_structure_says_so(engines):
    full = engines["ngram"].generate(PROMPT, max_tokens=40, response_format=rf({"enum": ["abcdef"]}))
    assert full.parsed == "abcdef" and full.structure_error is None
    r = engines["ngram"].generate(PROMPT, max_tokens=40, stop=["cd"], response_format=rf({"enum": ["abcdef"]}))
    assert r.finish_reason == "stop" and r.structured_complete is False and r.parsed is None
    assert r.structure_error == "a stop string ended the reply before the JSON was complete"


def test_lenient_mode_says_on_the_result_what_it_relaxed(engines):
    schema = {"type": "array", "items": {"enum": [1, 2]}, "maxItems": 2, "uniqueItems": True}
    with pytest.raises(ConstraintError, match="uniqueItems"):
        engines["ngram"].generate(PROMPT, max_tokens=5, response_format=rf(schema))
    r = engines["ngram"].generate(PROMPT, max_tokens=24, response_format=rf(schema), lenient_schema=True)
    assert any("uniqueItems" in w for w in r.relaxed)
    assert any("uniqueItems" in w for w in r.to_dict()["relaxed"])
    strict = engines["ngram"].generate(PROMPT, max_tokens=24, response_format=rf({"type": "array", "maxItems": 2}))
    assert strict.relaxed == () and "relaxed" not in strict.to_dict()


def test_regex_and_grammar_outputs_match(engines):
    import re

    r = engines["ngram"].generate(
        PROMPT, max_tokens=20, response_format={"type": "regex", "regex": "[a-d]{3}-[0-9]{2}"}
    )
    assert r.finish_reason == "stop" and re.fullmatch("[a-d]{3}-[0-9]{2}", r.text)
    gbnf = 'root ::= "answer: " ("yes" | "no")'
    r = engines["model"].generate(PROMPT, max_tokens=20, response_format={"type": "grammar", "grammar": gbnf})
    assert r.finish_reason == "stop" and r.text in ("answer: yes", "answer: no") and r.structured_complete


def test_a_bad_response_format_fails_before_any_model_work(engines):
    e = engines["ngram"]
    n = e.ctx.n_decode_calls
    with pytest.raises(ConstraintError) as info:
        e.generate(PROMPT, response_format=rf({"type": "array", "uniqueItems": True}))
    assert info.value.param == "response_format.json_schema.schema"
    assert e.ctx.n_decode_calls == n


def test_a_constraint_from_another_model_is_refused(engines, tiny_small_vocab):
    from edgespec.errors import InputError
    from edgespec.llama import Model

    other = Model(tiny_small_vocab, vocab_only=True)
    try:
        # (JSON would not even bind: this vocabulary has no "{", and binding says so)
        c = compile_constraint({"type": "regex", "regex": "[a-z]+"}, other)
        with pytest.raises(InputError, match="another model"):
            engines["none"].generate(PROMPT, constraint=c)
    finally:
        other.close()


@pytest.mark.parametrize("drafter", ["ngram_k3", "model_k3"])
def test_the_matcher_moves_with_the_kv_cache_every_round(engines, drafter, monkeypatch):
    """After every round: matcher tokens == committed after the prompt, and the target's
    KV holds every committed token but the last."""
    seen = []
    settle = SpeculativeLoop.settle

    def checked(self, *args, **kwargs):
        res = settle(self, *args, **kwargs)
        m = self.matcher
        # an accepted end-of-generation draft ends the reply with its own KV cell kept
        last_in_kv = self.is_eog(self.committed[-1]) and res.from_draft[-1]
        seen.append(
            (
                m.consumed,
                len(self.committed) - self.n_prompt,
                self.target.pos_max(),
                len(self.committed) - 2 + last_in_kv,
            )
        )
        return res

    monkeypatch.setattr(SpeculativeLoop, "settle", checked)
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"enum": ["x", "y"]}, "maxItems": 3},
            "id": {"type": "integer"},
        },
        "required": ["tags", "id"],
        "additionalProperties": False,
    }
    for seed in range(3):
        engines[drafter].generate(PROMPT, max_tokens=40, response_format=rf(schema), temperature=1.0, seed=seed)
    assert seen and all(a == b and c == d for a, b, c, d in seen)


def test_a_matcher_error_ends_the_request_with_an_error(engines, monkeypatch):
    from edgespec.constraints import Matcher
    from edgespec.errors import ConstraintStateError

    calls = {"n": 0}
    real = Matcher.consume

    def breaks_later(self, tokens):
        calls["n"] += 1
        if calls["n"] > 3:
            raise ConstraintStateError("the grammar refused token 1")
        return real(self, tokens)

    monkeypatch.setattr(Matcher, "consume", breaks_later)
    e = engines["none"]
    with pytest.raises(ConstraintStateError):
        e.generate(PROMPT, max_tokens=30, response_format={"type": "json_object"})
    monkeypatch.undo()
    r = e.generate(PROMPT, max_tokens=8)  # the engine goes on from a consistent cache
    assert r.token_ids


def test_a_lazy_trigger_leaves_text_free_until_it_appears_then_constrains(engines):
    """The trigger: two characters the free greedy reply writes. Until they appear the
    constrained reply is the free one; from them on, the grammar; every drafter agrees."""
    from edgespec.constraints import compile_lark

    e = engines["none"]
    free = e.generate(PROMPT, max_tokens=40)
    import re

    # a trigger the reply completes exactly at the end of a token (a token that completes
    # it and goes on with bytes the grammar refuses is masked out: the reply would differ)
    model = e.target_model
    ends, text = [], b""
    for t in free.token_ids:
        text += model.token_to_bytes(t)
        ends.append(len(text))
    trigger = n_keep = None
    for i, end in enumerate(ends[2:], start=2):
        pair = text[end - 2 : end]
        if re.fullmatch(rb"[A-Za-z0-9 *+,.:;-]{2}", pair) and text.index(pair) == end - 2:
            trigger, n_keep = pair.decode(), i + 1
            break
    assert trigger, text
    grammar = f'start: "{trigger}" /[0-9]{{3}}/'
    ref = e.generate(PROMPT, max_tokens=60, constraint=compile_lark(grammar, model, trigger=trigger))
    assert ref.token_ids[:n_keep] == free.token_ids[:n_keep]
    tail = model.detokenize(ref.token_ids[n_keep:])
    assert len(tail) == 3 and tail.isdigit(), tail
    assert ref.finish_reason == "stop" and ref.structured_complete is True
    for name in ("ngram", "ngram_k3", "model", "model_k3"):
        other = engines[name]
        r = other.generate(PROMPT, max_tokens=60, constraint=compile_lark(grammar, other.target_model, trigger=trigger))
        assert r.token_ids == ref.token_ids, name
    untriggered = compile_lark('start: "QQ" /[0-9]+/', e.target_model, trigger="QQ")
    r = e.generate(PROMPT, max_tokens=40, constraint=untriggered)
    assert r.token_ids == free.token_ids and r.structured_complete is None
