"""Tiny random-weight GGUF models that llama.cpp really loads and runs, for fast tests.

``make_tiny_model(path, ...)`` writes a ``llama``-architecture GGUF with F32 weights
(2 layers, 64-wide by default: a few hundred KB, written in milliseconds) and a small
GPT-2 style byte-level BPE vocabulary:

* ``vocab="base"``  (320 tokens) the target's vocabulary: ids 0..4 are control tokens
  ``<|pad|> <|bos|> <|eos|> <|im_start|> <|im_end|>``, ids 5..260 the 256 byte tokens
  (in byte order), then 59 merges learnt from a short English + code corpus. Every
  token from id 5 up has distinct text. Tokenizes any text (byte-level), adds BOS, has
  a ChatML chat template.
* ``vocab="other"`` (300 tokens) a *different* vocabulary (other special tokens and
  ids, bytes in another order, other merges): a vocab-compatibility check must reject
  it as a drafter for a ``base`` target.
* ``vocab="small"`` (36 tokens) for sampling statistics: the 5 control tokens, space,
  newline, ``a``-``z`` and 3 merges. Text outside that alphabet is dropped by the
  tokenizer, so pass prompts as token ids.

Weights are seeded: the same arguments give byte-identical files. ``noise > 0`` adds
Gaussian noise (``noise`` times each matrix's own init scale, from ``noise_seed``) to
the very weights ``seed`` gives, which makes a drafter that mostly agrees with the
target; ``noise == 0`` gives exactly the target's weights.

Two tricks make the random models usable for exact tests:

* **Well-spread logits.** The output projection is scaled so that logits have a
  standard deviation of ``logit_scale`` (default 6 for the larger vocabularies): the
  top-1/top-2 gap is then almost never small enough for the different matmul kernels
  llama.cpp uses for 1-token and n-token batches to flip a greedy choice.
* **A bias channel.** Embedding dimension 0 is a constant that no layer writes to (the
  rows of ``attn_output`` and ``ffn_down`` that feed it are zero), so after the final
  RMS norm it acts as a per-token output bias. Control tokens get ``special_bias``
  through it (strongly negative by default: generation never emits BOS/EOS/im_end by
  accident); ``eos_bias`` overrides it for EOS (a large positive value makes a model
  that stops at once).
* **No fixed points.** A random model is close to a token -> token map, and such maps
  have fixed points (greedy emits one token forever). Each token's output row is
  pushed away from its own embedding, so greedy output wanders or falls into short
  cycles of 2+ tokens instead.

The vocabularies themselves are built in tests/tiny_vocab.py (``build_vocab``, also importable
from here). Also here: ``write_truncated`` and ``write_random_bytes`` for corrupt-file tests, and
``make_header_model`` (a GGUF header without runnable weights). This module needs numpy and
``gguf`` only; it never imports llama_cpp.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from tiny_vocab import TOKEN_NORMAL, TinyVocab, build_vocab


def _weights(
    rng: np.random.Generator,
    vocab: TinyVocab,
    *,
    n_layer: int,
    n_embd: int,
    n_head: int,
    n_head_kv: int,
    n_ff: int,
    logit_scale: float,
    special_bias: float,
    eos_bias: float | None,
    bias_value: float,
    repeat_suppression: float = 0.0,
    attn_gain: float = 1.0,
) -> dict[str, tuple[np.ndarray, float]]:
    """name -> (float32 array in numpy (rows, cols) = (out, in) order, init std).

    The init std is what ``noise`` is relative to; 0 marks tensors that never get noise
    (norm weights and the bias channel).
    """
    n_vocab = vocab.n_vocab
    head_dim = n_embd // n_head
    n_embd_kv = head_dim * n_head_kv
    out: dict[str, tuple[np.ndarray, float]] = {}

    def normal(shape: tuple[int, ...], std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    emb = normal((n_vocab, n_embd), 1.0)
    emb[:, 0] = bias_value  # the bias channel
    out["token_embd.weight"] = (emb, 1.0)

    s_in = 1.0 / np.sqrt(n_embd)
    for i in range(n_layer):
        p = f"blk.{i}."
        out[p + "attn_norm.weight"] = (np.ones(n_embd, np.float32), 0.0)
        out[p + "attn_q.weight"] = (normal((n_embd, n_embd), s_in), s_in)
        out[p + "attn_k.weight"] = (normal((n_embd_kv, n_embd), s_in), s_in)
        out[p + "attn_v.weight"] = (normal((n_embd_kv, n_embd), s_in), s_in)
        wo = normal((n_embd, n_embd), s_in * attn_gain)
        wo[0, :] = 0.0  # nothing writes into the bias channel
        out[p + "attn_output.weight"] = (wo, s_in * attn_gain)
        out[p + "ffn_norm.weight"] = (np.ones(n_embd, np.float32), 0.0)
        out[p + "ffn_gate.weight"] = (normal((n_ff, n_embd), s_in), s_in)
        out[p + "ffn_up.weight"] = (normal((n_ff, n_embd), s_in), s_in)
        s_ff = 1.0 / np.sqrt(n_ff)
        wd = normal((n_embd, n_ff), s_ff)
        wd[0, :] = 0.0
        out[p + "ffn_down.weight"] = (wd, s_ff)

    out["output_norm.weight"] = (np.ones(n_embd, np.float32), 0.0)
    # After RMS norm the hidden state has RMS 1, so rows with std s / sqrt(n_embd) over
    # the n_embd - 1 ordinary dimensions give logits with std ~ s.
    s_out = logit_scale / np.sqrt(n_embd)
    w_out = normal((n_vocab, n_embd), s_out)
    w_out[:, 0] = 0.0
    if repeat_suppression:
        # Random maps from token to token have fixed points (t -> t forever); pushing
        # each token's output row away from its own embedding makes "repeat the current
        # token" about ``repeat_suppression`` logit stds less likely.
        e = emb[:, 1:] / np.linalg.norm(emb[:, 1:], axis=1, keepdims=True)
        w_out[:, 1:] -= (repeat_suppression * logit_scale / np.sqrt(n_embd - 1)) * e
    # The bias channel's normalised value (no layer writes it, so it is bias_value over
    # the RMS of the residual stream, ~bias_value / 1.1 here); approximate is enough.
    channel = bias_value / np.sqrt((bias_value**2 + (n_embd - 1)) / n_embd)
    for t in vocab.special_ids:
        w_out[t, :] = 0.0
        bias = eos_bias if (t == vocab.eos_id and eos_bias is not None) else special_bias
        w_out[t, 0] = bias / channel
    out["output.weight"] = (w_out, s_out)
    return out


def make_tiny_model(
    path: str | Path,
    *,
    vocab: str = "base",
    seed: int = 0,
    noise: float = 0.0,
    noise_seed: int = 1,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 2,
    n_head_kv: int = 1,
    n_ff: int = 128,
    n_ctx_train: int = 2048,
    logit_scale: float | None = None,
    special_bias: float = -30.0,
    eos_bias: float | None = None,
    name: str | None = None,
    repeat_suppression: float = 2.0,
    attn_gain: float = 1.0,
    n_vocab: int | None = None,
    chat_template: str | None = None,
    fim: bool = False,
) -> Path:
    """Write a tiny ``llama`` GGUF (F32) to ``path`` and return the path.

    ``seed`` fixes the weights; ``noise``/``noise_seed`` perturb them (a drafter; 0.1
    gives ~65-75% greedy top-1 agreement with the same ``seed``'s target, 0.04 ~85-90%,
    0.2 ~40-55%). ``logit_scale`` is the std of the logits (default 6, or 2 for
    ``vocab="small"`` so that sampling spreads over many tokens). ``special_bias`` sets
    the logit of the control tokens and ``eos_bias`` that of EOS alone, through the bias
    channel; both are approximate (the residual stream grows through the layers, so the
    realised logit is ~0.6x the value asked for: ``eos_bias=30`` makes EOS the greedy
    choice by a margin of ~1 logit, ``eos_bias=50`` by a wide one).
    ``repeat_suppression`` (in logit stds) pushes each token's output row away from its
    own embedding, so that greedy decoding does not lock onto one token; ``attn_gain``
    scales the attention output (above ~1.5 the models collapse into repetition).
    ``name`` is ``general.name``. ``n_vocab`` larger than the vocabulary's own size
    appends ordinary tokens ``<extra_0>``, ``<extra_1>``, ... (no merge produces them,
    but the model can emit them) with random embedding and output rows drawn after all
    other weights, so every other weight is the same as without them: a 328-token
    ``base`` model is a 320-token one plus 8 ids (vocabulary sizes that differ, as
    Qwen2.5-7B's 152,064 and 0.5B's 151,936 do). ``chat_template`` replaces the
    vocabulary's own template (a model whose template renders tools, for example).
    ``fim``: the last five ids (``n_vocab`` must add at least five) are its
    fill-in-the-middle prefix, suffix, middle, repository and file-separator tokens
    (``tokenizer.ggml.fim_*_token_id``), as a code model's.
    """
    import gguf  # test-only dependency

    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must divide by n_head, and n_head by n_head_kv")
    v = build_vocab(vocab)
    n_extra = 0 if n_vocab is None else n_vocab - v.n_vocab
    if n_extra < 0:
        raise ValueError(f"n_vocab must be at least the {vocab!r} vocabulary's {v.n_vocab} tokens")
    if logit_scale is None:
        logit_scale = 2.0 if vocab == "small" else 6.0
    rng = np.random.default_rng(seed)
    tensors = _weights(
        rng,
        v,
        n_layer=n_layer,
        n_embd=n_embd,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        logit_scale=logit_scale,
        special_bias=special_bias,
        eos_bias=eos_bias,
        bias_value=4.0,
        repeat_suppression=repeat_suppression,
        attn_gain=attn_gain,
    )
    if n_extra:
        emb, emb_std = tensors["token_embd.weight"]
        extra_emb = (rng.standard_normal((n_extra, n_embd)) * emb_std).astype(np.float32)
        extra_emb[:, 0] = emb[0, 0]  # the bias channel's constant
        out, out_std = tensors["output.weight"]
        extra_out = (rng.standard_normal((n_extra, n_embd)) * out_std).astype(np.float32)
        extra_out[:, 0] = 0.0
        tensors["token_embd.weight"] = (np.concatenate([emb, extra_emb]), emb_std)
        tensors["output.weight"] = (np.concatenate([out, extra_out]), out_std)
        v = replace(
            v,
            tokens=v.tokens + tuple(f"<extra_{i}>" for i in range(n_extra)),
            token_types=v.token_types + (TOKEN_NORMAL,) * n_extra,
        )
    if noise > 0:
        nrng = np.random.default_rng(noise_seed)
        for key, (arr, std) in tensors.items():
            if std == 0.0:
                continue
            pert = (nrng.standard_normal(arr.shape) * (noise * std)).astype(np.float32)
            keep_zero = arr == 0.0  # bias channel and the zeroed special rows stay exact
            arr = arr + pert
            arr[keep_zero] = 0.0
            if key == "token_embd.weight":
                arr[:, 0] = tensors[key][0][:, 0]
            tensors[key] = (arr, std)

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name or f"edgespec-tiny-{vocab}-s{seed}" + (f"-noise{noise:g}" if noise else ""))
    w.add_context_length(n_ctx_train)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(n_head)
    w.add_head_count_kv(n_head_kv)
    w.add_rope_dimension_count(n_embd // n_head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(v.n_vocab)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(v.pre)
    w.add_token_list(list(v.tokens))
    w.add_token_types(list(v.token_types))
    w.add_token_merges(list(v.merges))
    w.add_bos_token_id(v.bos_id)
    w.add_eos_token_id(v.eos_id)
    w.add_pad_token_id(v.pad_id)
    w.add_add_bos_token(v.add_bos)
    w.add_add_eos_token(False)
    if chat_template or v.chat_template:
        w.add_chat_template(chat_template or v.chat_template)
    if fim:
        if n_extra < 5:
            raise ValueError("fim=True needs n_vocab at least five above the vocabulary's own size")
        for i, name in enumerate(("pre", "suf", "mid", "rep", "sep")):
            w.add_uint32(f"tokenizer.ggml.fim_{name}_token_id", v.n_vocab - 5 + i)
    for key, (arr, _) in tensors.items():
        w.add_tensor(key, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def write_truncated(src: str | Path, dst: str | Path, fraction: float = 0.5) -> Path:
    """Copy the first ``fraction`` of ``src`` to ``dst`` (a GGUF cut short)."""
    data = Path(src).read_bytes()
    dst = Path(dst)
    dst.write_bytes(data[: int(len(data) * fraction)])
    return dst


def write_random_bytes(dst: str | Path, n: int = 4096, seed: int = 0) -> Path:
    """``n`` seeded random bytes: not a GGUF at all (no ``GGUF`` magic)."""
    data = np.random.default_rng(seed).integers(0, 256, size=n, dtype=np.uint8).tobytes()
    if data[:4] == b"GGUF":  # cannot happen with seed 0; be sure anyway
        data = b"\0" + data[1:]
    dst = Path(dst)
    dst.write_bytes(data)
    return dst


def make_header_model(
    path: str | Path,
    *,
    vocab: str = "base",
    name: str = "edgespec-tiny-header",
    kind: str = "model",
    n_floats: int = 256,
    n_parts: int = 1,
    basename: str | None = None,
    pre: str | None = None,
    tokens: list[str] | None = None,
    arch: str = "llama",
) -> list[Path]:
    """A GGUF that only has to be *read*, not run: a tiny vocabulary's tokenizer metadata
    and ``n_floats`` F32 weights per part (which sets the file size, for size ratios).
    ``kind``: "model", "mmproj" (general.type mmproj, arch clip) or "lora" (general.type
    adapter). ``n_parts`` > 1 writes a split model (``name-00001-of-0000N.gguf`` next to
    ``path``). ``tokens`` replaces the vocabulary's token list (a large fake vocabulary).
    Returns the files written."""
    import gguf

    v = build_vocab(vocab)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arch = "clip" if kind == "mmproj" else arch  # ``arch``: general.architecture
    w = gguf.GGUFWriter(str(path), arch, split_max_tensors=1 if n_parts > 1 else 0)
    w.add_name(name)
    if basename:
        w.add_basename(basename)
    if kind == "mmproj":
        w.add_type("mmproj")
    elif kind == "lora":
        w.add_type("adapter")
        w.add_string("adapter.type", "lora")
    w.add_context_length(2048)
    w.add_block_count(1)
    w.add_embedding_length(64)
    w.add_head_count(2)
    w.add_head_count_kv(1)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    toks = list(tokens) if tokens is not None else list(v.tokens)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(pre or v.pre)
    w.add_token_list(toks)
    w.add_bos_token_id(v.bos_id)
    w.add_eos_token_id(v.eos_id)
    w.add_add_bos_token(v.add_bos)
    w.add_add_eos_token(False)
    if v.chat_template:
        w.add_chat_template(v.chat_template)
    for i in range(max(1, n_parts)):
        w.add_tensor(f"blk.{i}.weight", np.zeros(n_floats, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    if n_parts > 1:
        return sorted(path.parent.glob(f"{path.stem}-*-of-*.gguf"))
    return [path]
