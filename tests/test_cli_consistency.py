"""One CLI vocabulary: the plan in one line (in full behind -v and in `profiles detect`),
--prompt-file for a text prompt and --input for JSONL in every command, the same option
names for the same things, and non-UTF-8 input as a one-line error with exit 2."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from edgespec.cli import app as edgespec_app
from edgespec.cli.plan_options import PlanOptions, make_plan
from edgespec.planning import planner

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


def test_the_automatic_choice_is_one_line_and_the_full_reason_is_behind_v(run, tiny_target):
    full = planner.plan("cpu-small", target=str(tiny_target))
    assert full.drafter == "ngram" and len(full.reason) > 200  # the paragraph this is about
    base = ("generate", "--profile", "cpu-small", "--target", tiny_target, "--max-tokens", "4", "--raw", "hi")
    r = run(*base)
    assert r.exit_code == 0, r.output
    assert plan_lines(r.stderr) == [
        "edgespec: ngram drafter (prompt lookup): it drafts only where the text repeats its input or "
        "an earlier answer, so it can only help (-v says why)"
    ]
    v = run(*base, "-v")
    assert v.exit_code == 0, v.output
    lines = plan_lines(v.stderr)
    assert lines[0] == f"edgespec: {full.reason}"
    assert any(note in line for line in lines[1:] for note in full.notes)


def test_an_explicit_choice_is_already_one_line(run, tiny_target):
    r = run(
        "generate",
        "--profile",
        "cpu-small",
        "--target",
        tiny_target,
        "--draft",
        "ngram",
        "--max-tokens",
        "4",
        "--raw",
        "hi",
    )
    lines = plan_lines(r.stderr)
    assert len(lines) == 1 and lines[0].startswith("edgespec: ngram drafter as asked") and "-v" not in lines[0]


def test_profiles_detect_gives_the_full_reason(run):
    rec = DATA / "dev-vm-2core.toml"
    r = run("profiles", "detect", "--from", rec, "--json")
    d = json.loads(r.stdout)
    assert d["drafter"] == "ngram" and d["headline"] != d["reason"]
    assert d["reason"].startswith(d["headline"] + "; ")
    r = run("profiles", "detect", "--from", rec)
    assert r.exit_code == 0, r.output
    assert "for a typical prompt mix" in " ".join(r.stdout.split())  # the table may wrap it


# -- non-UTF-8 input ------------------------------------------------------------------------

LATIN1 = "café au lait".encode("latin-1")  # é is byte 0xe9 at offset 3


def edgespec(*args, stdin: bytes = b"", locale: str | None = None) -> subprocess.CompletedProcess:
    """The CLI as a user runs it, with raw bytes on stdin and in argv."""
    env = dict(os.environ)
    if locale is not None:
        env["LC_ALL"] = locale
    cmd = [sys.executable, "-m", "edgespec", *(a if isinstance(a, bytes) else str(a) for a in args)]
    return subprocess.run(cmd, input=stdin, capture_output=True, env=env, timeout=120)


@pytest.mark.parametrize("locale", [None, "C"])
def test_non_utf8_stdin_is_a_one_line_error_with_exit_2(tiny_target, locale):
    r = edgespec("generate", "--target", tiny_target, "--raw", "--max-tokens", "2", stdin=LATIN1, locale=locale)
    err = r.stderr.decode("utf-8", "replace")
    assert r.returncode == 2, err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].startswith("error: stdin is not UTF-8 text (byte 0xe9 at offset 3)")


def test_non_utf8_prompt_file_and_argument_are_exit_2(tiny_target, tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes(LATIN1)
    r = edgespec("generate", "--target", tiny_target, "--raw", "--prompt-file", f)
    err = r.stderr.decode("utf-8", "replace").strip()
    assert r.returncode == 2 and err == (
        f"error: prompt file {f} is not UTF-8 text (byte 0xe9 at offset 3); edgespec reads UTF-8 text; "
        "convert it first, e.g. iconv -f latin1 -t utf-8"
    )
    r = edgespec("generate", "--target", tiny_target, "--raw", LATIN1)
    err = r.stderr.decode("utf-8", "replace").strip()
    assert r.returncode == 2 and "Traceback" not in err
    assert err.startswith("error: the prompt argument is not UTF-8 text (byte 0xe9 at character 3)")


def test_utf8_stdin_still_works(tiny_target):
    r = edgespec(
        "generate",
        "--target",
        tiny_target,
        "--raw",
        "--max-tokens",
        "2",
        "--json",
        stdin="café au lait".encode("utf-8"),
        locale="C",
    )
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads(r.stdout)["stats"]["prompt_tokens"] > 0


# -- --prompt-file is text, --input is JSONL --------------------------------------------------


def test_bench_reads_a_text_prompt_file_and_jsonl_through_input(run, tiny_target, prompt_file, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    base = (
        "bench",
        "--profile",
        "cpu-small",
        "--target",
        tiny_target,
        "-d",
        "ngram",
        "--k-grid",
        "2",
        "--max-tokens",
        4,
        "--threads",
        1,
        "--json",
        "--quiet",
    )
    text = tmp_path / "edit.txt"
    text.write_text("def f(x): return x + 1\ndef f(x): return x + 1\ndef f(", encoding="utf-8")
    r = run(*base, "--prompt-file", text)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["settings"]["prompts"] == ["edit"]
    r = run(*base, "--input", prompt_file, "--limit", 2)
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["settings"]["prompts"] == ["a", "b"]


@pytest.mark.parametrize("command", ["bench", "tune"])
def test_jsonl_through_prompt_file_is_a_clear_error(run, tiny_target, prompt_file, command):
    r = run(command, "--profile", "cpu-small", "--target", tiny_target, "--prompt-file", prompt_file)
    assert r.exit_code == 2
    assert r.stderr.strip() == (
        f"error: --prompt-file reads one text prompt; JSONL prompts go through --input {prompt_file}"
    )
    r = run(
        command, "--profile", "cpu-small", "--target", tiny_target, "--prompt-file", prompt_file, "--input", prompt_file
    )
    assert r.exit_code == 2 and "not both" in r.stderr


def test_bench_text_prompt_file_must_be_utf8(run, tiny_target, tmp_path):
    f = tmp_path / "latin1.txt"
    f.write_bytes(LATIN1)
    r = run("bench", "--profile", "cpu-small", "--target", tiny_target, "--prompt-file", f)
    assert r.exit_code == 2 and "is not UTF-8 text (byte 0xe9 at offset 3)" in r.stderr


# -- one vocabulary --------------------------------------------------------------------------

ENGINE_COMMANDS = ("generate", "chat", "bench", "tune")


def options_of(command: str) -> dict[str, list[str]]:
    """param name -> its flags, as the command line offers them."""
    cmd = typer.main.get_command(edgespec_app).commands[command]
    opts = {p.name: list(p.opts) for p in cmd.params if p.param_type_name == "option"}
    assert opts, command
    return opts


def test_the_same_option_has_the_same_name_in_every_command():
    by_flag: dict[str, set[str]] = {}
    by_param: dict[str, set[tuple[str, tuple[str, ...]]]] = {}
    for command in ENGINE_COMMANDS:
        for name, flags in options_of(command).items():
            for flag in flags:
                by_flag.setdefault(flag, set()).add(name)
            long = next(f for f in flags if f.startswith("--"))
            shorts = tuple(sorted(f for f in flags if not f.startswith("--")))
            by_param.setdefault(name, set()).add((long, shorts))
    # a flag means one thing, and one thing has one main flag and one short flag
    assert {flag: names for flag, names in by_flag.items() if len(names) > 1} == {}
    assert {name: forms for name, forms in by_param.items() if len(forms) > 1} == {}


def test_every_engine_command_has_the_shared_options():
    shared = {
        "profile": "--profile",
        "target": "--target",
        "draft": "--draft",
        "max_tokens": "--max-tokens",
        "n_ctx": "--n-ctx",
        "threads": "--threads",
        "verbose": "--verbose",
    }
    for command in ENGINE_COMMANDS:
        opts = options_of(command)
        for name, flag in shared.items():
            assert flag in opts.get(name, []), (command, flag)
    for command in ("generate", "bench", "tune"):
        opts = options_of(command)
        assert opts["input_file"][0] == "--input" and opts["prompt_file"][0] == "--prompt-file", command
        assert "--quiet" in opts["quiet"] and "--json" in opts["json_output"]


def test_the_plan_options_are_one_frozen_set_that_every_engine_command_takes(tiny_target):
    # the ten plan options, and the memory's two that cli/memory_options folds in (MemoryOptions.apply)
    fields = [f.name for f in dataclasses.fields(PlanOptions) if f.name not in ("memory", "memory_cap")]
    assert len(fields) == 10
    for command in ("generate", "chat", "serve"):
        assert set(fields) <= set(options_of(command)), command
    for command in ("bench", "tune"):  # their --draft names the drafters to measure; they measure a k grid
        assert set(fields) - {"k"} <= set(options_of(command)), command
    asked = PlanOptions(profile="cpu-small", target=str(tiny_target), draft=" Off ", threads=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        asked.k = 2  # type: ignore[misc]
    p = make_plan(asked)
    assert p.drafter == "none" and p.n_threads == 3
    assert make_plan(PlanOptions(profile="cpu-small", target=str(tiny_target))).drafter == "ngram"


def test_old_spellings_still_work():
    assert "--draft-candidates" in options_of("bench")["draft"]
    assert "--repeats" in options_of("tune")["repeat"]
