"""``edgespec generate --schema / --grammar / --regex`` from the command line.

Bad constraints fail in one line with exit code 2 before any model is loaded (the target
path does not even exist); on the real Qwen2.5-Coder-0.5B the reply is JSON that
validates against the schema, through the installed command.
"""

from __future__ import annotations

import json
import subprocess
import sys

import jsonschema
import pytest

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer", "minimum": 0},
        "city": {"type": "string"},
        "tags": {"type": "array", "items": {"enum": ["friend", "work", "family"]}},
    },
    "required": ["name", "age", "city", "tags"],
    "additionalProperties": False,
}


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "edgespec", "generate", *args], capture_output=True, text=True, timeout=timeout
    )


@pytest.mark.parametrize(
    "make_args, words",
    [
        (lambda d: ["--schema", str(d / "bad.json")], "keyword 'uniqueItems'"),
        (lambda d: ["--schema", str(d / "notjson.json")], "not JSON"),
        (lambda d: ["--schema", str(d / "missing.json")], "schema file not found"),
        (lambda d: ["--regex", "a(b"], "unclosed group"),
        (lambda d: ["--grammar", str(d / "bad.lark")], "unknown name"),
        (lambda d: ["--grammar", str(d / "bad.gbnf")], "invalid GBNF grammar"),
        (lambda d: ["--regex", "a", "--schema", str(d / "ok.json")], "cannot be combined"),
        (lambda d: ["--regex", "a", "--lenient-schema"], "--lenient-schema applies to --schema only"),
        # issue 28 item 7: no finite value, an overlapping oneOf, a file without end
        (lambda d: ["--schema", str(d / "self.json")], "satisfied by no finite value"),
        (lambda d: ["--schema", str(d / "selfreq.json")], "'#/properties/a' refers to '#'"),
        (lambda d: ["--schema", str(d / "oneof.json")], "--lenient-schema"),
        (lambda d: ["--schema", "/dev/zero"], "larger than 4 MiB"),
        (lambda d: ["--grammar", str(d / "big.lark")], "larger than 4 MiB"),
    ],
)
def test_a_bad_constraint_is_one_line_and_exit_2_before_loading(tmp_path, make_args, words):
    (tmp_path / "self.json").write_text(json.dumps({"$ref": "#"}))
    (tmp_path / "selfreq.json").write_text(
        json.dumps({"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]})
    )
    (tmp_path / "oneof.json").write_text(json.dumps({"oneOf": [{"type": "number"}, {"type": "integer"}]}))
    (tmp_path / "big.lark").write_text('start: "a"\n' + "// padding\n" * 400_000)
    (tmp_path / "bad.json").write_text(json.dumps({"type": "array", "uniqueItems": True}))
    (tmp_path / "notjson.json").write_text("{nope")
    (tmp_path / "ok.json").write_text("{}")
    (tmp_path / "bad.lark").write_text("start: foo\n")
    (tmp_path / "bad.gbnf").write_text('root ::= "a" | missing\n')
    r = run("--target", str(tmp_path / "no-such-model.gguf"), *make_args(tmp_path), "hi", timeout=120)
    assert r.returncode == 2, r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0], r.stderr


def test_lenient_schema_warns_about_what_it_ignores(tmp_path, tiny_target):
    path = tmp_path / "s.json"
    path.write_text(
        json.dumps(
            {
                "type": "array",
                "items": {"type": "integer", "minimum": 0, "maximum": 9},
                "maxItems": 3,
                "uniqueItems": True,
            }
        )
    )
    r = run(
        "--target",
        str(tiny_target),
        "--draft",
        "ngram",
        "--schema",
        str(path),
        "--lenient-schema",
        "--json",
        "-n",
        "24",
        "hello",
        timeout=300,
    )
    out = json.loads(r.stdout)
    assert r.returncode == (0 if out["structured_complete"] else 10), r.stderr
    assert "uniqueItems" in r.stderr and "relaxed" in r.stderr
    assert set(out) >= {"text", "token_ids", "finish_reason", "stats", "structured_complete", "parsed"}
    # --json says it too (issue 28 item 7): parsed was checked against the relaxed schema only
    assert any("uniqueItems" in w for w in out["relaxed"])


NEEDS_MORE = {"type": "object", "properties": {"note": {"type": "string", "minLength": 40}}, "required": ["note"]}


@pytest.mark.parametrize("extra", [[], ["-q"], ["--json"], ["--json", "-q"]])
def test_a_cut_structured_answer_is_exit_10_with_its_text_written(tmp_path, tiny_target, extra):
    """issue 28 item 3: the partial text on stdout, one error line on stderr that says
    why (also with -q), and exit code 10 (docs/cli.md)."""
    path = tmp_path / "s.json"
    path.write_text(json.dumps(NEEDS_MORE))
    r = run(
        "--target", str(tiny_target), "--draft", "ngram", "--schema", str(path), "-n", "6", *extra, "hello", timeout=300
    )
    assert r.returncode == 10, r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert errors == [errors[0]] and "incomplete: max_tokens (6) ran out before the JSON was complete" in errors[0]
    if "-q" in extra:
        assert r.stderr.strip().splitlines() == errors
    text = json.loads(r.stdout)["text"] if "--json" in extra else r.stdout
    assert text.startswith('{"note"')
    if "--json" in extra:
        out = json.loads(r.stdout)
        assert out["structured_complete"] is False and out["structure_error"] in errors[0]


def test_a_special_token_the_model_lacks_is_exit_2(tmp_path, tiny_target):
    """issue 28 item 6: refused when the grammar meets the model, before generating."""
    path = tmp_path / "g.lark"
    path.write_text('start: <tool_call> "x"\n')
    r = run("--target", str(tiny_target), "--grammar", str(path), "hello", timeout=300)
    assert r.returncode == 2, r.stderr
    assert "error:" in r.stderr and "<tool_call>" in r.stderr and str(path) in r.stderr


def test_a_batch_takes_lenient_schema_and_says_what_was_cut(tmp_path, tiny_target):
    """issue 28 items 3 and 6: --lenient-schema in a batch (for the lines' own schemas
    too, as a line's "lenient_schema": true is); a line cut by max_tokens carries its
    finish_reason and structure_error, and the batch ends with exit code 10."""
    loose = {"type": "array", "items": {"enum": [1, 2, 3]}, "maxItems": 2, "uniqueItems": True}
    lines = [
        {
            "id": 1,
            "prompt": "hello",
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": loose}},
        },
        {
            "id": 2,
            "prompt": "hello",
            "max_tokens": 4,
            "response_format": {"type": "json_schema", "json_schema": {"name": "b", "schema": NEEDS_MORE}},
        },
    ]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(x) + "\n" for x in lines))
    base = ["--target", str(tiny_target), "--draft", "ngram", "--input", str(inp), "--output", str(out), "-n", "24"]
    strict = run(*base, timeout=300)
    assert strict.returncode == 1 and "uniqueItems" in strict.stderr and "--lenient-schema" in strict.stderr
    out.unlink()
    r = run(*base, "--lenient-schema", timeout=300)
    assert r.returncode == 10, r.stderr
    assert "1 structured answer(s) incomplete" in r.stderr
    got = {rec["id"]: rec for rec in map(json.loads, out.read_text().splitlines())}
    assert any("uniqueItems" in w for w in got[1]["relaxed"])
    assert got[2]["finish_reason"] == "length" and got[2]["structured_complete"] is False
    assert got[2]["structure_error"] == "max_tokens (4) ran out before the JSON was complete"
    assert list(got[2])[:4] == ["id", "text", "finish_reason", "stats"]
    # per line, without the option
    lines[0]["lenient_schema"] = True
    inp.write_text(json.dumps(lines[0]) + "\n")
    out.unlink()
    r = run(*base, timeout=300)
    assert r.returncode == 0, r.stderr
    assert any("uniqueItems" in w for w in json.loads(out.read_text())["relaxed"])


@pytest.mark.integration
def test_real_model_writes_schema_valid_json_through_the_command(tmp_path):
    from edgespec.catalog import resolve_model

    path = tmp_path / "person.json"
    path.write_text(json.dumps(SCHEMA))
    prompt = (
        "Extract the person as JSON (name, age, city, tags) from: 'My colleague Maria Lopez, 34, "
        "moved to Valencia last year; we are friends too.'"
    )
    r = run(
        "--target",
        str(resolve_model("qwen2.5-coder-0.5b")),
        "--draft",
        "ngram",
        "--schema",
        str(path),
        "--json",
        "-n",
        "96",
        prompt,
    )
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["finish_reason"] == "stop" and out["structured_complete"] is True
    value = json.loads(out["text"])
    jsonschema.validate(value, SCHEMA)
    assert value == out["parsed"] and value["name"] == "Maria Lopez" and value["age"] == 34
    assert out["stats"]["forced"] > 0


@pytest.mark.integration
def test_real_model_constrained_greedy_is_the_same_with_every_drafter():
    """Exact kernels: the 0.5B under a schema gives the same tokens with no drafter, with
    prompt lookup (the grammar's drafts too) and drafting for itself."""
    from edgespec import DraftingOptions, Engine
    from edgespec.catalog import resolve_model

    q = resolve_model("qwen2.5-coder-0.5b")
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    prompt = "Extract the person as JSON: 'Tom Berg, 51, lives in Oslo; a work contact.'"
    outs = {}
    for name, draft in (("none", None), ("ngram", "ngram"), ("self", q)):
        with Engine(q, draft=draft, n_ctx=1024, exact=True, drafting=DraftingOptions(k=4)) as e:
            r = e.generate(prompt, max_tokens=64, response_format=rf)
            outs[name] = (r.token_ids, r.stats.forced)
            jsonschema.validate(r.parsed, SCHEMA)
    assert outs["ngram"][0] == outs["none"][0] and outs["self"][0] == outs["none"][0]
    assert outs["none"][1] == 0 and outs["ngram"][1] > 0 and outs["self"][1] > 0
