"""The ``logprobs`` objects of a response, from the engine's ``TokenLogprob`` records.

Chat (OpenAI's format), one entry per generated token::

    {"content": [{"token": "Hello", "logprob": -0.31, "bytes": [72, 101, 108, 108, 111],
                  "top_logprobs": [{"token": ..., "logprob": ..., "bytes": [...]}, ...]}],
     "refusal": null}

Completions (the legacy format)::

    {"tokens": [...], "token_logprobs": [...], "top_logprobs": [{token: logprob, ...}, ...],
     "text_offset": [...]}

where ``text_offset`` is the character offset in the choice's ``text`` at which each
token's text starts (the prompt is not echoed, so offsets count from the answer), and a
``top_logprobs`` dict keeps the likelier of two alternatives that share a string.

A token's string is its bytes decoded as UTF-8 (a byte of a character split across
tokens shows as U+FFFD; ``bytes`` holds the exact bytes), special tokens as their text.
``LogprobWriter`` is stateful: it is fed each choice's tokens in order, whole or chunk by
chunk, so a stream's chunks carry the same entries as the whole body, split.
Which distribution the numbers come from is ``edgespec.decoding.logprob``'s docstring.
"""

from __future__ import annotations

import codecs
import math
from typing import Callable, Sequence

from edgespec.events import TokenLogprob

FLOOR = -9999.0  # what OpenAI reports for a probability that rounds to 0


def _value(logprob: float) -> float:
    return logprob if math.isfinite(logprob) and logprob > FLOOR else FLOOR


class LogprobWriter:
    """One choice's logprobs objects, chat or legacy; ``token_bytes(id, special)`` gives a
    token's bytes (``special``: control tokens as their text, else empty, as in the
    answer's text): ``llama.Model.token_to_bytes``."""

    def __init__(self, token_bytes: Callable[[int, bool], bytes], *, chat: bool) -> None:
        self.token_bytes = token_bytes
        self.chat = chat
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._chars = 0  # characters of the answer before the next token (text_offset)

    def _text(self, token: int) -> tuple[str, bytes]:
        raw = self.token_bytes(token, True)
        return raw.decode("utf-8", errors="replace"), raw

    def _entry(self, token: int, logprob: float) -> dict:
        text, raw = self._text(token)
        return {"token": text, "logprob": _value(logprob), "bytes": list(raw)}

    def object(self, lps: Sequence[TokenLogprob]) -> dict:
        """The logprobs object of the next ``lps`` of this choice."""
        if self.chat:
            return {
                "content": [
                    {**self._entry(lp.id, lp.logprob), "top_logprobs": [self._entry(t, v) for t, v in lp.top]}
                    for lp in lps
                ],
                "refusal": None,
            }
        out: dict = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for lp in lps:
            out["tokens"].append(self._text(lp.id)[0])
            out["token_logprobs"].append(_value(lp.logprob))
            top: dict[str, float] = {}
            for t, v in lp.top:  # two tokens with one string (split characters): the likelier
                top.setdefault(self._text(t)[0], _value(v))
            out["top_logprobs"].append(top)
            # the text so far, the bytes of a character still incomplete counted as it will
            # show (U+FFFD, or the character they start): where this token's own text begins
            pending = self._decoder.getstate()[0]
            out["text_offset"].append(self._chars + len(pending.decode("utf-8", errors="replace")))
            self._chars += len(self._decoder.decode(self.token_bytes(lp.id, False)))
        return out
