"""Tiny random-weight *hybrid* GGUF models (recurrent + attention layers) that llama.cpp
really loads and runs, for fast tests of speculation on hybrids (issue 44).

* ``make_tiny_lfm2(path, ...)``: an ``lfm2`` GGUF. Layers alternate short-convolution and
  attention by default (``layers="caca"``: conv, attn, conv, attn); a conv layer is the
  one whose entry in the per-layer ``lfm2.attention.head_count_kv`` array is 0, and has
  ``blk.N.shortconv.{conv,in_proj,out_proj}`` tensors (``lfm2.shortconv.l_cache`` = 3, as
  LiquidAI's models). The output norm is ``token_embd_norm`` (llama.cpp's name for it).
* ``make_tiny_qwen35(path, ...)``: a ``qwen35`` GGUF (Qwen3.5's dense layout). Gated
  DeltaNet recurrent layers with a full-attention layer every ``full_attention_interval``
  layers (4, as Qwen3.5: layers 0-2 recurrent, 3 attention), written both as
  ``qwen35.full_attention_interval`` and as the per-layer ``qwen35.attention.recurrent_layers``
  array (as the converter writes them); ``qwen35.ssm.*`` keys, gated attention (``attn_q``
  holds query and gate), partial interleaved M-RoPE (``rope.dimension_count`` a quarter of
  the head, ``rope.dimension_sections``). ``nextn=True`` appends one MTP (nextn) block as
  layer ``n_layer`` (``qwen35.nextn_predict_layers`` = 1, ``block_count`` = n_layer + 1),
  with ``nextn.eh_proj``, ``nextn.enorm``, ``nextn.hnorm`` and ``nextn.shared_head_norm``;
  llama.cpp skips its tensors unless the model is loaded with ``load_mtp``.
* ``make_shape_true_qwen35(path, size="0.8b")``: a ``qwen35`` file at a real
  Qwen3.5-0.8B's dimensions (see its docstring) with random weights, Q8_0 or F16, for cost
  measurements (c(n), snapshot memory, reuse costs), not for correctness; with
  ``nextn=True, right_head=True, perturb=x`` its MTP head is built as the tiny model's
  right head, for ``--draft mtp`` at a chosen acceptance and real costs.

The tiny ones use tests/tiny_vocab.py's 320-token ``base`` vocabulary (ChatML template,
BOS 1, EOS 2) and are F32, seeded (same arguments, byte-identical files), under 1 MB,
written in milliseconds. They carry tests/tiny_models.py's tricks, so that greedy decoding on random
weights is the same in 1-token and n-token batches and falls into loops that prompt lookup
can draft:

* **Well-spread logits**: the output projection gives logits with a standard deviation of
  ``logit_scale`` (6), so the top-1/top-2 gap is almost never within the rounding
  differences between llama.cpp's 1-token and n-token kernels (the chunked and the
  one-step Gated DeltaNet included).
* **A bias channel**: embedding dimension 0 is a constant no layer writes to (the rows of
  every matrix that writes the residual stream are zero: ``attn_output``, ``shortconv.out_proj``,
  ``ssm_out``, ``ffn_down``), so after the final RMS norm it is a per-token output bias:
  control tokens get ``special_bias`` (strongly negative: never emitted by accident),
  ``eos_bias`` overrides it for EOS.
* **No fixed points**: each token's output row is pushed away from its own embedding
  (``repeat_suppression`` logit stds), so greedy output cycles through 2+ tokens instead of
  repeating one.
* **Quiet mixers**: the recurrent blocks write into the residual stream at a quarter of
  the usual scale (``conv_gain`` / ``deltanet_gain`` 0.25). At full scale a random hybrid is
  chaotic (its next token depends on the last several tokens: of 64-128 greedy tokens, 0-4%
  are what prompt lookup would draft); at 0.25 ~35% (lfm2) and ~25-30% (qwen35) are,
  as on the tiny llama target (~40%), while the state still matters: a stale recurrent state
  (llama.cpp's snapshot plane of an earlier decode) changes the greedy continuation within
  20 tokens in ~80% of trials (all of them at gain 1, within 1-8 tokens). Pass gain 1.0
  for a model where every state error shows at once.

Recurrent parameters follow the real models' initialisation where it matters for stable
numbers: Gated DeltaNet's ``ssm_a`` = -A with A in [1, 16], ``ssm_dt.bias`` the inverse
softplus of a time step in [0.001, 0.1], unit ``ssm_norm``; short-conv kernels with std
1/sqrt(l_cache). This module needs numpy and ``gguf`` only; it never imports llama_cpp.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from tiny_vocab import TOKEN_NORMAL, TinyVocab, build_vocab

# ------------------------------------------------------------------ shared parts


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> np.ndarray:
    return (rng.standard_normal(shape) * std).astype(np.float32)


def _embedding_and_head(
    rng: np.random.Generator,
    vocab: TinyVocab,
    n_embd: int,
    *,
    logit_scale: float,
    special_bias: float,
    eos_bias: float | None,
    bias_value: float,
    repeat_suppression: float,
) -> tuple[np.ndarray, np.ndarray]:
    """``token_embd`` (bias channel in dimension 0) and ``output`` (well-spread logits,
    control tokens biased through the channel, rows pushed off their own embedding), as
    tests/tiny_models.py builds them."""
    n_vocab = vocab.n_vocab
    emb = _normal(rng, (n_vocab, n_embd), 1.0)
    emb[:, 0] = bias_value
    s_out = logit_scale / np.sqrt(n_embd)
    w_out = _normal(rng, (n_vocab, n_embd), s_out)
    w_out[:, 0] = 0.0
    if repeat_suppression:
        e = emb[:, 1:] / np.linalg.norm(emb[:, 1:], axis=1, keepdims=True)
        w_out[:, 1:] -= (repeat_suppression * logit_scale / np.sqrt(n_embd - 1)) * e
    # the channel's value after the final RMS norm, roughly (the residual stream grows a
    # little through the layers, so the realised bias is somewhat smaller)
    channel = bias_value / np.sqrt((bias_value**2 + (n_embd - 1)) / n_embd)
    for t in vocab.special_ids:
        w_out[t, :] = 0.0
        bias = eos_bias if (t == vocab.eos_id and eos_bias is not None) else special_bias
        w_out[t, 0] = bias / channel
    return emb, w_out


def _ffn(rng: np.random.Generator, p: str, n_embd: int, n_ff: int) -> dict[str, np.ndarray]:
    s_in = 1.0 / np.sqrt(n_embd)
    down = _normal(rng, (n_embd, n_ff), 1.0 / np.sqrt(n_ff))
    down[0, :] = 0.0  # nothing writes into the bias channel
    return {
        p + "ffn_gate.weight": _normal(rng, (n_ff, n_embd), s_in),
        p + "ffn_up.weight": _normal(rng, (n_ff, n_embd), s_in),
        p + "ffn_down.weight": down,
    }


def _writes_residual(rng: np.random.Generator, n_embd: int, n_in: int, gain: float = 1.0) -> np.ndarray:
    """A projection into the residual stream (numpy (out, in)) with its bias-channel row zero."""
    w = _normal(rng, (n_embd, n_in), gain / np.sqrt(n_in))
    w[0, :] = 0.0
    return w


def _ones(n: int) -> np.ndarray:
    return np.ones(n, dtype=np.float32)


def _add_vocab(w, v: TinyVocab, n_vocab: int | None = None) -> None:
    """The tokenizer metadata of ``v`` (``n_vocab`` above its size appends ordinary
    ``<extra_i>`` tokens, as tests/tiny_models.py does)."""
    tokens, types = list(v.tokens), list(v.token_types)
    if n_vocab is not None and n_vocab > len(tokens):
        extra = n_vocab - len(tokens)
        tokens += [f"<extra_{i}>" for i in range(extra)]
        types += [TOKEN_NORMAL] * extra
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre(v.pre)
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(list(v.merges))
    w.add_bos_token_id(v.bos_id)
    w.add_eos_token_id(v.eos_id)
    w.add_pad_token_id(v.pad_id)
    w.add_add_bos_token(v.add_bos)
    w.add_add_eos_token(False)
    if v.chat_template:
        w.add_chat_template(v.chat_template)


def _write(path: Path, arch: str, name: str, kv: list[tuple[str, object]], v: TinyVocab, tensors, fim=()) -> Path:
    """Write an F32 GGUF: ``kv`` as (key without the ``arch.`` prefix, value) pairs; ints
    are uint32, floats float32, lists arrays (bools: a bool array)."""
    import gguf  # test-only dependency

    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    _add_kv(w, arch, kv)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    _add_vocab(w, v)
    for which, token in fim:  # (name, id): the header's fill-in-the-middle tokens
        w.add_uint32(f"tokenizer.ggml.fim_{which}_token_id", token)
    for key, arr in tensors.items():
        w.add_tensor(key, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _add_kv(w, arch: str, kv: list[tuple[str, object]]) -> None:
    import gguf

    for key, value in kv:
        full = f"{arch}.{key}"
        if isinstance(value, bool):
            w.add_bool(full, value)
        elif isinstance(value, int):
            w.add_uint32(full, value)
        elif isinstance(value, float):
            w.add_float32(full, value)
        elif value and isinstance(value[0], bool):
            w.add_array(full, [bool(x) for x in value])
        else:
            # ints: llama.cpp reads uint32 and int32 arrays alike
            w.add_key_value(full, [int(x) for x in value], gguf.GGUFValueType.ARRAY, sub_type=gguf.GGUFValueType.INT32)


def _perturb(rng_seed: int, noise: float, tensors: dict[str, np.ndarray], stds: dict[str, float]) -> None:
    """In place: Gaussian noise (``noise`` times each tensor's init std) on every weight that
    has one, keeping exact zeros (the bias channel) and the embedding's channel."""
    if noise <= 0:
        return
    nrng = np.random.default_rng(rng_seed)
    for key, arr in tensors.items():
        std = stds.get(key, 0.0)
        if std == 0.0:
            continue
        keep = arr == 0.0
        new = arr + (nrng.standard_normal(arr.shape) * (noise * std)).astype(np.float32)
        new[keep] = 0.0
        if key == "token_embd.weight":
            new[:, 0] = arr[:, 0]
        tensors[key] = new


def _init_std(key: str, arr: np.ndarray) -> float:
    """The init std noise is relative to: 0 for norms, the recurrent constants and 1-D tensors."""
    if arr.ndim < 2 or "norm" in key:
        return 0.0
    nz = arr[arr != 0.0]
    return float(nz.std()) if nz.size else 0.0


# ------------------------------------------------------------------------- lfm2


def make_tiny_lfm2(
    path: str | Path,
    *,
    seed: int = 0,
    n_layer: int = 4,
    layers: str | None = None,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 128,
    l_cache: int = 3,
    n_ctx_train: int = 2048,
    logit_scale: float = 6.0,
    special_bias: float = -30.0,
    eos_bias: float | None = None,
    repeat_suppression: float = 2.0,
    conv_gain: float = 0.25,
    attn_gain: float = 1.0,
    noise: float = 0.0,
    noise_seed: int = 1,
    name: str | None = None,
    fim: bool = False,
) -> Path:
    """Write a tiny ``lfm2`` GGUF (F32, 320-token ``base`` vocabulary) and return the path.

    ``layers``: one letter per layer, ``c`` a short-convolution layer, ``a`` an attention
    layer (default: ``"ca"`` repeated, ``n_layer`` long: conv, attn, conv, attn). Defaults:
    n_embd 64, 4 query heads of 16, 2 KV heads (on attention layers; 0 on conv layers),
    n_ff 128, l_cache 3 (a conv layer keeps the last 2 positions' state), RMS eps 1e-5,
    rope base 1e6, separate output matrix (not tied). ``conv_gain`` scales what the conv
    layers write (see the module's "quiet mixers"), ``attn_gain`` the attention layers'.
    ``noise``/``noise_seed``: Gaussian noise on the weights of the same
    ``seed`` (a drafter that mostly agrees), as tests/tiny_models.py's ``noise``.
    ``fim``: five more tokens, named as a code model's fill-in-the-middle tokens in the
    header (``tokenizer.ggml.fim_{pre,suf,mid,rep,sep}_token_id``), for ``/infill``.
    """
    if layers is None:
        layers = ("ca" * n_layer)[:n_layer]
    layers = layers.lower()
    if set(layers) - {"c", "a"} or not layers:
        raise ValueError("layers: one 'c' (conv) or 'a' (attention) per layer")
    if n_embd % n_head or n_head % n_head_kv:
        raise ValueError("n_embd must divide by n_head, and n_head by n_head_kv")
    n_layer = len(layers)
    head_dim = n_embd // n_head
    v = build_vocab("base")
    if fim:  # ordinary tokens, as tests/tiny_models.py's fim: named in the header below
        names = tuple(f"<extra_{i}>" for i in range(5))
        v = replace(v, tokens=v.tokens + names, token_types=v.token_types + (TOKEN_NORMAL,) * 5)
    rng = np.random.default_rng(seed)
    emb, w_out = _embedding_and_head(
        rng,
        v,
        n_embd,
        logit_scale=logit_scale,
        special_bias=special_bias,
        eos_bias=eos_bias,
        bias_value=4.0,
        repeat_suppression=repeat_suppression,
    )
    t: dict[str, np.ndarray] = {"token_embd.weight": emb}
    s_in = 1.0 / np.sqrt(n_embd)
    for i, kind in enumerate(layers):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = _ones(n_embd)  # LFM2's "operator norm"
        if kind == "a":
            t[p + "attn_q.weight"] = _normal(rng, (n_embd, n_embd), s_in)
            t[p + "attn_k.weight"] = _normal(rng, (head_dim * n_head_kv, n_embd), s_in)
            t[p + "attn_v.weight"] = _normal(rng, (head_dim * n_head_kv, n_embd), s_in)
            t[p + "attn_q_norm.weight"] = _ones(head_dim)
            t[p + "attn_k_norm.weight"] = _ones(head_dim)
            t[p + "attn_output.weight"] = _writes_residual(rng, n_embd, n_embd, attn_gain)
        else:
            # in_proj gives B, C, x (n_embd each); y = out_proj(C * conv(B * x)), the conv
            # kernel numpy (n_embd, l_cache) = ggml {l_cache, n_embd}
            t[p + "shortconv.in_proj.weight"] = _normal(rng, (3 * n_embd, n_embd), s_in)
            t[p + "shortconv.conv.weight"] = _normal(rng, (n_embd, l_cache), 1.0 / np.sqrt(l_cache))
            t[p + "shortconv.out_proj.weight"] = _writes_residual(rng, n_embd, n_embd, conv_gain)
        t[p + "ffn_norm.weight"] = _ones(n_embd)
        t.update(_ffn(rng, p, n_embd, n_ff))
    t["token_embd_norm.weight"] = _ones(n_embd)  # LFM2's output norm, under this name
    t["output.weight"] = w_out
    _perturb(noise_seed, noise, t, {k: _init_std(k, a) for k, a in t.items()})

    kv: list[tuple[str, object]] = [
        ("context_length", n_ctx_train),
        ("embedding_length", n_embd),
        ("block_count", n_layer),
        ("feed_forward_length", n_ff),
        ("attention.head_count", n_head),
        ("attention.head_count_kv", [n_head_kv if k == "a" else 0 for k in layers]),
        ("attention.layer_norm_rms_epsilon", 1e-5),
        ("rope.freq_base", 1000000.0),
        ("shortconv.l_cache", l_cache),
        ("vocab_size", v.n_vocab),
    ]
    label = name or f"edgespec-tiny-lfm2-s{seed}" + (f"-noise{noise:g}" if noise else "")
    fim_ids = [("pre", v.n_vocab - 5), ("suf", v.n_vocab - 4), ("mid", v.n_vocab - 3), ("rep", v.n_vocab - 2)]
    fim_ids.append(("sep", v.n_vocab - 1))
    return _write(Path(path), "lfm2", label, kv, v, t, fim=fim_ids if fim else ())


# ------------------------------------------------------------------------ qwen35


def _qwen35_attention(
    rng: np.random.Generator, p: str, n_embd: int, n_head: int, n_head_kv: int, head_dim: int, gain: float = 1.0
) -> dict[str, np.ndarray]:
    s_in = 1.0 / np.sqrt(n_embd)
    return {
        # per head: head_dim query values then head_dim gate values
        p + "attn_q.weight": _normal(rng, (2 * head_dim * n_head, n_embd), s_in),
        p + "attn_k.weight": _normal(rng, (head_dim * n_head_kv, n_embd), s_in),
        p + "attn_v.weight": _normal(rng, (head_dim * n_head_kv, n_embd), s_in),
        p + "attn_q_norm.weight": _ones(head_dim),
        p + "attn_k_norm.weight": _ones(head_dim),
        p + "attn_output.weight": _writes_residual(rng, n_embd, head_dim * n_head, gain),
    }


def _qwen35_deltanet(
    rng: np.random.Generator,
    p: str,
    n_embd: int,
    d_conv: int,
    d_state: int,
    n_group: int,
    n_v_heads: int,
    gain: float = 1.0,
    dt_range: tuple[float, float] = (1e-3, 1e-1),
) -> dict[str, np.ndarray]:
    s_in = 1.0 / np.sqrt(n_embd)
    key_dim = d_state * n_group
    value_dim = d_state * n_v_heads
    conv_dim = 2 * key_dim + value_dim
    a = rng.uniform(1.0, 16.0, n_v_heads)  # A; the converter stores -exp(A_log) = -A
    dt = np.exp(rng.uniform(np.log(dt_range[0]), np.log(dt_range[1]), n_v_heads))
    dt_bias = dt + np.log(-np.expm1(-dt))  # inverse softplus
    return {
        p + "attn_qkv.weight": _normal(rng, (conv_dim, n_embd), s_in),  # q, k, v (conv input)
        p + "attn_gate.weight": _normal(rng, (value_dim, n_embd), s_in),  # z
        p + "ssm_conv1d.weight": _normal(rng, (conv_dim, d_conv), 1.0 / np.sqrt(d_conv)),
        p + "ssm_dt.bias": dt_bias.astype(np.float32),
        p + "ssm_a": (-a).astype(np.float32),
        p + "ssm_beta.weight": _normal(rng, (n_v_heads, n_embd), s_in),
        p + "ssm_alpha.weight": _normal(rng, (n_v_heads, n_embd), s_in),
        p + "ssm_norm.weight": _ones(d_state),
        p + "ssm_out.weight": _writes_residual(rng, n_embd, value_dim, gain),
    }


def _qwen35_recurrent(n_layer: int, full_attention_interval: int) -> list[bool]:
    return [(i + 1) % full_attention_interval != 0 for i in range(n_layer)]


def _qwen35_kv(
    *,
    n_ctx_train: int,
    n_embd: int,
    n_layer: int,
    nextn: bool,
    n_ff: int,
    n_head: int,
    n_head_kv: int,
    head_dim: int,
    n_rot: int,
    sections: list[int],
    rope_base: float,
    rms_eps: float,
    d_conv: int,
    d_state: int,
    n_group: int,
    n_v_heads: int,
    full_attention_interval: int,
    n_vocab: int,
) -> list[tuple[str, object]]:
    recurrent = _qwen35_recurrent(n_layer, full_attention_interval) + [False] * int(nextn)
    kv: list[tuple[str, object]] = [
        ("context_length", n_ctx_train),
        ("embedding_length", n_embd),
        ("block_count", n_layer + int(nextn)),
        ("feed_forward_length", n_ff),
        ("attention.head_count", n_head),
        ("attention.head_count_kv", n_head_kv),
        ("attention.key_length", head_dim),
        ("attention.value_length", head_dim),
        ("attention.layer_norm_rms_epsilon", rms_eps),
        ("rope.dimension_count", n_rot),
        ("rope.dimension_sections", sections),
        ("rope.freq_base", rope_base),
        ("ssm.conv_kernel", d_conv),
        ("ssm.state_size", d_state),
        ("ssm.group_count", n_group),
        ("ssm.time_step_rank", n_v_heads),
        ("ssm.inner_size", d_state * n_v_heads),
        ("full_attention_interval", full_attention_interval),
        ("attention.recurrent_layers", recurrent),
        ("vocab_size", n_vocab),
    ]
    if nextn:
        kv.append(("nextn_predict_layers", 1))
    return kv


def _right_head(t: dict[str, np.ndarray], n_layer: int, n_embd: int, perturb: float, rng: np.random.Generator) -> None:
    """In place: the MTP head right by construction, then perturbed (``make_tiny_qwen35``)."""
    for key in t:
        if key.endswith(("attn_output.weight", "ssm_out.weight", "ffn_down.weight")):
            t[key] = np.zeros_like(t[key])
    p = f"blk.{n_layer}."
    eh = np.zeros((n_embd, 2 * n_embd), dtype=np.float32)  # (out, in): in = [enorm(emb), hnorm(h)]
    eh[:, :n_embd] = np.eye(n_embd, dtype=np.float32)
    t[p + "nextn.eh_proj.weight"] = eh
    if perturb > 0:
        for key in ("nextn.eh_proj.weight", "attn_output.weight", "ffn_down.weight"):
            arr = t[p + key]
            noise = _normal(rng, arr.shape, perturb / np.sqrt(arr.shape[1]))
            noise[0, :] = 0.0  # the bias channel stays the embedding's
            t[p + key] = arr + noise


def _mrope_sections(n_rot: int) -> list[int]:
    """Qwen3.5's [11, 11, 10, 0] for n_rot 64, scaled: the three sections share n_rot / 2."""
    half = n_rot // 2
    t = -(-half // 3)
    h = -(-(half - t) // 2)
    return [t, h, half - t - h, 0]


def make_tiny_qwen35(
    path: str | Path,
    *,
    seed: int = 0,
    n_layer: int = 4,
    full_attention_interval: int = 4,
    n_embd: int = 64,
    n_head: int = 4,
    n_head_kv: int = 2,
    head_dim: int = 32,
    n_ff: int = 128,
    d_conv: int = 4,
    d_state: int = 16,
    n_group: int = 2,
    n_v_heads: int = 4,
    nextn: bool = False,
    right_head: bool = False,
    perturb: float = 0.0,
    n_ctx_train: int = 2048,
    logit_scale: float = 6.0,
    special_bias: float = -30.0,
    eos_bias: float | None = None,
    repeat_suppression: float = 2.0,
    deltanet_gain: float = 0.25,
    deltanet_dt: tuple[float, float] = (1e-3, 1e-1),
    attn_gain: float = 1.0,
    noise: float = 0.0,
    noise_seed: int = 1,
    name: str | None = None,
) -> Path:
    """Write a tiny ``qwen35`` GGUF (F32, 320-token ``base`` vocabulary) and return the path.

    Defaults: 4 layers with ``full_attention_interval`` 4 (layers 0-2 Gated DeltaNet, 3 full
    attention, Qwen3.5's pattern); n_embd 64; attention 4 query heads / 2 KV heads of
    head_dim 32 (key_length = value_length = 32), rope over a quarter of the head (n_rot 8,
    M-RoPE sections [2, 1, 1, 0], interleaved as Qwen3.5's IMROPE), rope base 1e7; DeltaNet
    conv kernel 4, 2 key heads (``ssm.group_count``) and 4 value heads
    (``ssm.time_step_rank``) of 16 (``ssm.state_size``; ``ssm.inner_size`` 64), so a key
    head is shared by two value heads as in the 4B and up; n_ff 128; RMS eps 1e-6; separate
    output matrix (not tied). ``deltanet_gain`` scales what the DeltaNet layers write (see
    the module's "quiet mixers"), ``deltanet_dt`` is the range of their time steps (the
    state's decay), ``attn_gain`` scales the attention layers' output. ``nextn=True`` adds
    one MTP block after the trunk (its weights come from a generator of their own, so the
    trunk is identical to ``nextn=False``'s).
    ``right_head=True`` (with ``nextn``) makes that head right by construction (issue 45):
    every block's output projection (``attn_output``, ``ssm_out``, ``ffn_down``, the MTP
    block's too) is zero, so the residual stream stays the token's embedding and the target
    predicts f(x_t) = argmax(output · norm(emb(x_t))); the head's ``eh_proj`` passes the
    token-embedding half through (identity there, zero on the hidden half), so from
    (x_(t+1), h_t) it predicts f(x_(t+1)), the target's next token: every greedy draft is
    accepted, and at temperature > 0 its q is the target's p. ``perturb`` adds Gaussian
    noise of that many unit-gain stds (1/sqrt(fan-in)) to the head's ``eh_proj`` (both
    halves: the hidden rows then matter), ``attn_output`` and ``ffn_down`` (not to the bias
    channel's row): partial acceptance, the more the lower.
    ``noise``/``noise_seed`` as ``make_tiny_lfm2``'s.
    """
    if n_layer < 1 or full_attention_interval < 1:
        raise ValueError("n_layer and full_attention_interval must be positive")
    if n_v_heads % n_group:
        raise ValueError("n_v_heads must be a multiple of n_group (key heads are shared by value heads)")
    if n_head % n_head_kv:
        raise ValueError("n_head must divide by n_head_kv")
    n_rot = max(2, head_dim // 4) // 2 * 2
    v = build_vocab("base")
    rng = np.random.default_rng(seed)
    emb, w_out = _embedding_and_head(
        rng,
        v,
        n_embd,
        logit_scale=logit_scale,
        special_bias=special_bias,
        eos_bias=eos_bias,
        bias_value=4.0,
        repeat_suppression=repeat_suppression,
    )
    t: dict[str, np.ndarray] = {"token_embd.weight": emb}
    for i, recurrent in enumerate(_qwen35_recurrent(n_layer, full_attention_interval)):
        p = f"blk.{i}."
        t[p + "attn_norm.weight"] = _ones(n_embd)
        if recurrent:
            t.update(_qwen35_deltanet(rng, p, n_embd, d_conv, d_state, n_group, n_v_heads, deltanet_gain, deltanet_dt))
        else:
            t.update(_qwen35_attention(rng, p, n_embd, n_head, n_head_kv, head_dim, attn_gain))
        t[p + "post_attention_norm.weight"] = _ones(n_embd)
        t.update(_ffn(rng, p, n_embd, n_ff))
    t["output_norm.weight"] = _ones(n_embd)
    t["output.weight"] = w_out
    if nextn:
        mrng = np.random.default_rng([seed, 1])
        p = f"blk.{n_layer}."
        t[p + "attn_norm.weight"] = _ones(n_embd)
        t.update(_qwen35_attention(mrng, p, n_embd, n_head, n_head_kv, head_dim))
        t[p + "post_attention_norm.weight"] = _ones(n_embd)
        t.update(_ffn(mrng, p, n_embd, n_ff))
        eh = _writes_residual(mrng, n_embd, 2 * n_embd)  # [enorm(embedding), hnorm(hidden)] -> n_embd
        t[p + "nextn.eh_proj.weight"] = eh
        t[p + "nextn.enorm.weight"] = _ones(n_embd)
        t[p + "nextn.hnorm.weight"] = _ones(n_embd)
        t[p + "nextn.shared_head_norm.weight"] = _ones(n_embd)
    if right_head:
        if not nextn:
            raise ValueError("right_head needs nextn=True")
        _right_head(t, n_layer, n_embd, perturb, np.random.default_rng([seed, 2]))
    _perturb(noise_seed, noise, t, {k: _init_std(k, a) for k, a in t.items()})

    kv = _qwen35_kv(
        n_ctx_train=n_ctx_train,
        n_embd=n_embd,
        n_layer=n_layer,
        nextn=nextn,
        n_ff=n_ff,
        n_head=n_head,
        n_head_kv=n_head_kv,
        head_dim=head_dim,
        n_rot=n_rot,
        sections=_mrope_sections(n_rot),
        rope_base=10000000.0,
        rms_eps=1e-6,
        d_conv=d_conv,
        d_state=d_state,
        n_group=n_group,
        n_v_heads=n_v_heads,
        full_attention_interval=full_attention_interval,
        n_vocab=v.n_vocab,
    )
    label = name or (
        f"edgespec-tiny-qwen35-s{seed}"
        + ("-mtp" if nextn else "")
        + ("-right" if right_head else "")
        + (f"-perturb{perturb:g}" if perturb else "")
        + (f"-noise{noise:g}" if noise else "")
    )
    return _write(Path(path), "qwen35", label, kv, v, t)


# ------------------------------------------------------------- shape-true qwen35

# Qwen3.5-0.8B's text model (Qwen/Qwen3.5-0.8B config.json, text_config): hidden 1024, 24
# layers with full attention every 4th (18 Gated DeltaNet + 6 attention: llama.cpp's loader
# calls 24 layers x 1024 "0.8B"), FFN 3584, 8 query heads / 2 KV heads of head_dim 256 with a
# quarter rotary (64, M-RoPE sections [11, 11, 10, 0]), rope base 1e7, RMS eps 1e-6; DeltaNet
# conv kernel 4, 16 key heads and 16 value heads of 128 (inner size 2048); vocabulary 248,320
# (the padded embedding size); tied embeddings; one MTP layer in the checkpoint; 262,144
# context.
_SHAPE_TRUE_QWEN35 = {
    "0.8b": {
        "n_embd": 1024,
        "n_layer": 24,
        "full_attention_interval": 4,
        "n_ff": 3584,
        "n_head": 8,
        "n_head_kv": 2,
        "head_dim": 256,
        "d_conv": 4,
        "d_state": 128,
        "n_group": 16,
        "n_v_heads": 16,
        "n_vocab": 248320,
        "n_ctx_train": 262144,
    },
}

_Q8_0_BLOCK = 32  # values per Q8_0 block: an fp16 scale then 32 int8 (34 bytes)


def _random_q8_0(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """Q8_0 blocks drawn directly (uniform int8 in [-127, 127], one scale giving ``std``):
    the bytes of a (rows, cols) Q8_0 tensor, no float round trip."""
    nb = cols // _Q8_0_BLOCK
    out = np.empty((rows, nb, 2 + _Q8_0_BLOCK), dtype=np.uint8)
    scale = np.float16(std / 73.6)  # 73.6: the std of a uniform integer in [-127, 127]
    out[:, :, :2] = np.frombuffer(scale.tobytes(), dtype=np.uint8)
    out[:, :, 2:] = rng.integers(-127, 128, size=(rows, nb, _Q8_0_BLOCK), dtype=np.int8).view(np.uint8)
    return out.reshape(rows, nb * (2 + _Q8_0_BLOCK))


def _quantize_q8_0(x: np.ndarray) -> np.ndarray:
    """The Q8_0 bytes of a float (rows, cols) matrix, as llama.cpp's reference
    ``quantize_row_q8_0_ref``: per block of 32, an fp16 scale d = max|x| / 127, then
    int8 round(x / d), rounding half away from zero (C's roundf); a block of zeros is
    scale 0 and zeros."""
    rows, cols = x.shape
    blocks = np.asarray(x, dtype=np.float32).reshape(rows, cols // _Q8_0_BLOCK, _Q8_0_BLOCK)
    d = np.abs(blocks).max(axis=2, keepdims=True) / np.float32(127)
    inv = np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)
    scaled = blocks * inv
    q = np.trunc(scaled + np.copysign(np.float32(0.5), scaled)).astype(np.int8)
    out = np.empty((rows, cols // _Q8_0_BLOCK, 2 + _Q8_0_BLOCK), dtype=np.uint8)
    out[:, :, :2] = d.astype(np.float16).view(np.uint8)
    out[:, :, 2:] = q.view(np.uint8)
    return out.reshape(rows, cols // _Q8_0_BLOCK * (2 + _Q8_0_BLOCK))


def _random_f16(rng: np.random.Generator, rows: int, cols: int, std: float) -> np.ndarray:
    """The same draws as ``_random_q8_0``, as F16 values (the scale times the int8, rounded)."""
    scale = float(np.float16(std / 73.6))
    table = (np.arange(256, dtype=np.uint8).view(np.int8).astype(np.float32) * scale).astype(np.float16)
    return np.take(table, rng.integers(-127, 128, size=(rows, cols), dtype=np.int8).view(np.uint8))


def _shape_true_right_head(
    mats: list[tuple[str, tuple[int, int], float]], n_layer: int, n_embd: int, perturb: float, seed: int
) -> dict[str, object]:
    """``make_shape_true_qwen35``'s right head: what ``_right_head`` does to the tiny model's
    tensors, as functions giving each replaced matrix (called one at a time while writing,
    so that the zeros of 25 blocks are never all in memory)."""
    shapes = {key: shape for key, shape, _ in mats}
    fixed: dict[str, object] = {}
    for key, shape in shapes.items():
        if key.endswith(("attn_output.weight", "ssm_out.weight", "ffn_down.weight")):
            fixed[key] = lambda shape=shape: np.zeros(shape, dtype=np.float32)
    p = f"blk.{n_layer}."
    eh = np.zeros((n_embd, 2 * n_embd), dtype=np.float32)  # (out, in): in = [enorm(emb), hnorm(h)]
    eh[:, :n_embd] = np.eye(n_embd, dtype=np.float32)
    head = {p + "nextn.eh_proj.weight": eh}
    head[p + "attn_output.weight"] = np.zeros(shapes[p + "attn_output.weight"], dtype=np.float32)
    head[p + "ffn_down.weight"] = np.zeros(shapes[p + "ffn_down.weight"], dtype=np.float32)
    if perturb > 0:
        nrng = np.random.default_rng([seed, 2])
        for key in (p + "nextn.eh_proj.weight", p + "attn_output.weight", p + "ffn_down.weight"):
            arr = head[key]
            head[key] = arr + _normal(nrng, arr.shape, perturb / np.sqrt(arr.shape[1]))
    for key, arr in head.items():
        fixed[key] = lambda arr=arr: arr
    return fixed


def make_shape_true_qwen35(
    path: str | Path,
    size: str = "0.8b",
    *,
    dtype: str = "q8_0",
    nextn: bool = False,
    right_head: bool = False,
    perturb: float = 0.0,
    tied: bool = True,
    seed: int = 0,
    name: str | None = None,
) -> Path:
    """Write a ``qwen35`` GGUF with a real Qwen3.5's dimensions and random weights, for cost
    measurements (c(n) with and without recurrent snapshots, their memory, reuse costs); its
    output is noise (but see ``right_head``). Returns the path.

    ``size="0.8b"`` (the only one so far) is Qwen3.5-0.8B's text model: n_embd 1024, 24 layers
    (``full_attention_interval`` 4: layers 3, 7, ..., 23 full attention, the other 18 Gated
    DeltaNet), n_ff 3584, 8 query heads and 2 KV heads of 256 (key_length = value_length =
    256; ``attn_q`` 1024 -> 4096 for query and gate), rope over 64 dimensions with M-RoPE
    sections [11, 11, 10, 0], rope base 1e7, RMS eps 1e-6; DeltaNet ``ssm.conv_kernel`` 4,
    ``ssm.state_size`` 128, ``ssm.group_count`` 16 key heads, ``ssm.time_step_rank`` 16 value
    heads, ``ssm.inner_size`` 2048 (conv channels 6144); vocabulary 248,320; tied embeddings
    (no ``output.weight``, as the real file); context 262,144. llama.cpp describes it as
    "qwen35 0.8B Q8_0" with 752,393,024 parameters. ``nextn=True`` adds its one MTP layer
    (``block_count`` 25, 772,845,888 parameters; published GGUFs differ on whether they
    carry it).

    ``dtype``: ``"q8_0"`` (default, 770 MiB; every matrix Q8_0, drawn directly as random
    blocks: one scale per matrix times uniform int8 in [-127, 127]) or ``"f16"`` (1.5 GiB;
    the same values rounded to F16, so the two files of one seed differ only in the type);
    norms, ``ssm_a``, ``ssm_dt`` and the conv kernels are F32 as llama-quantize leaves them.
    Seeded and deterministic; written tensor by tensor (~10 s here, ~0.6 GB of memory).
    The vocabulary is the tiny ``base`` one padded with ``<extra_i>`` tokens to 248,320, so
    text tokenizes to the same short ids as on the tiny models.

    ``right_head=True`` (with ``nextn``): the MTP head right by construction, as
    ``make_tiny_qwen35``'s (issue 45), for measuring ``--draft mtp`` at a chosen acceptance
    with real costs (the zeros are multiplied all the same): every block's output projection
    (``attn_output``, ``ssm_out``, ``ffn_down``, the MTP block's too) is zero, the MTP
    block's ``eh_proj`` is the identity on the token-embedding half and zero on the hidden
    half; then ``perturb`` adds Gaussian noise of that many unit-gain stds (1/sqrt(fan-in))
    to the MTP block's ``eh_proj``, ``attn_output`` and ``ffn_down`` (from a generator of
    its own: the other tensors are the bytes of the same seed's ``nextn=True`` file). These
    matrices are quantized from floats (``_quantize_q8_0``, llama.cpp's reference Q8_0).
    The target then predicts f(x_t) = argmax(output · norm(emb(x_t))) and the head, from
    (x_(t+1), h_t), f(x_(t+1)): the target's next token. With tied embeddings (output =
    emb) f(x) is x itself, so greedy output repeats the prompt's last token, and a perturbed
    head is right or wrong on that one token for good: per prompt, its acceptance is all or
    nothing. ``tied=False`` adds a random ``output.weight`` (logits of std 6, as the tiny
    models'; the rows of the control tokens zero, so that none is ever emitted): f is a
    random map, greedy output a path through the vocabulary that does not repeat within
    hundreds of tokens, and a perturbed head misses on some tokens and not others, so
    ``perturb`` sets the acceptance smoothly. The LM head's matmul is the same size either
    way (the tied file multiplies by ``token_embd``): the costs are the same, the file
    258 MiB larger (in Q8_0).
    """
    import gguf

    if right_head and not nextn:
        raise ValueError("right_head needs nextn=True")
    if size not in _SHAPE_TRUE_QWEN35:
        raise ValueError(f"size: one of {sorted(_SHAPE_TRUE_QWEN35)}")
    if dtype not in ("q8_0", "f16"):
        raise ValueError("dtype: 'q8_0' or 'f16'")
    hp = _SHAPE_TRUE_QWEN35[size]
    n_embd, n_layer, n_ff = hp["n_embd"], hp["n_layer"], hp["n_ff"]
    n_head, n_head_kv, head_dim = hp["n_head"], hp["n_head_kv"], hp["head_dim"]
    d_conv, d_state, n_group, n_v_heads = hp["d_conv"], hp["d_state"], hp["n_group"], hp["n_v_heads"]
    n_vocab = hp["n_vocab"]
    key_dim, value_dim = d_state * n_group, d_state * n_v_heads
    conv_dim = 2 * key_dim + value_dim
    n_rot = head_dim // 4

    # (name, numpy shape (out, in) or (n,), std) for random matrices; (name, shape, array) F32
    mats: list[tuple[str, tuple[int, int], float]] = []
    vecs: list[tuple[str, np.ndarray]] = []
    rng = np.random.default_rng(seed)

    def mat(key: str, rows: int, cols: int) -> None:
        mats.append((key, (rows, cols), 1.0 / np.sqrt(cols)))

    def attention(p: str) -> None:
        mat(p + "attn_q.weight", 2 * head_dim * n_head, n_embd)
        mat(p + "attn_k.weight", head_dim * n_head_kv, n_embd)
        mat(p + "attn_v.weight", head_dim * n_head_kv, n_embd)
        mat(p + "attn_output.weight", n_embd, head_dim * n_head)
        vecs.append((p + "attn_q_norm.weight", _ones(head_dim)))
        vecs.append((p + "attn_k_norm.weight", _ones(head_dim)))

    def ffn(p: str) -> None:
        mat(p + "ffn_gate.weight", n_ff, n_embd)
        mat(p + "ffn_up.weight", n_ff, n_embd)
        mat(p + "ffn_down.weight", n_embd, n_ff)

    mats.append(("token_embd.weight", (n_vocab, n_embd), 1.0))
    vecs.append(("output_norm.weight", _ones(n_embd)))
    for i, recurrent in enumerate(_qwen35_recurrent(n_layer, hp["full_attention_interval"])):
        p = f"blk.{i}."
        vecs.append((p + "attn_norm.weight", _ones(n_embd)))
        vecs.append((p + "post_attention_norm.weight", _ones(n_embd)))
        if recurrent:
            mat(p + "attn_qkv.weight", conv_dim, n_embd)
            mat(p + "attn_gate.weight", value_dim, n_embd)
            mat(p + "ssm_beta.weight", n_v_heads, n_embd)
            mat(p + "ssm_alpha.weight", n_v_heads, n_embd)
            mat(p + "ssm_out.weight", n_embd, value_dim)
            a = rng.uniform(1.0, 16.0, n_v_heads)
            dt = np.exp(rng.uniform(np.log(1e-3), np.log(1e-1), n_v_heads))
            vecs.append((p + "ssm_a", (-a).astype(np.float32)))
            vecs.append((p + "ssm_dt.bias", (dt + np.log(-np.expm1(-dt))).astype(np.float32)))
            vecs.append((p + "ssm_norm.weight", _ones(d_state)))
            vecs.append((p + "ssm_conv1d.weight", _normal(rng, (conv_dim, d_conv), 1.0 / np.sqrt(d_conv))))
        else:
            attention(p)
        ffn(p)
    if nextn:
        p = f"blk.{n_layer}."
        vecs.append((p + "attn_norm.weight", _ones(n_embd)))
        vecs.append((p + "post_attention_norm.weight", _ones(n_embd)))
        attention(p)
        ffn(p)
        mat(p + "nextn.eh_proj.weight", n_embd, 2 * n_embd)
        for k in ("enorm", "hnorm", "shared_head_norm"):
            vecs.append((p + f"nextn.{k}.weight", _ones(n_embd)))
    if not tied:  # drawn last: the other tensors keep the tied file's bytes
        mats.append(("output.weight", (n_vocab, n_embd), 6.0 / np.sqrt(n_embd)))
    # matrices written from floats instead of their random draws (which are still drawn, so
    # the others keep their bytes): name -> a function giving the float (rows, cols) matrix
    fixed = _shape_true_right_head(mats, n_layer, n_embd, perturb, seed) if right_head else {}

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    v = build_vocab("base")
    w = gguf.GGUFWriter(str(path), "qwen35")
    label = f"edgespec-shape-true-qwen3.5-{size}-{dtype}-s{seed}" + ("-mtp" if nextn else "")
    label += ("-right" if right_head else "") + (f"-perturb{perturb:g}" if right_head and perturb else "")
    label += "" if tied else "-untied"
    w.add_name(name or label)
    _add_kv(
        w,
        "qwen35",
        _qwen35_kv(
            n_ctx_train=hp["n_ctx_train"],
            n_embd=n_embd,
            n_layer=n_layer,
            nextn=nextn,
            n_ff=n_ff,
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim=head_dim,
            n_rot=n_rot,
            sections=_mrope_sections(n_rot),
            rope_base=10000000.0,
            rms_eps=1e-6,
            d_conv=d_conv,
            d_state=d_state,
            n_group=n_group,
            n_v_heads=n_v_heads,
            full_attention_interval=hp["full_attention_interval"],
            n_vocab=n_vocab,
        ),
    )
    q8 = dtype == "q8_0"
    w.add_file_type(int(gguf.LlamaFileType.MOSTLY_Q8_0 if q8 else gguf.LlamaFileType.MOSTLY_F16))
    _add_vocab(w, v, n_vocab)
    row_bytes = (lambda cols: cols // _Q8_0_BLOCK * (2 + _Q8_0_BLOCK)) if q8 else (lambda cols: 2 * cols)
    for key, (rows, cols), _ in mats:
        if q8:
            w.add_tensor_info(
                key, (rows, row_bytes(cols)), np.dtype(np.uint8), rows * row_bytes(cols), gguf.GGMLQuantizationType.Q8_0
            )
        else:
            w.add_tensor_info(key, (rows, cols), np.dtype(np.float16), rows * row_bytes(cols))
    for key, arr in vecs:
        w.add_tensor_info(key, arr.shape, np.dtype(np.float32), arr.nbytes)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    draw = _random_q8_0 if q8 else _random_f16
    for key, (rows, cols), std in mats:
        data = draw(rng, rows, cols, std)
        if key in fixed:
            x = fixed[key]()
            data = _quantize_q8_0(x) if q8 else x.astype(np.float16)
        elif key == "output.weight":
            data[list(v.special_ids)] = 0  # zero rows (a zero Q8_0 scale): logit 0, never the largest
        w.write_tensor_data(data)
    for _, arr in vecs:
        w.write_tensor_data(np.ascontiguousarray(arr, dtype=np.float32))
    w.close()
    return path
