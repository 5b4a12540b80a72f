"""The free side of a lazy grammar: which tokens may not be taken before its trigger.

Before the trigger appears, generation is free, with one exception: a token that would
complete the trigger and go on with bytes the grammar refuses (trigger ``ab`` then
``digits``, and a token ``b, `` after an ``a``). Taking it would commit text that the
grammar, starting at the trigger, can never accept; so such tokens are masked out, and
only they. Which tokens can complete the trigger is read from the vocabulary once per
tokenizer and trigger (tokens that contain the trigger, or start with its tail); whether
their remaining bytes are acceptable is asked of the grammar once per distinct tail.
"""

from __future__ import annotations

import threading

from llguidance import LLMatcher, LLTokenizer

_index: dict[tuple[int, bytes], tuple[LLTokenizer, list, dict]] = {}
_lock = threading.Lock()


def _completers(tok: LLTokenizer, trig: bytes) -> tuple[list, dict]:
    """(tokens containing the trigger with the bytes after its first occurrence,
    {k: tokens starting with trig[k:] with the bytes after it} for 1 <= k < len(trig))."""
    with _lock:
        hit = _index.get((id(tok), trig))
        if hit is not None:
            return hit[1], hit[2]
        contains: list[tuple[int, bytes]] = []
        starts: dict[int, list[tuple[int, bytes]]] = {k: [] for k in range(1, len(trig))}
        firsts = {trig[k] for k in range(1, len(trig))}
        for t in range(tok.vocab_size):
            b = tok.decode_bytes([t])
            if not b:
                continue
            at = b.find(trig)
            if at >= 0:
                contains.append((t, b[at + len(trig) :]))
            if b[0] in firsts:
                for k in range(1, len(trig)):
                    rest = trig[k:]
                    if b.startswith(rest):
                        starts[k].append((t, b[len(rest) :]))
        _index[(id(tok), trig)] = (tok, contains, starts)  # the tokenizer is kept: id stays unique
        return contains, starts


class TriggerGuard:
    """For one matcher waiting for its trigger: ``bad(text)``, the tokens that would
    start the grammar with bytes it refuses, given the free text so far."""

    def __init__(self, tok: LLTokenizer, trig: bytes, matcher: LLMatcher) -> None:
        self.tok, self.trig, self._m = tok, trig, matcher  # the matcher: at its start, unused
        self.contains, self.starts = _completers(tok, trig)
        self._ok: dict[bytes, bool] = {}

    def accepts(self, tail: bytes) -> bool:
        """Can the grammar start with the trigger followed by ``tail``?"""
        ok = self._ok.get(tail)
        if ok is None:
            text = self.trig + tail
            ok = any(
                self._m.validate_tokens(ids) == len(ids)
                for ids in (self.tok.tokenize_bytes(text, parse_special=s) for s in (True, False))
            )
            self._ok[tail] = ok
        return ok

    def bad(self, text: bytes | bytearray) -> list[int]:
        seen: set[int] = set()
        out: list[int] = []
        for k in range(len(self.trig) - 1, 0, -1):  # an occurrence that began in the text comes first
            if text.endswith(self.trig[:k]):
                for t, tail in self.starts[k]:
                    if t not in seen:
                        seen.add(t)
                        if not self.accepts(tail):
                            out.append(t)
        for t, tail in self.contains:
            if t not in seen and not self.accepts(tail):
                out.append(t)
        return out
