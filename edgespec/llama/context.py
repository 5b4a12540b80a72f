"""Contexts: a llama.cpp context on one model holding sequence 0, batch decode with the
logits of the rows asked for, rollback of the KV memory, and its last position.

On a recurrent or hybrid model (``Model.is_recurrent``) the context keeps ``n_rs_seq``
recurrent-state snapshots per sequence when asked (``rollback``: the most drafts a verify
may undo) and says how far it can roll back now (``max_drafts``, ``rollback_room``); what
lies beyond comes back from a checkpoint or is decoded again (``recurrent.py``)."""

from __future__ import annotations

import contextlib
import time
from typing import Sequence

import numpy as np

from ..errors import ContextOverflowError, DecodeError, InputError, ModelLoadError, RollbackError
from .backend import _last_llama_errors, _llama, _log_mark, default_threads
from .kernels import _FLASH_ATTN_ENABLED, _GGML_TYPE_F16, _GGML_TYPE_Q8_0
from .model import ASSISTANT_ARCH, Model
from .nextn import HiddenRows
from .prefix import common_prefix_len, keep_prefix
from .recurrent import Checkpoints, RollbackRoom
from .rpc import watch


def create_context(
    model: Model,
    *,
    n_ctx: int,
    n_batch: int,
    n_threads: int,
    n_threads_batch: int | None = None,
    n_seq_max: int = 1,
    n_rs_seq: int = 0,
    mtp: bool = False,
    other=None,
) -> tuple:
    """A llama.cpp context on ``model``: (pointer, whether its kernels are batch-invariant).

    With several sequences on llama.cpp's kernels the KV memory is one unified pool
    (``kv_unified``): a batch may then mix sequences and token counts freely and stays
    one graph computation. On exact kernels each sequence gets its own KV stream
    instead: in a shared pool a sequence's cells can land out of position order (a new
    prompt wrapping around holes others left), and attention sums its cells in cell
    order, so its logits would depend on its neighbours. Separate streams fill like a
    solo context; the price is that llama.cpp cuts a batch into micro-batches of equal
    token counts over consecutive sequence ids.

    On a recurrent or hybrid model, ``n_rs_seq`` snapshots of each sequence's recurrent
    state (a tail of up to that many positions can be removed after a decode). llama.cpp
    keeps a sequence's last 1 + n_rs_seq tokens in one micro-batch and aborts the process
    when ``n_ubatch`` is under n_rs_seq + 2, so the request is cut to ``n_batch - 2``
    (the micro-batch is the whole batch here); embeddings stay off, which that rule needs.
    An architecture without snapshots gets none (llama.cpp clamps to 0: the caller reads
    ``llama_n_rs_seq`` back). ``mtp``: a context of the model's multi-token-prediction
    head (``LLAMA_CONTEXT_TYPE_MTP``, ``mtp.MtpContext``): its memory is the KV cache of
    the nextn layer alone, no recurrent state, no snapshots. ``other``: the context whose
    KV cache this one reads (llama.cpp's ``ctx_other``: a Gemma 4 assistant's, ``assistant.py``);
    a model that needs one and has none is refused with a clear ``InputError``.
    """
    if other is None and model.architecture == ASSISTANT_ARCH:
        raise InputError(
            f"{model.label} is a Gemma 4 assistant ({ASSISTANT_ARCH}): a drafter that reads its "
            "target's KV cache, not a model that generates on its own. Use it as the draft of its "
            "Gemma 4 target (--target THE_GEMMA4_FILE --draft assistant, or Engine(target, draft=this file))"
        )
    params = _llama.llama_context_default_params()
    params.n_ctx = n_ctx
    params.n_batch = n_batch
    params.n_ubatch = n_batch
    params.n_seq_max = n_seq_max
    params.kv_unified = n_seq_max > 1 and not model.exact
    params.n_threads = n_threads
    params.n_threads_batch = n_threads_batch or n_threads
    if mtp:
        params.ctx_type = _llama.LLAMA_CONTEXT_TYPE_MTP
        params.ctx_other = other
    elif model.is_recurrent:
        params.n_rs_seq = max(0, min(n_rs_seq, n_batch - 2))
        params.embeddings = False
    exact = model.exact  # see "Batch-invariant numerics" in kernels.py
    if exact:
        params.flash_attn_type = _FLASH_ATTN_ENABLED
        params.type_k = _GGML_TYPE_F16
        params.type_v = _GGML_TYPE_Q8_0
    mark = _log_mark()
    ptr = _llama.llama_init_from_model(model._ptr, params)
    batch_invariant = exact
    if not ptr and exact:
        # q8_0 V needs head sizes that are multiples of 32; fall back to llama.cpp's
        # default cache types (exact up to 256 cached tokens, see kernels.py)
        params.type_v = _GGML_TYPE_F16
        ptr = _llama.llama_init_from_model(model._ptr, params)
        batch_invariant = False
    if not ptr:
        reason = _last_llama_errors(mark) or "llama.cpp gave no reason"
        raise ModelLoadError(
            f"could not create a context of {n_ctx} tokens for {model.path.name}: {reason}. "
            "Try a smaller --n-ctx, fewer parallel sequences, or fewer GPU layers."
        )
    return ptr, batch_invariant


class _LlamaContext:
    """What every context owns: the llama.cpp context, its one reusable batch with numpy
    views over its arrays (filling a batch is a slice assignment), the timed decode and
    logits read, and the checked removal of a sequence's tail. ``Context`` (sequence 0)
    and ``multi.MultiContext`` (many sequences) add their own bookkeeping."""

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int,
        n_batch: int,
        n_threads: int | None,
        n_threads_batch: int | None = None,
        n_seq_max: int = 1,
        rollback: int = 0,
    ) -> None:
        self.model = model
        self.n_threads = n_threads or default_threads()
        self._ptr, self.batch_invariant = create_context(
            model,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=self.n_threads,
            n_threads_batch=n_threads_batch,
            n_seq_max=n_seq_max,
            n_rs_seq=rollback,
        )
        self._mem = _llama.llama_get_memory(self._ptr)
        # a recurrent state undoes only what its snapshots kept (recurrent.py)
        self.recurrent: bool = model.is_recurrent
        self.n_rs_seq: int = int(_llama.llama_n_rs_seq(self._ptr)) if self.recurrent else 0
        self._room = RollbackRoom(self.n_rs_seq) if self.recurrent else None
        self.checkpoints = Checkpoints(self._ptr, self._mem) if self.recurrent else None
        self.n_ctx: int = _llama.llama_n_ctx(self._ptr)
        self.n_batch: int = _llama.llama_n_batch(self._ptr)
        self.n_vocab = model.n_vocab
        self.t_decode = 0.0  # seconds spent inside llama_decode (and the logits wait)
        self.n_decode_calls = 0
        # over RPC, a server that stops answering ends the process with an error (rpc.watch)
        self._watch = watch(model.rpc) if model.rpc else contextlib.nullcontext()
        self._batch = _llama.llama_batch_init(self.n_batch, 0, 1)
        b = self._batch
        self._b_token = np.ctypeslib.as_array(b.token, shape=(self.n_batch,))
        self._b_pos = np.ctypeslib.as_array(b.pos, shape=(self.n_batch,))
        self._b_nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(self.n_batch,))
        self._b_logits = np.ctypeslib.as_array(b.logits, shape=(self.n_batch,))
        self._b_nseq[:] = 1

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            _llama.llama_batch_free(self._batch)
            _llama.llama_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    def _decode_batch(self, n_tokens: int) -> int:
        """llama_decode of the first ``n_tokens`` of the batch, timed; its return code."""
        self._batch.n_tokens = n_tokens
        t0 = time.perf_counter()
        with self._watch:
            rc = _llama.llama_decode(self._ptr, self._batch)
        self.t_decode += time.perf_counter() - t0
        self.n_decode_calls += 1
        return rc

    def _logits(self, n_out: int) -> np.ndarray:
        """The last decode's ``n_out`` output rows, in batch order (a view)."""
        t0 = time.perf_counter()
        with self._watch:
            ptr = _llama.llama_get_logits(self._ptr)  # waits for an asynchronous backend (RPC)
        self.t_decode += time.perf_counter() - t0
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))

    @property
    def max_drafts(self) -> int:
        """The most drafts one verify batch may hold and still be undone: the batch less
        the last committed token, or on a recurrent state its snapshots (0: none)."""
        return self.n_rs_seq if self.recurrent else self.n_batch - 1

    def rollback_room(self, seq: int = 0) -> int | None:
        """How many positions of ``seq``'s tail one removal can undo now (None: any)."""
        return self._room.room(seq) if self._room is not None else None

    def _decoded(self, seq: int, n_tokens: int) -> None:
        if self._room is not None:
            self._room.decoded(seq, n_tokens)

    def restored(self, seq: int) -> None:
        """``seq``'s state was just restored from a checkpoint: nothing to undo until it
        decodes again."""
        if self._room is not None:
            self._room.removed(seq)

    def _remove_tail(self, seq: int, n_keep: int, held: int) -> None:
        """Remove positions ``n_keep..held-1`` of ``seq`` from the memory, checking
        llama_memory_seq_rm's answer. On a recurrent state only what its snapshots kept
        can go (``rollback_room``); the loop never asks for more, so more is a bug here,
        refused before it could corrupt the state silently."""
        room = self.rollback_room(seq)
        if room is not None and 0 < n_keep and held - n_keep > room:
            raise RollbackError(
                f"{self.model.label} ({self.model.architecture}) keeps a recurrent state that can "
                f"undo {room} position(s) now, not {held - n_keep}: edgespec planned past what the "
                "model can roll back (a bug: please report it; --draft none decodes plainly)"
            )
        if not _llama.llama_memory_seq_rm(self._mem, seq, n_keep, -1):
            raise RollbackError(
                f"{self.model.label} ({self.model.architecture}) could not remove positions "
                f"{n_keep}..{held - 1} of its memory; use it with --draft none"
            )
        if self._room is not None:
            self._room.removed(seq)


def in_row_order(block: np.ndarray, rows: Sequence[int]) -> np.ndarray:
    """Output rows come back in batch order; reorder ``block`` to the order of ``rows``."""
    order = np.argsort(np.asarray(rows))
    if np.all(order == np.arange(len(rows))):
        return block
    inverse = np.empty_like(order)
    inverse[order] = np.arange(len(rows))
    return block[inverse]


class Context(_LlamaContext):
    """A llama.cpp context on one model, holding sequence 0 in its KV memory.

    ``decode(tokens, rows)`` appends ``tokens`` at positions ``n_past..`` in batches of
    at most ``n_batch`` and returns the logits of the requested rows (indices into
    ``tokens``) as a read-only numpy array of shape ``(len(rows), n_vocab)``. The array
    is a view of llama.cpp's buffer: valid until the next decode, copy what you keep.
    """

    def __init__(
        self,
        model: Model,
        *,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_threads: int | None = None,
        n_threads_batch: int | None = None,
        rollback: int = 0,
    ) -> None:
        super().__init__(
            model,
            n_ctx=n_ctx,
            n_batch=n_batch,
            n_threads=n_threads,
            n_threads_batch=n_threads_batch,
            rollback=rollback,
        )
        self.tokens: list[int] = []
        # how the last prompt found the cache (reuse_chunks): "prefix" (nothing to undo),
        # "rollback" (a tail undone), "checkpoint" (a recurrent state restored), "none"
        self.last_reuse = "none"
        self.hidden: HiddenRows | None = None  # each decode's nextn rows, for an MTP head (keep_hidden)
        b = self._batch
        for i in range(self.n_batch):
            b.seq_id[i][0] = 0

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def decode(self, tokens: Sequence[int], rows: Sequence[int] | None = None) -> np.ndarray:
        """Append ``tokens`` to the sequence; return logits for ``rows`` (default: last).

        Rows must lie in the last ``n_batch`` tokens (earlier chunks' logits are gone by
        the time the call returns; the short chunk, if any, is the first); the speculative
        loop only ever asks for the verify batch, which its first round decodes behind the
        prompt's prefill.
        """
        n = len(tokens)
        if n == 0:
            raise ValueError("decode() needs at least one token")
        if self.n_past + n > self.n_ctx:
            raise ContextOverflowError(
                f"{self.n_past + n} tokens do not fit in the context of {self.n_ctx}; "
                "use a larger --n-ctx or a shorter prompt"
            )
        if rows is None:
            rows = (n - 1,)
        # Chunks are cut from the end: the last one holds the last min(n, n_batch) tokens,
        # so a verify batch decoded behind a prefill (decoding.generation) stays whole.
        last_chunk_start = max(0, n - self.n_batch)
        if rows and min(rows) < last_chunk_start:
            raise ValueError("logits can only be requested within the last n_batch tokens")
        self._heal()
        toks = np.asarray(tokens, dtype=np.int32)
        out_rows = 0
        if self.hidden is not None:
            self.hidden.begin(self.n_past)
        starts = sorted({0, *range(last_chunk_start % self.n_batch, last_chunk_start + 1, self.n_batch)})
        for start, end in zip(starts, [*starts[1:], n]):
            m = end - start
            self._b_token[:m] = toks[start:end]
            self._b_pos[:m] = np.arange(self.n_past, self.n_past + m, dtype=np.int32)
            self._b_logits[:m] = 0
            if start == last_chunk_start:
                for r in rows:
                    self._b_logits[r - start] = 1
                out_rows = len(rows)
            rc = self._decode_batch(m)
            if rc != 0:
                # rc 1: no KV slot for the batch; <0: error. Either way this chunk is not
                # in memory: make sure nothing half-written stays behind.
                _llama.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)
                raise DecodeError(
                    f"llama_decode failed with code {rc} at position {self.n_past} "
                    f"({_last_llama_errors() or 'no reason given'})"
                )
            self.tokens.extend(int(t) for t in toks[start:end])
            self._decoded(0, m)
            if self.hidden is not None:
                self.hidden.read(m)
        if not out_rows:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        return in_row_order(self._logits(out_rows), rows)

    def _heal(self) -> None:
        """Drop KV entries past ``tokens``. They exist only if an exception (Ctrl-C)
        arrived between a successful llama_decode and the bookkeeping after it. A
        recurrent state cannot drop a whole decode: it starts over, empty."""
        if _llama.llama_memory_seq_pos_max(self._mem, 0) >= self.n_past:
            if self.recurrent:
                self.clear()
            else:
                _llama.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)

    def rollback(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` tokens of the sequence; remove the rest from the KV
        (checked: see ``_remove_tail``)."""
        if n_keep >= self.n_past:
            return
        if n_keep < 0:
            raise ValueError("n_keep must be >= 0")
        self._remove_tail(0, n_keep, self.n_past)
        del self.tokens[n_keep:]

    def keep_hidden(self) -> None:
        """From now on keep each decode's nextn hidden rows (``nextn.HiddenRows``): what
        a multi-token-prediction head drafts from; ``hidden_kept`` reads them."""
        if self.hidden is None:
            self.hidden = HiddenRows(self._ptr, self.model._ptr)

    def hidden_kept(self) -> np.ndarray:
        """The last decode's hidden rows of the positions the cache still holds (its last
        ``len(rows)`` tokens, after a rollback too); none unless ``keep_hidden``."""
        return self.hidden.kept(self.n_past) if self.hidden is not None else np.empty((0, 0), dtype=np.float32)

    def checkpoint(self) -> None:
        """On a recurrent state, keep a copy of it after the tokens the cache holds now,
        so a later prompt that shares them (a chat's next turn after an edit, the same
        prompt again) restores it instead of decoding them again. Nothing otherwise."""
        if self.checkpoints is not None:
            self.checkpoints.take(0, self.tokens)

    def reuse_chunks(self, prompt: Sequence[int], min_chunk: int) -> int:
        """Keep what the cache holds of ``prompt`` and remove the rest; how many tokens of
        ``prompt`` it now holds (a prefix, as ``tokens`` says). ``min_chunk`` > 0: also the
        later runs of that many cached tokens the prompt holds further forward, moved back
        (llama-server's ``--cache-reuse``). A recurrent state keeps the common prefix if it
        can undo the rest, else a checkpoint. ``last_reuse`` says what happened
        (``llama.prefix``)."""
        self._heal()
        return keep_prefix(self, prompt, min_chunk)

    def remove_range(self, p0: int, p1: int) -> None:
        """Remove positions ``p0..p1-1`` of sequence 0 from the KV memory (checked)."""
        if p1 > p0 and not _llama.llama_memory_seq_rm(self._mem, 0, p0, p1):
            self._remove_tail(0, p0, self.n_past)  # raises RollbackError: this model cannot forget a part

    def clear(self) -> None:
        _llama.llama_memory_clear(self._mem, True)
        self.tokens.clear()

    def pos_max(self) -> int:
        """Largest position of sequence 0 in the KV memory (-1 when empty)."""
        return int(_llama.llama_memory_seq_pos_max(self._mem, 0))

    def set_threads(self, n_threads: int, n_threads_batch: int | None = None) -> None:
        _llama.llama_set_n_threads(self._ptr, n_threads, n_threads_batch or n_threads)
        self.n_threads = n_threads


__all__ = ["Context", "common_prefix_len", "create_context", "in_row_order"]
