"""Structured output in batches (multiseq + constraints) on the tiny models.

Each sequence of a batch has its own grammar matcher: every output that ends with
``stop`` validates against its own schema (``jsonschema``); under ``exact`` every batch
output equals the same request's solo constrained run token for token; the matcher and
the KV cache of every sequence stay in step after every batch step. The masks of a
step's rows, computed for all sequences in one parallel call, equal those each matcher
computes alone. A JSONL line's ``response_format`` is checked before the batch starts.
"""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import numpy as np
import pytest

from edgespec import Engine
from edgespec.batching.jobs import InputLineError, parse_line
from edgespec.batching.run import PreparedBatch
from edgespec.batching.runner import BatchRunner, Request
from edgespec.constraints import allowed_array, batch_masks, compile_constraint
from edgespec.errors import ConstraintStateError

SCHEMAS = [
    {
        "type": "object",
        "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
        "required": ["id", "ok"],
        "additionalProperties": False,
    },
    {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"enum": ["a", "bc", "xyz"]}, "maxItems": 3},
            "note": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
        },
        "required": ["tags", "note"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"type": "string", "pattern": "^[a-c]{1,3}$"}, "maxItems": 4},
    {
        "type": "object",
        "properties": {"kind": {"enum": ["fox", "dog"]}, "score": {"type": "number", "minimum": 0, "maximum": 9}},
        "required": ["kind"],
        "additionalProperties": False,
    },
]
WORDS = "the quick brown fox jumps over the lazy dog while seven wizards quietly hex".split()


def rf(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "t", "schema": schema, "strict": True}}


def prompt(i: int) -> str:
    words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(3 + 4 * (i % 3)))
    return f'Answer in JSON. {words} {{"id": 3, "ok": true, "tags": ["a"], "kind": "fox"}}'


def requests(n: int, **extra) -> list[Request]:
    return [
        Request(
            i, prompt(i), {"response_format": rf(SCHEMAS[i % len(SCHEMAS)]), "max_tokens": 24 + 9 * (i % 3), **extra}
        )
        for i in range(n)
    ]


def run(engine: Engine, reqs: list[Request], parallel: int) -> dict:
    out = {o.key: o for o in PreparedBatch(engine, reqs, parallel=parallel)}
    assert set(out) == {r.key for r in reqs}
    return out


def check_valid(result, schema: dict) -> None:
    if result.finish_reason == "stop":
        value = json.loads(result.text)
        jsonschema.validate(value, schema)
        assert result.structured_complete is True and result.parsed == value
    else:
        assert result.structured_complete is not True or result.finish_reason == "length"


@pytest.fixture(scope="module")
def engines(tiny_target):
    made = {d: Engine(tiny_target, draft=d, n_ctx=512, exact=True, n_threads=1) for d in (None, "ngram")}
    yield made
    for e in made.values():
        e.close()


# -- the masks of a step, all at once ---------------------------------------------------------


def _walk(matcher, rng, n: int, is_eog) -> list[int]:
    """A random path of ``n`` tokens the grammar allows from the matcher's state (the
    matcher is left where it was)."""
    path = []
    for _ in range(n):
        allowed = np.flatnonzero(allowed_array(matcher.fill_mask(0), matcher.n_vocab))
        allowed = [t for t in allowed if not is_eog(int(t))]
        if not allowed:
            break
        t = int(rng.choice(allowed))
        matcher.consume([t])
        path.append(t)
    matcher.rollback(len(path))
    return path


def test_batch_masks_equal_each_matchers_own(engines):
    eng = engines["ngram"]
    model = eng.target_model
    rng = np.random.default_rng(7)
    for trial in range(6):
        items = []
        for schema in SCHEMAS:
            m = compile_constraint(rf(schema), model).matcher()
            m.consume(_walk(m, rng, int(rng.integers(0, 6)), model.is_eog))  # somewhere inside
            drafts = _walk(m, rng, int(rng.integers(0, 7)), model.is_eog)
            if trial % 2 and drafts:  # an end-of-generation draft: its later rows are never read
                drafts = [*drafts[: len(drafts) // 2], model.eos, *drafts[len(drafts) // 2 :]]
            items.append((m, drafts))
        alone = [[None if r is None else r.copy() for r in m.masks(d, model.is_eog)] for m, d in items]
        before = [m.consumed for m, _ in items]
        together = batch_masks(items, model.is_eog)
        assert [m.consumed for m, _ in items] == before  # every matcher left where it was
        for a, b in zip(alone, together):
            assert len(a) == len(b)
            for x, y in zip(a, b):
                assert (x is None and y is None) or np.array_equal(x, y)
        for m, _ in items:  # and its own next mask is still the same
            np.testing.assert_array_equal(m.fill_mask(0), batch_masks([(m, [])])[0][0])


def test_batch_masks_report_a_matcher_that_allows_nothing(engines):
    model = engines["ngram"].target_model
    m = compile_constraint(rf(SCHEMAS[0]), model).matcher()
    bad = next(t for t in range(model.n_vocab) if m.validate([t]) == 0)
    m._m.consume_token(bad)  # push llguidance into its error state behind the wrapper's back
    with pytest.raises(ConstraintStateError):
        batch_masks([(m, [])])


# -- batches of constrained sequences -------------------------------------------------------


@pytest.mark.parametrize("draft", [None, "ngram"])
def test_batch_outputs_equal_solo_constrained_runs_under_exact(engines, draft):
    eng = engines[draft]
    reqs = requests(7)
    out = run(eng, reqs, parallel=3)
    if draft == "ngram":  # the batch drafted: forced tokens and prompt lookup's own
        stats = [o.result.stats for o in out.values()]
        assert sum(s.forced for s in stats) > 0 and sum(s.drafted - s.forced for s in stats) > 0
    for r in reqs:
        o = out[r.key]
        assert o.error is None, o.error
        solo = eng.generate(r.prompt, **r.options)
        assert o.result.token_ids == solo.token_ids, f"request {r.key} differs from its solo run"
        assert o.result.finish_reason == solo.finish_reason
        assert o.result.structured_complete == solo.structured_complete
        check_valid(o.result, SCHEMAS[r.key % len(SCHEMAS)])


def test_sampled_batch_outputs_validate(engines):
    reqs = requests(8, temperature=1.0, seed=11)
    for i, r in enumerate(reqs):
        r.options["seed"] = 100 + i
        r.options["max_tokens"] = 64
    out = run(engines["ngram"], reqs, parallel=4)
    stopped = 0
    for r in reqs:
        o = out[r.key]
        assert o.error is None, o.error
        check_valid(o.result, SCHEMAS[r.key % len(SCHEMAS)])
        stopped += o.result.finish_reason == "stop"
    assert stopped >= 2  # the check above must have had outputs to validate


def test_constrained_and_free_requests_share_a_batch(engines):
    eng = engines["ngram"]
    reqs = requests(4) + [Request(10 + i, prompt(i), {"max_tokens": 12}) for i in range(3)]
    out = run(eng, reqs, parallel=4)
    for r in reqs:
        solo = eng.generate(r.prompt, **r.options)
        assert out[r.key].result.token_ids == solo.token_ids
        assert out[r.key].result.structured_complete == solo.structured_complete
    assert all(out[10 + i].result.structured_complete is None for i in range(3))


def test_matcher_and_kv_stay_in_step_for_every_sequence(engines, monkeypatch):
    checked = []
    original = BatchRunner._step

    def step(self, running):
        ended = original(self, running)
        for s in running:
            if s.prefilling or s.error is not None or s in ended:
                continue
            committed = s.loop.committed
            # the cache holds every committed token but the last; the matcher every
            # committed token after the prompt (x_last included)
            assert s.loop.target.pos_max() == len(committed) - 2
            assert s.matcher.consumed == len(committed) - len(s.ids)
            checked.append(s.req.key)
        return ended

    monkeypatch.setattr(BatchRunner, "_step", step)
    run(engines["ngram"], requests(6), parallel=3)
    assert (
        len(set(checked)) == 6 and len(checked) > 6
    )  # (steps after the first; the memory drafts much of the later answers)


def test_a_failing_matcher_ends_only_its_own_sequence(engines, monkeypatch):
    from edgespec.batching import sequence

    original = sequence.batch_masks
    calls = {"n": 0}

    def failing(items, is_eog):
        calls["n"] += 1
        if calls["n"] == 3:  # request 1's grammar breaks at its third step
            m = next(m for m, _ in items if m is target["m"])
            m._m.consume_token(next(t for t in range(m.n_vocab) if m.validate([t]) == 0))
        return original(items, is_eog)

    target = {}
    eng = engines["ngram"]
    reqs = requests(3)
    original_prepare = BatchRunner._prepare

    def prepare(self, req, slot):
        seq = original_prepare(self, req, slot)
        if req.key == 1:
            target["m"] = seq.matcher
        return seq

    monkeypatch.setattr(BatchRunner, "_prepare", prepare)
    monkeypatch.setattr(sequence, "batch_masks", failing)
    out = run(eng, reqs, parallel=3)
    assert isinstance(out[1].error, ConstraintStateError)
    for k in (0, 2):
        assert out[k].error is None
        assert out[k].result.token_ids == eng.generate(reqs[k].prompt, **reqs[k].options).token_ids


# -- JSONL lines ------------------------------------------------------------------------------


def test_a_jsonl_line_carries_response_format():
    job = parse_line(json.dumps({"id": 1, "prompt": "hi", "response_format": rf(SCHEMAS[0])}), 3, "in.jsonl")
    assert job.options["response_format"] == rf(SCHEMAS[0])


@pytest.mark.parametrize(
    "value, words",
    [
        (
            {"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "object", "uniqueItems": True}}},
            "uniqueItems",
        ),
        ({"type": "regex", "regex": "a("}, "regex"),
        ({"type": "yaml"}, "type"),
        ("json", "response_format"),
        # issue 28 item 7: refused when the file is read, not per line at run time
        ({"type": "json_schema", "json_schema": {"name": "t", "schema": {"$ref": "#"}}}, "no finite value"),
    ],
)
def test_a_bad_response_format_names_the_line(value, words):
    with pytest.raises(InputLineError) as e:
        parse_line(json.dumps({"id": 1, "prompt": "hi", "response_format": value}), 7, "in.jsonl")
    msg = str(e.value)
    assert msg.startswith("in.jsonl:7: ") and "response_format" in msg and words in msg
    assert "\n" not in msg


def test_a_line_may_be_lenient_and_the_batch_may_be_lenient_for_every_line():
    """issue 28 item 6: lenient mode in a batch, per line or for the whole file."""
    loose = {"type": "json_schema", "json_schema": {"name": "t", "schema": {"type": "array", "uniqueItems": True}}}
    line = {"id": 1, "prompt": "hi", "response_format": loose}
    with pytest.raises(InputLineError, match="uniqueItems"):
        parse_line(json.dumps(line), 1)
    assert parse_line(json.dumps({**line, "lenient_schema": True}), 1).options["lenient_schema"] is True
    assert parse_line(json.dumps(line), 1, lenient=True).options["response_format"] == loose
    with pytest.raises(InputLineError, match="uniqueItems"):  # the line's own word wins
        parse_line(json.dumps({**line, "lenient_schema": False}), 1, lenient=True)
    with pytest.raises(InputLineError, match="'lenient_schema' must be true or false"):
        parse_line(json.dumps({"id": 1, "prompt": "hi", "lenient_schema": "yes"}), 1)


# -- the command line: a JSONL batch with response_format lines ------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "edgespec", "generate", *args],
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


def test_jsonl_lines_with_response_format_run_in_parallel(tiny_target, tmp_path):
    lines = [{"id": i, "prompt": prompt(i), "max_tokens": 40, "response_format": rf(SCHEMAS[i % 4])} for i in range(5)]
    lines.append({"id": 5, "prompt": prompt(5), "max_tokens": 8})  # a free line in the same batch
    lines.append({"id": 6, "prompt": "x", "response_format": {"type": "regex", "regex": "a("}})
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    r = _cli(
        "--target",
        str(tiny_target),
        "--draft",
        "ngram",
        "--exact",
        "--input",
        str(inp),
        "--output",
        str(out),
        "--parallel",
        "3",
    )
    assert r.returncode == 1, r.stderr  # the batch ran, with a bad line skipped
    assert "in.jsonl:7: 'response_format.regex': invalid regex" in r.stderr  # named in one line
    got = {x["id"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert sorted(got) == list(range(6))
    with Engine(tiny_target, draft="ngram", exact=True) as e:
        for line in lines[:6]:
            options = {k: v for k, v in line.items() if k not in ("id", "prompt")}
            solo = e.generate(line["prompt"], **options)
            assert got[line["id"]]["text"] == solo.text
            if "response_format" in line and got[line["id"]]["finish_reason"] == "stop":
                jsonschema.validate(json.loads(got[line["id"]]["text"]), SCHEMAS[line["id"] % 4])


def test_schema_option_constrains_every_line_of_a_parallel_batch(tiny_target, tmp_path):
    schema = tmp_path / "s.json"
    schema.write_text(json.dumps(SCHEMAS[3]))
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps({"id": i, "prompt": prompt(i)}) + "\n" for i in range(4)))
    r = _cli(
        "--target",
        str(tiny_target),
        "--schema",
        str(schema),
        "--input",
        str(inp),
        "--output",
        str(out),
        "--parallel",
        "2",
        "--max-tokens",
        "48",
    )
    assert r.returncode == 0, r.stderr
    results = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(results) == 4
    assert any(x["finish_reason"] == "stop" for x in results)
    for x in results:
        if x["finish_reason"] == "stop":
            jsonschema.validate(json.loads(x["text"]), SCHEMAS[3])
