"""Model files: checking a path is a GGUF model, loading it (weights, vocabulary,
metadata), tokenizing and detokenizing, streaming UTF-8-safe detokenization."""

from __future__ import annotations

import codecs
import ctypes
import os
import struct
from pathlib import Path
from typing import Iterable, Sequence

from ..errors import InputError, ModelFileError, ModelLoadError
from . import rpc as _rpc
from .backend import LLAMA_CPP_PYTHON_VERSION, _ensure_backend, _last_llama_errors, _llama, _log_mark
from .backend import supports_gpu_offload as _supports_gpu_offload
from .kernels import FAST_KERNELS
from .rpc_endpoints import endpoints as _endpoints

_GGUF_MAGIC = b"GGUF"
# llama.cpp's name for a Gemma 4 assistant (src/llama-arch.cpp): a drafter whose context
# reads its gemma4 target's KV cache (``assistant.py``), never a target itself
ASSISTANT_ARCH = "gemma4-assistant"
ASSISTANT_TARGET_ARCH = "gemma4"


def check_gguf_file(path: str | os.PathLike) -> Path:
    """Fail early and clearly on a path that cannot be a GGUF model.

    llama.cpp itself rejects bad files by returning NULL, but its reason only reaches
    the log; checking here gives the user a message that names the file and the cause.
    """
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelFileError(
            f"model file not found: {p}. Check the path, or use a catalog name (`edgespec models list`)."
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
        raise ModelFileError(f"unsupported GGUF version {version} in {p} (llama.cpp reads versions 2 and 3)")
    return p


class Model:
    """A loaded GGUF model: weights, vocabulary and metadata.

    ``n_gpu_layers`` is llama.cpp's: 0 keeps everything on the CPU, -1 (or a large
    number) offloads every layer to Metal/CUDA when the build supports it.

    ``rpc`` puts every layer on those RPC servers (checked first, see ``rpc.py``), split
    in proportion to their memory or by ``tensor_split`` (one share per server device).
    Once any server is registered, a model loaded without ``rpc`` gets an explicit list
    of local devices, so a drafter never goes over the network.

    ``mtp``: load the multi-token-prediction (nextn) layers too, when the file has them
    (``n_layer_nextn``; llama.cpp skips their tensors otherwise): an MTP context on the
    model (``mtp.MtpContext``) drafts with them. ``has_mtp`` says whether they are loaded.
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        n_gpu_layers: int = 0,
        use_mmap: bool = True,
        vocab_only: bool = False,
        exact: bool = True,
        rpc: str | Sequence[str | _rpc.Endpoint] | None = None,
        tensor_split: Sequence[float] = (),
        mtp: bool = False,
    ) -> None:
        self.path = check_gguf_file(path)
        self.label = self.path.name  # how messages name it (Engine: a store's name, if it has one)
        # batch-invariant kernels (see "Batch-invariant numerics" in kernels.py)
        self.exact = exact and not FAST_KERNELS
        _ensure_backend()
        params = _llama.llama_model_default_params()
        params.n_gpu_layers = n_gpu_layers if n_gpu_layers >= 0 else 999
        params.use_mmap = use_mmap
        params.vocab_only = vocab_only
        params.use_extra_bufts = not self.exact
        params.load_mtp = mtp
        self.rpc = _endpoints(rpc)
        self._set_devices(params, tensor_split)
        self.n_gpu_layers: int = params.n_gpu_layers
        mark = _log_mark()
        if self.rpc:  # the servers' handshakes and uploads, watched (rpc.watch): no answer ends the process
            params.progress_callback = self._progress = _rpc.load_progress()
            with _rpc.watch(self.rpc, during="while loading the model", learn=False):
                ptr = _llama.llama_model_load_from_file(str(self.path).encode("utf-8"), params)
        else:
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
        self.n_embd: int = _llama.llama_model_n_embd(ptr)
        self.n_layer_nextn: int = int(_llama.llama_model_n_layer_nextn(ptr))  # MTP (nextn) layers in the file
        self.has_mtp: bool = mtp and self.n_layer_nextn > 0
        self.size_bytes: int = _llama.llama_model_size(ptr)
        self.n_params: int = _llama.llama_model_n_params(ptr)
        self.is_recurrent: bool = bool(_llama.llama_model_is_recurrent(ptr)) or bool(_llama.llama_model_is_hybrid(ptr))
        self._piece_cache: dict[int, bytes] = {}
        self._eog_cache: dict[int, bool] = {}

    def _set_devices(self, params, tensor_split: Sequence[float]) -> None:
        devices = self.devices = None
        if self.rpc:
            devices = _rpc.register(self.rpc)
            params.n_gpu_layers = 999  # every layer on the servers; only the embeddings stay here
        elif _rpc.registered():
            devices = _rpc.local_devices()
        if tensor_split:
            if devices is None or len(tensor_split) != len(devices) or min(tensor_split) < 0 or sum(tensor_split) <= 0:
                raise InputError(
                    f"--tensor-split needs one non-negative share per RPC device "
                    f"({len(devices or ())} here), not {list(tensor_split)}"
                )
            self._split = _rpc.tensor_split_array(tensor_split)
            params.tensor_split = self._split
        if devices is not None:
            self.devices = tuple(devices)
            self._devices = _rpc.device_array(devices)  # llama.cpp copies it; kept for clarity
            params.devices = ctypes.cast(self._devices, ctypes.c_void_p)

    @property
    def kv_device_share(self) -> float:
        """The share of a context's KV cache that sits on a device (a GPU, an RPC server)
        rather than in RAM: llama.cpp keeps the K and V of each offloaded layer with it."""
        if self.n_gpu_layers <= 0 or not (self.rpc or _supports_gpu_offload()):
            return 0.0
        return min(self.n_gpu_layers, self.n_layer) / max(1, self.n_layer)

    def device_free_bytes(self) -> int | None:
        """The free memory of the devices its layers went to (this machine's GPUs, or
        its RPC servers), as llama.cpp reports it now; None where none says."""
        try:
            devices = self.devices if self.devices is not None else _rpc.local_devices()
            free = sum(_rpc.device_memory(d)[0] for d in devices)
        except (OSError, AttributeError):  # a build without the device calls
            return None
        return free or None

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
    def file_type(self) -> str:
        """The weight type llama.cpp wrote in the header (``general.file_type``, as its
        ``LLAMA_FTYPE_*`` names spell it: "Q4_K_M", "Q4_0", "F32"...); "" when the header
        has none or one this build does not name."""
        raw = self.meta("general.file_type")
        try:
            code = int(raw) if raw is not None else None
        except ValueError:
            return ""
        for prefix in ("LLAMA_FTYPE_MOSTLY_", "LLAMA_FTYPE_ALL_"):
            for attr in dir(_llama):
                if attr.startswith(prefix) and getattr(_llama, attr) == code:
                    return attr.removeprefix(prefix)
        return ""

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
    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes one token takes in an f16 KV cache (K and V, every layer)."""
        m = self._ptr
        n_head = max(1, _llama.llama_model_n_head(m))
        head_dim = _llama.llama_model_n_embd(m) // n_head
        return 2 * 2 * _llama.llama_model_n_layer(m) * _llama.llama_model_n_head_kv(m) * head_dim

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

    @property
    def eog_ids(self) -> tuple[int, ...]:
        """Every end-of-generation token id (read once from the vocabulary, then kept)."""
        ids = getattr(self, "_eog_ids", None)
        if ids is None:
            is_eog, vocab = _llama.llama_vocab_is_eog, self._vocab
            ids = self._eog_ids = tuple(t for t in range(self.n_vocab) if is_eog(vocab, t))
        return ids

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

    def guidance_vocab(self) -> tuple[list[bytes], list[int], int, int]:
        """What a grammar engine needs to build its tokenizer over this vocabulary (see
        ``edgespec.constraints``, after llguidance's ``lltokenizer_from_vocab``): every
        token's bytes, control tokens (and user-defined ones shaped ``<...>``) marked with
        a leading 0xFF byte, llguidance's sign for a special token; the end-of-generation
        ids; the vocabulary pointer; and the address of ``llama_tokenize``, which the
        grammar engine calls to tokenize forced text. Both addresses stay valid only while
        this model is open. Walks the whole vocabulary (~0.5 s for 152k tokens): cache it."""
        vocab = self._vocab
        size = 1024
        buf = ctypes.create_string_buffer(size)
        control, user = _llama.LLAMA_TOKEN_ATTR_CONTROL, _llama.LLAMA_TOKEN_ATTR_USER_DEFINED
        pieces: list[bytes] = []
        eog: list[int] = []
        for token in range(self.n_vocab):
            n = _llama.llama_token_to_piece(vocab, token, buf, size, 0, True)
            if n < 0:
                raise ModelFileError(f"token {token} of {self.path.name} is over {size} bytes long")
            piece = buf.raw[:n]
            attr = _llama.llama_vocab_get_attr(vocab, token)
            if attr & control or (attr & user and piece.startswith(b"<") and piece.endswith(b">")):
                piece = b"\xff" + piece
            pieces.append(piece)
            if _llama.llama_vocab_is_eog(vocab, token):
                eog.append(token)
        tokenize = ctypes.cast(_llama.llama_cpp._lib.llama_tokenize, ctypes.c_void_p).value
        return pieces, eog, int(vocab), int(tokenize)

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
        return b"".join(self.token_to_bytes(t, special) for t in tokens).decode("utf-8", errors="replace")


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
