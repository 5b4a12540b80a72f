"""``edgespec chat``: a multi-turn REPL on the target's chat template, with the live readout.

The whole conversation is sent as a message list each turn; the engine keeps its KV cache
between calls, so a turn decodes only what is new since the last one (the summary after
each reply says how many prompt tokens were processed). Ctrl-C during a reply stops that
reply (the engine leaves its caches consistent) and keeps the session; Ctrl-C at the
prompt clears the line being typed, as in the Python REPL and ``ollama run``; Ctrl-D or
``/quit`` leaves. When the conversation outgrows the context, the oldest exchanges
are dropped (and said so) so that a reply still fits; ``/reset`` starts over.

This module knows the engine through its public API only, and the terminal through
``input()`` (with readline when available) and the readout.
"""

import json
import os
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from edgespec.cli.common import (
    DraftOpt, ExactOpt, KOpt, MinPOpt, NCtxOpt, ProfileOpt, SeedOpt, ShowRejectedOpt, TargetOpt, TemperatureOpt, ThreadsOpt, TopKOpt, TopPOpt, VerboseOpt,
    RpcOpt, TensorSplitOpt,
    cli_errors,
    ensure_utf8,
    err_console,
    load_engine,
    make_plan,
    normalize_draft,
    out_console,
)
from edgespec.cli.chat_input import History
from edgespec.errors import ContextOverflowError, EdgespecError

HELP = """\
commands:
  /help             this list
  /stats            per-turn statistics of this conversation
  /reset            forget the conversation (keeps the system prompt)
  /k N | auto       draft exactly N tokens every round, or let the policy choose
  /draft off|ngram|model|PATH   switch the drafter (model = the loaded draft model)
  /system [TEXT|off]  show, set or remove the system prompt
  /save FILE        save the conversation as JSON
  /quit             leave (also Ctrl-D; Ctrl-C at the prompt clears the line)
a line that is just \"\"\" starts a multi-line message; another \"\"\" ends it.
Ctrl-C during a reply stops the reply and keeps the conversation."""



@dataclass
class TurnRecord:
    """What one reply cost: the numbers /stats shows and /save writes."""

    turn: int
    prompt_tokens: int
    prompt_tokens_processed: int
    generated_tokens: int
    drafter: str
    k_final: int
    acceptance_rate: float
    mean_accepted_length: float
    tokens_per_second: float
    speedup: str
    finish_reason: str


class ChatSession:
    """One conversation: messages, the engine, the readout, and the slash commands."""

    def __init__(
        self,
        engine: Any,
        *,
        system: str | None,
        options: dict[str, Any],
        show_rejected: bool = False,
        console: Console | None = None,
        err: Console | None = None,
    ):
        from edgespec.readout import Readout

        self.engine = engine
        self.options = dict(options)
        self.console = console or out_console()
        self.err = err or err_console()
        self.readout = Readout(self.console, err_console=self.err, show_rejected=show_rejected)
        self.system = system
        self.messages: list[dict[str, str]] = self._fresh_messages()
        self.turns: list[TurnRecord] = []
        self.turn_count = 0
        self._last_stats: Any = None

    # -- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        self._banner()
        history = History()
        try:
            while True:
                try:
                    line = self._read_message()
                except EOFError:
                    self.console.print()
                    return
                except KeyboardInterrupt:
                    # as in the Python REPL and `ollama run`: drop the line, stay
                    self.console.print()
                    self.console.print(Text("(/quit or Ctrl-D leaves)", style="dim"))
                    continue
                except UnicodeDecodeError as e:  # a terminal that does not send UTF-8
                    self._error(f"the message is not UTF-8 text (byte 0x{e.object[e.start]:02x}); "
                                "set the terminal to UTF-8")
                    continue
                if line is None:
                    continue
                try:
                    ensure_utf8(line, "the message")
                except EdgespecError as e:
                    self._error(str(e))
                    continue
                if line.startswith("/"):
                    if not self.command(line):
                        return
                    continue
                self.turn(line)
        finally:
            history.save()

    def _read_message(self) -> str | None:
        line = input(self._prompt())
        if line.strip() == '"""':
            lines: list[str] = []
            while True:
                more = input(self._prompt(continuation=True))
                if more.strip() == '"""':
                    break
                lines.append(more)
            line = "\n".join(lines)
        line = line.strip()
        return line or None

    def _prompt(self, continuation: bool = False) -> str:
        label = "..." if continuation else "you›"
        if sys.stdout.isatty():
            # \001 and \002 tell readline the escape codes take no room on screen.
            return f"\001\x1b[1;36m\002{label}\001\x1b[0m\002 "
        return f"{label} "

    def _banner(self) -> None:
        e = self.engine
        target = _name(getattr(e, "target_path", None)) or "target"
        drafter = e.drafter_name
        if drafter == "model":
            drafter = f"model ({_name(getattr(e, 'draft_path', None))})"
        self.console.print(Text(  # k: the policy's bound, or the fixed k (--k, /k N)
            f"edgespec chat · {target} · drafter {drafter} · {self.readout.k_label(e.adaptive_k, e.k, e.k_max)}"
            f" · context {e.n_ctx:,} tokens"
            " · /help for commands",
            style="bold",
        ))
        if e.drafter_name != "none":
            self.readout.print_legend()

    # -- one turn ------------------------------------------------------------------------

    def turn(self, text: str) -> None:
        self.messages.append({"role": "user", "content": text})
        try:
            self._fit_context()
            events = self.engine.stream(self.messages, **self.options)
        except EdgespecError as e:
            self.messages.pop()
            self._error(str(e))
            if isinstance(e, ContextOverflowError):
                self.err.print(Text("(the message alone does not fit; shorten it, or restart with a larger --n-ctx)"))
            return
        reply = self.readout.reply()
        try:
            with reply:
                for event in events:
                    reply.feed(event)
        except KeyboardInterrupt:
            # Leaves the engine's caches consistent (its generator cleans up on close).
            events.close()
            self.err.print(Text("reply stopped; the conversation goes on", style="dim"))
        except EdgespecError as e:
            events.close()
            self._error(str(e))
        answer = reply.done.text if reply.done is not None else reply.text
        if answer:
            self.messages.append({"role": "assistant", "content": answer})
        else:
            self.messages.pop()  # nothing was said: forget the question too
        if reply.done is not None:
            self._record(reply.done.stats, reply.done.finish_reason)
        elif reply.interrupted and reply.text:
            # The engine keeps the stats of a stopped generation too; make sure they are
            # this reply's (a stop during the prompt leaves the previous turn's there).
            stats = getattr(self.engine, "last_stats", None)
            if stats is not None and stats is not self._last_stats:
                self._record(stats, "interrupted")

    def _record(self, s: Any, finish_reason: str) -> None:
        self._last_stats = s
        self.turn_count += 1
        self.turns.append(TurnRecord(
            turn=self.turn_count,
            prompt_tokens=s.prompt_tokens,
            prompt_tokens_processed=s.prompt_tokens_processed,
            generated_tokens=s.generated_tokens,
            drafter=s.drafter,
            k_final=s.k_final,
            acceptance_rate=round(s.acceptance_rate, 4),
            mean_accepted_length=round(s.mean_accepted_length, 3),
            tokens_per_second=round(s.tokens_per_second, 2),
            speedup=self.readout.speedup_text(s).replace(" vs plain", "") if s.drafter != "none" else "",
            finish_reason=finish_reason,
        ))
        max_tokens = self.options.get("max_tokens", 0)
        if finish_reason == "length" and s.generated_tokens < max_tokens:
            self.err.print(Text(
                f"the context is full ({self.engine.n_ctx:,} tokens): the reply was cut; "
                "the oldest exchanges will be dropped next turn (or /reset)",
                style="yellow",
            ))

    def _fit_context(self) -> None:
        """Drop the oldest exchanges until the prompt leaves room for a reply.

        The room kept is max_tokens, capped at a quarter of the context so a long
        max_tokens does not wipe the conversation. Dropping changes the prompt's prefix,
        so the next turn re-reads the remaining history once.
        """
        n_ctx = self.engine.n_ctx
        room = min(int(self.options.get("max_tokens", 256)), n_ctx // 4)
        first = 1 if self.messages and self.messages[0]["role"] == "system" else 0
        dropped = 0
        while True:
            n = len(self.engine.prompt_tokens(self.messages))
            if n + room <= n_ctx or len(self.messages) - first <= 1:
                break
            del self.messages[first]
            while len(self.messages) - first > 1 and self.messages[first]["role"] != "user":
                del self.messages[first]
            dropped += 1
        if dropped:
            self.err.print(Text(
                f"the context ({n_ctx:,} tokens) was full: dropped the {dropped} oldest message(s) "
                f"to make room; the conversation is now {n:,} tokens (/reset clears it)",
                style="yellow",
            ))

    # -- slash commands ------------------------------------------------------------------

    def command(self, line: str) -> bool:
        """Run one slash command; False means leave."""
        name, _, arg = line[1:].partition(" ")
        name, arg = name.lower(), arg.strip()
        if name in ("quit", "exit", "q"):
            return False
        handler = {
            "help": self._cmd_help,
            "?": self._cmd_help,
            "stats": self._cmd_stats,
            "reset": self._cmd_reset,
            "k": self._cmd_k,
            "draft": self._cmd_draft,
            "system": self._cmd_system,
            "save": self._cmd_save,
        }.get(name)
        if handler is None:
            self._error(f"unknown command /{name}; /help lists them")
            return True
        try:
            handler(arg)
        except EdgespecError as e:
            self._error(str(e))
        return True

    def _cmd_help(self, arg: str) -> None:
        self.console.print(Text(HELP))

    def _cmd_stats(self, arg: str) -> None:
        e = self.engine
        used = len(e.prompt_tokens(self.messages)) if len(self.messages) > (1 if self.system else 0) else 0
        drafter, k = e.drafter_name, self.readout.k_label(e.adaptive_k, e.k, e.k_max)
        self.console.print(Text(
            f"{_name(getattr(e, 'target_path', None))} · drafter {drafter} · {k}"
            f" · conversation {used:,} of {e.n_ctx:,} tokens · {_plural(len(self.turns), 'reply', 'replies')}",
            style="bold",
        ))
        if not self.turns:
            self.console.print(Text("no replies yet"))
            return
        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in ("turn", "prompt", "new", "reply", "drafter", "accepted", "per round", "k",
                    "tok/s", "speedup", "finish"):
            table.add_column(col, justify="left" if col in ("drafter", "speedup", "finish") else "right")
        for t in self.turns:
            drafted = t.drafter != "none"
            table.add_row(
                str(t.turn), f"{t.prompt_tokens:,}", f"{t.prompt_tokens_processed:,}",
                f"{t.generated_tokens:,}", t.drafter,
                f"{t.acceptance_rate:.0%}" if drafted else "–",
                f"{t.mean_accepted_length:.2f}" if drafted else "–",
                f"≤{t.k_final}" if drafted else "–",  # the bound; the summary has the mean
                f"{t.tokens_per_second:.1f}", t.speedup or "–", t.finish_reason,
            )
        self.console.print(table)
        total = sum(t.generated_tokens for t in self.turns)
        new = sum(t.prompt_tokens_processed for t in self.turns)
        seen = sum(t.prompt_tokens for t in self.turns)
        self.console.print(Text(
            f"total: {total:,} tokens generated; prompts {seen:,} tokens, of which {new:,} were "
            f"decoded and {seen - new:,} reused from the cache",
            style="dim",
        ))

    def _cmd_reset(self, arg: str) -> None:
        self.messages = self._fresh_messages()
        self.turns.clear()
        self.turn_count = 0
        self.engine.reset()
        self.console.print(Text("conversation cleared", style="dim"))

    def _cmd_k(self, arg: str) -> None:
        if arg.strip() == "auto":
            self.engine.adaptive_k = True
            self.console.print(Text("k = auto (the drafting policy chooses each round)", style="dim"))
            return
        try:
            k = int(arg)
        except ValueError:
            self._error(f"/k needs a whole number or auto, e.g. /k 4 (now k = "
                        f"{self.engine.k if not self.engine.adaptive_k else 'auto'})")
            return
        self.engine.set_k(k)
        self.engine.adaptive_k = False
        self.console.print(Text(f"k = {self.engine.k} in every round (/k auto: the drafting policy)", style="dim"))

    def _cmd_draft(self, arg: str) -> None:
        if not arg:
            self.console.print(Text(f"drafter: {self.engine.drafter_name}; /draft off|ngram|model|PATH"))
            return
        choice = normalize_draft(os.path.expanduser(arg) if arg not in ("off", "none", "ngram", "model") else arg)
        if choice not in ("none", "ngram", "model") and self.err.is_terminal:
            with self.err.status(f"loading {Path(choice).name}…"):
                self.engine.set_drafter(choice)
        else:
            self.engine.set_drafter(choice)
        self.console.print(Text(f"drafter: {self.engine.drafter_name}", style="dim"))
        if self.engine.drafter_name != "none":
            self.readout.print_legend()

    def _cmd_system(self, arg: str) -> None:
        if not arg:
            self.console.print(Text(f"system prompt: {self.system!r}" if self.system else "no system prompt"))
            return
        self.system = None if arg.lower() in ("off", "none") else arg
        rest = [m for m in self.messages if m["role"] != "system"]
        self.messages = self._fresh_messages() + rest
        self.console.print(Text(
            ("system prompt set" if self.system else "system prompt removed")
            + ("; the history will be re-read once" if rest else ""),
            style="dim",
        ))

    def _cmd_save(self, arg: str) -> None:
        if not arg:
            self._error("/save needs a file name, e.g. /save chat.json")
            return
        path = Path(arg).expanduser()
        e = self.engine
        data = {
            "target": str(getattr(e, "target_path", "")),
            "drafter": e.drafter_name,
            "draft": str(getattr(e, "draft_path", "") or "") or None,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.options.items()},
            "messages": self.messages,
            "turns": [asdict(t) for t in self.turns],
        }
        try:
            path.write_text(json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
        except OSError as err:
            self._error(f"cannot write {path}: {err.strerror or err}")
            return
        self.console.print(Text(f"saved {len(self.messages)} messages to {path}", style="dim"))

    # -- helpers -------------------------------------------------------------------------

    def _fresh_messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}] if self.system else []

    def _error(self, message: str) -> None:
        self.err.print(Text(f"error: {message}", style="red" if self.err.is_terminal else ""))


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def _name(path: Any) -> str:
    return Path(str(path)).name if path else ""


def chat(
    profile: ProfileOpt = "auto",
    target: TargetOpt = None,
    draft: DraftOpt = None,
    k: KOpt = None,
    exact: ExactOpt = False,
    system: Annotated[Optional[str], typer.Option("--system", "-s", help="System prompt.")] = None,
    temperature: TemperatureOpt = 0.7,
    top_k: TopKOpt = 0,
    top_p: TopPOpt = 1.0,
    min_p: MinPOpt = 0.0,
    seed: SeedOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Longest reply, in tokens.")] = 1024,
    n_ctx: NCtxOpt = None,
    threads: ThreadsOpt = None,
    rpc: RpcOpt = None,
    tensor_split: TensorSplitOpt = None,
    show_rejected: ShowRejectedOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Chat with the target model, with a live view of speculation (/help inside)."""
    import signal

    if sys.stdin.isatty() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started in the background by a shell without job control (`cmd &` in a script),
        # which ignores SIGINT; on a terminal, Ctrl-C is how a reply is stopped
        signal.signal(signal.SIGINT, signal.default_int_handler)
    options: dict[str, Any] = dict(
        max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed,
    )
    with cli_errors():
        p = make_plan(profile, target=target, draft=draft, k=k, n_ctx=n_ctx, threads=threads, exact=exact,
                      rpc=rpc, tensor_split=tensor_split)
        engine = load_engine(p, verbose=verbose)
    try:
        with cli_errors():
            ChatSession(engine, system=system, options=options, show_rejected=show_rejected).run()
    finally:
        engine.close()
