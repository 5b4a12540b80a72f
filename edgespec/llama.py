"""The one door to llama.cpp: every ``llama_cpp`` import in edgespec lives here.

It knows how to load a GGUF model and make a context, decode a batch and hand back the
logits of the rows asked for as numpy views, trim a sequence from the KV memory and
read its last position, tokenize and detokenize (streaming, UTF-8 safe), read metadata,
and check that a draft vocabulary can stand in for a target's. It knows nothing about
speculation, sampling or what the tokens mean: callers decide which rows they need and
where to roll back to.

Positions: a ``Context`` keeps the list of tokens its KV memory holds for sequence 0
(``Context.tokens``), so ``n_past == len(tokens)`` and ``pos_max() == n_past - 1`` at
all times; ``decode`` appends after success and ``rollback`` trims. Everything above
this module reasons about KV state through that list.
"""

from __future__ import annotations

import codecs
import ctypes
import os
import struct
import threading
import time
from collections import deque
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .errors import (
    ContextOverflowError,
    DecodeError,
    IncompatibleVocabError,
    ModelFileError,
    ModelLoadError,
    RollbackError,
)

try:  # pragma: no cover - exercised only when the package is broken
    import llama_cpp as _llama
except Exception as exc:  # noqa: BLE001 - a missing shared library raises OSError etc.
    raise ImportError(
        "edgespec needs llama-cpp-python==0.3.36 with its compiled library; "
        f"importing it failed: {exc}. Reinstall with "
        "`pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36`."
    ) from exc

LLAMA_CPP_PYTHON_VERSION = getattr(_llama, "__version__", "unknown")

# -- Batch-invariant numerics ------------------------------------------------------------
# Speculation verifies k+1 tokens in one decode; plain decoding runs one token at a time.
# Greedy output is only identical if a token's logits do not depend on how many tokens
# shared its batch. On the CPU backend three kernels break that (measured on the Qwen2.5
# GGUFs, logit differences of 0.3-0.5, enough to flip argmax):
#   - repacked weight layouts ("extra buffer types") switch to a GEMM at 4+ rows;
#   - the tiled K-quant matmul takes over at 8+ rows (env GGML_CPU_TILED_MM, read once);
#   - flash attention's split-KV path, used for 1 row once the KV view reaches 512
#     cells and K and V have the same f16/f32 type.
# So a model loaded for speculation (``Model(..., exact=True)``, the default) skips weight
# repacking, the tiled matmul is off (GGML_CPU_TILED_MM=0, process-wide, set here before
# the backend starts) and its contexts keep V in q8_0 (accumulated in f32) next to an f16
# K, which keeps attention on the same per-row path for every batch size.
# The price is real: on an AVX2 CPU the repacked Q4_K kernels decode ~1.3x faster than
# the per-row ones (measured on Qwen2.5-Coder-1.5B, 2 cores). Only speculation needs
# exact kernels: when edgespec decodes plainly by its own choice it loads the target with
# ``exact=False`` (llama.cpp's defaults, repacking included; see ``Engine``'s ``exact``).
# A draft model follows its target's kind of kernels. EDGESPEC_FAST_KERNELS=1
# makes every load fast, speculation included (then lossless only up to floating-point
# differences between batch sizes, as llama.cpp's own speculative decoding is).
FAST_KERNELS = os.environ.get("EDGESPEC_FAST_KERNELS", "") not in ("", "0")
if not FAST_KERNELS:
    os.environ.setdefault("GGML_CPU_TILED_MM", "0")
_GGML_TYPE_F16 = 1
_GGML_TYPE_Q8_0 = 8
_FLASH_ATTN_ENABLED = 1

# llama.cpp's own rule for draft/target compatibility (common/speculative.cpp):
# vocab sizes may differ by at most this much, and token texts must agree from id 5 up.
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5

_GGUF_MAGIC = b"GGUF"

# --------------------------------------------------------------------------------------
# Logging: llama.cpp talks a lot on stderr. Keep its recent lines so an error message can
# quote the reason it gave, and print them only when asked to be verbose.
# --------------------------------------------------------------------------------------

_log_lines: deque[tuple[int, str]] = deque(maxlen=64)
_log_lock = threading.Lock()
_verbose = bool(os.environ.get("EDGESPEC_LLAMA_VERBOSE"))
_GGML_LOG_ERROR = 3
_GGML_LOG_WARN = 2


@_llama.llama_log_callback
def _log_callback(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    try:
        line = text.decode("utf-8", errors="replace")
    except Exception:  # noqa: BLE001 - never raise into C
        return
    with _log_lock:
        _log_lines.append((level, line))
    if _verbose:
        os.write(2, text)


_backend_ready = False


def _ensure_backend() -> None:
    global _backend_ready
    if not _backend_ready:
        _llama.llama_log_set(_log_callback, ctypes.c_void_p(0))
        _llama.llama_backend_init()
        _backend_ready = True


def set_verbose(verbose: bool) -> None:
    """Echo llama.cpp's own log to stderr (off by default)."""
    global _verbose
    _verbose = verbose


def _last_llama_errors(since: int = 0) -> str:
    """The error/warning lines llama.cpp logged, most recent last, as one string."""
    with _log_lock:
        lines = [t.strip() for lvl, t in list(_log_lines)[since:] if lvl in (_GGML_LOG_ERROR, _GGML_LOG_WARN)]
    return "; ".join(line for line in lines if line)[-400:]


def _log_mark() -> int:
    with _log_lock:
        return len(_log_lines)


def supports_gpu_offload() -> bool:
    """Whether this llama.cpp build can put layers on a GPU (Metal, CUDA, Vulkan...)."""
    _ensure_backend()
    return bool(_llama.llama_supports_gpu_offload())


def system_info() -> str:
    _ensure_backend()
    return _llama.llama_print_system_info().decode("utf-8", errors="replace").strip()


def default_threads() -> int:
    """Physical cores (llama.cpp gains nothing from hyper-threads on matmuls)."""
    try:
        import psutil

        n = psutil.cpu_count(logical=False)
    except Exception:  # noqa: BLE001
        n = None
    return max(1, n or os.cpu_count() or 1)


# --------------------------------------------------------------------------------------
# Model files
# --------------------------------------------------------------------------------------


def check_gguf_file(path: str | os.PathLike) -> Path:
    """Fail early and clearly on a path that cannot be a GGUF model.

    llama.cpp itself rejects bad files by returning NULL, but its reason only reaches
    the log; checking here gives the user a message that names the file and the cause.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(
            f"model file not found: {p}. Check the path, or use a catalog name "
            "(`edgespec models list`)."
        )
    if p.is_dir():
        raise ModelFileError(f"model path is a directory, not a GGUF file: {p}")
    try:
        with open(p, "rb") as f:
            head = f.read(24)
    except OSError as exc:
        raise ModelFileError(f"cannot read model file {p}: {exc.strerror or exc}") from exc
    if len(head) < 24 or head[:4] != _GGUF_MAGIC:
        hint = " (it is empty)" if not head else ""
        raise ModelFileError(
            f"not a GGUF model file: {p}{hint}. edgespec loads llama.cpp GGUF files "
            "(*.gguf); convert other formats with llama.cpp's convert_hf_to_gguf.py."
        )
    (version,) = struct.unpack("<I", head[4:8])
    if version not in (2, 3):
        raise ModelFileError(
            f"unsupported GGUF version {version} in {p} (llama.cpp reads versions 2 and 3)"
        )
    return p


class Model:
    """A loaded GGUF model: weights, vocabulary and metadata.

    ``n_gpu_layers`` is llama.cpp's: 0 keeps everything on the CPU, -1 (or a large
    number) offloads every layer to Metal/CUDA when the build supports it.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        n_gpu_layers: int = 0,
        use_mmap: bool = True,
        vocab_only: bool = False,
        exact: bool = True,
    ) -> None:
        self.path = check_gguf_file(path)
        # batch-invariant kernels (see "Batch-invariant numerics" above)
        self.exact = exact and not FAST_KERNELS
        _ensure_backend()
        params = _llama.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers if n_gpu_layers >= 0 else 999
        params.use_mmap = use_mmap
        params.vocab_only = vocab_only
        params.use_extra_bufts = not self.exact
        mark = _log_mark()
        ptr = _llama.llama_model_load_from_file(str(self.path).encode("utf-8"), params)
        if not ptr:
            reason = _last_llama_errors(mark) or "llama.cpp gave no reason"
            raise ModelLoadError(
                f"llama.cpp could not load {self.path}: {reason}. The file may be truncated "
                "or corrupt (re-download it and check its SHA-256), or use an architecture "
                f"this llama.cpp (llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}) does not know."
            )
        self._ptr = ptr
        self._vocab = _llama.llama_model_get_vocab(ptr)
        self.n_vocab: int = _llama.llama_vocab_n_tokens(self._vocab)
        self.vocab_type: int = _llama.llama_vocab_type(self._vocab)
        self.bos: int = _llama.llama_vocab_bos(self._vocab)
        self.eos: int = _llama.llama_vocab_eos(self._vocab)
        self.add_bos: bool = bool(_llama.llama_vocab_get_add_bos(self._vocab))
        self.add_eos: bool = bool(_llama.llama_vocab_get_add_eos(self._vocab))
        self.n_ctx_train: int = _llama.llama_model_n_ctx_train(ptr)
        self.n_layer: int = _llama.llama_model_n_layer(ptr)
        self.size_bytes: int = _llama.llama_model_size(ptr)
        self.n_params: int = _llama.llama_model_n_params(ptr)
        self.is_recurrent: bool = bool(_llama.llama_model_is_recurrent(ptr)) or bool(
            _llama.llama_model_is_hybrid(ptr)
        )
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}

    # -- lifetime ------------------------------------------------------------------
    def close(self) -> None:
        if getattr(self, "_ptr", None):
            _llama.llama_model_free(self._ptr)
            self._ptr = None

    def __del__(self) -> None:  # pragma: no cover - best effort at interpreter exit
        try:
            self.close()
        except Exception:  # noqa: BLE001
            pass

    # -- metadata ------------------------------------------------------------------
    def meta(self, key: str) -> str | None:
        """A GGUF metadata value as a string (llama.cpp formats arrays/numbers)."""
        size = 256
        while True:
            buf = ctypes.create_string_buffer(size)
            n = _llama.llama_model_meta_val_str(self._ptr, key.encode("utf-8"), buf, size)
            if n < 0:
                return None
            if n < size:
                return buf.value.decode("utf-8", errors="replace")
            size = n + 1

    @property
    def architecture(self) -> str:
        return self.meta("general.architecture") or "unknown"

    @property
    def name(self) -> str:
        return self.meta("general.name") or self.path.stem

    @property
    def chat_template(self) -> str | None:
        ptr = _llama.llama_model_chat_template(self._ptr, None)
        if not ptr:
            return None
        return ptr.decode("utf-8", errors="replace") if isinstance(ptr, bytes) else None

    def description(self) -> str:
        buf = ctypes.create_string_buffer(256)
        _llama.llama_model_desc(self._ptr, buf, 256)
        return buf.value.decode("utf-8", errors="replace")

    # -- vocabulary ----------------------------------------------------------------
    def token_text(self, token: int) -> str:
        """The vocabulary entry for ``token`` as stored (not detokenized)."""
        raw = _llama.llama_vocab_get_text(self._vocab, token)
        return raw.decode("utf-8", errors="replace") if raw else ""

    def is_eog(self, token: int) -> bool:
        """End of generation: EOS, EOT, <|im_end|> and the like."""
        v = self._eog_cache.get(token)
        if v is None:
            v = self._eog_cache[token] = bool(_llama.llama_vocab_is_eog(self._vocab, token))
        return v

    def token_to_bytes(self, token: int, special: bool = False) -> bytes:
        """The bytes this token contributes to the text (control tokens render empty)."""
        key = token if not special else -token - 1
        piece = self._piece_cache.get(key)
        if piece is None:
            buf = ctypes.create_string_buffer(64)
            n = _llama.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
            if n < 0:
                buf = ctypes.create_string_buffer(-n)
                n = _llama.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
            piece = buf.raw[:n]
            self._piece_cache[key] = piece
        return piece

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Text -> token ids. ``add_special`` adds BOS when the model asks for it;
        ``parse_special`` turns ``<|im_start|>`` and friends into their control ids."""
        data = text.encode("utf-8")
        n_max = len(data) + 8
        arr = (_llama.llama_token * n_max)()
        n = _llama.llama_tokenize(self._vocab, data, len(data), arr, n_max, add_special, parse_special)
        if n < 0:
            n_max = -n
            arr = (_llama.llama_token * n_max)()
            n = _llama.llama_tokenize(self._vocab, data, len(data), arr, n_max, add_special, parse_special)
        if n < 0:
            raise ModelFileError(f"tokenization failed for a text of {len(data)} bytes")
        return list(arr[:n])

    def detokenize(self, tokens: Iterable[int], *, special: bool = False) -> str:
        return b"".join(self.token_to_bytes(t, special) for t in tokens).decode(
            "utf-8", errors="replace"
        )


class Detokenizer:
    """Streaming detokenizer: feed token ids, get text that is always valid UTF-8.

    A token can end in the middle of a multi-byte character (byte-fallback tokens, or a
    BPE merge that splits an emoji); the incremental decoder holds those bytes until the
    character is complete instead of emitting a replacement character.
    """

    def __init__(self, model: Model) -> None:
        self._model = model
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token: int) -> str:
        return self._decoder.decode(self._model.token_to_bytes(token))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


def check_vocab_compatible(target: Model, draft: Model) -> None:
    """Raise IncompatibleVocabError unless ``draft`` can draft for ``target``.

    The rules are llama.cpp's (common/speculative.cpp): same vocabulary type, same
    BOS/EOS ids and add-BOS/add-EOS flags, sizes within 128 of each other, and identical
    token text for every id from 5 up to the smaller size.
    """
    names = f"target {target.path.name} and draft {draft.path.name}"
    if target.vocab_type != draft.vocab_type:
        raise IncompatibleVocabError(
            f"{names} use different tokenizer types ({target.vocab_type} vs "
            f"{draft.vocab_type}); pick a draft model from the target's family, or use "
            "--draft ngram"
        )
    for what, a, b in (
        ("add-BOS flag", target.add_bos, draft.add_bos),
        ("add-EOS flag", target.add_eos, draft.add_eos),
        ("BOS token", target.bos, draft.bos),
        ("EOS token", target.eos, draft.eos),
    ):
        if a != b:
            raise IncompatibleVocabError(
                f"{names} disagree on the {what} ({a} vs {b}); pick a draft model from the "
                "target's family, or use --draft ngram"
            )
    if abs(target.n_vocab - draft.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise IncompatibleVocabError(
            f"{names} have vocabularies of {target.n_vocab} and {draft.n_vocab} tokens "
            f"(more than {VOCAB_MAX_SIZE_DIFFERENCE} apart); pick a draft model from the "
            "target's family, or use --draft ngram"
        )
    get_t, get_d = _llama.llama_vocab_get_text, _llama.llama_vocab_get_text
    vt, vd = target._vocab, draft._vocab
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        a, b = get_t(vt, i), get_d(vd, i)
        if a != b:
            ta = a.decode("utf-8", errors="replace")
            tb = b.decode("utf-8", errors="replace")
            raise IncompatibleVocabError(
                f"{names} have different vocabularies: token {i} is {ta!r} in the target "
                f"and {tb!r} in the draft; pick a draft model from the target's family, "
                "or use --draft ngram"
            )


def check_vocab_files(target_path: str | os.PathLike, draft_path: str | os.PathLike) -> None:
    """``check_vocab_compatible`` on two files, loading only their vocabularies."""
    t = Model(target_path, vocab_only=True)
    d = Model(draft_path, vocab_only=True)
    try:
        check_vocab_compatible(t, d)
    finally:
        t.close()
        d.close()


# --------------------------------------------------------------------------------------
# Contexts
# --------------------------------------------------------------------------------------


class Context:
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
    ) -> None:
        self.model = model
        n_threads = n_threads or default_threads()
        params = _llama.llama_context_default_params()
        params.n_ctx = n_ctx
        params.n_batch = n_batch
        params.n_ubatch = n_batch
        params.n_seq_max = 1
        params.n_threads = n_threads
        params.n_threads_batch = n_threads_batch or n_threads
        exact = model.exact  # see "Batch-invariant numerics" above
        if exact:
            params.flash_attn_type = _FLASH_ATTN_ENABLED
            params.type_k = _GGML_TYPE_F16
            params.type_v = _GGML_TYPE_Q8_0
        mark = _log_mark()
        ptr = _llama.llama_init_from_model(model._ptr, params)
        self.batch_invariant = exact
        if not ptr and exact:
            # q8_0 V needs head sizes that are multiples of 32; fall back to llama.cpp's
            # default cache types (exact up to 256 cached tokens, see above)
            params.type_v = _GGML_TYPE_F16
            ptr = _llama.llama_init_from_model(model._ptr, params)
            self.batch_invariant = False
        if not ptr:
            reason = _last_llama_errors(mark) or "llama.cpp gave no reason"
            raise ModelLoadError(
                f"could not create a context of {n_ctx} tokens for {model.path.name}: {reason}. "
                "Try a smaller --n-ctx, or fewer GPU layers."
            )
        self._ptr = ptr
        self._mem = _llama.llama_get_memory(ptr)
        self.n_ctx: int = _llama.llama_n_ctx(ptr)
        self.n_batch: int = _llama.llama_n_batch(ptr)
        self.n_vocab = model.n_vocab
        self.n_threads = n_threads
        self.tokens: list[int] = []
        self.t_decode = 0.0  # seconds spent inside llama_decode
        self.n_decode_calls = 0
        self._batch = _llama.llama_batch_init(self.n_batch, 0, 1)
        b = self._batch
        # numpy views over the batch arrays: filling a batch is a slice assignment
        self._b_token = np.ctypeslib.as_array(b.token, shape=(self.n_batch,))
        self._b_pos = np.ctypeslib.as_array(b.pos, shape=(self.n_batch,))
        self._b_nseq = np.ctypeslib.as_array(b.n_seq_id, shape=(self.n_batch,))
        self._b_logits = np.ctypeslib.as_array(b.logits, shape=(self.n_batch,))
        self._b_nseq[:] = 1
        for i in range(self.n_batch):
            b.seq_id[i][0] = 0

    @property
    def n_past(self) -> int:
        return len(self.tokens)

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

    def decode(self, tokens: Sequence[int], rows: Sequence[int] | None = None) -> np.ndarray:
        """Append ``tokens`` to the sequence; return logits for ``rows`` (default: last).

        Rows must lie in the last ``n_batch`` tokens (earlier chunks' logits are gone by
        the time the call returns); the speculative loop only ever asks for the verify
        batch, and prefill only for its last row.
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
        last_chunk_start = ((n - 1) // self.n_batch) * self.n_batch
        if rows and min(rows) < last_chunk_start:
            raise ValueError("logits can only be requested within the last n_batch tokens")
        self._heal()
        toks = np.asarray(tokens, dtype=np.int32)
        out_rows = 0
        for start in range(0, n, self.n_batch):
            end = min(n, start + self.n_batch)
            m = end - start
            self._b_token[:m] = toks[start:end]
            self._b_pos[:m] = np.arange(self.n_past, self.n_past + m, dtype=np.int32)
            self._b_logits[:m] = 0
            if start == last_chunk_start:
                for r in rows:
                    self._b_logits[r - start] = 1
                out_rows = len(rows)
            self._batch.n_tokens = m
            t0 = time.perf_counter()
            rc = _llama.llama_decode(self._ptr, self._batch)
            self.t_decode += time.perf_counter() - t0
            self.n_decode_calls += 1
            if rc != 0:
                # rc 1: no KV slot for the batch; <0: error. Either way this chunk is not
                # in memory: make sure nothing half-written stays behind.
                _llama.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)
                raise DecodeError(
                    f"llama_decode failed with code {rc} at position {self.n_past} "
                    f"({_last_llama_errors() or 'no reason given'})"
                )
            self.tokens.extend(int(t) for t in toks[start:end])
        if not out_rows:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        ptr = _llama.llama_get_logits(self._ptr)
        # Outputs come back in batch order, one row per flagged token.
        arr = np.ctypeslib.as_array(ptr, shape=(out_rows, self.n_vocab))
        order = np.argsort(np.asarray(rows))
        if np.any(order != np.arange(len(rows))):
            inverse = np.empty_like(order)
            inverse[order] = np.arange(len(rows))
            arr = arr[inverse]
        return arr

    def _heal(self) -> None:
        """Drop KV entries past ``tokens``. They exist only if an exception (Ctrl-C)
        arrived between a successful llama_decode and the bookkeeping after it."""
        if _llama.llama_memory_seq_pos_max(self._mem, 0) >= self.n_past:
            _llama.llama_memory_seq_rm(self._mem, 0, self.n_past, -1)

    def rollback(self, n_keep: int) -> None:
        """Keep the first ``n_keep`` tokens of the sequence; remove the rest from the KV.

        Checks llama_memory_seq_rm's answer: recurrent and hybrid models cannot forget
        part of a sequence, and speculation on them would silently corrupt the state.
        """
        if n_keep >= self.n_past:
            return
        if n_keep < 0:
            raise ValueError("n_keep must be >= 0")
        ok = _llama.llama_memory_seq_rm(self._mem, 0, n_keep, -1)
        if not ok:
            raise RollbackError(
                f"{self.model.path.name} ({self.model.architecture}) cannot remove part of a "
                "sequence from its memory (recurrent or hybrid model), so drafts cannot be "
                "rolled back; use it with --draft none"
            )
        del self.tokens[n_keep:]

    def clear(self) -> None:
        _llama.llama_memory_clear(self._mem, True)
        self.tokens.clear()

    def pos_max(self) -> int:
        """Largest position of sequence 0 in the KV memory (-1 when empty)."""
        return int(_llama.llama_memory_seq_pos_max(self._mem, 0))

    def set_threads(self, n_threads: int, n_threads_batch: int | None = None) -> None:
        _llama.llama_set_n_threads(self._ptr, n_threads, n_threads_batch or n_threads)
        self.n_threads = n_threads


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    i = 0
    # compare in blocks first: prompts share long prefixes across chat turns
    step = 256
    while i + step <= n and list(a[i : i + step]) == list(b[i : i + step]):
        i += step
    while i < n and a[i] == b[i]:
        i += 1
    return i
