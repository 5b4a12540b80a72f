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

    A stop string counts when it ENDS in the piece just pushed with ``check`` on: the
    pieces pushed with ``check=False`` (a reply shorter than its ``min_tokens``) never end
    one, but they are held back like any others, so a stop string that starts in them
    and ends in a checked piece (it straddles the ``min_tokens`` boundary) is caught and
    cut at its start, and no text of it has been released. (vLLM's ``min_tokens``: stop
    strings are looked for only once that many tokens are out, in the text the newest
    token completed; llama-server looks for them there too.)
    """

    def __init__(self, stops: Sequence[str]) -> None:
        self.stops = [s for s in stops if s]
        self.text = ""  # released text
        self._held = ""
        self.hit = False

    def push(self, piece: str, check: bool = True) -> tuple[str, bool]:
        """Add ``piece``; the text that may be shown now, and whether a stop string
        completed in it. ``check=False``: a stop string that ends in this piece does not
        count (a reply shorter than its ``min_tokens``)."""
        if self.hit:
            return "", True
        if not self.stops:
            self.text += piece
            return piece, False
        held, buf = len(self._held), self._held + piece
        first = None
        for s in self.stops if check else ():
            # only a stop string that ends in the new piece: one ending in the held text
            # ended before the check began (the held text holds none that counted)
            i = buf.find(s, max(0, held - len(s) + 1))
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

    def finish(self, piece: str = "", check: bool = True) -> str:
        """Release what is still held at the end of generation (``piece``: the last text,
        pushed with ``check`` as ``push`` takes it)."""
        released, _ = self.push(piece, check) if piece else ("", False)
        if not self.hit and self._held:
            released += self._held
            self.text += self._held
            self._held = ""
        return released
