"""The terminal side of ``edgespec chat``: readline line editing, history kept between
sessions, and completion of slash commands."""

from __future__ import annotations

import os
from pathlib import Path

COMMANDS = ("/help", "/stats", "/reset", "/k", "/draft", "/system", "/save", "/save!", "/quit", "/exit")


class History:
    """Readline line editing, history (kept between sessions) and /command completion."""

    def __init__(self) -> None:
        self.path: Path | None = None
        try:
            import readline
        except ImportError:  # pragma: no cover - Windows without pyreadline
            self.readline = None
            return
        self.readline = readline
        state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
        self.path = Path(state) / "edgespec" / "chat_history"
        readline.set_history_length(1000)
        try:
            readline.read_history_file(self.path)
        except (OSError, ValueError):
            pass

        def complete(text: str, state: int) -> str | None:
            matches = [c + " " for c in COMMANDS if c.startswith(text)] if text.startswith("/") else []
            return matches[state] if state < len(matches) else None

        readline.set_completer(complete)
        readline.set_completer_delims(" \t\n")
        if "libedit" in (readline.__doc__ or ""):
            readline.parse_and_bind("bind ^I rl_complete")
        else:
            readline.parse_and_bind("tab: complete")

    def save(self) -> None:
        if self.readline is None or self.path is None:
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.readline.write_history_file(self.path)
        except OSError:
            pass
