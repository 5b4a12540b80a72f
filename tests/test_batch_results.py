"""JSONL results (edgespec.batching.writer, .results): the append-only resumable writer, the batch
loop, and a real ``edgespec generate --input/--output`` run killed with SIGKILL and
resumed. The input lines are test_batch_jobs.py's.

Issue 13's review, defect 1: a batch's ``--output`` that is not edgespec's (no trailing
newline, or the input itself) was cut or replaced; now it is refused and left byte for
byte. Defect 4: ``--on-error stop`` halted halfway over a sampling value the input check
let through."""

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
import typer
from typer.testing import CliRunner

from edgespec.batching.jobs import read_jobs
from edgespec.batching.results import BatchObserver, run_batch
from edgespec.batching.writer import ResultWriter
from edgespec.cli.generate import generate
from edgespec.decoding.params import SamplingParams
from edgespec.errors import ContextOverflowError, InputError
from edgespec.events import Stats


def cli_command() -> list[str]:
    """How a user runs the CLI: ``python -m edgespec``."""
    return [sys.executable, "-m", "edgespec"]


# -- input lines (their checks: test_batch_jobs.py) ------------------------------------


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


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
    from edgespec.batching.writer import _torn_result

    line = json.dumps(
        {
            "id": 7,
            "text": '{"a":',
            "finish_reason": "length",
            "stats": {"rounds": 2},
            "structured_complete": False,
            "parsed": None,
            "structure_error": "max_tokens (4) ran out before the JSON was complete",
            "relaxed": ["Unimplemented keys: uniqueItems"],
        },
        separators=(",", ":"),
    )
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
    inp = write_lines(
        tmp_path / "in.jsonl",
        [
            '{"id": "a", "prompt": "A"}',
            '{"id": "b", "prompt": "B", "max_tokens": 5}',
            '{"id": "c", "messages": [{"role": "user", "content": "C"}]}',
        ],
    )
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
    assert records[1] == {
        "id": "b",
        "text": "<B>",
        "finish_reason": "stop",
        "stats": Stats(drafter="ngram", generated_tokens=3).to_dict(),
    }


def test_run_batch_on_error_skip_and_stop(tmp_path):
    inp = write_lines(
        tmp_path / "in.jsonl",
        [
            '{"id": "a", "prompt": "A"}',
            '{"id": "b", "prompt": "LONG"}',
            '{"id": "c", "prompt": "C"}',
        ],
    )
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
    inp = write_lines(
        tmp_path / "prompts.jsonl",
        [
            json.dumps({"id": f"p{i}", "prompt": f"the quick brown fox {i} jumps over the lazy dog {i}", "seed": i})
            for i in range(n)
        ],
    )
    out = tmp_path / "results.jsonl"
    cmd = cli_command() + [
        "generate",
        "--target",
        str(tiny_target),
        "--draft",
        "ngram",
        "--max-tokens",
        "24",
        "--raw",
        "--input",
        str(inp),
        "--output",
        str(out),
        "--parallel",
        parallel,
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


# -- issue 13's review, 1: an output file that is not a result file ------------------------


RECORD = {"id": "a", "text": "t", "finish_reason": "stop", "stats": {}}


def record_line(rec: dict = RECORD) -> bytes:
    """A result line exactly as ResultWriter.write writes it."""
    return (json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


@pytest.mark.parametrize(
    "content",
    [
        b"my notes, no trailing newline",
        b'{"id": 1, "prompt": "hello world"}',  # an input line, whole
        b'{"id":1,"prompt":"hello',  # an input line, cut short
        record_line() + b"my notes",  # results, then something else
        record_line() + b'{"id":"b","text":"x","finish_reason":"stop","stats":{}} trailing words',
        record_line() + b"  ",
        record_line() + b'{"id":"b","text":5',  # text is not a string
        "é".encode()[:1],  # half a character, and not a result
    ],
)
def test_output_that_is_not_a_result_file_is_refused_and_kept(tmp_path, content):
    out = tmp_path / "notes.txt"
    out.write_bytes(content)
    with pytest.raises(InputError, match="not a result line written by edgespec"):
        ResultWriter(out).open()
    assert out.read_bytes() == content


@pytest.mark.parametrize(
    "tail",
    [
        b'{"id":"b","text":"half a li',
        b'{"id": "b", "text": "half a li',  # the same, written with spaces
        b"{",
        b'{"i',
        b'{"id":"b","text":"caf\xc3',  # torn inside a two-byte character
        b'{"id":"b","text":"x","finish_reason":"stop","stats":{"drafter":"ng',
        b'{"id":"b","text":"x","finish_reason":"stop","stats":{}',  # only the brace lost
    ],
)
def test_only_a_torn_result_line_is_cut(tmp_path, tail):
    out = tmp_path / "out.jsonl"
    out.write_bytes(record_line() + tail)
    with ResultWriter(out) as w:
        assert (w.torn_line, w.torn_action) == (2, "dropped")
        assert w.done == {'"a"'}
    assert out.read_bytes() == record_line()


def test_a_file_holding_only_a_torn_result_is_emptied(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"id":"p0","text":"hal')
    with ResultWriter(out) as w:
        assert w.torn_action == "dropped" and not w.done
    assert out.read_bytes() == b""


def test_output_that_is_the_input_is_refused_also_through_links(tmp_path):
    one = tmp_path / "one.jsonl"
    content = b'{"id": 1, "prompt": "hello world"}'
    one.write_bytes(content)
    inp = read_jobs(one)
    assert [j.id for j in inp.jobs] == [1]
    (tmp_path / "soft.jsonl").symlink_to(one)
    os.link(one, tmp_path / "hard.jsonl")
    for path in (one, tmp_path / "soft.jsonl", tmp_path / "hard.jsonl", tmp_path / "." / "one.jsonl"):
        with pytest.raises(InputError, match="is the input file"):
            ResultWriter(path, input=inp).open()
    assert one.read_bytes() == content
    with ResultWriter(tmp_path / "other.jsonl", input=inp):  # another file is fine
        pass


def test_output_that_is_the_input_read_from_stdin_is_refused(tmp_path, monkeypatch):
    import io
    import sys

    one = tmp_path / "one.jsonl"
    one.write_bytes(b'{"id": 1, "prompt": "hello world"}\n')
    with open(one, "rb") as f:  # edgespec generate -i - -o one.jsonl < one.jsonl
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(f, encoding="utf-8"))
        inp = read_jobs("-")
        with pytest.raises(InputError, match="is the input file <stdin>"):
            ResultWriter(one, input=inp).open()
    assert one.read_bytes() == b'{"id": 1, "prompt": "hello world"}\n'


@pytest.fixture()
def run_cli():
    app = typer.Typer()
    app.command("generate")(generate)
    app.command("other")(lambda: None)  # keep "generate" a subcommand
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


def test_cli_refuses_notes_and_its_own_input_as_output(run_cli, tmp_path, tiny_target):
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b'{"id": 1, "prompt": "hello world"}\n')
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"my notes, no trailing newline")
    common = ("generate", "--target", tiny_target, "--draft", "none", "--max-tokens", "4", "--raw")

    r = run_cli(*common, "--input", inp, "--output", notes)
    assert r.exit_code == 2, r.output
    assert "not a result line" in r.stderr
    assert notes.read_bytes() == b"my notes, no trailing newline"

    one = tmp_path / "one.jsonl"
    one.write_bytes(b'{"id": 1, "prompt": "hello world"}')
    r = run_cli(*common, "-i", one, "-o", one)
    assert r.exit_code == 2, r.output
    assert "is the input file" in r.stderr
    assert one.read_bytes() == b'{"id": 1, "prompt": "hello world"}'


# -- issue 13's review, 4: --on-error stop over a sampling value ---------------------------


def test_on_error_stop_does_not_halt_halfway_over_a_sampling_value(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text(
        "".join(
            json.dumps(obj) + "\n"
            for obj in [
                {"id": 1, "prompt": "one"},
                {"id": 2, "prompt": "two", "top_p": 0},
                {"id": 3, "prompt": "three"},
            ]
        )
    )
    inp = read_jobs(path)
    assert [j.id for j in inp.jobs] == [1, 3]  # the bad line is known before any work

    class Checking:
        def generate(self, prompt, **options):
            SamplingParams(
                **{k: v for k, v in options.items() if k in ("temperature", "top_k", "top_p", "min_p", "seed")}
            ).validate()
            return SimpleNamespace(text=prompt, finish_reason="stop", stats=Stats(drafter="none"))

    with ResultWriter(tmp_path / "out.jsonl") as w:
        summary = run_batch(Checking(), inp.jobs, w, on_error="stop")
    assert summary.done == 2
