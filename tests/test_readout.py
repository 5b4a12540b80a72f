"""The live readout rendered into recorded Rich consoles, from hand-made event streams."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

from edgespec.cli.readout import STYLE_DRAFT, STYLE_REJECTED, Readout, SpeedupEstimate
from edgespec.events import Done, Round, Stats, Token

ESC = "\x1b"


def fake_stream(rounds, drafter="ngram", k=4, finish="stop"):
    """Events for rounds given as (accepted draft pieces, target piece, rejected text)."""
    events, ids, text = [], [], ""
    stats = Stats(drafter=drafter, prompt_tokens=20, prompt_tokens_processed=7)
    tid = 100
    for i, (accepted, own, rejected) in enumerate(rounds):
        for piece in accepted:
            events.append(Token(id=tid, text=piece, from_draft=True, round=i))
            ids.append(tid)
            text += piece
            tid += 1
        events.append(Token(id=tid, text=own, from_draft=False, round=i))
        ids.append(tid)
        text += own
        tid += 1
        n_rej = len(rejected.split()) if rejected else 0
        drafted = len(accepted) + n_rej
        events.append(
            Round(
                index=i,
                drafted=drafted,
                accepted=len(accepted),
                rejected=n_rej,
                k=k,
                drafter=drafter,
                rejected_ids=tuple(range(n_rej)),
                rejected_text=rejected,
            )
        )
        stats.rounds += 1
        stats.drafted += drafted
        stats.accepted += len(accepted)
        stats.rejected += n_rej
    stats.generated_tokens = len(ids)
    stats.t_generate = 0.5
    stats.k_final = k
    events.append(Done(finish_reason=finish, stats=stats, text=text, token_ids=tuple(ids)))
    return events, text


ROUNDS = [
    (["def", " add"], "(", " foo bar"),
    ([], "a", ""),
    ([", b"], ")", "):"),
    ([":\n", "    return"], " a", ""),
    ([" +", " b", "\n"], "", ""),
]


def tty_console(width=100):
    return Console(
        file=io.StringIO(),
        force_terminal=True,
        color_system="standard",
        width=width,
        height=30,
        record=True,
        highlight=False,
        legacy_windows=False,
    )


def sgr_before(ansi: str, piece: str) -> str:
    """The SGR escape sequence(s) in effect right before ``piece`` in ANSI output."""
    i = ansi.index(piece)
    codes = re.findall(r"\x1b\[([0-9;]*)m", ansi[:i])
    return codes[-1] if codes else ""


def test_live_view_styles_accepted_drafts_differently_from_target_tokens():
    out, err = tty_console(), tty_console()
    readout = Readout(out, err_console=err)
    assert readout.live
    events, text = fake_stream(ROUNDS)
    reply = readout.show(events)
    assert reply.text == text
    assert reply.done is not None and reply.done.finish_reason == "stop"

    ansi = out.export_text(styles=True, clear=False)
    green = str(STYLE_DRAFT.color.number + 30)  # SGR foreground code of the draft colour
    assert sgr_before(ansi, "def") == green, ansi
    assert sgr_before(ansi, "    return") == green
    # The target's own tokens are in the default colour: a reset precedes them.
    assert sgr_before(ansi, "(a") in ("0", "")
    # Rejected drafts are not shown without show_rejected.
    assert "foo bar" not in out.export_text(clear=False)

    plain = err.export_text(clear=False)
    assert "accepted" in plain and "stop" in plain  # the one-line summary


def test_show_rejected_strikes_through_rejected_drafts_in_place():
    out, err = tty_console(), tty_console()
    readout = Readout(out, err_console=err, show_rejected=True)
    events, text = fake_stream(ROUNDS)
    reply = readout.show(events)
    assert reply.text == text  # rejected text is never part of the answer
    ansi = out.export_text(styles=True, clear=False)
    final_line = out.export_text(clear=False).splitlines()
    # Shown between the accepted drafts and the target's correction of that round.
    assert any("def add foo bar(" in line for line in final_line), final_line
    codes = sgr_before(ansi, " foo bar").split(";")
    assert "9" in codes  # strike-through
    assert str(STYLE_REJECTED.color.number + 30) in codes
    assert "):" in out.export_text(clear=False)  # the rejected text of round 2
    assert "legend" in readout.legend().plain and "rejected" in readout.legend().plain


def test_long_output_commits_lines_above_the_live_region():
    out, err = tty_console(width=40), tty_console()
    rounds = [([f"line {i}\n"], f"more {i}\n", "") for i in range(60)]
    events, text = fake_stream(rounds)
    reply = Readout(out, err_console=err).show(events)
    assert reply.text == text
    screen = out.export_text(clear=False)
    for i in range(60):
        assert f"line {i}" in screen and f"more {i}" in screen


def test_non_terminal_output_is_plain_text_without_escape_codes():
    out_file, err_file = io.StringIO(), io.StringIO()
    out = Console(file=out_file, highlight=False)
    err = Console(file=err_file, highlight=False)
    assert not out.is_terminal
    readout = Readout(out, err_console=err, show_rejected=True)
    assert not readout.live
    readout.print_legend()
    events, text = fake_stream(ROUNDS)
    readout.show(events)
    assert out_file.getvalue() == text + "\n" if not text.endswith("\n") else out_file.getvalue() == text
    assert ESC not in out_file.getvalue()
    assert ESC not in err_file.getvalue()
    assert "foo bar" not in out_file.getvalue()
    assert "tokens" in err_file.getvalue()  # the stats went to stderr


def test_plain_output_is_flushed_token_by_token():
    class Recorder(io.StringIO):
        flushes = 0

        def flush(self):
            Recorder.flushes += 1

    f = Recorder()
    readout = Readout(Console(file=f), err_console=Console(file=io.StringIO()))
    with readout.reply() as r:
        r.feed(Token(id=1, text="Hel", from_draft=False, round=0))
        assert f.getvalue() == "Hel"
        r.feed(Token(id=2, text="lo", from_draft=True, round=1))
        assert f.getvalue() == "Hello"
    assert Recorder.flushes >= 2


def test_interrupted_reply_keeps_its_text_and_says_so():
    out, err = tty_console(), tty_console()
    readout = Readout(out, err_console=err)
    events, _ = fake_stream(ROUNDS)
    with pytest.raises(KeyboardInterrupt):
        with readout.reply() as r:
            for ev in events[:6]:
                r.feed(ev)
            raise KeyboardInterrupt
    assert r.done is None and r.interrupted
    assert r.text.startswith("def add(")
    assert "interrupted after" in err.export_text(clear=False)


def test_done_text_not_streamed_is_still_shown():
    out = Console(file=io.StringIO())
    readout = Readout(out, err_console=Console(file=io.StringIO()))
    stats = Stats(drafter="none", generated_tokens=2, rounds=2)
    with readout.reply() as r:
        r.feed(Token(id=1, text="ab", from_draft=False, round=0))
        r.feed(Done(finish_reason="length", stats=stats, text="abc", token_ids=(1, 2)))
    assert r.text == "abc"
    assert out.file.getvalue() == "abc\n"


def test_speedup_is_measured_from_plain_rounds_or_shown_as_a_bound():
    est = SpeedupEstimate(min_samples=3)
    assert est.format(50.0, 2.5) == "≤2.5× vs plain"  # nothing measured: an upper bound
    for t in (0.05, 0.05, 0.06, 0.05):
        est.add_plain_round(t)
    value, measured = est.speedup(30.0, 2.5)
    assert measured and value == pytest.approx(30.0 * 0.05)
    assert est.format(30.0, 2.5) == "~1.50× vs plain"


def test_plain_rounds_in_a_stream_feed_the_estimate(monkeypatch):
    import edgespec.cli.readout as ro

    clock = iter(i * 0.1 for i in range(1000))
    monkeypatch.setattr(ro.time, "perf_counter", lambda: next(clock))
    readout = Readout(Console(file=io.StringIO()), err_console=Console(file=io.StringIO()))
    rounds = [([], "x", "")] * 6  # drafter proposed nothing: plain steps
    events, _ = fake_stream(rounds)
    readout.show(events)
    assert readout.speed.t_plain is not None and readout.speed.t_plain > 0


def test_empty_rounds_of_a_draft_model_are_not_taken_as_plain_steps():
    # A draft model that proposed nothing may still have run a decode to decide so.
    readout = Readout(Console(file=io.StringIO()), err_console=Console(file=io.StringIO()))
    events, _ = fake_stream([([], "x", "")] * 6, drafter="model")
    readout.show(events)
    assert readout.speed.t_plain is None


def _stats(rounds: int, drafting: int, drafted: int, accepted: int, tokens: int, seconds: float) -> Stats:
    st = Stats(
        drafter="ngram",
        rounds=rounds,
        drafted=drafted,
        accepted=accepted,
        generated_tokens=tokens,
        t_generate=seconds,
        k_final=15,
        prompt_tokens=10,
        prompt_tokens_processed=10,
    )
    st.drafted_by_position = [drafting] if drafting else []
    return st


def test_nothing_drafted_is_plain_decoding_not_a_loss():
    # issue 22 item 12: "nothing drafted · ~0.92× vs plain" on the README's quick start:
    # the mean round against the median plain step measured only the estimate's error
    readout = Readout(Console(file=io.StringIO()), err_console=Console(file=io.StringIO()))
    for t in (0.07, 0.07, 0.07):
        readout.speed.add_plain_round(t)
    line = readout.summary(_stats(127, 0, 0, 0, 127, 127 * 0.076), "length")
    assert "nothing drafted: plain decoding" in line and "×" not in line
    # almost nothing (2 of 127 rounds): said so, and no ratio either
    line = readout.summary(_stats(127, 2, 6, 3, 130, 130 * 0.076), "length")
    assert "drafted in 2 of 127 rounds: about plain decoding" in line and "×" not in line
    # where drafting ran, the estimate and the length actually drafted (k) are shown
    line = readout.summary(_stats(100, 40, 160, 120, 220, 100 * 0.08), "stop")
    assert "~1.93× vs plain" in line and "k 4.0 avg (≤15)" in line and "rounds" not in line


def test_forced_tokens_are_drafts_in_the_summary_as_in_json():
    """issue 28 item 7: "nothing drafted: plain decoding · forced 18" while --json had 18
    drafted and 18 accepted in 6 rounds. The grammar's drafts count as drafts."""
    readout = Readout(Console(file=io.StringIO()), err_console=Console(file=io.StringIO()))
    st = _stats(6, 6, 18, 18, 24, 0.5)
    st.forced = st.forced_accepted = 18
    line = readout.summary(st, "stop")
    assert "nothing drafted" not in line and "plain decoding" not in line
    assert f"accepted {st.accepted}/{st.drafted}" in line and "forced 18 of the 18 accepted" in line
    assert "k 3.0 avg" in line and "3.00 accepted/round" in line


def test_the_status_line_shows_the_length_drafted_and_no_ratio_without_drafts(monkeypatch):
    import edgespec.cli.readout as ro

    clock = iter(i * 0.1 for i in range(1000))
    monkeypatch.setattr(ro.time, "perf_counter", lambda: next(clock))
    readout = Readout(tty_console(), err_console=Console(file=io.StringIO()))
    for t in (0.1, 0.1, 0.1):
        readout.speed.add_plain_round(t)
    events, _ = fake_stream([([], "x", "")] * 6, k=15)
    with readout.reply() as reply:
        for ev in events[:-1]:
            reply.feed(ev)
        status = reply._status().plain
    assert "nothing drafted yet" in status and "×" not in status
    events, _ = fake_stream([(["a", "b"], "c", "d e")] * 4, k=15)
    with readout.reply() as reply:
        for ev in events[:-1]:
            reply.feed(ev)
        status = reply._status().plain
    assert "k 4.0 (≤15)" in status and "× vs plain" in status


def test_k_label_names_the_policy_s_bound_or_the_fixed_k():
    assert Readout.k_label(True, 1, 15) == "k auto (≤15)"
    assert Readout.k_label(False, 4, 15) == "k 4"
