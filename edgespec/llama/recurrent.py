"""What a context on a recurrent or hybrid model can undo, and how it undoes the rest.

A KV cache forgets any tail of a sequence (``llama_memory_seq_rm``). A recurrent state
(Mamba, Gated DeltaNet, LFM2's short convolutions) is one running summary per sequence:
llama.cpp can only give back what it kept of it. A context opened with ``n_rs_seq = R``
(``create_context``) keeps, inside each decode, the state after each of the last R tokens
of every sequence (snapshot planes), and a tail removal of r positions restores one of
them. That removal is right only if (read in the vendored source,
src/llama-memory-recurrent.cpp, and upstream issues #26695 and #29117):

* 1 <= r <= R, and r is at most that sequence's tokens in its last decode less one:
  undoing a whole decode (r equal to its tokens) or reaching past it returns true and
  restores a stale plane, a silently wrong state;
* one removal per decode: the next partial removal before the sequence decodes again
  returns false;
* a removal of everything (position 0 on) always works.

``RollbackRoom`` keeps those facts per sequence (how many tokens each sequence had in its
last decode, whether a removal is pending) and answers how far it may roll back now, so
the loop plans its drafts within it (a verify of k drafts is k + 1 tokens: all k can be
undone when R >= k) and nothing ever asks llama.cpp for a removal it would get wrong.

Beyond that window the state comes back from a checkpoint: ``Checkpoints`` keeps a few
copies of a sequence's recurrent half (``llama_state_seq_get_data_ext`` with
``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``, as llama-server's context checkpoints), each with
the tokens it follows; restoring one and cutting the KV half at its length puts the
sequence back exactly where it was then. Where no checkpoint fits, the caller decodes
again from the start.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

from .backend import _llama

# Architectures whose snapshots are wrong when several sequences share a decode: on
# qwen4exp llama.cpp's own test of a multi-sequence split replay fails (upstream #28019,
# logits off by 9.25) while one sequence restores exactly. Their many-sequence contexts
# keep no snapshots (their batches decode plainly).
MULTI_SEQUENCE_UNSAFE = frozenset({"qwen4exp"})
# how many checkpoints a sequence keeps (the oldest goes first); each holds one copy of
# the recurrent state (a Qwen3.5-0.8B's: ~20 MB in f32)
MAX_CHECKPOINTS = 4
_PARTIAL = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the recurrent half, not the KV cache


class RollbackRoom:
    """How many positions each sequence of a recurrent context can undo now."""

    def __init__(self, n_rs_seq: int) -> None:
        self.n_rs_seq = n_rs_seq
        self._last_run: dict[int, int] = {}  # tokens of the sequence in its last decode (0: none since a removal)

    def decoded(self, seq: int, n_tokens: int) -> None:
        """``seq`` had ``n_tokens`` in the decode that just succeeded."""
        self._last_run[seq] = n_tokens

    def removed(self, seq: int) -> None:
        """A removal of ``seq``'s tail is pending: no other until it decodes again."""
        self._last_run[seq] = 0

    def room(self, seq: int) -> int:
        """The most positions of ``seq``'s tail one removal can undo now."""
        return max(0, min(self.n_rs_seq, self._last_run.get(seq, 0) - 1))


@dataclass
class Checkpoint:
    """A copy of one sequence's recurrent state after ``tokens``."""

    tokens: list[int]
    data: ctypes.Array
    size: int


class Checkpoints:
    """The last few checkpoints of each sequence of context ``ptr``."""

    def __init__(self, ptr, mem, limit: int = MAX_CHECKPOINTS) -> None:
        self._ptr, self._mem, self.limit = ptr, mem, limit
        self._kept: dict[int, list[Checkpoint]] = {}
        self.taken = 0  # checkpoints written, and restored, over the context's life
        self.restored = 0

    def take(self, seq: int, tokens: list[int]) -> None:
        """Keep a copy of ``seq``'s recurrent state, which follows ``tokens`` (the whole
        sequence as the KV memory holds it). One per token list: the newest wins."""
        if not tokens:
            return
        kept = self._kept.setdefault(seq, [])
        kept[:] = [c for c in kept if c.tokens != tokens]
        size = _llama.llama_state_seq_get_size_ext(self._ptr, seq, _PARTIAL)
        data = (ctypes.c_uint8 * size)()
        written = _llama.llama_state_seq_get_data_ext(self._ptr, data, size, seq, _PARTIAL)
        if written == 0:
            return  # nothing to keep (llama.cpp logs why): the caller decodes again
        kept.append(Checkpoint(list(tokens), data, written))
        self.taken += 1
        del kept[: max(0, len(kept) - self.limit)]

    def best(self, seq: int, prompt: list[int] | tuple[int, ...]) -> Checkpoint | None:
        """The longest checkpoint of ``seq`` whose tokens begin ``prompt``."""
        best = None
        for c in self._kept.get(seq, ()):
            n = len(c.tokens)
            if n <= len(prompt) and (best is None or n > len(best.tokens)) and list(prompt[:n]) == c.tokens:
                best = c
        return best

    def restore(self, seq: int, ckpt: Checkpoint) -> bool:
        """Put ``seq`` back where ``ckpt`` was taken: its recurrent state restored and its
        KV cache cut to the checkpoint's tokens. False if llama.cpp refused (the caller
        then clears the sequence and decodes again)."""
        if _llama.llama_state_seq_set_data_ext(self._ptr, ckpt.data, ckpt.size, seq, _PARTIAL) == 0:
            return False
        if not _llama.llama_memory_seq_rm(self._mem, seq, len(ckpt.tokens), -1):
            return False
        self.restored += 1
        return True

    def drop(self, seq: int) -> None:
        self._kept.pop(seq, None)

    def nbytes(self) -> int:
        """The memory the kept checkpoints take."""
        return sum(c.size for kept in self._kept.values() for c in kept)
