"""One CLI vocabulary: the plan in one line (in full behind -v and in `profiles detect`),
--prompt-file for a text prompt and --input for JSONL in every command, the same option
names for the same things, and non-UTF-8 input as a one-line error with exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from edgespec import planner
from edgespec.cli import app as edgespec_app

DATA = Path(__file__).parent / "data" / "detect"


@pytest.fixture()
def run():
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(edgespec_app, [str(a) for a in args], input=input, catch_exceptions=False)

    return invoke


def plan_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("edgespec:") or line.startswith("  ")]


# -- the plan in one line -----------------------------------------------------------------


def test_plain_decoding_is_one_line_and_the_full_reason_is_behind_v(run, tiny_target):
    full = planner.plan("cpu-small", target=str(tiny_target))
    assert full.drafter == "none" and len(full.reason) > 200  # the paragraph this is about
    base = ("generate", "--profile", "cpu-small", "--target", tiny_target, "--max-tokens", "4", "--raw", "hi")
    r = run(*base)
    assert r.exit_code == 0, r.output
    assert plan_lines(r.stderr) == [
        f"edgespec: plain decoding: no drafter is predicted to beat it by {full_gain(full)} (-v says why)"
    ]
    v = run(*base, "-v")
    assert v.exit_code == 0, v.output
    lines = plan_lines(v.stderr)
    assert lines[0] == f"edgespec: {full.reason}"
    assert any(note in line for line in lines[1:] for note in full.notes)


def full_gain(p: planner.Plan) -> str:
    head = p.reason.split(";")[0]
    return head.rsplit(" by ", 1)[1]


def test_an_explicit_choice_is_already_one_line(run, tiny_target):
    r = run("generate", "--profile", "cpu-small", "--target", tiny_target, "--draft", "ngram",
            "--max-tokens", "4", "--raw", "hi")
    lines = plan_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("edgespec: ngram drafter, k=") and "-v" not in lines[0]


def test_profiles_detect_gives_the_full_reason(run):
    rec = DATA / "dev-vm-2core.toml"
    r = run("profiles", "detect", "--from", rec, "--json")
    d = json.loads(r.stdout)
    assert d["drafter"] == "none" and d["headline"] != d["reason"]
    assert d["reason"].startswith(d["headline"] + "; ")
    r = run("profiles", "detect", "--from", rec)
    assert r.exit_code == 0, r.output
    assert "for a typical prompt mix" in " ".join(r.stdout.split())  # the table may wrap it
