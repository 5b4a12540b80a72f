"""One reply as it grows: the committed tokens of each round turned into ``Token`` and
``Round`` events, ended by end-of-generation or a stop string.

The engine's single stream and the multi-sequence batch both build their replies here,
so a sequence ends for the same reasons, at the same token, whoever decodes it. How many
tokens it may have (``max_tokens``, the context) is the sequence's budget
(``decoding.sequence.DecodeSequence``), which no round exceeds: a reply that has not
stopped when the budget is spent ends with ``finish_reason`` "length".
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from ..events import Event, Token, TokenLogprob
from ..llama import Detokenizer, Model
from .text import TextAssembler


class Reply:
    """The text side of one generation: streaming detokenization, stop strings, the
    reasons to stop. ``push(round_result)`` returns the events that round produces;
    ``done`` tells whether the reply has ended; ``finish()`` releases held-back text.
    A stop string counts only when it ends in the text of the ``min_tokens``-th token
    or a later one (vLLM's ``min_tokens``; the sampler keeps end-of-generation tokens out
    until then): one that ends earlier is text like any other, one that starts earlier
    and ends there (it straddles the boundary) ends the reply at its start."""

    def __init__(self, model: Model, stops: Sequence[str], min_tokens: int = 0, logprobs: bool = False) -> None:
        self.model = model
        self.min_tokens = min_tokens
        self.detok = Detokenizer(model)
        self.text_out = TextAssembler(stops)
        self.ids: list[int] = []
        # one per id when asked for (the rounds' RoundResult.logprobs), else None
        self.logprobs: list[TokenLogprob] | None = [] if logprobs else None
        self.finish_reason = "length"  # unless it stops: the budget ran out
        self.done = False  # stopped (end of generation, a stop string)

    @property
    def text(self) -> str:
        return self.text_out.text

    def push(self, res) -> list[Event]:
        """The events of one round (a ``decoding.speculative.RoundResult``): its tokens up to
        wherever the reply ends, then the round record."""
        events: list[Event] = []
        n_forced = res.info.forced  # the round's first accepted drafts were the grammar's
        lps = res.logprobs if self.logprobs is not None else None
        for j, (tok, fd) in enumerate(zip(res.tokens, res.from_draft)):
            if self.model.is_eog(tok):
                self.finish_reason, self.done = "stop", True
                break
            self.ids.append(tok)
            lp = lps[j] if lps is not None else None
            if lp is not None:
                self.logprobs.append(lp)
            piece, hit = self.text_out.push(self.detok.push(tok), check=len(self.ids) >= self.min_tokens)
            events.append(
                Token(id=tok, text=piece, from_draft=fd, round=res.info.index, forced=fd and j < n_forced, logprob=lp)
            )
            if hit:
                self.finish_reason, self.done = "stop", True
                break
        rej = res.info.rejected_ids
        events.append(replace(res.info, rejected_text=self.model.detokenize(rej)) if rej else res.info)
        return events

    def logprobs_out(self) -> tuple[TokenLogprob, ...] | None:
        """One ``TokenLogprob`` per token of the reply, or None when not asked for."""
        return None if self.logprobs is None else tuple(self.logprobs)

    def finish(self, round_index: int) -> list[Event]:
        """Release the text still held (a partial character, a possible stop string's
        start) at the end of generation, as a last ``Token`` with id -1."""
        if self.finish_reason == "stop" and self.text_out.hit:
            return []
        tail = self.text_out.finish(self.detok.flush(), check=len(self.ids) >= self.min_tokens)
        return [Token(id=-1, text=tail, from_draft=False, round=round_index)] if tail else []
