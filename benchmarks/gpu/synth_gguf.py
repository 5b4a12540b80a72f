"""Synthetic GGUF models of real shapes, for timing where no real model can travel.

The GPU machine has no network and only 64 MiB of files reach it, so the Qwen2.5 models
are rebuilt there: same architecture (``qwen2``), same shapes, same vocabulary size and the
same mix of quantization types as llama.cpp's Q4_K_M files, with random weights. A decode
step reads every weight once and runs the same kernels whatever the values are, so step
times, c(n) and γ measured on these files are those of the real models; acceptance is not
(random models agree on nothing), which is why the speculation checks use a self-draft.

Weights are random quantized blocks written directly (no float model, no quantize pass:
a 7B file is written in seconds). Each block's scale is chosen so that the dequantized
weights have the standard deviation of a normal initialisation (1/sqrt(fan-in)); the
quantized values themselves are uniform random bits. The Q4_K_M mix follows llama.cpp's
``llama_tensor_get_type``: Q4_K everywhere, Q6_K for the output matrix (or the token
embedding when the output is tied to it) and for ``attn_v``/``ffn_down`` in the layers
``use_more_bits`` picks, with llama.cpp's fallbacks (Q4_K -> Q5_0, Q6_K -> Q8_0) for
matrices whose rows are not a multiple of 256 (Qwen2.5-0.5B's 896).

Logits are kept well spread (std ``LOGIT_STD``) and the special tokens' output rows are
zero, so greedy decoding never stops on an end-of-generation token by accident.

Usage: ``python synth_gguf.py OUT_DIR [qwen2.5-0.5b qwen2.5-1.5b qwen2.5-7b tiny]``.
Needs numpy and ``gguf`` only; it never imports llama_cpp.
"""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

QK_K = 256
LOGIT_STD = 4.0
N_SPECIAL = 3  # <|endoftext|> <|im_start|> <|im_end|>, the last ids of the vocabulary


@dataclass(frozen=True)
class Shape:
    """The hyperparameters of one Qwen2-architecture model."""

    name: str
    n_vocab: int
    n_embd: int
    n_layer: int
    n_head: int
    n_head_kv: int
    n_ff: int
    tied: bool  # output projection shared with the token embedding
    n_ctx_train: int = 32768
    real_bytes: int = 0  # size of the real Q4_K_M file, for comparison (0: none)


# From the models' config.json (Qwen/Qwen2.5-*-Instruct); real sizes as in edgespec.catalog. The
# published GGUFs store output.weight even where the HF model ties it to the embedding (the
# 0.5B Coder file here: token_embd Q5_0, output Q8_0, 491,400,064 bytes), so none is tied.
SHAPES = {
    "qwen2.5-0.5b": Shape("qwen2.5-0.5b", 151936, 896, 24, 14, 2, 4864, False, real_bytes=491_400_064),
    "qwen2.5-1.5b": Shape("qwen2.5-1.5b", 151936, 1536, 28, 12, 2, 8960, False, real_bytes=1_117_320_768),
    "qwen2.5-7b": Shape("qwen2.5-7b", 152064, 3584, 28, 28, 4, 18944, False, real_bytes=4_680_000_000),
    # a few MB, for running the whole benchmark on a CPU in a test
    "tiny": Shape("tiny", 2048, 256, 2, 4, 2, 768, True, n_ctx_train=4096),
}


# --------------------------------------------------------------------------------------
# Random quantized blocks
# --------------------------------------------------------------------------------------

# type name -> (weights per block, bytes per block)
BLOCK = {"Q4_K": (256, 144), "Q6_K": (256, 210), "Q5_0": (32, 22), "Q8_0": (32, 34), "F32": (1, 4)}
# the standard deviation of one block's dequantized weights per unit of its scale d, for
# uniform random quantized bits and the fixed sub-block scales written below
_UNIT_STD = {
    "Q4_K": 32 * np.sqrt((16**2 - 1) / 12),  # w = d*32*q - (7.5*d)*32, q in 0..15
    "Q6_K": 16 * np.sqrt((64**2 - 1) / 12),  # w = d*16*(q - 32), q in 0..63
    "Q5_0": np.sqrt((32**2 - 1) / 12),  # w = d*(q - 16), q in 0..31
    "Q8_0": np.sqrt(((2 * 127 + 1) ** 2 - 1) / 12),  # w = d*q, q in -127..127
}
# Q4_K's 12 scale bytes packing 8 sub-block scales and 8 mins, all 32 (6 bits each; see
# get_scale_min_k4 in ggml-quants.c)
_Q4K_SCALES = np.array([0xA0] * 8 + [0x00] * 4, dtype=np.uint8)


def _f16_bytes(x: float) -> np.ndarray:
    return np.frombuffer(np.float16(x).tobytes(), dtype=np.uint8)


def quantized(
    rng: np.random.Generator, rows: int, cols: int, qtype: str, std: float, zero_rows: tuple[int, ...] = ()
) -> np.ndarray:
    """A (rows, bytes per row) uint8 array of random ``qtype`` blocks whose weights have
    standard deviation ``std``; ``zero_rows`` dequantize to exactly zero."""
    per, nbytes = BLOCK[qtype]
    if cols % per:
        raise ValueError(f"{qtype} needs rows of a multiple of {per} weights, not {cols}")
    nb = cols // per
    n = rows * nb * nbytes
    # raw 64-bit draws seen as bytes: ~4x faster than integers(0, 256) on uint8
    data = rng.bit_generator.random_raw((n + 7) // 8).view(np.uint8)[:n].reshape(rows, nb, nbytes)
    d = std / _UNIT_STD[qtype]
    if qtype == "Q4_K":
        data[:, :, 0:2] = _f16_bytes(d)
        data[:, :, 2:4] = _f16_bytes(7.5 * d)
        data[:, :, 4:16] = _Q4K_SCALES
    elif qtype == "Q6_K":
        data[:, :, 192:208] = 16
        data[:, :, 208:210] = _f16_bytes(d)
    elif qtype == "Q5_0":
        data[:, :, 0:2] = _f16_bytes(d)
    elif qtype == "Q8_0":
        data[:, :, 0:2] = _f16_bytes(d)
        # -128 is outside the symmetric range llama.cpp's quantizer writes
        q = data[:, :, 2:].view(np.int8)
        q[q == -128] = -127
    else:
        raise ValueError(f"no random blocks for {qtype}")
    if zero_rows:
        rows_idx = np.asarray(zero_rows)
        if qtype == "Q4_K":
            data[rows_idx, :, 0:4] = 0
        elif qtype == "Q6_K":
            data[rows_idx, :, 208:210] = 0
        else:
            data[rows_idx, :, 0:2] = 0
    return data.reshape(rows, nb * nbytes)


# --------------------------------------------------------------------------------------
# The Q4_K_M mix
# --------------------------------------------------------------------------------------


def _use_more_bits(i: int, n: int) -> bool:
    """llama.cpp's choice of layers that get Q6_K in a Q4_K_M file."""
    return i < n // 8 or i >= 7 * n // 8 or (i - n // 8) % 3 == 2


def _fallback(qtype: str, cols: int) -> str:
    if cols % QK_K == 0:
        return qtype
    return {"Q4_K": "Q5_0", "Q6_K": "Q8_0"}[qtype]


def tensor_type(name: str, cols: int, layer: int | None, shape: Shape) -> str:
    """The type llama.cpp's Q4_K_M quantization gives this weight matrix."""
    if name == "output.weight" or (shape.tied and name == "token_embd.weight"):
        base = "Q6_K"
    elif (
        name.endswith(("attn_v.weight", "ffn_down.weight"))
        and layer is not None
        and _use_more_bits(layer, shape.n_layer)
    ):
        base = "Q6_K"
    else:
        base = "Q4_K"
    return _fallback(base, cols)


# --------------------------------------------------------------------------------------
# The vocabulary
# --------------------------------------------------------------------------------------


def _bytes_to_unicode() -> list[str]:
    """GPT-2's byte -> printable character map, in byte order."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    table = dict(zip(bs, cs))
    return [chr(table[b]) for b in range(256)]


def vocabulary(n_vocab: int) -> tuple[list[str], list[int], list[str]]:
    """Tokens, token types and merges of a byte-level BPE vocabulary of ``n_vocab``
    tokens: the 256 byte tokens, distinct filler tokens, and the three Qwen special
    tokens as the last ids."""
    byte_tokens = _bytes_to_unicode()
    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = byte_tokens + ["Ġt", "he", "Ġthe"]
    n_fill = n_vocab - len(tokens) - N_SPECIAL
    tokens += [f"w{i}" for i in range(n_fill)]
    tokens += ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    types = [1] * (n_vocab - N_SPECIAL) + [3] * N_SPECIAL  # NORMAL, CONTROL
    return tokens, types, merges


# --------------------------------------------------------------------------------------
# Writing a model
# --------------------------------------------------------------------------------------


def make_model(path: str | Path, shape: Shape | str, *, seed: int = 0) -> dict:
    """Write ``shape`` (a Shape or a key of SHAPES) as a random Q4_K_M-mix GGUF to
    ``path``; return a description (file size, tensor types, seconds taken)."""
    import gguf

    t0 = time.perf_counter()
    s = SHAPES[shape] if isinstance(shape, str) else shape
    rng = np.random.default_rng(seed)
    head_dim = s.n_embd // s.n_head
    n_kv = head_dim * s.n_head_kv
    specials = tuple(range(s.n_vocab - N_SPECIAL, s.n_vocab))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)

    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name(f"edgespec-synthetic-{s.name}")
    w.add_context_length(s.n_ctx_train)
    w.add_embedding_length(s.n_embd)
    w.add_block_count(s.n_layer)
    w.add_feed_forward_length(s.n_ff)
    w.add_head_count(s.n_head)
    w.add_head_count_kv(s.n_head_kv)
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q4_K_M))
    tokens, types, merges = vocabulary(s.n_vocab)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(specials[0])
    w.add_eos_token_id(specials[2])
    w.add_pad_token_id(specials[0])
    w.add_add_bos_token(False)

    # Tensors are described first and generated one at a time while writing, so memory
    # holds one tensor, not the model (the 7B's output matrix is the largest: 0.45 GB).
    specs: list[tuple[str, tuple]] = []  # (name, ("q", rows, cols, qtype, std, zero_rows) | ("v", values))
    types_used: dict[str, int] = {}

    def matrix(
        name: str, rows: int, cols: int, std: float, layer: int | None = None, zero_rows: tuple[int, ...] = ()
    ) -> None:
        qtype = tensor_type(name, cols, layer, s)
        types_used[qtype] = types_used.get(qtype, 0) + 1
        specs.append((name, ("q", rows, cols, qtype, std, zero_rows)))

    def vector(name: str, values: np.ndarray) -> None:
        types_used["F32"] = types_used.get("F32", 0) + 1
        specs.append((name, ("v", values.astype(np.float32))))

    # With a tied output the embedding is also the output projection: scale it so that
    # logits (embedding rows · the RMS-normalised hidden state) have std LOGIT_STD.
    out_std = LOGIT_STD / np.sqrt(s.n_embd)
    matrix("token_embd.weight", s.n_vocab, s.n_embd, out_std if s.tied else 1.0, zero_rows=specials if s.tied else ())
    for i in range(s.n_layer):
        p = f"blk.{i}."
        fan_in = 1.0 / np.sqrt(s.n_embd)
        vector(p + "attn_norm.weight", np.ones(s.n_embd))
        matrix(p + "attn_q.weight", s.n_embd, s.n_embd, fan_in, i)
        matrix(p + "attn_k.weight", n_kv, s.n_embd, fan_in, i)
        matrix(p + "attn_v.weight", n_kv, s.n_embd, fan_in, i)
        vector(p + "attn_q.bias", rng.normal(0, 0.1, s.n_embd))
        vector(p + "attn_k.bias", rng.normal(0, 0.1, n_kv))
        vector(p + "attn_v.bias", rng.normal(0, 0.1, n_kv))
        matrix(p + "attn_output.weight", s.n_embd, s.n_embd, fan_in, i)
        vector(p + "ffn_norm.weight", np.ones(s.n_embd))
        matrix(p + "ffn_gate.weight", s.n_ff, s.n_embd, fan_in, i)
        matrix(p + "ffn_up.weight", s.n_ff, s.n_embd, fan_in, i)
        matrix(p + "ffn_down.weight", s.n_embd, s.n_ff, 1.0 / np.sqrt(s.n_ff), i)
    vector("output_norm.weight", np.ones(s.n_embd))
    if not s.tied:
        matrix("output.weight", s.n_vocab, s.n_embd, out_std, zero_rows=specials)

    for name, spec in specs:
        if spec[0] == "q":
            _, rows, cols, qtype, _, _ = spec
            per, nbytes = BLOCK[qtype]
            w.add_tensor_info(
                name,
                (rows, cols // per * nbytes),
                np.dtype(np.uint8),
                rows * cols // per * nbytes,
                raw_dtype=gguf.GGMLQuantizationType[qtype],
            )
        else:
            w.add_tensor_info(name, spec[1].shape, spec[1].dtype, spec[1].nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    for _name, spec in specs:
        if spec[0] == "q":
            _, rows, cols, qtype, std, zero_rows = spec
            w.write_tensor_data(quantized(rng, rows, cols, qtype, std, zero_rows))
        else:
            w.write_tensor_data(spec[1])
    w.close()
    size = path.stat().st_size
    return {
        "shape": s.name,
        "path": str(path),
        "bytes": size,
        "real_q4_k_m_bytes": s.real_bytes or None,
        "n_vocab": s.n_vocab,
        "n_embd": s.n_embd,
        "n_layer": s.n_layer,
        "n_head": s.n_head,
        "n_head_kv": s.n_head_kv,
        "n_ff": s.n_ff,
        "tied_output": s.tied,
        "tensor_types": dict(sorted(types_used.items())),
        "seconds": round(time.perf_counter() - t0, 2),
    }


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    out = Path(argv[0])
    for name in argv[1:] or ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b"]:
        info = make_model(out / f"{name}-synthetic-q4_k_m.gguf", name)
        print(f"{name}: {info['bytes'] / 1e6:.1f} MB in {info['seconds']} s {info['tensor_types']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
