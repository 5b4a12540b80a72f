"""A compiled constraint and its matcher: the grammar state that moves with the KV cache.

``Constraint`` is a checked grammar bound to one model's tokenizer; each generation gets
its own ``Matcher`` from it. The matcher answers, for the next position, which tokens
the grammar allows (``fill_mask`` / ``masks``: llguidance's bitmask, one bit per token,
computed into a reusable buffer), which tokens are forced whatever the model says
(``forced``: ``compute_ff_tokens``), and how many of a list of tokens it would take
(``validate``); ``consume`` advances it and ``rollback`` takes tokens back.

THE INVARIANT. A matcher has consumed exactly the tokens committed after the prompt —
``x_last`` included, since it is chosen, only not yet decoded — plus, during a round,
the drafts in flight; when the round rolls the KV cache back past a rejection, the
matcher rolls back with it. ``consumed`` counts the tokens; ``decoding/speculative.py`` asserts
``matcher.consumed == len(committed) - n_prompt`` after every round.

A lazy TRIGGER (llama.cpp's ``grammar_lazy``, for tool calls): generation is free until
the committed text contains the trigger; from the trigger's first byte on, the grammar
(which itself starts with the trigger text) applies. On activation the text from the
trigger to the end of the activating token is tokenized and consumed; tokens after it
are consumed one for one. Rolling back past the activating token makes the matcher free
again (and resets llguidance's state), so speculation past a trigger stays exact. While
free, the only tokens masked out are those that would complete the trigger and go on with
bytes the grammar refuses (``trigger.TriggerGuard``).

Any llguidance error state raises ``ConstraintStateError``: a request never goes on
unconstrained.
"""

from __future__ import annotations

import bisect
import json
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
from llguidance import LLMatcher, LLTokenizer

from ..errors import ConstraintError, ConstraintStateError
from .formats import GrammarSpec, one_line
from .trigger import TriggerGuard


@dataclass(frozen=True, eq=False)
class Constraint:
    """A checked grammar bound to one model's tokenizer (valid while the model is open).

    ``kind`` is "json", "regex" or "grammar"; ``schema`` the JSON schema (json only);
    ``trigger`` the lazy trigger or None; ``warnings`` what lenient mode relaxed."""

    spec: GrammarSpec
    tokenizer: LLTokenizer
    n_vocab: int

    @property
    def kind(self) -> str:
        return self.spec.kind

    @property
    def grammar(self) -> str:
        return self.spec.grammar

    @property
    def schema(self) -> object:
        return self.spec.schema

    @property
    def trigger(self) -> str | None:
        return self.spec.trigger

    @property
    def warnings(self) -> tuple[str, ...]:
        return self.spec.warnings

    def matcher(self) -> Matcher:
        """A fresh matcher at the start of the structure (or free, before a trigger)."""
        return Matcher(self)

    def outcome(self, text: str, complete: bool | None) -> tuple[bool | None, object]:
        """(structured_complete, parsed): the parsed JSON value when the output is a
        complete JSON structure (None otherwise, and for the other kinds)."""
        if self.kind != "json" or not complete:
            return complete, None
        try:
            return True, json.loads(text)
        except ValueError:  # a stop string cut the text the matcher accepted
            return False, None


def probe(constraint: Constraint) -> None:
    """Check a constraint against its model's tokenizer before any generation: llguidance
    validates special tokens (``<tool_call>``) only with a tokenizer, and a grammar whose
    start allows no token, or forces tokens without end (a rule that requires itself),
    fails only on its first mask. Each is a ``ConstraintError`` (a 400, exit code 2)
    naming the field, instead of a ``ConstraintStateError`` mid-request."""
    spec = constraint.spec
    what = {"json": "JSON schema", "regex": "regex"}.get(spec.kind, "grammar")
    is_error, messages = LLMatcher.validate_grammar_with_warnings(spec.grammar, constraint.tokenizer)
    if is_error:
        reason = one_line(messages[0]) if messages else "invalid"
        raise ConstraintError(f"the {what} does not fit this model: {reason}", param=spec.param)
    try:
        m = Matcher(constraint)
        if m.active:
            m.fill_mask(0)
            m.forced()
    except ConstraintStateError as exc:
        text = str(exc)
        reason = (
            "it forces output without end (a required part that contains itself?)"
            if "Too many" in text
            else "it allows no output at all (a rule that only refers to itself?)"
        )
        raise ConstraintError(f"the {what} can never be satisfied: {reason}", param=spec.param) from None


def cut_reason(kind: str, finish_reason: str, n_tokens: int, max_tokens: int) -> str:
    """Why a reply's structure is not complete, in words every surface shows the same way
    (``Result.structure_error``, ``--json``, a batch line, the command's error)."""
    what = "the JSON" if kind == "json" else "the structure"
    if finish_reason == "length":
        if n_tokens >= max_tokens:
            return f"max_tokens ({max_tokens}) ran out before {what} was complete"
        return f"the context filled up (after {n_tokens} tokens) before {what} was complete"
    if finish_reason == "stop":
        return f"a stop string ended the reply before {what} was complete"
    return f"the reply ended ({finish_reason}) before {what} was complete"


def allowed_array(bits: np.ndarray, n: int) -> np.ndarray:
    """A bitmask row as ``n`` booleans (True: the token is allowed)."""
    return np.unpackbits(bits.view(np.uint8), count=n, bitorder="little").view(bool)


# -inf's bit pattern per float width: a forbidden token's penalty, built without branches
_NEG_INF_BITS = {np.dtype(np.float32): (np.uint32, 0xFF800000), np.dtype(np.float64): (np.uint64, 0xFFF0000000000000)}


def mask_logits(row: np.ndarray, allowed: np.ndarray) -> np.ndarray:
    """``row`` + (0 where ``allowed``, -inf elsewhere), as a new array (the logits row from
    llama.cpp is never written). ``allowed``: booleans or 0/1 bytes as long as the row.
    The penalty is made from -inf's bit pattern: a boolean-indexed copy costs ~15x more
    on a 152k vocabulary with a scattered mask (~1 ms against ~80 us per row)."""
    spec = _NEG_INF_BITS.get(row.dtype)
    if spec is None:
        return np.where(allowed, row, -np.inf)
    uint, neg_inf = spec
    pen = (allowed.view(np.uint8) ^ 1).astype(uint)
    pen *= uint(neg_inf)
    out = pen.view(row.dtype)
    out += row
    return out


def apply_mask(bits: np.ndarray | None, row: np.ndarray) -> np.ndarray:
    """``row`` (logits) with every token the mask forbids at -inf; a new array (the
    logits row from llama.cpp is never written). ``bits`` None: no constraint here."""
    if bits is None:
        return row
    return mask_logits(row, allowed_array(bits, row.shape[0]))


class Matcher:
    """One generation's grammar state (see the module docstring for the invariant)."""

    def __init__(self, constraint: Constraint) -> None:
        self.constraint = constraint
        tok = constraint.tokenizer
        self._m = LLMatcher(tok, constraint.grammar, log_level=0)
        self._check("the grammar could not start")
        self.n_vocab = constraint.n_vocab
        self._words = (tok.vocab_size + 31) // 32
        self._buf = np.zeros((17, self._words), dtype=np.int32)
        self.consumed = 0  # tokens consumed: THE invariant's count
        # End of generation is kept here, not in llguidance (whose rollback over its
        # stop takes back a token too many): the EOG tokens consumed at the end.
        self._eos = frozenset(tok.eos_tokens)
        self._ended = 0
        self.t_mask = 0.0  # seconds computing masks and forced tokens
        trig = constraint.trigger
        self._trigger = trig.encode("utf-8") if trig else None
        self.active = trig is None  # is the grammar in force?
        self.started_at: int | None = 0 if trig is None else None  # token index where it began
        self._text = bytearray()  # lazy: the free text so far (bytes) ...
        self._ends: list[int] = []  # ... and where each free token ends in it
        self._n_free = 0  # lazy: tokens consumed before the grammar's own
        self._guard = TriggerGuard(tok, self._trigger, self._m) if trig else None

    # -- state ---------------------------------------------------------------------------
    def _check(self, what: str) -> None:
        if self._m.is_error():
            raise ConstraintStateError(f"{what}: {self._m.get_error().splitlines()[0][:300]}")

    def is_accepting(self) -> bool:
        """Can the output end here with the structure complete (True while a lazy
        grammar has not started: free text may end anywhere)."""
        return self._m.is_accepting() if self.active else True

    def is_stopped(self) -> bool:
        """The structure is complete and nothing but end-of-generation may follow."""
        return self.active and self._m.is_stopped()

    def complete(self) -> bool | None:
        """Whether what was consumed completes the structure (None: a lazy grammar that
        never started)."""
        return self._m.is_accepting() if self.active else None

    def outcome(self, reply: Any, max_tokens: int) -> dict:
        """The structure's fields of a finished reply's ``Done`` (``structured_complete``,
        ``parsed``, ``structure_error``, ``relaxed``). ``reply``: a ``decoding.reply.Reply``
        (``ids``, ``text``, ``finish_reason``) of a request of ``max_tokens``. Judged without the tokens
        consumed past its end (its EOG, or the rest of a round cut by max_tokens or a
        stop string), so the matcher is first rolled back to the reply's length."""
        self.rollback(self.consumed - len(reply.ids))
        complete, parsed = self.constraint.outcome(reply.text, self.complete())
        error = None
        if complete is False:
            error = cut_reason(self.constraint.kind, reply.finish_reason, len(reply.ids), max_tokens)
        return dict(
            structured_complete=complete, parsed=parsed, structure_error=error, relaxed=tuple(self.constraint.warnings)
        )

    # -- advancing -----------------------------------------------------------------------
    def consume(self, tokens: Sequence[int]) -> None:
        """Advance over ``tokens`` (committed ones, or drafts in flight)."""
        for t in tokens:
            t = int(t)
            if not self.active:
                self._consume_free(t)
                continue
            if self._ended or t in self._eos:
                if self._ended or not self._m.is_accepting():
                    raise ConstraintStateError(
                        f"end of generation (token {t}) where the structure "
                        f"is not complete, after {self.consumed} tokens"
                    )
                self._ended = 1
                self.consumed += 1
                continue
            if not self._m.consume_token(t):
                piece = self.constraint.tokenizer.decode_bytes([t])
                raise ConstraintStateError(
                    f"the grammar refused token {t} ({piece!r}) after {self.consumed} tokens: "
                    + (self._m.get_error().splitlines() or ["no reason given"])[0][:300]
                )
            self.consumed += 1

    def _consume_free(self, t: int) -> None:
        start = len(self._text)
        self._text += self.constraint.tokenizer.decode_bytes([t])
        self._ends.append(len(self._text))
        self.consumed += 1
        trig = self._trigger
        at = self._text.find(trig, max(0, start - len(trig) + 1))
        if at < 0:
            return
        # The grammar begins at byte ``at``: consume the text from there to the end of
        # this token as llguidance's own tokens (it may start inside an earlier token).
        # A special token's text (<tool_call>) is tried as that token first, then as
        # plain text, so a grammar may spell the trigger either way.
        tail = bytes(self._text[at:])
        tok = self.constraint.tokenizer
        for special in (True, False):
            if self._m.consume_tokens(tok.tokenize_bytes(tail, parse_special=special)):
                break
            self._m.reset()  # leave the error state and try the other spelling
        else:
            del self._ends[-1]  # this token was never taken
            del self._text[start:]
            self.consumed -= 1
            raise ConstraintStateError(
                f"the text from the trigger on ({tail[:80]!r}) does not "
                "match the grammar, which must start with the trigger"
            )
        self.active = True
        self.started_at = bisect.bisect_right(self._ends, at)
        self._n_free = self.consumed

    def rollback(self, n: int) -> None:
        """Take back the last ``n`` consumed tokens (with the KV cache's rollback)."""
        if n <= 0:
            return
        if n > self.consumed:
            raise ValueError(f"cannot roll back {n} tokens, {self.consumed} consumed")
        if self._ended:
            self._ended, self.consumed, n = 0, self.consumed - 1, n - 1
            if n == 0:
                return
        if self._trigger is None:
            if not self._m.rollback(n):
                self._check("the grammar could not roll back")
            self.consumed -= n
            return
        own = self.consumed - self._n_free  # tokens consumed under the grammar, one for one
        if self.active and n <= own:
            self._m.rollback(n)
            self._check("the grammar could not roll back")
            self.consumed -= n
            return
        keep = self.consumed - n
        if self.active:  # back before the trigger: free text again
            self._m.reset()
            self.active, self.started_at, self._n_free = False, None, 0
        del self._ends[keep:]
        del self._text[(self._ends[-1] if self._ends else 0) :]
        self.consumed = keep

    # -- questions about the next position ----------------------------------------------
    def forced(self) -> list[int]:
        """Tokens the grammar forces from here, whatever the model would say (their
        canonical tokenization); [] when free or nothing is forced."""
        if not self.active:
            return []
        t0 = time.perf_counter()
        ff = list(self._m.compute_ff_tokens())
        self.t_mask += time.perf_counter() - t0
        self._check("the grammar failed computing forced tokens")
        return ff

    def likely(self) -> list[int]:
        """The canonical tokens of the bytes the grammar forces from here when no token is
        forced: the text is certain, its split into tokens is not (``":"`` may come as
        ``":`` then ``"``), so these are a good guess, not a certainty. [] when free."""
        if not self.active:
            return []
        t0 = time.perf_counter()
        text = bytes(self._m.compute_ff_bytes())
        ids = self.constraint.tokenizer.tokenize_bytes(text) if text else []
        ids = ids[: self.validate(ids)] if ids else []
        self.t_mask += time.perf_counter() - t0
        return ids

    def validate(self, tokens: Sequence[int]) -> int:
        """How many of ``tokens`` (from the current state on) the grammar accepts in a
        row; the state is left as it was."""
        tokens = [int(t) for t in tokens]
        if self._trigger is None:
            return self._m.validate_tokens(tokens)
        n = 0
        try:
            for t in tokens:
                if self.active and self._m.validate_tokens([t]) != 1:
                    break
                self.consume([t])
                n += 1
        except ConstraintStateError:
            pass  # a trigger whose text the grammar refuses: the draft ends before it
        self.rollback(n)
        return n

    def fill_mask(self, row: int = 0) -> np.ndarray | None:
        """The allowed tokens at the next position as a bitmask row (int32 words, bit i of
        the row = token i) in this matcher's reusable buffer: valid until the next fill
        of the same row. None when every token is allowed (free text before a trigger)."""
        if row >= self._buf.shape[0]:
            self._buf = np.zeros((max(row + 1, 2 * self._buf.shape[0]), self._words), dtype=np.int32)
        t0 = time.perf_counter()
        out = self._buf[row]
        if not self.active:
            bad = self._guard.bad(self._text)
            self.t_mask += time.perf_counter() - t0
            if not bad:
                return None
            out.fill(-1)
            words = out.view(np.uint32)
            for t in bad:
                words[t >> 5] &= np.uint32(~(1 << (t & 31)) & 0xFFFFFFFF)
            return out
        self._m.unsafe_compute_mask_ptr(out.ctypes.data, out.nbytes)
        self.t_mask += time.perf_counter() - t0
        self._check("the grammar failed computing its mask")
        if not out.any():
            raise ConstraintStateError(f"the grammar allows no token after {self.consumed} tokens")
        return out

    def allowed(self) -> np.ndarray | None:
        """The next position's allowed tokens as booleans over the vocabulary (None when
        free): what a model drafter masks its own distribution q with."""
        bits = self.fill_mask(self._buf.shape[0] - 1)
        return None if bits is None else allowed_array(bits, self.n_vocab)

    def masks(self, drafts: Sequence[int], is_eog=lambda t: False) -> list[np.ndarray | None]:
        """The masks of a verify batch: row i is the grammar state after the drafts
        before i (len(drafts) + 1 rows). The state is left as it was. Rows after an
        end-of-generation draft are None (the loop never reads them)."""
        out: list[np.ndarray | None] = []
        n = 0
        for i in range(len(drafts) + 1):
            out.append(self.fill_mask(i))
            if i == len(drafts):
                break
            if is_eog(drafts[i]):
                out.extend([None] * (len(drafts) - i))
                break
            self.consume([drafts[i]])
            n += 1
        self.rollback(n)
        return out
