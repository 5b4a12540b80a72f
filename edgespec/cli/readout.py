"""The terminal view of a generation: text as it is committed, and how speculation went.

It consumes the event stream of ``Engine.stream()`` (``Token`` / ``Round`` / ``Done`` from
``edgespec.events``) and knows nothing of models, drafters or caches.

On a terminal it runs a Rich ``Live`` region: tokens the target accepted from the
drafter are green, tokens the grammar forced (structured output) cyan, tokens the
target produced itself are in the terminal's default colour, and with ``show_rejected``
the rejected draft text of each round is shown struck
through where it was proposed (between the accepted drafts and the target's correction).
Completed lines are printed above the live region, which holds only the line being
written and a status line (acceptance rate, mean accepted length, current k, tokens/s,
estimated speedup, and where the accepted drafts came from once more than the drafter's
own did: earlier answers, the prompt, the grammar). After each reply a one-line summary
goes to stderr, saying the same ("kept 40 drafted tokens: 25 from earlier answers, 10
from the prompt, 5 from the grammar").

Anywhere else (a pipe, a file, ``TERM=dumb``) the text goes to the output as plain
characters, flushed per token, and the summary to stderr; no escape codes.

The speedup estimate and the drafting figures in words are ``edgespec.cli.speedup``'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import IO, Iterable

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.style import Style
from rich.text import Text

from edgespec.cli.speedup import (
    PLAIN_STEP_DRAFTERS,
    SpeedupEstimate,
    drafting_parts,
    forced_part,
    sources_part,
)
from edgespec.cli.speedup import (
    num as _num,
)
from edgespec.events import Done, Round, Stats, Token

STYLE_DRAFT = Style(color="green")
"""Tokens the drafter proposed and the target accepted."""
STYLE_TARGET = Style()
"""Tokens the target produced itself (bonus tokens and corrections): the default colour."""
STYLE_REJECTED = Style(color="red", strike=True, dim=True)
"""Draft tokens the target rejected (only with show_rejected; never part of the answer)."""
STYLE_FORCED = Style(color="cyan")
"""Tokens the grammar forced (structured output), drafted for free and accepted."""
STYLE_STATUS = Style(dim=True)


def k_label(adaptive: bool, k: int, k_max: int) -> str:
    """An engine's draft length setting: the policy's bound, or the fixed k."""
    return f"k auto (≤{k_max})" if adaptive else f"k {k}"


@dataclass
class _Counters:
    """Running counters of the reply being shown (for the status line)."""

    rounds: int = 0
    drafting: int = 0  # rounds that drafted
    drafted: int = 0
    accepted: int = 0
    forced: int = 0
    tokens: int = 0
    k: int = 0
    drafter: str = ""
    t_first_round: float | None = None
    tokens_at_first_round: int = 0
    t_last_round: float | None = None
    kept: dict[str, int] = field(default_factory=dict)  # accepted drafts by source

    def tokens_per_second(self, now: float) -> float:
        if self.t_first_round is None or now <= self.t_first_round:
            return 0.0
        return (self.tokens - self.tokens_at_first_round) / (now - self.t_first_round)


class Readout:
    """Shows replies on a console; keeps what it learned about speed across replies.

    ``console`` is where the text goes (stdout by default), ``err_console`` where the
    summaries go (stderr by default). ``live=None`` decides from the console: a live view
    on a real terminal, plain text otherwise.
    """

    def __init__(
        self,
        console: Console | None = None,
        *,
        err_console: Console | None = None,
        show_rejected: bool = False,
        show_forced: bool = False,
        live: bool | None = None,
        refresh_per_second: float = 15.0,
    ):
        # generated text and model names are printed as they are: no markup, no emoji codes
        self.console = console or Console(highlight=False, markup=False, emoji=False)
        self.err_console = err_console or Console(stderr=True, highlight=False, markup=False, emoji=False)
        if live is None:
            live = self.console.is_terminal and not self.console.is_dumb_terminal
        self.live = live
        self.show_rejected = show_rejected
        self.show_forced = show_forced
        self.refresh_interval = 1.0 / refresh_per_second
        self.speed = SpeedupEstimate()

    def legend(self) -> Text:
        parts: list[str | tuple[str, Style]] = [
            ("drafted & accepted", STYLE_DRAFT),
            "  ",
            *((("forced by the grammar", STYLE_FORCED), "  ") if self.show_forced else ()),
            ("target's own", STYLE_TARGET),
        ]
        if self.show_rejected:
            parts += ["  ", ("rejected draft", STYLE_REJECTED)]
        return Text.assemble("legend: ", *parts, style=STYLE_STATUS)

    def print_legend(self) -> None:
        """Print the colour legend (live mode only: plain text has no colours to explain)."""
        if self.live:
            self.console.print(self.legend())

    def reply(self) -> "ReplyView":
        """A context manager showing one reply: ``with readout.reply() as r: r.feed(ev)``."""
        return ReplyView(self)

    def show(self, events: Iterable[Token | Round | Done]) -> "ReplyView":
        """Show a whole event stream; returns the finished ReplyView (``.done``, ``.text``)."""
        with self.reply() as r:
            for event in events:
                r.feed(event)
        return r

    def speedup_text(self, stats: Stats) -> str:
        """The speedup estimate of a finished reply ("" where there is none to give)."""
        share = stats.drafting_rounds / stats.rounds if stats.rounds else 0.0
        return self.speed.format(stats.tokens_per_second, stats.tokens_per_round, share)

    k_label = staticmethod(k_label)

    def summary(self, stats: Stats, finish_reason: str) -> str:
        """One line about a finished reply."""
        parts = [stats.drafter, f"{_num(stats.generated_tokens)} tokens"]
        if stats.t_generate > 0:
            parts.append(f"{stats.tokens_per_second:.1f} tok/s")
        if stats.drafter != "none":
            # the grammar's forced tokens are drafts too (as in Stats and --json): counted
            # with the drafter's, then said apart
            parts += drafting_parts(stats.rounds, stats.drafting_rounds, stats.drafted, stats.accepted, stats.k_final)
            by_source = {s: n for s, n in stats.accepted_by_source.items() if n}
            # where the accepted drafts came from (the grammar's forced tokens among them),
            # unless a draft model's (the MTP head's, the assistant's) own were all there was
            kept = sources_part(by_source) if set(by_source) - {"model", "mtp", "assistant"} else ""
            if kept:
                parts.append(kept)
            elif stats.forced:
                parts.append(forced_part(stats.forced_accepted, stats.accepted))
            speed = self.speedup_text(stats)
            if speed:
                parts.append(speed)
        restored = " after a checkpoint" if stats.prompt_reuse == "checkpoint" else ""  # a recurrent state's
        parts.append(f"prompt {_num(stats.prompt_tokens_processed)} new of {_num(stats.prompt_tokens)}{restored}")
        parts.append(finish_reason)
        return " · ".join(parts)


class ReplyView:
    """One reply being shown (the screen's view of it; ``decoding.reply.Reply`` builds the
    reply itself). Feed it events; leave the ``with`` block to finish it.

    ``text`` is the answer so far (what was committed, never rejected drafts); ``done``
    is the final ``Done`` event, or None if the stream was interrupted.
    """

    def __init__(self, readout: Readout):
        self.readout = readout
        self.console = readout.console
        self.done: Done | None = None
        self.interrupted = False
        self._pieces: list[str] = []
        self._round_tokens: list[Token] = []
        self._state = _Counters()
        self._pending = Text()  # the line being written (live mode)
        self._live: Live | None = None
        self._last_refresh = 0.0
        self._out: IO[str] = self.console.file
        # Rejected drafts are drawn inside their round, before the target's correction,
        # so with show_rejected a round's tokens wait for its Round event (they arrive
        # together anyway). Otherwise each token is drawn as it comes.
        self._buffer_rounds = readout.show_rejected and readout.live

    @property
    def text(self) -> str:
        return "".join(self._pieces)

    @property
    def tokens(self) -> int:
        """Tokens committed so far (also known when the reply was interrupted)."""
        return self._state.tokens

    # -- lifecycle -------------------------------------------------------------------

    def __enter__(self) -> "ReplyView":
        if self.readout.live:
            self._live = Live(
                self._renderable(),
                console=self.console,
                auto_refresh=False,  # we refresh on events; no thread racing our updates
                transient=False,
                vertical_overflow="visible",
            )
            self._live.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self.interrupted = self.done is None
        self._flush_round(None)
        if self._live is not None:
            # The final frame keeps the last partial line and drops the status line.
            self._live.update(self._pending if self._pending.plain else Group(), refresh=True)
            self._live.stop()
            self._live = None
        else:
            text = self.text
            if text and not text.endswith("\n"):
                self._write("\n")
        self._print_summary()

    # -- events ----------------------------------------------------------------------

    def feed(self, event: Token | Round | Done) -> None:
        if isinstance(event, Token):
            if event.id >= 0:  # id -1: text released at the end, not a token
                self._state.tokens += 1
            if not self._buffer_rounds:
                self._emit([(event.text, _style(event))])
            else:
                if self._round_tokens and self._round_tokens[0].round != event.round:
                    self._flush_round(None)
                self._round_tokens.append(event)
        elif isinstance(event, Round):
            self._on_round(event)
            self._flush_round(event)
        elif isinstance(event, Done):
            self._flush_round(None)
            self.done = event
            missing = event.text[len(self.text) :] if event.text.startswith(self.text) else ""
            if missing:  # text the engine released only at the end
                self._emit([(missing, STYLE_TARGET)])
        self._maybe_refresh()

    def _on_round(self, r: Round) -> None:
        s = self._state
        now = time.perf_counter()
        # The first round of a reply includes the prompt prefill: not a decoding step.
        if s.t_last_round is not None and r.drafted == 0 and r.drafter in PLAIN_STEP_DRAFTERS:
            self.readout.speed.add_plain_round(now - s.t_last_round)
        if s.t_first_round is None:
            s.t_first_round = now
            s.tokens_at_first_round = s.tokens
        s.t_last_round = now
        s.rounds += 1
        s.drafting += r.drafted > 0
        s.drafted += r.drafted
        s.accepted += r.accepted
        s.forced += min(r.forced, r.accepted)
        # as Stats counts them (decoding.speculative.count_round): the grammar's first
        if r.forced and r.accepted:
            s.kept["grammar"] = s.kept.get("grammar", 0) + min(r.forced, r.accepted)
        if r.accepted > r.forced:
            source = r.source or (r.drafter if r.drafter in ("model", "mtp", "assistant") else "prompt")
            s.kept[source] = s.kept.get(source, 0) + r.accepted - r.forced
        s.k = r.k
        s.drafter = r.drafter

    def _flush_round(self, r: Round | None) -> None:
        """Render the buffered tokens of one round (with its rejected drafts, if shown)."""
        tokens, self._round_tokens = self._round_tokens, []
        pieces: list[tuple[str, Style]] = []
        rejected = r.rejected_text if (r is not None and self.readout.show_rejected and self.readout.live) else ""
        for tok in tokens:
            if rejected and not tok.from_draft:
                # Rejected drafts were proposed right after the accepted ones, in place of
                # the target's correction: show them there. A newline would be invisible
                # under a strike-through, so it becomes a visible mark.
                pieces.append((rejected.replace("\n", "↵"), STYLE_REJECTED))
                rejected = ""
            pieces.append((tok.text, _style(tok)))
        if rejected:
            pieces.append((rejected.replace("\n", "↵"), STYLE_REJECTED))
        self._emit(pieces)

    def _emit(self, pieces: list[tuple[str, Style]]) -> None:
        for text, style in pieces:
            if not text:
                continue
            if style is not STYLE_REJECTED:
                self._pieces.append(text)
            if self._live is None:
                if style is not STYLE_REJECTED:
                    self._write(text)
                continue
            self._pending.append(text, style)
        if self._live is not None:
            self._commit_lines()

    def _write(self, text: str) -> None:
        self._out.write(text)
        self._out.flush()

    # -- live rendering ----------------------------------------------------------------

    def _commit_lines(self) -> None:
        """Print finished lines above the live region; keep only the open line in it."""
        assert self._live is not None
        if "\n" in self._pending.plain:
            lines = self._pending.split("\n", allow_blank=True)
            for line in lines[:-1]:
                self.console.print(line, soft_wrap=False)
            self._pending = lines[-1]
        # A very long line without a newline would outgrow the screen (Live cannot scroll):
        # break it at a space and print the head.
        limit = max(80, self.console.width * max(4, self.console.height - 4))
        while len(self._pending.plain) > limit:
            plain = self._pending.plain
            cut = plain.rfind(" ", 0, limit) + 1 or limit
            head, tail = self._pending.divide([cut])
            self.console.print(head)
            self._pending = tail

    def _status(self) -> Text:
        s = self._state
        now = time.perf_counter()
        if s.rounds == 0:
            return Text("▍ reading the prompt…", style=STYLE_STATUS)
        tps = s.tokens_per_second(now)
        parts = []
        drafting = bool(s.drafter and s.drafter != "none")
        if drafting:
            parts += [s.drafter, *drafting_parts(s.rounds, s.drafting, s.drafted, s.accepted, s.k, live=True)]
            if len(s.kept) > 1 or "memory" in s.kept:  # more than the drafter's own: where they came from
                parts.append(sources_part(s.kept, live=True))
            elif s.forced:
                parts.append(forced_part(s.forced, s.accepted, live=True))
        else:
            parts.append("plain decoding")
        parts.append(f"{tps:.1f} tok/s" if tps else "– tok/s")
        if drafting:
            speed = self.readout.speed.format(tps, s.tokens / s.rounds, s.drafting / s.rounds)
            if speed:
                parts.append(speed)
        return Text("▍ " + " · ".join(parts), style=STYLE_STATUS)

    def _renderable(self) -> RenderableType:
        pending = self._pending.copy()
        return Group(pending, self._status()) if pending.plain else Group(self._status())

    def _maybe_refresh(self) -> None:
        if self._live is None:
            return
        now = time.perf_counter()
        if now - self._last_refresh >= self.readout.refresh_interval:
            self._last_refresh = now
            self._live.update(self._renderable(), refresh=True)

    # -- summary -------------------------------------------------------------------------

    def _print_summary(self) -> None:
        err = self.readout.err_console
        if self.done is not None:
            line = self.readout.summary(self.done.stats, self.done.finish_reason)
        else:
            line = f"interrupted after {_num(self._state.tokens)} tokens"
        err.print(Text(line, style=STYLE_STATUS), soft_wrap=True)


def _style(tok: Token) -> Style:
    if tok.forced:
        return STYLE_FORCED
    return STYLE_DRAFT if tok.from_draft else STYLE_TARGET


__all__ = [
    "STYLE_FORCED",
    "Readout",
    "ReplyView",
    "STYLE_DRAFT",
    "STYLE_REJECTED",
    "STYLE_TARGET",
    "SpeedupEstimate",
    "drafting_parts",
    "k_label",
]
