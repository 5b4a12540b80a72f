"""A model's multi-token-prediction (MTP, "nextn") head as a context of its own.

Qwen3.5/3.6 (and GLM, DeepSeek, ...) carry a nextn layer after the trunk, trained to
predict the token after next: at position p it reads the token x_p and the target's hidden
row h_(p-1) (``nextn.HiddenRows``), ``eh_proj`` mixes their two norms, one decoder block and
the shared LM head follow (llama.cpp's ``graph_mtp``, src/models/qwen35.cpp). A context of
type ``LLAMA_CONTEXT_TYPE_MTP`` on the same model runs that graph alone; its memory is the
KV cache of the nextn layer, so it rolls back any tail like a plain KV cache.

``MtpContext.decode(tokens, rows, pos)`` decodes (token, hidden row) pairs at positions
``pos..`` through llama.cpp's extended batch (``llama_batch_ext``: a token with an input
embedding row, ``llama_batch_ext_set_embd_token``; ``set_embd_state`` is a stub upstream),
and returns the last pair's logits and the head's own hidden row there (its input for
drafting one more token). ``tokens`` mirrors what its KV holds, as ``Context.tokens``.
The context needs no pointer to the target's (qwen35's MTP graph reads nothing of it).

It knows nothing of drafting: which rows pair with which tokens is ``decoding/mtp.py``'s.
"""

from __future__ import annotations

import ctypes
import time
from typing import Sequence

import numpy as np

from ..errors import DecodeError, InputError, RollbackError
from .backend import _last_llama_errors, _llama, _llama_ext, default_threads
from .context import create_context
from .model import Model

_FLOAT_P = ctypes.POINTER(ctypes.c_float)


def check_mtp(model: Model) -> None:
    """Raise a clear ``InputError`` unless ``model`` was loaded with its MTP layers."""
    if model.n_layer_nextn <= 0:
        raise InputError(
            f"{model.label} has no multi-token-prediction (nextn) layers, so it cannot draft for "
            "itself (--draft mtp); use a GGUF that keeps them (often published as -MTP-GGUF), "
            "or another drafter (--draft ngram, or a draft model)"
        )
    if not model.has_mtp:
        raise InputError(f"{model.label} was loaded without its MTP layers; load it with draft='mtp'")


class MtpContext:
    """The MTP head of ``model`` (loaded with ``mtp=True``) as a context of ``n_ctx``
    positions, decoding up to ``n_batch`` pairs per call."""

    def __init__(self, model: Model, *, n_ctx: int, n_batch: int, n_threads: int | None = None) -> None:
        check_mtp(model)
        self.model = model
        self.n_threads = n_threads or default_threads()
        self._ptr, _ = create_context(model, n_ctx=n_ctx, n_batch=n_batch, n_threads=self.n_threads, mtp=True)
        self._batch = None
        try:
            # its own rows only for the rows it outputs (masked): the next draft's input
            _llama_ext.llama_set_embeddings_nextn(self._ptr, True, True)
            self._batch = _llama.llama_batch_ext_init(self._ptr)
            if not self._batch:  # pragma: no cover
                raise DecodeError("llama.cpp could not make an extended batch for the MTP context")
        except BaseException:
            self.close()
            raise
        self._mem = _llama.llama_get_memory(self._ptr)
        self.n_ctx: int = _llama.llama_n_ctx(self._ptr)
        self.n_batch: int = _llama.llama_n_batch(self._ptr)
        self.n_embd: int = int(_llama.llama_model_n_embd_out(model._ptr))
        self.n_vocab = model.n_vocab
        self.tokens: list[int] = []
        self.t_decode = 0.0  # seconds inside llama.cpp's decodes and reads
        self.n_decode_calls = 0

    @property
    def n_past(self) -> int:
        return len(self.tokens)

    def decode(self, tokens: Sequence[int], rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Append the pairs (``tokens[i]``, ``rows[i]``) at positions ``n_past..``, in
        chunks of ``n_batch``; return the last pair's logits (n_vocab,) and the head's
        hidden row there (n_embd,), both copies."""
        n = len(tokens)
        if n == 0 or rows.shape != (n, self.n_embd):
            raise ValueError(f"decode() needs one ({self.n_embd},) row per token, at least one")
        if self.n_past + n > self.n_ctx:
            raise DecodeError(f"the MTP context holds {self.n_ctx} positions, not {self.n_past + n}")
        rows = np.ascontiguousarray(rows, dtype=np.float32)
        for start in range(0, n, self.n_batch):
            end = min(n, start + self.n_batch)
            self._decode_chunk(tokens[start:end], rows[start:end], last=end == n)
        t0 = time.perf_counter()
        logits = np.ctypeslib.as_array(_llama.llama_get_logits_ith(self._ptr, -1), shape=(self.n_vocab,)).copy()
        h = _llama_ext.llama_get_embeddings_nextn_ith(self._ptr, -1)
        if not h:  # pragma: no cover
            raise DecodeError("llama.cpp gave no hidden row for the MTP head's output")
        hidden = np.ctypeslib.as_array(h, shape=(self.n_embd,)).copy()
        self.t_decode += time.perf_counter() - t0
        return logits, hidden

    def _decode_chunk(self, tokens: Sequence[int], rows: np.ndarray, *, last: bool) -> None:
        b = self._batch
        _llama.llama_batch_ext_clear(b)
        pos = _llama.llama_pos(0)
        base = self.n_past
        stride = self.n_embd * 4
        ptr = rows.ctypes.data
        for i, tok in enumerate(tokens):
            idx = _llama.llama_batch_ext_add_token(b, 0, int(tok))
            embd = _llama.llama_embd(ctypes.cast(ptr + i * stride, _FLOAT_P), 1, self.n_embd)
            pos.value = base + i
            if (
                idx != i
                or not _llama.llama_batch_ext_set_embd_token(b, idx, embd)
                or not _llama.llama_batch_ext_set_pos(b, idx, ctypes.byref(pos))
            ):
                raise DecodeError(f"could not add token {tok} to the MTP head's batch ({_last_llama_errors()})")
        if last:
            _llama.llama_batch_ext_set_output_logits(b, len(tokens) - 1, True)
        t0 = time.perf_counter()
        rc = _llama.llama_process(self._ptr, _llama.LLAMA_PROCESS_TYPE_DECODE, b)
        self.t_decode += time.perf_counter() - t0
        self.n_decode_calls += 1
        if rc != 0:
            _llama.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)
            raise DecodeError(
                f"the MTP head's decode failed with code {rc} at position {self.n_past} "
                f"({_last_llama_errors() or 'no reason given'})"
            )
        self.tokens.extend(int(t) for t in tokens)

    def rollback(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` positions; remove the rest from its KV cache."""
        if n_keep >= self.n_past:
            return
        if not _llama.llama_memory_seq_rm(self._mem, 0, max(0, n_keep), -1):
            raise RollbackError(f"the MTP head of {self.model.label} could not forget positions {n_keep}..")
        del self.tokens[max(0, n_keep) :]

    def clear(self) -> None:
        _llama.llama_memory_clear(self._mem, True)
        self.tokens.clear()

    def close(self) -> None:
        if getattr(self, "_ptr", None):
            if self._batch:
                _llama.llama_batch_ext_free(self._batch)
            _llama.llama_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:  # pragma: no cover
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass
