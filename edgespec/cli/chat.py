"""``edgespec chat``: a multi-turn REPL on the target's chat template, with the live readout.

The whole conversation is sent as a message list each turn; the engine keeps its KV cache
between calls, so a turn decodes only what is new since the last one (the summary after
each reply says how many prompt tokens were processed). Ctrl-C during a reply stops that
reply (the engine leaves its caches consistent) and keeps the session; Ctrl-C at the
prompt clears the line being typed, as in the Python REPL and ``ollama run``; Ctrl-D or
``/quit`` leaves. When the conversation outgrows the context, the oldest exchanges
are dropped (and said so) so that a reply still fits; ``/reset`` starts over. Nothing is
dropped for a message that would not fit even then, and a system prompt that leaves no
room for a message and a reply is refused when it is set. The slash commands are in
``chat_commands``.

This module knows the engine through its public API only, and the terminal through
``input()`` (with readline when available) and the readout.
"""

import sys
from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.text import Text

from edgespec.cli.chat_commands import SlashCommands, shown_names
from edgespec.cli.chat_input import History
from edgespec.cli.common import (
    MinPOpt,
    SeedOpt,
    ShowRejectedOpt,
    TemperatureOpt,
    TopKOpt,
    TopPOpt,
    VerboseOpt,
    cli_errors,
    ensure_utf8,
    err_console,
    load_engine,
    out_console,
)
from edgespec.cli.memory_options import MemoryCapOpt, MemoryOpt, MemoryOptions, RememberOpt, remembering
from edgespec.cli.plan_options import (
    DraftOpt,
    ExactOpt,
    KOpt,
    NCtxOpt,
    OptimizedOpt,
    PlanOptions,
    ProfileOpt,
    RpcOpt,
    TargetOpt,
    TensorSplitOpt,
    ThreadsOpt,
    make_plan,
)
from edgespec.errors import ContextOverflowError, EdgespecError


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


class ChatSession(SlashCommands):
    """One conversation: messages, the engine, the readout, and the slash commands
    (``chat_commands.SlashCommands``)."""

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
        from edgespec.cli.readout import Readout

        self.engine = engine
        self.options = dict(options)
        self.console = console or out_console()
        self.err = err or err_console()
        self.readout = Readout(self.console, err_console=self.err, show_rejected=show_rejected)
        if system:
            self.check_system_fits(system)
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
                    self._error(
                        f"the message is not UTF-8 text (byte 0x{e.object[e.start]:02x}); set the terminal to UTF-8"
                    )
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
        target, draft = shown_names(e)
        drafter = e.drafter_name
        if drafter == "model":
            drafter = f"model ({draft})"
        self.console.print(
            Text(  # k: the policy's bound, or the fixed k (--k, /k N)
                f"edgespec chat · {target} · drafter {drafter} · {self.readout.k_label(e.adaptive_k, e.k, e.k_max)}"
                f" · context {e.n_ctx:,} tokens"
                " · /help for commands",
                style="bold",
            )
        )
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
                self.err.print(
                    Text(
                        "(the message does not fit with room for a reply: shorten it, /reset, or "
                        "restart with a larger --n-ctx; the conversation is kept as it was)"
                    )
                )
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
            stats = self.engine.last_stats
            if stats is not None and stats is not self._last_stats:
                self._record(stats, "interrupted")

    def _record(self, s: Any, finish_reason: str) -> None:
        self._last_stats = s
        self.turn_count += 1
        self.turns.append(
            TurnRecord(
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
            )
        )
        max_tokens = self.options.get("max_tokens", 0)
        if finish_reason == "length" and s.generated_tokens < max_tokens:
            self.err.print(
                Text(
                    f"the context is full ({self.engine.n_ctx:,} tokens): the reply was cut; "
                    "the oldest exchanges will be dropped next turn (or /reset)",
                    style="yellow",
                )
            )

    def _room(self) -> int:
        """Tokens kept free for a reply: max_tokens, capped at a quarter of the context so
        a long max_tokens does not wipe the conversation."""
        return min(int(self.options.get("max_tokens", 256)), self.engine.n_ctx // 4)

    def check_system_fits(self, system: str) -> None:
        """A ``ContextOverflowError`` if ``system`` leaves no room for a message and a
        reply: with it, the REPL would drop the whole conversation and still fail."""
        n_ctx, room = self.engine.n_ctx, self._room()
        n = len(self.engine.prompt_tokens([{"role": "system", "content": system}, {"role": "user", "content": ""}]))
        if n + room > n_ctx:
            raise ContextOverflowError(
                f"the system prompt is {n:,} tokens: with {room:,} kept for a reply it does not fit the "
                f"context of {n_ctx:,} tokens; shorten it, or restart with a larger --n-ctx"
            )

    def _fit_context(self) -> None:
        """Drop the oldest exchanges until the prompt leaves room for a reply.

        First checks that dropping can help: when the system prompt and the new message
        alone leave no room to generate, nothing is dropped and a ContextOverflowError
        says so. Dropping changes the prompt's prefix, so the next turn re-reads the
        remaining history once.
        """
        n_ctx, room = self.engine.n_ctx, self._room()
        first = 1 if self.messages and self.messages[0]["role"] == "system" else 0
        least = len(self.engine.prompt_tokens(self.messages[:first] + self.messages[-1:]))
        what = f"this message{' with the system prompt' if first else ''} is {least:,} tokens"
        if least >= n_ctx:
            raise ContextOverflowError(
                f"{what}; the context holds {n_ctx:,}, so even without the earlier conversation no reply would fit"
            )
        if least + room > n_ctx and len(self.messages) - first > 1:
            raise ContextOverflowError(
                f"{what}; even without the earlier conversation the context ({n_ctx:,}) would keep only "
                f"{n_ctx - least:,} of the {room:,} tokens a reply gets, so the conversation is not dropped for "
                "it (/reset and send it again for a short reply)"
            )
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
            self.err.print(
                Text(
                    f"the context ({n_ctx:,} tokens) was full: dropped the {dropped} oldest message(s) "
                    f"to make room; the conversation is now {n:,} tokens (/reset clears it)",
                    style="yellow",
                )
            )

    # -- helpers -------------------------------------------------------------------------

    def _fresh_messages(self) -> list[dict[str, str]]:
        return [{"role": "system", "content": self.system}] if self.system else []

    def _error(self, message: str) -> None:
        self.err.print(Text(f"error: {message}", style="red" if self.err.is_terminal else ""))


def chat(
    profile: ProfileOpt = "auto",
    target: TargetOpt = None,
    draft: DraftOpt = None,
    k: KOpt = None,
    exact: ExactOpt = False,
    optimized: OptimizedOpt = True,
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
    memory: MemoryOpt = True,
    memory_cap: MemoryCapOpt = None,
    remember: RememberOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Chat with the target model, with a live view of speculation (/help inside)."""
    import signal

    if sys.stdin.isatty() and signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # started in the background by a shell without job control (`cmd &` in a script),
        # which ignores SIGINT; on a terminal, Ctrl-C is how a reply is stopped
        signal.signal(signal.SIGINT, signal.default_int_handler)
    options: dict[str, Any] = dict(
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        seed=seed,
    )
    with cli_errors():
        memory_options = MemoryOptions(memory, memory_cap, remember)
        p = make_plan(
            memory_options.apply(
                PlanOptions(
                    profile=profile,
                    target=target,
                    draft=draft,
                    k=k,
                    exact=exact,
                    optimized=optimized,
                    n_ctx=n_ctx,
                    threads=threads,
                    rpc=rpc,
                    tensor_split=tensor_split,
                )
            )
        )
        engine = load_engine(p, verbose=verbose)
    try:
        with cli_errors(), remembering(engine, memory_options, err=err_console()):
            ChatSession(engine, system=system, options=options, show_rejected=show_rejected).run()
    finally:
        engine.close()
