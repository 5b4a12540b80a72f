"""JSONL batches: input validation with line numbers, the append-only resumable writer,
and a real ``edgespec generate --input/--output`` run killed with SIGKILL and resumed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from edgespec.batching.results import (
    BatchObserver,
    InputLineError,
    ResultWriter,
    parse_line,
    read_jobs,
    run_batch,
)
from edgespec.errors import ContextOverflowError, InputError
from edgespec.events import Stats


def cli_command() -> list[str]:
    """How a user runs the CLI: ``python -m edgespec``."""
    return [sys.executable, "-m", "edgespec"]


# -- input ------------------------------------------------------------------------------


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
    path = write_lines(tmp_path / "in.jsonl", [
        '{"id": "a", "prompt": "one"}',
        "",
        '{"id": "b", "prompt": 5}',
        '{"id": "a", "prompt": "again"}',
        '{"id": 1, "prompt": "int id"}',
        '{"id": "1", "prompt": "string id"}',
        "oops",
    ])
    inp = read_jobs(path)
    assert [j.id for j in inp.jobs] == ["a", 1, "1"]
    assert [j.line for j in inp.jobs] == [1, 5, 6]
    assert [e.line for e in inp.errors] == [3, 4, 7]
    assert "duplicate id \"a\" (first on line 1)" in str(inp.errors[1])


def test_missing_input_file_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="input file not found"):
        read_jobs(tmp_path / "nope.jsonl")


# -- the writer -------------------------------------------------------------------------


def test_writer_appends_whole_lines_and_remembers_ids(tmp_path):
    out = tmp_path / "out.jsonl"
    with ResultWriter(out) as w:
        w.write({"id": "a", "text": "x\ny", "finish_reason": "stop", "stats": {}})
        w.write({"id": 2, "text": "é", "finish_reason": "length", "stats": {}})
    lines = out.read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", 2]
    with ResultWriter(out) as w:
        assert w.done == {'"a"', "2"}
        assert w.torn_line is None


def test_writer_drops_a_torn_last_line(tmp_path):
    out = tmp_path / "out.jsonl"
    good = json.dumps({"id": "a", "text": "t", "finish_reason": "stop", "stats": {}})
    out.write_bytes((good + "\n" + '{"id": "b", "text": "half a li').encode())
    with ResultWriter(out) as w:
        assert w.torn_line == 2 and w.torn_action == "dropped"
        assert w.done == {'"a"'}
        w.write({"id": "b", "text": "whole", "finish_reason": "stop", "stats": {}})
    lines = out.read_text().splitlines()
    assert [json.loads(line)["id"] for line in lines] == ["a", "b"]


def test_a_structured_line_torn_anywhere_is_dropped_and_a_foreign_tail_is_not():
    """A constrained result line has the structure's keys after stats (issue 28 item 3):
    every prefix of it still reads as a torn result; other keys after stats do not."""
    from edgespec.batching.results import _torn_result

    line = json.dumps({"id": 7, "text": '{"a":', "finish_reason": "length", "stats": {"rounds": 2},
                       "structured_complete": False, "parsed": None,
                       "structure_error": "max_tokens (4) ran out before the JSON was complete",
                       "relaxed": ["Unimplemented keys: uniqueItems"]}, separators=(",", ":"))
    for cut in range(1, len(line)):
        assert _torn_result(line[:cut].encode()), line[:cut]
    assert not _torn_result(line[:-1].replace('"parsed"', '"mine"').encode())


def test_writer_repairs_a_whole_object_missing_its_newline(tmp_path):
    out = tmp_path / "out.jsonl"
    a = json.dumps({"id": "a", "text": "t", "finish_reason": "stop", "stats": {}})
    b = json.dumps({"id": "b", "text": "u", "finish_reason": "stop", "stats": {}})
    out.write_text(a + "\n" + b)
    with ResultWriter(out) as w:
        assert w.torn_action == "repaired" and w.done == {'"a"', '"b"'}
    assert out.read_text() == a + "\n" + b + "\n"


def test_writer_refuses_a_file_that_is_not_results(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_text("hello\n")
    with pytest.raises(InputError, match="out.jsonl:1: not a result line"):
        ResultWriter(out).open()


def test_two_writers_cannot_share_an_output(tmp_path):
    out = tmp_path / "out.jsonl"
    with ResultWriter(out):
        with pytest.raises(InputError, match="another edgespec run"):
            ResultWriter(out).open()


# -- run_batch with a stand-in engine -------------------------------------------------------


class FakeEngine:
    def __init__(self, fail_on=()):
        self.calls = []
        self.fail_on = set(fail_on)

    def generate(self, prompt, **options):
        self.calls.append((prompt, options))
        if isinstance(prompt, str) and prompt in self.fail_on:
            raise ContextOverflowError("the prompt is too long")
        stats = Stats(drafter="ngram", generated_tokens=3)
        return SimpleNamespace(text=f"<{prompt}>", token_ids=[1, 2, 3], finish_reason="stop", stats=stats)


def test_run_batch_skips_done_ids_and_merges_settings(tmp_path):
    inp = write_lines(tmp_path / "in.jsonl", [
        '{"id": "a", "prompt": "A"}',
        '{"id": "b", "prompt": "B", "max_tokens": 5}',
        '{"id": "c", "messages": [{"role": "user", "content": "C"}]}',
    ])
    out = tmp_path / "out.jsonl"
    out.write_text(json.dumps({"id": "a", "text": "old", "finish_reason": "stop", "stats": {}}) + "\n")
    engine = FakeEngine()
    with ResultWriter(out) as w:
        summary = run_batch(engine, read_jobs(inp).jobs, w, defaults={"max_tokens": 9, "raw": True})
    assert (summary.total, summary.skipped, summary.done) == (3, 1, 2)
    assert engine.calls[0] == ("B", {"max_tokens": 5, "raw": True})
    assert engine.calls[1][1] == {"max_tokens": 9}  # raw is for text prompts only
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["id"] for r in records] == ["a", "b", "c"]
    assert records[1] == {"id": "b", "text": "<B>", "finish_reason": "stop", "stats": Stats(
        drafter="ngram", generated_tokens=3).to_dict()}


def test_run_batch_on_error_skip_and_stop(tmp_path):
    inp = write_lines(tmp_path / "in.jsonl", [
        '{"id": "a", "prompt": "A"}', '{"id": "b", "prompt": "LONG"}', '{"id": "c", "prompt": "C"}',
    ])
    jobs = read_jobs(inp).jobs
    failed = []

    class Obs(BatchObserver):
        def job_failed(self, job, error):
            failed.append((job.line, str(error)))

    with ResultWriter(tmp_path / "skip.jsonl") as w:
        summary = run_batch(FakeEngine({"LONG"}), jobs, w, on_error="skip", observer=Obs())
    assert summary.done == 2 and len(summary.failed) == 1 and failed == [(2, "the prompt is too long")]

    with ResultWriter(tmp_path / "stop.jsonl") as w:
        with pytest.raises(ContextOverflowError):
            run_batch(FakeEngine({"LONG"}), jobs, w, on_error="stop")
    assert len((tmp_path / "stop.jsonl").read_text().splitlines()) == 1


# -- a real batch, killed with SIGKILL and resumed --------------------------------------------


def count_complete_lines(path: Path) -> int:
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def check_output(path: Path) -> list[str]:
    data = path.read_bytes()
    assert data.endswith(b"\n"), "torn last line"
    ids = []
    for n, line in enumerate(data.decode("utf-8").splitlines(), 1):
        obj = json.loads(line)  # every line is whole JSON
        assert set(obj) == {"id", "text", "finish_reason", "stats"}, f"line {n}"
        assert obj["finish_reason"] in ("stop", "length")
        ids.append(obj["id"])
    return ids


@pytest.mark.parametrize("parallel", ["1", "4"])
def test_kill_9_mid_batch_then_resume_gives_every_id_exactly_once(tmp_path, tiny_target, parallel):
    n = 60
    inp = write_lines(tmp_path / "prompts.jsonl", [
        json.dumps({"id": f"p{i}", "prompt": f"the quick brown fox {i} jumps over the lazy dog {i}",
                    "seed": i})
        for i in range(n)
    ])
    out = tmp_path / "results.jsonl"
    cmd = cli_command() + [
        "generate", "--target", str(tiny_target), "--draft", "ngram", "--max-tokens", "24",
        "--raw", "--input", str(inp), "--output", str(out), "--parallel", parallel,
    ]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 120
        while count_complete_lines(out) < 3:
            if proc.poll() is not None:
                pytest.fail(f"batch ended before the kill: {proc.stderr.read().decode()}")
            assert time.monotonic() < deadline, "no results within 120 s"
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    first = check_output(out)
    assert 3 <= len(first) < n, "the kill came after the batch had finished"

    # A crash of another kind (power loss, full disk) can leave half a line: resume must
    # notice it and drop it before appending.
    with open(out, "ab") as f:
        f.write(b'{"id": "p59", "text": "half a li')

    rerun = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert "dropped a torn last line" in rerun.stderr
    assert f"{len(first)} already there" in rerun.stderr
    ids = check_output(out)
    assert sorted(ids) == sorted(f"p{i}" for i in range(n))  # every id exactly once
    assert ids[: len(first)] == first  # earlier results were kept, not rewritten

    again = subprocess.run(cmd, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=120)
    assert again.returncode == 0 and "nothing to do" in again.stderr
    assert check_output(out) == ids
