"""JSONL input (edgespec.batching.jobs): every line checked before any work, a bad one
reported with its line number and skipped; the sampling values the engine refuses are
refused here too (issue 13's review, defect 4); a line that is not UTF-8 (issue 12), or
otherwise bad, is one bad line, not a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgespec.batching.jobs import InputLineError, parse_line, read_jobs
from edgespec.decoding.params import SamplingParams
from edgespec.errors import InputError


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def test_parse_line_accepts_prompt_or_messages_and_per_line_settings():
    job = parse_line('{"id": "a", "prompt": "hi", "max_tokens": 8, "temperature": 0.5, "seed": 3, "stop": "\\n"}', 1)
    assert job.id == "a" and job.prompt == "hi"
    assert job.options == {"max_tokens": 8, "temperature": 0.5, "seed": 3, "stop": ("\n",)}
    job = parse_line('{"id": 7, "messages": [{"role": "user", "content": "hi"}]}', 2)
    assert job.prompt == [{"role": "user", "content": "hi"}] and job.line == 2


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2]", "expected a JSON object"),
        ('{"prompt": "x"}', "missing 'id'"),
        ('{"id": true, "prompt": "x"}', "'id' must be"),
        ('{"id": "a"}', "exactly one of 'prompt' or 'messages'"),
        ('{"id": "a", "prompt": "x", "messages": []}', "exactly one of"),
        ('{"id": "a", "prompt": ""}', "non-empty string"),
        ('{"id": "a", "messages": [{"role": "user"}]}', "messages[0]"),
        ('{"id": "a", "prompt": "x", "max_tokens": 0}', "'max_tokens' must be at least 1"),
        ('{"id": "a", "prompt": "x", "max_tokens": 2.5}', "'max_tokens' must be an integer"),
        ('{"id": "a", "prompt": "x", "temperature": -1}', "'temperature' must be >= 0"),
        ('{"id": "a", "prompt": "x", "top_p": 2}', "'top_p' must be in (0, 1]"),
        ('{"id": "a", "prompt": "x", "stop": [1]}', "'stop' must be"),
        ('{"id": "a", "prompt": "x", "max_token": 5}', "unknown key 'max_token'"),
    ],
)
def test_bad_lines_are_reported_with_their_line_number(line, message):
    with pytest.raises(InputLineError) as info:
        parse_line(line, 12, "prompts.jsonl")
    assert info.value.line == 12
    assert str(info.value).startswith("prompts.jsonl:12: ")
    assert message in str(info.value)
    assert isinstance(info.value, InputError) and info.value.exit_code == 2


def test_read_jobs_keeps_good_lines_and_lists_every_bad_one(tmp_path):
    path = write_lines(
        tmp_path / "in.jsonl",
        [
            '{"id": "a", "prompt": "one"}',
            "",
            '{"id": "b", "prompt": 5}',
            '{"id": "a", "prompt": "again"}',
            '{"id": 1, "prompt": "int id"}',
            '{"id": "1", "prompt": "string id"}',
            "oops",
        ],
    )
    inp = read_jobs(path)
    assert [j.id for j in inp.jobs] == ["a", 1, "1"]
    assert [j.line for j in inp.jobs] == [1, 5, 6]
    assert [e.line for e in inp.errors] == [3, 4, 7]
    assert 'duplicate id "a" (first on line 1)' in str(inp.errors[1])


def test_missing_input_file_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="input file not found"):
        read_jobs(tmp_path / "nope.jsonl")


# -- issue 13's review, 4: one validation of the sampling settings -------------------------


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("top_p", 0, "'top_p' must be in (0, 1]"),
        ("seed", -1, "'seed' must be a non-negative integer"),
        ("top_k", -3, "'top_k' must be >= 0"),
        ("temperature", "hot", "'temperature' must be a number, not \"hot\""),
    ],
)
def test_read_jobs_refuses_what_the_engine_refuses(tmp_path, key, value, needle):
    path = tmp_path / "in.jsonl"
    path.write_text(
        json.dumps({"id": "ok", "prompt": "fine"}) + "\n" + json.dumps({"id": "bad", "prompt": "x", key: value}) + "\n"
    )
    inp = read_jobs(path)
    assert [j.id for j in inp.jobs] == ["ok"]
    assert [e.line for e in inp.errors] == [2]
    assert needle in str(inp.errors[0])
    # and the engine's own check says the same value is bad
    with pytest.raises(InputError, match=key):
        SamplingParams(**{key: value}).validate()


# -- issue 12: a JSONL line that is not UTF-8 is one bad line ------------------------------


def test_a_line_that_is_not_utf8_is_skipped_with_its_line_number(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b'{"id": 1, "prompt": "one"}\n'
        b'{"id": 2, "prompt": "caf\xe9 latin-1"}\n'
        b'\xff\xfe{"id": 3}\n'
        b'{"id": 4, "prompt": "four \xe2\x82\xac"}\n'
    )
    inp = read_jobs(path)
    assert [(j.id, j.prompt) for j in inp.jobs] == [(1, "one"), (4, "four €")]
    assert [e.line for e in inp.errors] == [2, 3]
    assert str(inp.errors[0]).startswith(f"{path}:2: not valid UTF-8 (byte 0xe9 at byte 25)")
    assert "not valid UTF-8" in str(inp.errors[1])


def test_a_non_utf8_line_on_stdin_is_skipped_too(monkeypatch):
    import io
    import sys

    raw = io.BytesIO(b'\xff\n{"id": "s", "prompt": "from stdin"}\n')
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(raw, encoding="utf-8"))
    inp = read_jobs("-")
    assert [j.id for j in inp.jobs] == ["s"]
    assert [str(e) for e in inp.errors] == ["<stdin>:1: not valid UTF-8 (byte 0xff at byte 1)"]


@pytest.mark.parametrize(
    "line, needle",
    [
        ('{"id": "a", "prompt": "\\ud800 half a pair"}', "lone surrogate"),
        ('{"id": "\\udfff", "prompt": "x"}', "lone surrogate"),
        ('{"id": "a", "prompt": "x", "stop": ["ok", "\\ud800"]}', "stop[1]"),
        ('{"id": "a", "messages": [{"role": "user", "content": "\\udc80"}]}', "messages[0].content"),
        ('{"id": ' + "1" * 5000 + ', "prompt": "x"}', "not valid JSON"),
        ("[" * 100000 + "]" * 100000, "not valid JSON"),
        ('{"id": "a", "prompt": "x", "temperature": NaN}', "'temperature' must be a finite number"),
    ],
)
def test_other_bad_lines_are_bad_lines_not_crashes(line, needle):
    with pytest.raises(InputError) as info:
        parse_line(line, 3, "in.jsonl")
    assert str(info.value).startswith("in.jsonl:3: ")
    assert needle in str(info.value)
