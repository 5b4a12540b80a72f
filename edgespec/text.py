"""Text on the way out: stop strings over a stream of decoded pieces.

Knows nothing about tokens or models: it sees text pieces as the detokenizer releases
them and decides what may be shown.
"""

from __future__ import annotations

from typing import Sequence


class TextAssembler:
    """Joins streamed text pieces and applies stop strings.

    Text that might be the beginning of a stop string is held back until the next
    pieces decide; when a stop string completes, everything from its start on is
    dropped and ``hit`` becomes True.
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.text = ""       # released text
        self._held = ""
        self.hit = False

    def push(self, piece: str, check: bool = True) -> tuple[str, bool]:
        """Add ``piece``; the text that may be shown now, and whether a stop string
        completed. ``check=False`` releases the piece without looking for stop strings
        (a reply shorter than its ``min_tokens``)."""
        if self.hit:
            return "", True
        if not check:
            released, self._held = self._held + piece, ""
            self.text += released
            return released, False
        if not self.stops:
            self.text += piece
            return piece, False
        buf = self._held + piece
        first = None
        for s in self.stops:
            i = buf.find(s)
            if i >= 0 and (first is None or i < first):
                first = i
        if first is not None:
            released = buf[:first]
            self.text += released
            self._held = ""
            self.hit = True
            return released, True
        hold = 0
        for s in self.stops:
            for n in range(min(len(s) - 1, len(buf)), 0, -1):
                if buf.endswith(s[:n]):
                    hold = max(hold, n)
                    break
        released = buf[: len(buf) - hold]
        self._held = buf[len(buf) - hold :]
        self.text += released
        return released, False

    def finish(self, piece: str = "") -> str:
        """Release what is still held at the end of generation."""
        released, _ = self.push(piece) if piece else ("", False)
        if not self.hit and self._held:
            released += self._held
            self.text += self._held
            self._held = ""
        return released
