"""The hidden rows a target context hands an MTP head: llama.cpp's nextn embeddings.

A model's multi-token-prediction (nextn) layer drafts from the target's own last hidden
state: h_p, the trunk's output at position p after its final norm (llama.cpp's
``t_h_nextn``, the input of the LM head). ``HiddenRows`` turns them on for one target
context (``llama_set_embeddings_nextn``, unmasked: a row for every token a decode holds,
not only the rows whose logits were asked for; the graph and the logits are the same as
without them, the rows are only copied out) and keeps a copy of each decode's rows, chunk
by chunk, so that after a rollback the caller reads those of the positions the cache
still holds (``kept``). It knows nothing of drafting: ``mtp.py`` feeds the rows to the
head, ``decoding/mtp.py`` decides which.
"""

from __future__ import annotations

import numpy as np

from .backend import _llama, _llama_ext


class HiddenRows:
    """The nextn hidden rows of one context's last decode (``start``: its first position)."""

    def __init__(self, ptr, model_ptr) -> None:
        self._ptr = ptr
        self.n_embd: int = int(_llama.llama_model_n_embd_out(model_ptr))
        self.start = 0
        self._parts: list[np.ndarray] = []
        _llama_ext.llama_set_embeddings_nextn(ptr, True, False)

    def begin(self, pos: int) -> None:
        """A decode starts at position ``pos``: the last one's rows are dropped."""
        self.start, self._parts = pos, []

    def read(self, n_tokens: int) -> None:
        """Copy the rows of the chunk of ``n_tokens`` just decoded (llama.cpp's buffer is
        overwritten by the next ``llama_decode``)."""
        ptr = _llama_ext.llama_get_embeddings_nextn(self._ptr)
        if not ptr:  # pragma: no cover - llama.cpp made none (a build without nextn rows)
            raise RuntimeError("llama.cpp gave no nextn hidden rows for this decode")
        self._parts.append(np.ctypeslib.as_array(ptr, shape=(n_tokens, self.n_embd)).copy())

    def kept(self, n_past: int) -> np.ndarray:
        """The last decode's rows of positions ``start .. n_past - 1`` (what a cache of
        ``n_past`` tokens still holds of it), shape (rows, n_embd)."""
        if len(self._parts) > 1:
            self._parts = [np.concatenate(self._parts)]
        n = max(0, n_past - self.start)
        return self._parts[0][:n] if self._parts and n else np.empty((0, self.n_embd), dtype=np.float32)
