"""The memory on the command line (issue 27 items 3 and 7): ``--memory/--no-memory``,
``--memory-cap`` and ``--remember`` on generate (one prompt and a batch), chat and bench;
``edgespec memory show`` and ``clear`` on a store directory of the test's own; a corrupt
store is one warning and a cold start; and where accepted drafts came from, in the
readout, the summary, ``--json`` and the JSONL lines. Tiny models (tests/conftest.py)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import pytest
from rich.console import Console
from typer.testing import CliRunner

from edgespec.cli import app
from edgespec.cli.memory_options import MemoryOptions, tokenizer_identity
from edgespec.decoding import suffix_store
from edgespec.events import Round, Stats

PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"


@pytest.fixture()
def store(tmp_path, monkeypatch):
    """A memory directory (and a model cache) of this test's own."""
    monkeypatch.setenv("EDGESPEC_MEMORY_DIR", str(tmp_path / "memory"))
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return tmp_path / "memory"


@pytest.fixture()
def run():
    runner = CliRunner()

    def invoke(*args, input=None):
        return runner.invoke(app, [str(a) for a in args], input=input, catch_exceptions=False)

    return invoke


def generate(run, target, *extra, prompt=PROMPT, n=16):
    # --k 4: a fixed draft length, so that whether the memory drafts does not hang on the
    # learned policy's timings of a busy test machine
    return run("generate", "--target", target, "--draft", "ngram", "--k", 4, "--max-tokens", n, "--raw", *extra, prompt)


def show(run) -> list[dict]:
    r = run("memory", "show", "--json")
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)["stores"]


# -- --remember ------------------------------------------------------------------------------
def test_remember_saves_and_the_next_run_starts_warm(run, store, tiny_target):
    first = generate(run, tiny_target, "--remember", "--json")
    assert first.exit_code == 0, first.output
    (saved,) = show(run)
    assert saved["tokens"] > 0 and saved["models"] == ["target.gguf"] and saved["problem"] == ""
    assert saved["identity"] == tokenizer_identity(tiny_target) and saved["cap"] == 262144
    assert oct(store.joinpath(saved["path"]).stat().st_mode & 0o777) == "0o600"
    second = generate(run, tiny_target, "--remember", "--json")
    assert second.exit_code == 0, second.output
    assert f"memory: {saved['tokens']:,} tokens of earlier answers from" in second.stderr
    stats = json.loads(second.stdout)["stats"]
    assert stats["accepted_by_source"].get("memory", 0) > 0  # the same answer, drafted from the first
    assert json.loads(first.stdout)["token_ids"] == json.loads(second.stdout)["token_ids"]
    (again,) = show(run)
    assert again["tokens"] > saved["tokens"] and again["proposals"] > saved["proposals"]


def test_remember_saves_after_ctrl_c(run, store, tiny_target, monkeypatch):
    from edgespec.cli.readout import ReplyView

    real, seen = ReplyView.feed, []

    def feed(self, event):
        seen.append(event)
        if len(seen) == 12:
            raise KeyboardInterrupt
        real(self, event)

    monkeypatch.setattr(ReplyView, "feed", feed)
    r = generate(run, tiny_target, "--remember", n=32)
    assert r.exit_code == 130, r.output
    (saved,) = show(run)  # what the interrupted answer wrote is kept
    assert saved["tokens"] > 0 and "memory: saved" in r.stderr


def test_without_remember_nothing_is_written(run, store, tiny_target):
    assert generate(run, tiny_target).exit_code == 0
    assert not store.exists() or not list(store.iterdir())


def test_two_models_with_one_vocabulary_share_a_store(tiny_target, tiny_same, tiny_other_vocab, store):
    assert tokenizer_identity(tiny_target) == tokenizer_identity(tiny_same)
    assert tokenizer_identity(tiny_target) != tokenizer_identity(tiny_other_vocab)


def test_a_corrupt_store_is_one_warning_and_a_cold_start(run, store, tiny_target):
    path = suffix_store.store_path(tokenizer_identity(tiny_target))
    path.parent.mkdir(parents=True)
    path.write_bytes(b"ESSUFFIX" + b"\x02\x00\x00\x00" + b"\xff" * 100)
    r = generate(run, tiny_target, "--remember")
    assert r.exit_code == 0, r.output
    warning = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(warning) == 1 and str(path) in warning[0] and "starting cold" in warning[0]
    assert "Traceback" not in r.output
    (saved,) = show(run)  # and the run's memory replaced it
    assert saved["problem"] == "" and saved["tokens"] > 0


def test_remember_with_no_memory_is_refused(run, store, tiny_target):
    r = generate(run, tiny_target, "--remember", "--no-memory")
    assert r.exit_code == 2 and "--no-memory" in r.stderr


def test_no_memory_leaves_the_engine_without_one_and_the_cap_reaches_it(run, store, tiny_target, monkeypatch):
    import importlib

    gen = importlib.import_module("edgespec.cli.generate")  # the module (the package exports the function)
    engines = []
    real = gen.load_engine
    monkeypatch.setattr(gen, "load_engine", lambda *a, **k: engines.append(real(*a, **k)) or engines[-1])
    assert generate(run, tiny_target, "--no-memory", "--json").exit_code == 0
    assert generate(run, tiny_target, "--memory-cap", 500, "--json").exit_code == 0
    assert generate(run, tiny_target, "--json").exit_code == 0
    assert engines[0].memory is None
    assert engines[1].memory.cap == 500 and engines[2].memory.cap == suffix_store.DEFAULT_CAP


def test_the_plan_carries_the_memory_options(tiny_target):
    from edgespec.cli.plan_options import PlanOptions, make_plan
    from edgespec.planning import planner

    p = make_plan(MemoryOptions(memory=False, cap=99).apply(PlanOptions("cpu-small", target=str(tiny_target))))
    drafting = p.engine_kwargs()["drafting"]
    assert (drafting.memory, drafting.memory_cap) == (False, 99)
    assert planner.plan("cpu-small", target=str(tiny_target)).drafting.memory_cap == suffix_store.DEFAULT_CAP


def test_a_batch_remembers_and_its_lines_count_drafts_by_source(run, store, tiny_target, tmp_path):
    jobs = tmp_path / "in.jsonl"
    jobs.write_text("".join(json.dumps({"id": i, "prompt": PROMPT}) + "\n" for i in range(2)))
    out = tmp_path / "out.jsonl"
    r = run(
        "generate",
        "--target",
        tiny_target,
        "--draft",
        "ngram",
        "--k",
        4,
        "--max-tokens",
        16,
        "--raw",
        "--parallel",
        1,
        "--input",
        jobs,
        "--output",
        out,
        "--remember",
    )
    assert r.exit_code == 0, r.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert all({"drafted_by_source", "accepted_by_source"} <= set(x["stats"]) for x in lines)
    assert lines[1]["stats"]["accepted_by_source"].get("memory", 0) > 0  # the second drafts from the first
    assert "from earlier answers" in r.stderr  # the batch's line: where the kept drafts came from
    assert show(run)[0]["tokens"] > 0
    # --no-memory: nothing from earlier answers
    out2 = tmp_path / "out2.jsonl"
    r = run(
        "generate",
        "--target",
        tiny_target,
        "--draft",
        "ngram",
        "--max-tokens",
        16,
        "--raw",
        "--parallel",
        1,
        "--input",
        jobs,
        "--output",
        out2,
        "--no-memory",
    )
    assert r.exit_code == 0, r.output
    assert all("memory" not in json.loads(x)["stats"]["accepted_by_source"] for x in out2.read_text().splitlines())


def test_chat_remembers_its_answers(run, store, tiny_target):
    r = run(
        "chat",
        "--target",
        tiny_target,
        "--draft",
        "ngram",
        "--max-tokens",
        12,
        "--temperature",
        0,
        "--remember",
        input="hello there\n/quit\n",
    )
    assert r.exit_code == 0, r.output
    (saved,) = show(run)
    assert saved["tokens"] > 0 and "memory: saved" in r.stderr


def test_bench_takes_the_memory_options_and_measures_each_configuration_cold(run, store, tiny_target, tmp_path):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text(json.dumps({"id": "a", "prompt": PROMPT}) + "\n")
    base = (
        "bench",
        "--profile",
        "cpu-small",
        "--target",
        tiny_target,
        "-d",
        "ngram",
        "--k-grid",
        2,
        "--input",
        prompts,
        "--max-tokens",
        6,
        "--threads",
        1,
        "--json",
        "--quiet",
    )
    r = run(*base, "--memory-cap", 4000)
    assert r.exit_code == 0, r.output
    assert show(run) == []  # a measurement is not remembered
    assert run(*base, "--no-memory").exit_code == 0
    assert run(*base, "--remember").exit_code == 2  # (not an option of bench)


# -- memory show / clear -----------------------------------------------------------------------
def test_memory_show_and_clear(run, store, tiny_target, tiny_other_vocab):
    assert "no memory saved in" in run("memory", "show").stdout
    assert generate(run, tiny_target, "--remember").exit_code == 0
    r = run(
        "generate", "--target", tiny_other_vocab, "--draft", "ngram", "--max-tokens", 8, "--remember", "--raw", "hello"
    )
    assert r.exit_code == 0, r.output
    table = run("memory", "show")
    assert table.exit_code == 0 and "target.gguf" in table.stdout and "other_vocab.gguf" in table.stdout
    rows = show(run)
    assert len(rows) == 2 and all(0 <= row["hit_rate"] <= 1 and 0 <= row["kept"] <= 1 for row in rows)
    assert all(row["saved_at"].endswith("Z") and row["file_bytes"] > 0 for row in rows)
    # one model's, by the name it was saved by
    r = run("memory", "clear", "--model", "target")
    assert r.exit_code == 0 and r.stdout.startswith("removed ") and "tokens)" in r.stdout
    assert [row["models"] for row in show(run)] == [["other_vocab.gguf"]]
    # by a path to a model of the same tokenizer
    r = run("memory", "clear", "--model", tiny_other_vocab)
    assert r.exit_code == 0 and "removed " in r.stdout and show(run) == []
    r = run("memory", "clear")
    assert r.exit_code == 0 and "nothing to remove" in r.stderr


def test_memory_clear_lists_an_unusable_file_and_removes_it(run, store):
    store.mkdir()
    (store / "junk.essuffix").write_bytes(b"junk")
    (row,) = show(run)
    assert "no magic" in row["problem"]
    assert "unusable" in run("memory", "show").stdout
    r = run("memory", "clear", "--yes")
    assert r.exit_code == 0 and "junk.essuffix" in r.stdout
    # the store is gone; its lock file stays, holding the generation a running save checks
    assert [p.name for p in store.iterdir()] == ["junk.essuffix.lock"]


def test_a_memory_cap_beyond_the_store_is_refused_where_it_is_parsed(run, store, tiny_target):
    """Issue 34 item 9: an OverflowError traceback at save, and the memory lost, before."""
    r = generate(run, tiny_target, "--memory-cap", "10000000000000000000", "--remember")
    assert r.exit_code == 2 and "--memory-cap" in r.stderr and not store.exists()


def test_clearing_a_model_that_has_no_store_exits_1(run, store, tiny_target):
    """Issue 34 item 15: exit 0 before, as if something had been removed."""
    assert generate(run, tiny_target, "--remember").exit_code == 0
    r = run("memory", "clear", "--model", "nosuchmodel")
    assert r.exit_code == 1 and "nothing to remove" in r.stderr and "nosuchmodel" in r.stderr
    assert len(show(run)) == 1


def _hostile(kind: str, folder, path):
    if kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "folder at the store":
        path.mkdir()
    elif kind == "newer file":
        path.write_bytes(suffix_store._HEAD.pack(suffix_store.MAGIC, 99, 2, 0, bytes(32)) + b"{}")
        os.chmod(path, 0o600)
    elif kind == "folder others may write":
        os.chmod(folder, 0o777)


@pytest.mark.parametrize(
    "kind, why",
    [
        ("fifo", "is a FIFO"),
        ("folder at the store", "is a folder"),
        ("newer file", "newer edgespec"),
        ("folder others may write", "writable by others"),
        ("memory dir is a file", "is a file, not a folder"),
    ],
)
def test_remember_survives_a_hostile_folder_with_one_line(tmp_path, tiny_target, kind, why):
    """Issue 34 "done when": each is one warning line naming the path, the run answers,
    and nothing hangs (a subprocess with a timeout: a FIFO hung it before)."""
    folder = tmp_path / "memory"
    if kind == "memory dir is a file":
        folder.write_text("x")
    else:
        folder.mkdir(mode=0o700)
        _hostile(kind, folder, suffix_store.store_path(tokenizer_identity(tiny_target), folder))
    env = {
        **os.environ,
        "EDGESPEC_MEMORY_DIR": str(folder),
        "EDGESPEC_CACHE": str(tmp_path / "cache"),
        "HF_HUB_OFFLINE": "1",
    }
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgespec",
            "generate",
            "--target",
            str(tiny_target),
            "--draft",
            "ngram",
            "--k",
            "4",
            "--max-tokens",
            "8",
            "--raw",
            "--remember",
            PROMPT,
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=180,
        stdin=subprocess.DEVNULL,
    )
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and r.stdout.strip()
    lines = [line for line in r.stderr.splitlines() if "warning" in line]
    assert len(lines) == 1 and why in lines[0] and str(folder) in lines[0], r.stderr


# -- where the accepted drafts came from -------------------------------------------------------
def test_the_summary_says_where_the_kept_drafts_came_from():
    from edgespec.cli.readout import Readout
    from edgespec.cli.speedup import sources_part

    assert (
        sources_part({"prompt": 10, "memory": 25, "grammar": 5})
        == "kept 40 drafted tokens: 25 from earlier answers, 10 from the prompt, 5 from the grammar"
    )
    assert sources_part({"prompt": 3, "memory": 0}) == "kept 3 drafted tokens, all from the prompt"
    assert sources_part({}) == "" and sources_part({"memory": 4}, live=True) == "kept 4 earlier answers"
    st = Stats(
        drafter="ngram",
        rounds=10,
        drafted=50,
        accepted=40,
        generated_tokens=50,
        t_generate=1.0,
        k_final=8,
        forced=5,
        forced_accepted=5,
    )
    st.drafted_by_position = [10]
    st.accepted_by_source = {"prompt": 10, "memory": 25, "grammar": 5}
    line = Readout(Console(file=io.StringIO()), err_console=Console(file=io.StringIO())).summary(st, "stop")
    assert "kept 40 drafted tokens: 25 from earlier answers, 10 from the prompt, 5 from the grammar" in line
    assert "forced 5 of" not in line  # said once, as the grammar's share


def test_the_live_status_line_shows_the_sources_once_the_memory_helps():
    from edgespec.cli.readout import Readout

    readout = Readout(
        Console(file=io.StringIO(), force_terminal=True, width=200), err_console=Console(file=io.StringIO())
    )
    with readout.reply() as reply:
        reply.feed(Round(index=1, drafted=4, accepted=3, rejected=1, k=8, drafter="ngram", source="prompt"))
        assert "kept" not in reply._status().plain  # the drafter's own alone: nothing to tell apart
        reply.feed(Round(index=2, drafted=6, accepted=6, rejected=0, k=8, drafter="ngram", source="memory"))
        reply.feed(Round(index=3, drafted=3, accepted=2, rejected=1, k=8, drafter="ngram", forced=2))
        assert "kept 6 earlier answers, 3 prompt, 2 grammar" in reply._status().plain
