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

SCHEMA = {"type": "object",
          "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0},
                         "city": {"type": "string"}, "tags": {"type": "array", "items": {"enum": ["friend", "work", "family"]}}},
          "required": ["name", "age", "city", "tags"], "additionalProperties": False}


def run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "edgespec", "generate", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("make_args, words", [
    (lambda d: ["--schema", str(d / "bad.json")], "keyword 'uniqueItems'"),
    (lambda d: ["--schema", str(d / "notjson.json")], "not JSON"),
    (lambda d: ["--schema", str(d / "missing.json")], "schema file not found"),
    (lambda d: ["--regex", "a(b"], "unclosed group"),
    (lambda d: ["--grammar", str(d / "bad.lark")], "unknown name"),
    (lambda d: ["--grammar", str(d / "bad.gbnf")], "invalid GBNF grammar"),
    (lambda d: ["--regex", "a", "--schema", str(d / "ok.json")], "cannot be combined"),
    (lambda d: ["--regex", "a", "--lenient-schema"], "--lenient-schema applies to --schema only"),
])
def test_a_bad_constraint_is_one_line_and_exit_2_before_loading(tmp_path, make_args, words):
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
    path.write_text(json.dumps({"type": "array", "items": {"type": "integer", "minimum": 0, "maximum": 9},
                                "maxItems": 3, "uniqueItems": True}))
    r = run("--target", str(tiny_target), "--draft", "ngram", "--schema", str(path), "--lenient-schema",
            "--json", "-n", "24", "hello", timeout=300)
    assert r.returncode == 0, r.stderr
    assert "uniqueItems" in r.stderr and "relaxed" in r.stderr
    out = json.loads(r.stdout)
    assert set(out) >= {"text", "token_ids", "finish_reason", "stats", "structured_complete", "parsed"}


@pytest.mark.integration
def test_real_model_writes_schema_valid_json_through_the_command(tmp_path):
    from edgespec.catalog import resolve_model

    path = tmp_path / "person.json"
    path.write_text(json.dumps(SCHEMA))
    prompt = ("Extract the person as JSON (name, age, city, tags) from: 'My colleague Maria Lopez, 34, "
              "moved to Valencia last year; we are friends too.'")
    r = run("--target", str(resolve_model("qwen2.5-coder-0.5b")), "--draft", "ngram", "--schema", str(path),
            "--json", "-n", "96", prompt)
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
    from edgespec import Engine
    from edgespec.catalog import resolve_model

    q = resolve_model("qwen2.5-coder-0.5b")
    rf = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA}}
    prompt = "Extract the person as JSON: 'Tom Berg, 51, lives in Oslo; a work contact.'"
    outs = {}
    for name, draft in (("none", None), ("ngram", "ngram"), ("self", q)):
        with Engine(q, draft=draft, n_ctx=1024, exact=True, k=4, adaptive_k=False) as e:
            r = e.generate(prompt, max_tokens=64, response_format=rf)
            outs[name] = (r.token_ids, r.stats.forced)
            jsonschema.validate(r.parsed, SCHEMA)
    assert outs["ngram"][0] == outs["none"][0] and outs["self"][0] == outs["none"][0]
    assert outs["none"][1] == 0 and outs["ngram"][1] > 0 and outs["self"][1] > 0
