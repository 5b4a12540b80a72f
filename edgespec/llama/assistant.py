"""A Gemma 4 assistant as a context that reads its target's KV cache.

Gemma 4 ships a small official drafter per size, the "-assistant" (llama.cpp's
``gemma4-assistant`` architecture, src/models/gemma4-assistant.cpp). At position p it reads
the token x_p through the TARGET's token embedding, concatenated with the target's hidden
row h_(p-1) (its last layer's output after the final norm: ``nextn.HiddenRows``), projects
them into its own width (``nextn.pre_projection``), runs a few decoder blocks whose
attention has queries only: keys and values are the target's own, its SWA layers reading
the target's last SWA layer and its full layers the target's last layer (llama.cpp shares
those KV tensors and cells: ``ctx_other`` in ``llama_context_params``, the ``share``
callback in src/llama-model.cpp), and gives the logits of x_(p+1) and its own next hidden
row (``nextn.post_projection``), the input of its next step.

So it keeps no KV cache of its own and writes nothing into the target's: every step is
one token at position p = the target's ``n_past`` (llama.cpp requires the next position
of the shared memory), and every draft of a round is at that same position, each fed
the assistant's own row of the step before (llama.cpp's ``is_mem_shared`` mode of
``common_speculative_impl_draft_mtp``, after the transformers ``gemma4_assistant`` note).
``AssistantContext.step(token, row)`` is one such step through llama.cpp's extended batch
(a token with an input row, as ``mtp.MtpContext``); there is nothing to roll back.

``check_assistant`` says, before any context is made, why a file cannot assist a target:
not an assistant, a target that is not ``gemma4`` (the assistant reads its embedding and
KV layout), a hidden width, head sizes or window that differ from the target's, or an
incompatible vocabulary. It knows nothing of drafting: ``decoding/assistant.py`` decides
what to feed it.
"""

from __future__ import annotations

import ctypes
import time

import numpy as np

from ..errors import DecodeError, InputError
from .backend import _last_llama_errors, _llama, _llama_ext
from .context import Context, create_context
from .model import ASSISTANT_ARCH, ASSISTANT_TARGET_ARCH, Model
from .vocab import check_vocab_compatible

_FLOAT_P = ctypes.POINTER(ctypes.c_float)
# what the assistant's attention must agree on with the target's KV cache it reads
_SHARED_KEYS = (
    "attention.key_length",
    "attention.key_length_swa",
    "attention.value_length",
    "attention.value_length_swa",
    "attention.sliding_window",
)


def is_assistant(model: Model) -> bool:
    """Whether ``model`` is a Gemma 4 assistant (a drafter reading its target's KV cache)."""
    return model.architecture == ASSISTANT_ARCH


def check_assistant(assistant: Model, target: Model) -> None:
    """Raise a clear ``InputError`` (or ``IncompatibleVocabError``) unless ``assistant``
    can draft for ``target`` by reading its KV cache."""
    if not is_assistant(assistant):
        raise InputError(f"{assistant.label} is a {assistant.architecture} model, not a Gemma 4 assistant")
    if target.architecture != ASSISTANT_TARGET_ARCH:
        raise InputError(
            f"{assistant.label} is a Gemma 4 assistant: it drafts only for a Gemma 4 target, whose "
            f"embedding and KV cache it reads, not for {target.label} ({target.architecture}); "
            "use another drafter (--draft ngram, or a draft model of the target's family)"
        )
    width = int(_llama.llama_model_n_embd_out(assistant._ptr))
    problems = [] if width == target.n_embd else [f"it reads hidden rows of {width}, the target's are {target.n_embd}"]
    for key in _SHARED_KEYS:
        mine, theirs = assistant.meta(f"{ASSISTANT_ARCH}.{key}"), target.meta(f"{ASSISTANT_TARGET_ARCH}.{key}")
        if mine is not None and theirs is not None and mine != theirs:
            problems.append(f"its {key} is {mine}, the target's {theirs}")
    if problems:
        raise InputError(
            f"{assistant.label} is not the assistant of {target.label}: {'; '.join(problems)} "
            "(a Gemma 4 assistant is made for one target size: use the one published beside it)"
        )
    check_vocab_compatible(target, assistant)


class AssistantContext:
    """The Gemma 4 assistant ``model`` drafting for the target context ``target``, whose
    KV cache it reads (the target's model loaded with the assistant's kind of kernels)."""

    def __init__(self, model: Model, target: Context, *, n_threads: int | None = None) -> None:
        check_assistant(model, target.model)
        if target.model.rpc:  # its KV cache sits on the servers, which this local context cannot reach
            raise InputError(
                f"{model.label} reads the target's KV cache, which lives on the RPC servers here; "
                "draft with prompt lookup (--draft ngram) or a draft model over RPC"
            )
        self.model = model
        self.target = target
        self.n_threads = n_threads or target.n_threads
        self._other = target._ptr
        self._ptr, _ = create_context(
            model, n_ctx=target.n_ctx, n_batch=8, n_threads=self.n_threads, mtp=True, other=self._other
        )
        self._batch = None
        try:
            if _llama_ext.llama_get_ctx_other(self._ptr) != self._other:  # pragma: no cover
                raise DecodeError("llama.cpp did not bind the assistant's context to its target's")
            _llama_ext.llama_set_embeddings_nextn(self._ptr, True, True)  # its own row, for the next step
            self._batch = _llama.llama_batch_ext_init(self._ptr)
            if not self._batch:  # pragma: no cover
                raise DecodeError("llama.cpp could not make an extended batch for the assistant")
        except BaseException:
            self.close()
            raise
        self.n_embd: int = int(_llama.llama_model_n_embd_out(model._ptr))  # the target's width
        self.n_vocab = model.n_vocab
        self._pos = _llama.llama_pos(0)
        self.t_decode = 0.0  # seconds inside llama.cpp's decodes and reads
        self.n_decode_calls = 0

    @property
    def n_past(self) -> int:
        """Where the target's cache ends: the position of every step now."""
        return self.target.n_past

    def step(self, token: int, row: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Decode (``token``, ``row``) at the target's next position, attending to what
        the target's cache holds; return the logits (n_vocab,) and the assistant's own
        hidden row (n_embd,), both copies."""
        if self.target._ptr != self._other:
            raise DecodeError("the target's context was replaced under its assistant; open the assistant again")
        if self.n_past == 0:
            raise DecodeError("the assistant drafts after at least one token in the target's cache")
        row = np.ascontiguousarray(row, dtype=np.float32)
        if row.shape != (self.n_embd,):
            raise ValueError(f"step() needs a ({self.n_embd},) row")
        b = self._batch
        _llama.llama_batch_ext_clear(b)
        idx = _llama.llama_batch_ext_add_token(b, 0, int(token))
        embd = _llama.llama_embd(ctypes.cast(row.ctypes.data, _FLOAT_P), 1, self.n_embd)
        self._pos.value = self.n_past
        if (
            idx != 0
            or not _llama.llama_batch_ext_set_embd_token(b, idx, embd)
            or not _llama.llama_batch_ext_set_pos(b, idx, ctypes.byref(self._pos))
        ):
            raise DecodeError(f"could not add token {token} to the assistant's batch ({_last_llama_errors()})")
        _llama.llama_batch_ext_set_output_logits(b, idx, True)
        t0 = time.perf_counter()
        rc = _llama.llama_process(self._ptr, _llama.LLAMA_PROCESS_TYPE_DECODE, b)
        self.n_decode_calls += 1
        if rc != 0:
            self.t_decode += time.perf_counter() - t0
            raise DecodeError(
                f"the assistant's decode failed with code {rc} at position {self.n_past} "
                f"({_last_llama_errors() or 'no reason given'})"
            )
        logits = np.ctypeslib.as_array(_llama.llama_get_logits_ith(self._ptr, -1), shape=(self.n_vocab,)).copy()
        h = _llama_ext.llama_get_embeddings_nextn_ith(self._ptr, -1)
        if not h:  # pragma: no cover
            raise DecodeError("llama.cpp gave no hidden row for the assistant's output")
        hidden = np.ctypeslib.as_array(h, shape=(self.n_embd,)).copy()
        self.t_decode += time.perf_counter() - t0
        return logits, hidden

    def clear(self) -> None:
        """Nothing to forget: it keeps no cache of its own."""

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
