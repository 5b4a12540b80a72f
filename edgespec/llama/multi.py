"""Many sequences in one context: a unified KV pool shared by up to ``n_seq`` sequences,
one ``llama_decode`` for the tokens of all of them, logits only at the rows asked for.

A ``MultiContext`` keeps, per sequence id, the list of tokens its KV memory holds (as
``Context`` does for sequence 0), so ``pos_max(s) == len(tokens[s]) - 1`` at all times:
``decode`` appends after success, ``rollback`` trims, ``free`` empties a sequence so
another can take its cells (continuous batching), ``share`` gives a sequence what
another already computed (a common prompt prefix). ``view(s)`` is the one sequence as the
speculative loop sees a context (``n_ctx``, ``n_batch``, ``tokens``, ``rollback``).
It knows nothing about scheduling: the caller decides which sequences share a decode.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import DecodeError
from .backend import _last_llama_errors, _llama
from .context import _LlamaContext, in_row_order
from .model import Model
from .recurrent import MULTI_SEQUENCE_UNSAFE

# (sequence id, tokens to append, indices into those tokens whose logits are wanted)
Part = tuple[int, Sequence[int], Sequence[int]]


class MultiContext(_LlamaContext):
    """A llama.cpp context holding up to ``n_seq`` sequences in one KV pool of ``n_ctx``."""

    def __init__(
        self,
        model: Model,
        *,
        n_seq: int,
        n_ctx: int,
        n_batch: int = 512,
        n_threads: int | None = None,
        rollback: int = 0,
    ) -> None:
        if n_seq < 1:
            raise ValueError("n_seq must be at least 1")
        if n_seq > 1 and model.is_recurrent and model.architecture in MULTI_SEQUENCE_UNSAFE:
            rollback = 0  # its snapshots go wrong across sequences (recurrent.py): no drafts here
        super().__init__(model, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads, n_seq_max=n_seq, rollback=rollback)
        self.n_seq = n_seq
        # create_context's choice: one pool on llama.cpp's kernels, a stream per sequence
        # on exact ones
        self.unified = n_seq > 1 and not model.exact
        self.tokens: list[list[int]] = [[] for _ in range(n_seq)]
        self._seq_of_row = [-1] * self.n_batch  # what b.seq_id[i][0] holds now

    def decode(self, parts: Sequence[Part]) -> list[np.ndarray]:
        """Append each part's tokens to its sequence in ONE decode; return, per part, the
        logits of its rows (shape ``(len(rows), n_vocab)``, a copy).

        The parts together must fit one batch (``n_batch`` tokens) and each sequence may
        appear once. On failure nothing of this batch stays in any sequence's memory.
        """
        n = sum(len(toks) for _, toks, _ in parts)
        if n == 0:
            raise ValueError("decode() needs at least one token")
        if n > self.n_batch:
            raise ValueError(f"{n} tokens do not fit one batch of {self.n_batch}")
        seqs = [s for s, _, _ in parts]
        if len(set(seqs)) != len(seqs):
            raise ValueError("a sequence may appear only once per decode")
        b, i = self._batch, 0
        self._b_logits[:n] = 0
        for s, toks, rows in parts:
            m = len(toks)
            start = len(self.tokens[s])
            self._b_token[i : i + m] = np.asarray(toks, dtype=np.int32)
            self._b_pos[i : i + m] = np.arange(start, start + m, dtype=np.int32)
            for j in range(i, i + m):
                if self._seq_of_row[j] != s:
                    b.seq_id[j][0] = s
                    self._seq_of_row[j] = s
            for r in rows:
                if not 0 <= r < m:
                    raise ValueError(f"row {r} is outside the part's {m} tokens")
                self._b_logits[i + r] = 1
            i += m
        rc = self._decode_batch(n)
        if rc != 0:
            for s in seqs:  # nothing half-written stays behind
                _llama.llama_memory_seq_rm(self._mem, s, len(self.tokens[s]), -1)
            raise DecodeError(
                f"llama_decode failed with code {rc} for a batch of {n} tokens over "
                f"{len(parts)} sequences ({_last_llama_errors() or 'no reason given'})"
            )
        for s, toks, _ in parts:
            self.tokens[s].extend(int(t) for t in toks)
            self._decoded(s, len(toks))
        n_out = sum(len(rows) for _, _, rows in parts)
        if not n_out:
            return [np.empty((0, self.n_vocab), dtype=np.float32) for _ in parts]
        arr = self._logits(n_out)  # one row per flagged token, in batch order
        result, k = [], 0
        for _, _, rows in parts:
            result.append(np.array(in_row_order(arr[k : k + len(rows)], rows)))
            k += len(rows)
        return result

    def rollback(self, seq: int, n_keep: int) -> None:
        """Keep the first ``n_keep`` tokens of sequence ``seq``; remove the rest."""
        toks = self.tokens[seq]
        if n_keep >= len(toks):
            return
        if n_keep < 0:
            raise ValueError("n_keep must be >= 0")
        self._remove_tail(seq, n_keep, len(toks))
        del toks[n_keep:]

    def share(self, src: int, dst: int, n: int) -> None:
        """Let sequence ``dst`` hold the first ``n`` tokens of ``src`` without computing
        them, so a prompt prefix is computed once for every sequence that starts with
        it. ``dst`` must hold a prefix of those tokens already (or nothing). In a unified
        pool the cells gain ``dst``'s id (``llama_memory_seq_cp``); with a KV stream per
        sequence llama.cpp copies ``src``'s whole stream into ``dst``'s at the next
        decode, and ``dst`` drops what lies past ``n``: its cells then sit where a solo
        run puts them (positions 0..n-1 in cells 0..n-1), which exactness needs."""
        have, held = len(self.tokens[dst]), self.tokens[src]
        if src == dst or not have <= n <= len(held) or self.tokens[dst] != held[:have] or not self.can_share(src, n):
            raise ValueError(f"sequence {dst} cannot take tokens {have}..{n} of sequence {src}")
        if n == have:
            return
        if self.unified:
            _llama.llama_memory_seq_cp(self._mem, src, dst, have, n)
        else:
            _llama.llama_memory_seq_cp(self._mem, src, dst, -1, -1)
            if n < len(held):
                self._remove_tail(dst, n, len(held))
        self.tokens[dst][:] = held[:n]

    def can_share(self, src: int, n: int) -> bool:
        """Whether ``share`` can hand over ``src``'s first ``n`` tokens: any prefix of a
        KV cache; of a recurrent state none (its state after a prefix is gone; a sequence
        shares no cells with another there, its prompt is decoded again)."""
        return not self.recurrent

    def free(self, seq: int) -> None:
        """Forget sequence ``seq`` entirely: its cells go back to the pool."""
        _llama.llama_memory_seq_rm(self._mem, seq, 0, -1)
        self.tokens[seq].clear()

    def pos_max(self, seq: int) -> int:
        """Largest position of sequence ``seq`` in the KV memory (-1 when empty)."""
        return int(_llama.llama_memory_seq_pos_max(self._mem, seq))

    def view(self, seq: int, n_ctx: int) -> "SeqView":
        return SeqView(self, seq, n_ctx)


class SeqView:
    """One sequence of a ``MultiContext`` seen as a context of ``n_ctx`` tokens (what it
    reserved of the pool): what the speculative loop reads and how it rolls back."""

    def __init__(self, owner: MultiContext, seq: int, n_ctx: int) -> None:
        self.owner, self.seq, self.n_ctx = owner, seq, n_ctx
        self.n_batch = owner.n_batch

    @property
    def tokens(self) -> list[int]:
        return self.owner.tokens[self.seq]

    def rollback(self, n_keep: int) -> None:
        self.owner.rollback(self.seq, n_keep)

    def pos_max(self) -> int:
        return self.owner.pos_max(self.seq)

    @property
    def max_drafts(self) -> int:
        return self.owner.max_drafts
