"""``edgespec chat`` driven through a real terminal (pexpect): turns, cache reuse across
turns, Ctrl-C during a reply and at the prompt, slash commands, a context that fills up,
clean exits."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

pexpect = pytest.importorskip("pexpect")

PROMPT = "you›"
SUMMARY = re.compile(r"prompt ([\d,]+) new of ([\d,]+) · (\w+)")


def cli_command() -> list[str]:
    """How a user runs the CLI: ``python -m edgespec``."""
    return [sys.executable, "-m", "edgespec"]


def spawn_chat(tmp_path, *args, timeout=120):
    cmd = cli_command() + ["chat", *map(str, args)]
    env = dict(os.environ, TERM="xterm-256color", XDG_STATE_HOME=str(tmp_path / "state"), PYTHONUNBUFFERED="1")
    child = pexpect.spawn(cmd[0], cmd[1:], env=env, encoding="utf-8", timeout=timeout, dimensions=(40, 120))
    child.expect_exact(PROMPT)
    return child


def say(child, text):
    """Send one message; return (prompt tokens processed, prompt tokens, finish reason)."""
    child.sendline(text)
    child.expect(SUMMARY)
    new, total, finish = child.match.groups()
    child.expect_exact(PROMPT)
    return int(new.replace(",", "")), int(total.replace(",", "")), finish


def finish_with_ctrl_d(child):
    # a Ctrl-D that arrives while the terminal is still in cooked mode, before the input
    # line takes it over, is read by the line discipline and lost (a race that a loaded
    # machine widens: CI once waited 120 s): press it again, as a user would
    for _ in range(6):
        child.sendeof()
        if child.expect([pexpect.EOF, pexpect.TIMEOUT], timeout=20) == 0:
            break
    else:
        raise AssertionError("chat did not end on Ctrl-D:\n" + str(child.before))
    child.close()
    assert child.exitstatus == 0, child.before


@pytest.mark.integration
def test_real_model_two_turns_reuse_the_cache_and_ctrl_c_keeps_the_session(tmp_path):
    from edgespec.catalog import resolve_model

    model = resolve_model("qwen2.5-coder-0.5b")
    child = spawn_chat(
        tmp_path, "--target", model, "--draft", "ngram", "--temperature", "0", "--max-tokens", "80", timeout=300
    )
    try:
        new1, total1, _ = say(child, "What is the capital of France? Answer in one short sentence.")
        assert new1 == total1  # a fresh conversation decodes its whole prompt
        new2, total2, _ = say(child, "And of Italy? One short sentence.")
        # The second turn decodes only what is new: the whole first exchange is reused.
        assert total2 > total1
        assert total2 - new2 >= total1, (new2, total2, total1)

        # Ctrl-C in the middle of a reply stops the reply and keeps the session.
        child.sendline("Write a long story about a robot who learns to paint. At least 400 words.")
        child.expect("tok/s")  # the live status line: the reply is streaming
        child.sendintr()
        child.expect("interrupted after ([\\d,]+) tokens")
        child.expect_exact(PROMPT)

        child.sendline("/stats")
        child.expect(r"conversation [\d,]+ of [\d,]+ tokens")
        child.expect("interrupted")  # the stopped turn is in the table
        child.expect_exact(PROMPT)

        # The conversation goes on, still reusing the cache after the interruption.
        new4, total4, finish4 = say(child, "Thanks! Reply with just the word: done")
        assert total4 - new4 > total2
        finish_with_ctrl_d(child)
    finally:
        child.close(force=True)


def test_slash_commands(tmp_path, tiny_target):
    child = spawn_chat(
        tmp_path, "--target", tiny_target, "--draft", "ngram", "--temperature", "0", "--max-tokens", "12"
    )
    try:
        child.sendline("/help")
        child.expect_exact("/draft off|ngram|model|PATH")
        child.expect_exact(PROMPT)
        child.sendline("/stats")
        child.expect_exact("no replies yet")
        child.expect_exact(PROMPT)

        new1, total1, _ = say(child, "hello world")
        new2, total2, _ = say(child, "the quick brown fox")
        assert total2 - new2 >= total1

        child.sendline("/k 3")
        child.expect_exact("k = 3")
        child.sendline("/k many")
        child.expect_exact("/k needs a whole number")
        child.sendline("/draft off")
        child.expect_exact("drafter: none")
        child.sendline("/draft model")
        child.expect("error: .*draft model")  # none was loaded: an error, not a crash
        child.sendline("/draft ngram")
        child.expect_exact("drafter: ngram")
        child.sendline("/bogus")
        child.expect_exact("unknown command /bogus")
        child.sendline("/system You answer briefly.")
        child.expect_exact("system prompt set; the history will be re-read once")
        child.expect_exact(PROMPT)

        say(child, "and the lazy dog")
        saved = tmp_path / "conv.json"
        child.sendline(f"/save {saved}")
        child.expect_exact("saved 7 messages")
        data = json.loads(saved.read_text())
        assert [m["role"] for m in data["messages"]] == ["system"] + ["user", "assistant"] * 3
        assert data["messages"][0]["content"] == "You answer briefly."
        assert data["messages"][1]["content"] == "hello world"
        assert len(data["turns"]) == 3 and data["turns"][0]["prompt_tokens"] == total1

        child.sendline("/reset")
        child.expect_exact("conversation cleared")
        child.expect_exact(PROMPT)
        new, total, _ = say(child, "hello again")
        assert new == total or new <= 2  # the cache was cleared; only a BOS could be shared

        child.sendline("/quit")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
    finally:
        child.close(force=True)


def test_multi_line_message(tmp_path, tiny_target):
    child = spawn_chat(tmp_path, "--target", tiny_target, "--temperature", "0", "--max-tokens", "4")
    try:
        child.sendline('"""')
        child.sendline("line one")
        child.sendline("line two")
        child.sendline('"""')
        child.expect(SUMMARY)
        child.expect_exact(PROMPT)
        saved = tmp_path / "c.json"
        child.sendline(f"/save {saved}")
        child.expect_exact("saved")
        assert json.loads(saved.read_text())["messages"][0]["content"] == "line one\nline two"
        finish_with_ctrl_d(child)
    finally:
        child.close(force=True)


def test_full_context_drops_old_turns_and_a_message_too_long_is_refused(tmp_path, tiny_target):
    child = spawn_chat(tmp_path, "--target", tiny_target, "--temperature", "0", "--max-tokens", "16", "--n-ctx", "128")
    try:
        dropped = False
        for i in range(8):
            child.sendline(f"message number {i}: the quick brown fox jumps over the lazy dog")
            i_sum = child.expect([SUMMARY, "dropped the \\d+ oldest message"])
            if i_sum == 1:
                dropped = True
                child.expect(SUMMARY)
            child.expect_exact(PROMPT)
        assert dropped
        child.sendline("word " * 200)
        child.expect("does not fit")
        child.expect_exact(PROMPT)
        say(child, "still here?")  # the session goes on
        finish_with_ctrl_d(child)
    finally:
        child.close(force=True)


def test_ctrl_c_at_the_prompt_clears_the_line_and_ctrl_d_or_quit_leaves(tmp_path, tiny_target):
    child = spawn_chat(tmp_path, "--target", tiny_target, "--max-tokens", "4")
    try:
        child.sendintr()  # at an empty prompt: the session goes on
        child.expect_exact("(/quit or Ctrl-D leaves)")
        child.expect_exact(PROMPT)
        child.send("/bogus half typed")  # a line being typed ...
        child.expect_exact("half typed")  # (echoed: readline has it)
        child.sendintr()  # ... is dropped, not sent
        child.expect_exact(PROMPT)
        child.sendline("/stats")
        # had the half-typed line stayed, this would be "/bogus half typed/stats"
        assert child.expect_exact(["no replies yet", "unknown command"]) == 0
        child.expect_exact(PROMPT)
        finish_with_ctrl_d(child)
        assert "Traceback" not in child.before
    finally:
        child.close(force=True)
    child = spawn_chat(tmp_path, "--target", tiny_target, "--max-tokens", "4")
    try:
        child.sendintr()
        child.expect_exact(PROMPT)
        child.sendline("/quit")
        child.expect(pexpect.EOF)
        child.close()
        assert child.exitstatus == 0
    finally:
        child.close(force=True)


def test_a_message_that_is_not_utf8_is_an_error_and_the_session_goes_on(tmp_path, tiny_target):
    # piped: a terminal's readline does not pass undecodable bytes through as they are
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    r = subprocess.run(
        cli_command() + ["chat", "--target", str(tiny_target), "--max-tokens", "4"],
        input="café au lait\n/stats\n".encode("latin-1"),
        capture_output=True,
        env=env,
        timeout=120,
    )
    err, out = r.stderr.decode("utf-8", "replace"), r.stdout.decode("utf-8", "replace")
    assert r.returncode == 0, err
    assert "error: the message is not UTF-8 text (byte 0xe9 at character 3)" in err
    assert "no replies yet" in out and "Traceback" not in err


def test_the_banner_and_stats_show_the_policy_s_bound_not_a_fixed_k(tmp_path, tiny_target):
    # issue 22 item 11: prompt lookup under the learned policy showed "k 1" (the plan's
    # fixed k, unused) while rounds could draft up to 15
    child = spawn_chat(tmp_path, "--target", tiny_target, "--draft", "ngram", "--temperature", "0", "--max-tokens", "8")
    try:
        assert "drafter ngram · k auto (≤15)" in child.before
        child.sendline("/k 4")
        child.expect_exact("k = 4")
        child.expect_exact(PROMPT)
        child.sendline("/stats")
        child.expect_exact("drafter ngram · k 4 ·")
        child.expect_exact(PROMPT)
        finish_with_ctrl_d(child)
    finally:
        child.close(force=True)


def _message_of(tiny_target, n_ctx, low, high, system=None):
    """A message whose prompt (with ``system``) is between ``low`` and ``high`` tokens."""
    from edgespec import Engine

    with Engine(tiny_target, draft=None, n_ctx=n_ctx, n_threads=1) as e:
        for words in range(1, 400):
            text = " ".join(["word"] * words)  # as the REPL sends it: stripped
            msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
            if low <= len(e.prompt_tokens(msgs)) <= high:
                return text
    raise AssertionError("no message of that size")


def test_a_system_prompt_too_long_is_refused_and_the_conversation_is_kept(tmp_path, tiny_target):
    """Before: /system took a prompt longer than the context; the next turn dropped the
    whole conversation and then failed anyway, blaming the user's message."""
    child = spawn_chat(tmp_path, "--target", tiny_target, "--temperature", "0", "--max-tokens", "20", "--n-ctx", "256")
    saved = tmp_path / "conv.json"
    try:
        say(child, "hello world")
        say(child, "the quick brown fox")
        child.sendline("/system " + "word " * 400)
        child.expect(
            r"error: the system prompt is [\d,]+ tokens: with 20 kept for a reply it does not fit the "
            r"context of 256 tokens"
        )
        child.expect_exact("there is still no system prompt")
        child.expect_exact(PROMPT)
        i = child.expect([SUMMARY, "dropped the"], timeout=60) if child.sendline("and the lazy dog") else None
        assert i == 0, "history was dropped"
        child.expect_exact(PROMPT)
        child.sendline("/stats")
        child.expect(r"conversation ([\d,]+) of 256 tokens")
        assert int(child.match.group(1).replace(",", "")) > 0
        child.expect_exact(PROMPT)
        child.sendline(f"/save {saved}")
        child.expect_exact("saved 6 messages")
        child.expect_exact(PROMPT)

        # a message that fits only without the history: refused, nothing dropped
        child.sendline(_message_of(tiny_target, 256, 256 - 20 + 1, 255))
        child.expect("even without the earlier conversation the context \\(256\\) would keep only")
        child.expect_exact("the conversation is kept as it was")
        child.expect_exact(PROMPT)
        # one that does not fit at all: the same
        child.sendline("word " * 200)
        child.expect("so even without the earlier conversation no reply would fit")
        child.expect_exact(PROMPT)
        child.sendline(f"/save! {saved}")
        child.expect_exact("saved 6 messages")
        child.expect_exact(PROMPT)
        messages = json.loads(saved.read_text())["messages"]
        assert [m["content"] for m in messages[::2]] == ["hello world", "the quick brown fox", "and the lazy dog"]

        # a system prompt that fits is taken; a later one too long keeps it
        child.sendline("/system You answer briefly.")
        child.expect_exact("system prompt set")
        child.sendline("/system " + "word " * 400)
        child.expect_exact("the system prompt stays as it was")
        child.sendline("/system")
        child.expect_exact("system prompt: 'You answer briefly.'")
        finish_with_ctrl_d(child)
    finally:
        child.close(force=True)


def test_a_system_prompt_too_long_at_start_is_an_error(tmp_path, tiny_target):
    env = dict(os.environ, XDG_STATE_HOME=str(tmp_path / "state"))
    r = subprocess.run(
        cli_command() + ["chat", "--target", str(tiny_target), "--n-ctx", "256", "-n", "20", "--system", "word " * 400],
        input="hello\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert r.returncode == 5 and "Traceback" not in r.stderr, r.stderr
    assert "error: the system prompt is" in r.stderr and "does not fit the context of 256 tokens" in r.stderr


def test_save_refuses_an_existing_file_and_save_bang_replaces_it_whole(tmp_path, tiny_target):
    """Before: /save overwrote an existing file without asking, in place."""
    child = spawn_chat(tmp_path, "--target", tiny_target, "--temperature", "0", "--max-tokens", "4")
    out = tmp_path / "out"
    out.mkdir()
    saved = out / "conv.json"
    saved.write_text("precious\n")
    inode = saved.stat().st_ino
    try:
        say(child, "hello world")
        child.sendline(f"/save {saved}")
        child.expect_exact(f"exists; /save! {saved} replaces it")
        child.expect_exact(PROMPT)
        assert saved.read_text() == "precious\n"
        child.sendline(f"/save {out}")
        child.expect_exact("is a folder")
        child.expect_exact(PROMPT)
        child.sendline(f"/save! {saved}")
        child.expect_exact("saved 2 messages")
        child.expect_exact(PROMPT)
        assert json.loads(saved.read_text())["messages"][0]["content"] == "hello world"
        assert saved.stat().st_ino != inode  # written beside it and renamed over it, not rewritten in place
        assert sorted(p.name for p in out.iterdir()) == ["conv.json"]  # no temporary file left
        child.sendline(f"/save {out / 'new.json'}")  # a new file needs no !
        child.expect_exact("saved 2 messages")
        child.sendline(f"/save {tmp_path / 'no' / 'such' / 'dir.json'}")
        child.expect_exact("cannot write")
        child.expect_exact(PROMPT)
        finish_with_ctrl_d(child)
    finally:
        child.close(force=True)
