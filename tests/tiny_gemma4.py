"""Tiny random-weight Gemma 4 GGUFs: a ``gemma4`` target and a ``gemma4-assistant`` drafter
that llama.cpp loads and runs together (issue 45), for fast tests of the assistant drafter.

* ``make_tiny_gemma4(path, ...)``: a ``gemma4`` GGUF (llama.cpp's src/models/gemma4.cpp):
  sliding-window (SWA) and full-attention layers by ``layers`` ("sssf": three SWA layers,
  then a full one, as Gemma 4's 4-5 to 1 pattern ends), per-layer ``head_count_kv``, SWA
  heads of ``head_dim_swa`` and full heads of ``head_dim`` (``key_length[_swa]``), Q/K
  RMS norms, V's plain RMS norm, attention scale 1, the post-attention and post-FFN
  norms, GELU gated FFN, ``rope_freqs`` for the full layers, no per-layer embeddings
  (``embedding_length_per_layer_input`` 0), no shared-KV layers, no final logit softcapping
  by default (``softcap``; written as 0, since llama.cpp's default when the key is absent
  is 30, and the assistant's head has none).
* ``make_tiny_assistant(path, target=..., ...)``: a ``gemma4-assistant`` GGUF
  (src/models/gemma4-assistant.cpp) for a target written with the same arguments: it reads
  the target's token embedding and the target's KV cache (its SWA layers read the
  target's last SWA layer, its full layers the target's last layer: llama.cpp's
  ``share`` callback in src/llama-model.cpp), so its head sizes, KV heads, window and
  rope follow the target's. Its own width is ``n_embd`` (it must differ from the
  target's, which it carries as ``embedding_length_out``); ``nextn.pre_projection`` maps
  [target embedding of x_p scaled by sqrt(n_embd_target), the target's hidden row
  h_(p-1)] into it, ``nextn.post_projection`` maps its last row back to the target's
  width (its own next h), ``token_embd`` is its output head (tied), every layer has a
  ``layer_output_scale``. ``nextn_predict_layers`` = ``block_count``.

``right=True`` (both files) makes the assistant right by construction: the target's blocks
write nothing (``attn_output`` and ``ffn_down`` zero), so it predicts f(x_t) =
argmax(W_out · norm(emb(x_t))); the assistant's pre-projection passes the token half
through (identity into its first n_embd_target dimensions, zero on the hidden half), its
blocks write nothing, its output norm scales by sqrt(n_target / n_assistant) (RMS over
the wider row) and its head's first n_target columns are the target's ``output``: its
logits at (x_p, anything) are the target's at x_p, exactly up to float rounding, so
every draft is accepted and at temperature > 0 its q is the target's p. ``perturb`` adds
Gaussian noise to the pre-projection (both halves: the target's hidden row then matters),
``attn_output`` (the target's KV then matters) and ``ffn_down``: any acceptance in
between. ``right=False``: random weights, drafts accepted by chance.

The weights follow tests/tiny_models.py's tricks (well-spread logits, a bias channel in
dimension 0 that control tokens are pushed down through, no fixed points), the 320-token
``base`` vocabulary of tests/tiny_vocab.py, F32, seeded (same arguments, same bytes). It
needs numpy and ``gguf`` only; it never imports llama_cpp.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tiny_hybrid import _add_kv, _add_vocab, _embedding_and_head, _normal, _ones, _writes_residual
from tiny_vocab import build_vocab

TARGET = dict(
    n_embd=64,
    layers="sssf",
    n_head=2,
    n_head_kv=1,
    head_dim=64,
    head_dim_swa=32,
    n_swa=64,
    rope_base=1000000.0,
    rope_base_swa=10000.0,
)


def _kv(arch: str, *, n_embd: int, layers: str, n_head: int, n_head_kv: int, n_ff: int, shape: dict, n_ctx: int):
    swa = [c == "s" for c in layers]
    return [
        ("context_length", n_ctx),
        ("embedding_length", n_embd),
        ("block_count", len(layers)),
        ("feed_forward_length", n_ff),
        ("attention.head_count", n_head),
        ("attention.head_count_kv", [n_head_kv] * len(layers)),
        ("attention.key_length", shape["head_dim"]),
        ("attention.value_length", shape["head_dim"]),
        ("attention.key_length_swa", shape["head_dim_swa"]),
        ("attention.value_length_swa", shape["head_dim_swa"]),
        ("attention.layer_norm_rms_epsilon", 1e-6),
        ("attention.sliding_window", shape["n_swa"]),
        ("attention.sliding_window_pattern", swa),
        ("rope.dimension_count", shape["head_dim"]),
        ("rope.dimension_count_swa", shape["head_dim_swa"]),
        ("rope.freq_base", shape["rope_base"]),
        ("rope.freq_base_swa", shape["rope_base_swa"]),
    ]


def _attention(rng, p: str, n_embd: int, n_head: int, n_head_kv: int, hd: int, *, kv: bool, gain: float):
    s_in = 1.0 / np.sqrt(n_embd)
    t = {
        p + "attn_norm.weight": _ones(n_embd),
        p + "attn_q.weight": _normal(rng, (n_head * hd, n_embd), s_in),
        p + "attn_q_norm.weight": _ones(hd),
        p + "attn_output.weight": _writes_residual(rng, n_embd, n_head * hd),
        p + "post_attention_norm.weight": np.full(n_embd, gain, dtype=np.float32),
    }
    if kv:
        t[p + "attn_k.weight"] = _normal(rng, (n_head_kv * hd, n_embd), s_in)
        t[p + "attn_v.weight"] = _normal(rng, (n_head_kv * hd, n_embd), s_in)
        t[p + "attn_k_norm.weight"] = _ones(hd)
    return t


def _ffn(rng, p: str, n_embd: int, n_ff: int, gain: float):
    s_in = 1.0 / np.sqrt(n_embd)
    return {
        p + "ffn_norm.weight": _ones(n_embd),
        p + "ffn_gate.weight": _normal(rng, (n_ff, n_embd), s_in),
        p + "ffn_up.weight": _normal(rng, (n_ff, n_embd), s_in),
        p + "ffn_down.weight": _writes_residual(rng, n_embd, n_ff),
        p + "post_ffw_norm.weight": np.full(n_embd, gain, dtype=np.float32),
    }


def _target_head(seed: int, n_embd: int, logit_scale: float, special_bias: float, repeat_suppression: float):
    """The target's ``token_embd`` and ``output`` (the assistant's right head copies them)."""
    return _embedding_and_head(
        np.random.default_rng([seed, 0]),
        build_vocab("base"),
        n_embd,
        logit_scale=logit_scale,
        special_bias=special_bias,
        eos_bias=None,
        bias_value=2.0,
        repeat_suppression=repeat_suppression,
    )


def _write(path: Path, arch: str, name: str, kv, tensors) -> Path:
    import gguf  # test-only dependency

    path.parent.mkdir(parents=True, exist_ok=True)
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    _add_kv(w, arch, kv)
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    _add_vocab(w, build_vocab("base"))
    for key, arr in tensors.items():
        w.add_tensor(key, np.ascontiguousarray(arr, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def make_tiny_gemma4(
    path: str | Path,
    *,
    seed: int = 0,
    right: bool = False,
    n_ff: int = 512,
    n_ctx_train: int = 2048,
    logit_scale: float = 6.0,
    special_bias: float = -30.0,
    repeat_suppression: float = 2.0,
    gain: float = 0.5,
    softcap: float = 0.0,
    name: str | None = None,
) -> Path:
    """Write a tiny ``gemma4`` target (``TARGET``'s shape: 64 wide, layers "sssf", 2 query
    heads and 1 KV head of 32 (SWA) / 64 (full), window 64; FFN 512 wide, so that the file
    is ~4× its assistant's, as a drafter found beside it must be) and return the path. ``gain``
    is the post-norms' weight (how much each block writes, against a residual of RMS ~8);
    ``right=True`` zeroes the blocks' output projections (the module's right assistant)."""
    shape = TARGET
    n_embd, layers = shape["n_embd"], shape["layers"]
    n_head, n_head_kv = shape["n_head"], shape["n_head_kv"]
    emb, w_out = _target_head(seed, n_embd, logit_scale, special_bias, repeat_suppression)
    t: dict[str, np.ndarray] = {"token_embd.weight": emb, "output.weight": w_out, "output_norm.weight": _ones(n_embd)}
    rng = np.random.default_rng([seed, 1])
    t["rope_freqs.weight"] = _ones(shape["head_dim"] // 2)
    for i, kind in enumerate(layers):
        hd = shape["head_dim_swa"] if kind == "s" else shape["head_dim"]
        t.update(_attention(rng, f"blk.{i}.", n_embd, n_head, n_head_kv, hd, kv=True, gain=gain))
        t.update(_ffn(rng, f"blk.{i}.", n_embd, n_ff, gain))
    if right:
        for key in t:
            if key.endswith(("attn_output.weight", "ffn_down.weight")):
                t[key] = np.zeros_like(t[key])
    kv = _kv(
        "gemma4",
        n_embd=n_embd,
        layers=layers,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=n_ff,
        shape=shape,
        n_ctx=n_ctx_train,
    )
    kv += [("embedding_length_per_layer_input", 0), ("attention.shared_kv_layers", 0)]
    kv.append(("final_logit_softcapping", float(softcap)))  # llama.cpp's default is 30: 0 turns it off
    label = name or f"edgespec-tiny-gemma4-s{seed}" + ("-right" if right else "")
    return _write(Path(path), "gemma4", label, kv, t)


def make_tiny_assistant(
    path: str | Path,
    *,
    seed: int = 0,
    target_seed: int = 0,
    right: bool = False,
    perturb: float = 0.0,
    n_embd: int = 96,
    layers: str = "sf",
    n_head: int = 2,
    n_ff: int = 64,
    n_ctx_train: int = 2048,
    logit_scale: float = 6.0,
    special_bias: float = -30.0,
    repeat_suppression: float = 2.0,
    gain: float = 0.5,
    name: str | None = None,
) -> Path:
    """Write a tiny ``gemma4-assistant`` for ``make_tiny_gemma4(seed=target_seed, ...)`` and
    return the path: ``n_embd`` wide (not the target's 64), ``layers`` "sf" (an SWA layer
    reading the target's last SWA layer's KV, a full one reading its last layer's).
    ``right``/``perturb``: see the module docstring."""
    shape = TARGET
    n_b = shape["n_embd"]
    if n_embd == n_b:
        raise ValueError("llama.cpp needs the assistant's width to differ from the target's")
    rng = np.random.default_rng([seed, 7])
    _, w_tgt = _target_head(target_seed, n_b, logit_scale, special_bias, repeat_suppression)
    t: dict[str, np.ndarray] = {}
    head = _normal(rng, (w_tgt.shape[0], n_embd), logit_scale / np.sqrt(n_embd))
    pre = _normal(rng, (n_embd, 2 * n_b), 1.0 / np.sqrt(2 * n_b))
    pre[0, :] = 0.0
    pre[0, 0] = 1.0  # the bias channel: the target embedding's, scaled alike
    norm = _ones(n_embd)
    head[:, 0] = 0.0
    head[:, :n_b] = w_tgt  # control tokens pushed down through the channel, as the target
    if right:
        pre[:] = 0.0
        pre[:n_b, :n_b] = np.eye(n_b, dtype=np.float32)
        norm[:n_b] = np.sqrt(n_b / n_embd)
    t["token_embd.weight"] = head
    t["output_norm.weight"] = norm
    t["nextn.pre_projection.weight"] = pre
    t["nextn.post_projection.weight"] = _normal(rng, (n_b, n_embd), 1.0 / np.sqrt(n_embd))
    t["rope_freqs.weight"] = _ones(shape["head_dim"] // 2)
    for i, kind in enumerate(layers):
        p = f"blk.{i}."
        hd = shape["head_dim_swa"] if kind == "s" else shape["head_dim"]
        t.update(_attention(rng, p, n_embd, n_head, shape["n_head_kv"], hd, kv=False, gain=gain))
        t.update(_ffn(rng, p, n_embd, n_ff, gain))
        t[p + "layer_output_scale.weight"] = np.ones(1, dtype=np.float32)
        if right:
            t[p + "attn_output.weight"] = np.zeros_like(t[p + "attn_output.weight"])
            t[p + "ffn_down.weight"] = np.zeros_like(t[p + "ffn_down.weight"])
    if perturb > 0:
        keys = ["nextn.pre_projection.weight"] + [
            f"blk.{i}.{k}" for i in range(len(layers)) for k in ("attn_output.weight", "ffn_down.weight")
        ]
        prng = np.random.default_rng([seed, 8])
        for key in keys:
            arr = t[key]
            noise = _normal(prng, arr.shape, perturb / np.sqrt(arr.shape[1]))
            noise[0, :] = 0.0  # the bias channel stays the embedding's
            t[key] = arr + noise
    kv = _kv(
        "gemma4-assistant",
        n_embd=n_embd,
        layers=layers,
        n_head=n_head,
        n_head_kv=shape["n_head_kv"],
        n_ff=n_ff,
        shape=shape,
        n_ctx=n_ctx_train,
    )
    kv += [("embedding_length_out", n_b), ("nextn_predict_layers", len(layers)), ("attention.shared_kv_layers", 0)]
    label = name or (
        f"edgespec-tiny-gemma4-assistant-s{seed}-t{target_seed}"
        + ("-right" if right else "")
        + (f"-perturb{perturb:g}" if perturb else "")
    )
    return _write(Path(path), "gemma4-assistant", label, kv, t)
