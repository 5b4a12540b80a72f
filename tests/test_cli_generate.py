"""``edgespec generate`` through Typer's CliRunner: prompts in, text / JSON out, errors
as one line and an exit code. Tiny models for the plumbing; the real Qwen2.5-Coder-0.5B
for greedy losslessness through the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import typer
from typer.testing import CliRunner

from edgespec.cli.chat import chat
from edgespec.cli.generate import generate

ESC = "\x1b"


def cli_command() -> list[str]:
    """How a user runs the CLI: ``python -m edgespec``."""
    return [sys.executable, "-m", "edgespec"]


@pytest.fixture(scope="module")
def app() -> typer.Typer:
    """The two commands as the lead's ``edgespec.cli.app`` registers them."""
    app = typer.Typer()
    app.command("generate")(generate)
    app.command("chat")(chat)
    return app


@pytest.fixture()
def run(app):
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(app, [str(a) for a in args], input=input, catch_exceptions=False)

    return invoke


def test_prompt_argument_prints_plain_text_and_stats_on_stderr(run, tiny_target):
    r = run(
        "generate", "--target", tiny_target, "--draft", "ngram", "--max-tokens", "12", "--raw", "the quick brown fox"
    )
    assert r.exit_code == 0, r.output
    assert r.stdout.strip()
    assert ESC not in r.stdout and ESC not in r.stderr
    assert "prompt" in r.stderr and "tokens" in r.stderr  # the summary line
    assert r.stdout.endswith("\n")


def test_json_output_matches_between_drafters_at_temperature_0(run, tiny_target, tiny_noisy):
    outs = {}
    for draft in ("none", "ngram", str(tiny_noisy)):
        r = run(
            "generate",
            "--target",
            tiny_target,
            "--draft",
            draft,
            "--max-tokens",
            "32",
            "--raw",
            "--json",
            "hello world, the dog and the fox",
        )
        assert r.exit_code == 0, r.output
        obj = json.loads(r.stdout)
        assert set(obj) == {"text", "token_ids", "finish_reason", "stats"}
        assert obj["stats"]["generated_tokens"] == len(obj["token_ids"])
        outs[draft] = obj
    assert outs["none"]["token_ids"] == outs["ngram"]["token_ids"] == outs[str(tiny_noisy)]["token_ids"]
    assert outs["none"]["text"] == outs["ngram"]["text"]


def test_prompt_from_stdin_and_from_file(run, tiny_target, tmp_path):
    base = ("generate", "--target", tiny_target, "--max-tokens", "8", "--raw", "--json")
    from_arg = json.loads(run(*base, "hello world").stdout)
    from_stdin = run(*base, input="hello world")
    assert from_stdin.exit_code == 0, from_stdin.output
    assert json.loads(from_stdin.stdout)["token_ids"] == from_arg["token_ids"]
    f = tmp_path / "prompt.txt"
    f.write_text("hello world", encoding="utf-8")
    from_file = run(*base, "--prompt-file", f)
    assert json.loads(from_file.stdout)["token_ids"] == from_arg["token_ids"]


def test_stop_string_ends_the_text(run, tiny_target):
    r = run("generate", "--target", tiny_target, "--max-tokens", "40", "--raw", "--json", "the quick brown fox")
    full = json.loads(r.stdout)["text"]
    stop = full[10:13]
    assert stop
    r = run(
        "generate",
        "--target",
        tiny_target,
        "--max-tokens",
        "40",
        "--raw",
        "--json",
        "--stop",
        stop,
        "the quick brown fox",
    )
    obj = json.loads(r.stdout)
    assert obj["finish_reason"] == "stop"
    assert obj["text"] == full[: full.index(stop)]


@pytest.mark.parametrize(
    "args, code, message",
    [
        (("--prompt-file", "/nonexistent/prompt.txt"), 2, "prompt file not found"),
        (("hi", "--prompt-file", "/etc/hostname"), 2, "not both"),
        (("hi", "--input", "x.jsonl", "--output", "y.jsonl"), 2, "drop the prompt argument"),
        (("--input", "x.jsonl"), 2, "needs both --input"),
    ],
)
def test_usage_errors_are_one_line_with_an_exit_code(run, args, code, message):
    r = run("generate", *args)
    assert r.exit_code == code
    assert r.stderr.startswith("error: ") and message in r.stderr
    assert "Traceback" not in r.output


def test_no_prompt_at_all(run):
    r = run("generate", input="")
    assert r.exit_code == 2 and "no prompt" in r.stderr


def test_missing_model_file_is_exit_3(run, tmp_path):
    r = run("generate", "--target", tmp_path / "missing.gguf", "--draft", "none", "hello")
    assert r.exit_code == 3, r.output
    errors = [line for line in r.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "missing.gguf" in errors[0]
    assert "Traceback" not in r.output


def test_batch_reports_bad_lines_and_generates_the_rest(run, tiny_target, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text(
        '{"id": "a", "prompt": "hello"}\n'
        '{"id": "b", "prompt": "world", "max_tokens": "ten"}\n'
        '{"id": "c", "messages": [{"role": "user", "content": "the fox"}], "max_tokens": 4}\n'
    )
    out = tmp_path / "out.jsonl"
    r = run("generate", "--target", tiny_target, "--max-tokens", "6", "--input", inp, "--output", out)
    assert r.exit_code == 1, r.output  # finished, but a line was bad
    assert "in.jsonl:2: 'max_tokens' must be an integer" in r.stderr
    lines = {x["id"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert sorted(lines) == ["a", "c"]  # in the order they finished (--parallel auto)
    assert lines["c"]["stats"]["generated_tokens"] <= 4

    r = run("generate", "--target", tiny_target, "--input", inp, "--output", out, "--on-error", "stop")
    assert r.exit_code == 2 and "fix them" in r.stderr


@pytest.mark.integration
@pytest.mark.parametrize(
    "prompt",
    [
        'def is_prime(n):\n    """Return True if n is prime."""\n',
        "Rename `total` to `subtotal` everywhere:\n\ntotal = 0\nfor x in items:\n    total += x.price\nprint(total)\n",
        "A haiku about a lighthouse:\n",
    ],
    ids=["code", "edit", "poem"],
)
def test_real_model_exact_greedy_output_is_the_same_with_and_without_drafting(tmp_path, prompt):
    """On Qwen2.5-Coder-0.5B with --exact: --draft ngram and the model as its own drafter
    give exactly the token ids of --exact --draft none, with the learned policy and with a
    fixed k, through the CLI as a user runs it."""
    from edgespec.catalog import resolve_model

    model = str(resolve_model("qwen2.5-coder-0.5b"))
    cmd = cli_command() + [
        "generate",
        "--target",
        model,
        "--raw",
        "--json",
        "--exact",
        "--temperature",
        "0",
        "--max-tokens",
        "48",
        prompt,
    ]
    ids = {}
    for name, extra in (
        ("none", ["--draft", "none"]),
        ("ngram", ["--draft", "ngram"]),
        ("ngram k=4", ["--draft", "ngram", "--k", "4"]),
        ("model k=4", ["--draft", model, "--k", "4"]),
    ):
        r = subprocess.run(
            cmd + extra, capture_output=True, text=True, timeout=600, stdin=subprocess.DEVNULL, env=dict(os.environ)
        )
        assert r.returncode == 0, r.stderr
        ids[name] = json.loads(r.stdout)["token_ids"]
    assert len(ids["none"]) > 10
    for name in ("ngram", "ngram k=4", "model k=4"):
        assert ids[name] == ids["none"], name


def test_batch_parallel_runs_many_per_decode_and_says_so(run, tiny_target, tmp_path):
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(f'{{"id": {i}, "prompt": "the fox {i}", "max_tokens": {3 + i}}}\n' for i in range(6)))
    out = tmp_path / "out.jsonl"
    r = run("generate", "--target", tiny_target, "--input", inp, "--output", out, "--parallel", "3", "--exact")
    assert r.exit_code == 0, r.output
    assert "3 sequences per decode (asked for 3)" in r.stderr
    assert "tok/s overall" in r.stderr
    lines = {x["id"]: x for x in map(json.loads, out.read_text().splitlines())}
    assert sorted(lines) == list(range(6))
    from edgespec import Engine

    with Engine(tiny_target, exact=True) as e:
        for i in range(6):
            assert lines[i]["text"] == e.generate(f"the fox {i}", max_tokens=3 + i).text


@pytest.mark.parametrize("value", ["0", "-2", "many"])
def test_batch_parallel_must_be_a_positive_number_or_auto(run, tiny_target, tmp_path, value):
    inp = tmp_path / "in.jsonl"
    inp.write_text('{"id": 1, "prompt": "hi"}\n')
    r = run("generate", "--target", tiny_target, "--input", inp, "--output", tmp_path / "o.jsonl", "--parallel", value)
    assert r.exit_code == 2 and "--parallel must be a positive number or 'auto'" in r.stderr
    assert not (tmp_path / "o.jsonl").exists() or (tmp_path / "o.jsonl").read_text() == ""


def test_batch_parallel_beyond_llama_cpp_s_limit_is_refused_with_exit_2(run, tiny_target, tmp_path):
    # issue 22 item 7: 300 sequences failed creating the context, as a corrupt model (exit 3)
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(f'{{"id": {i}, "prompt": "fox {i}", "max_tokens": 2}}\n' for i in range(300)))
    r = run("generate", "--target", tiny_target, "--input", inp, "--output", tmp_path / "o.jsonl", "--parallel", "300")
    assert r.exit_code == 2, r.output
    assert "--parallel 300 is more sequences than llama.cpp holds in one context (256)" in r.stderr
    # issue 28 item 6: the error alone, not "stopped: 0 result(s) written" before it
    assert "stopped" not in r.stderr and r.stderr.strip().splitlines()[-1].startswith("error: --parallel 300")
    assert [line for line in r.stderr.splitlines() if "result(s)" in line] == []


def test_batch_parallel_whose_kv_cache_does_not_fit_is_refused_with_exit_2(run, tiny_target, tmp_path, monkeypatch):
    # an explicit N skipped the memory check that auto makes
    from edgespec.detect import LocalProbe

    monkeypatch.setattr(LocalProbe, "memory", lambda self: (1 << 30, 64 << 10))  # half: 2 x 64 tokens
    inp = tmp_path / "in.jsonl"
    inp.write_text("".join(f'{{"id": {i}, "prompt": "fox {i}", "max_tokens": 2}}\n' for i in range(8)))
    r = run("generate", "--target", tiny_target, "--input", inp, "--output", tmp_path / "o.jsonl", "--parallel", "8")
    assert r.exit_code == 2, r.output
    assert "--parallel 8 needs" in r.stderr and "KV cache" in r.stderr and "lower --parallel" in r.stderr
