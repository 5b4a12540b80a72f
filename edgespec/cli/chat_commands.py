"""The slash commands of ``edgespec chat`` (``/help``, ``/stats``, ``/system``, ``/save`` ...).

A mixin of ``ChatSession`` (cli/chat.py): it reads and changes the session's state (the
engine, the messages, the system prompt, the turns) and prints on its consoles. A
command that fails says so in one line and leaves the session as it was.
"""

from __future__ import annotations

import json
import os
import secrets
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from edgespec.cli.plan_options import normalize_draft
from edgespec.costmodel.adaptive import is_no_draft
from edgespec.errors import EdgespecError

HELP = """\
commands:
  /help             this list
  /stats            per-turn statistics of this conversation
  /reset            forget the conversation (keeps the system prompt)
  /k N | auto       draft exactly N tokens every round, or let the policy choose
  /draft off|ngram|model|PATH   switch the drafter (model = the loaded draft model)
  /system [TEXT|off]  show, set or remove the system prompt
  /save FILE        save the conversation as JSON (/save! FILE replaces an existing file)
  /quit             leave (also Ctrl-D; Ctrl-C at the prompt clears the line)
a line that is just \"\"\" starts a multi-line message; another \"\"\" ends it.
Ctrl-C during a reply stops the reply and keeps the conversation."""


class SlashCommands:
    """``/name arg`` -> ``_cmd_name(arg)``. The session provides the state below and
    ``_error``, ``_fresh_messages`` and ``check_system_fits``."""

    engine: Any
    readout: Any
    options: dict[str, Any]
    console: Console
    err: Console
    system: str | None
    messages: list[dict[str, str]]
    turns: list[Any]
    turn_count: int

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
            "save!": lambda arg: self._cmd_save(arg, replace=True),
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
        k = self.readout.k_label(e.adaptive_k, e.k, e.k_max)
        self.console.print(
            Text(
                f"{shown_names(e)[0]} · drafter {e.drafter_name} · {k}"
                f" · conversation {used:,} of {e.n_ctx:,} tokens · {_plural(len(self.turns), 'reply', 'replies')}",
                style="bold",
            )
        )
        if not self.turns:
            self.console.print(Text("no replies yet"))
            return
        table = Table(box=None, pad_edge=False, header_style="bold")
        for col in (
            "turn",
            "prompt",
            "new",
            "reply",
            "drafter",
            "accepted",
            "per round",
            "k",
            "tok/s",
            "speedup",
            "finish",
        ):
            table.add_column(col, justify="left" if col in ("drafter", "speedup", "finish") else "right")
        for t in self.turns:
            drafted = t.drafter != "none"
            table.add_row(
                str(t.turn),
                f"{t.prompt_tokens:,}",
                f"{t.prompt_tokens_processed:,}",
                f"{t.generated_tokens:,}",
                t.drafter,
                f"{t.acceptance_rate:.0%}" if drafted else "–",
                f"{t.mean_accepted_length:.2f}" if drafted else "–",
                f"≤{t.k_final}" if drafted else "–",  # the bound; the summary has the mean
                f"{t.tokens_per_second:.1f}",
                t.speedup or "–",
                t.finish_reason,
            )
        self.console.print(table)
        total = sum(t.generated_tokens for t in self.turns)
        new = sum(t.prompt_tokens_processed for t in self.turns)
        seen = sum(t.prompt_tokens for t in self.turns)
        self.console.print(
            Text(
                f"total: {total:,} tokens generated; prompts {seen:,} tokens, of which {new:,} were "
                f"decoded and {seen - new:,} reused from the cache",
                style="dim",
            )
        )

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
            self._error(
                f"/k needs a whole number or auto, e.g. /k 4 (now k = "
                f"{self.engine.k if not self.engine.adaptive_k else 'auto'})"
            )
            return
        self.engine.set_k(k)
        self.engine.adaptive_k = False
        self.console.print(Text(f"k = {self.engine.k} in every round (/k auto: the drafting policy)", style="dim"))

    def _cmd_draft(self, arg: str) -> None:
        if not arg:
            self.console.print(Text(f"drafter: {self.engine.drafter_name}; /draft off|ngram|model|mtp|assistant|PATH"))
            return
        named = is_no_draft(arg) or arg in ("ngram", "model", "mtp", "assistant")
        choice = normalize_draft(arg if named else os.path.expanduser(arg))
        if choice not in ("none", "ngram", "model", "mtp", "assistant") and self.err.is_terminal:
            with self.err.status(Text(f"loading {Path(choice).name}…")):
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
        system = None if arg.lower() in ("off", "none") else arg
        if system is not None:
            try:
                self.check_system_fits(system)
            except EdgespecError as e:
                self._error(
                    f"{e}; "
                    + ("the system prompt stays as it was" if self.system else "there is still no system prompt")
                )
                return
        self.system = system
        rest = [m for m in self.messages if m["role"] != "system"]
        self.messages = self._fresh_messages() + rest
        self.console.print(
            Text(
                ("system prompt set" if self.system else "system prompt removed")
                + ("; the history will be re-read once" if rest else ""),
                style="dim",
            )
        )

    def _cmd_save(self, arg: str, replace: bool = False) -> None:
        """Write the conversation as JSON: through a temporary file in the same folder,
        renamed over the target, so a crash or a full disk never leaves half a file; an
        existing file is replaced only with ``/save!``."""
        if not arg:
            self._error("/save needs a file name, e.g. /save chat.json")
            return
        path = Path(arg).expanduser()
        if path.is_dir():
            self._error(f"{path} is a folder; /save needs a file name, e.g. /save {path / 'chat.json'}")
            return
        if path.exists() and not replace:
            self._error(f"{path} exists; /save! {arg} replaces it")
            return
        e = self.engine
        data = {
            "target": str(getattr(e, "target_path", "")),
            "drafter": e.drafter_name,
            "draft": str(getattr(e, "draft_path", "") or "") or None,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.options.items()},
            "messages": self.messages,
            "turns": [asdict(t) for t in self.turns],
        }
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            with open(tmp, "x", encoding="utf-8") as f:  # mode 0666 & ~umask, as a new file gets
                f.write(json.dumps(data, ensure_ascii=False, indent=2) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except OSError as err:
            tmp.unlink(missing_ok=True)
            self._error(f"cannot write {path}: {err.strerror or err}")
            return
        self.console.print(Text(f"saved {len(self.messages)} messages to {path}", style="dim"))


def _plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def shown_names(engine: Any) -> tuple[str, str]:
    """The target's and the draft model's names for the screen: the name of a model in
    another tool's store as it was given (not an Ollama blob's file name), else the file
    name (``Model.label``); "" without a draft model."""
    draft = getattr(engine, "draft_model", None)
    return engine.target_model.label, draft.label if draft is not None else ""
