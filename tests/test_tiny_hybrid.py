"""Checks that the tiny hybrid GGUF models (tests/tiny_hybrid.py) are what the hybrid tests
assume: llama.cpp loads them as hybrids, keeps recurrent snapshots for them (``n_rs_seq``),
and greedy decoding one token at a time equals the same tokens verified in batches.

Like tests/test_tiny_models.py they drive llama.cpp through llama-cpp-python's low-level API
directly (not through edgespec.llama), so a failure here points at the fixtures.
"""

from __future__ import annotations

import ctypes
import time
from pathlib import Path

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from tiny_hybrid import make_tiny_lfm2, make_tiny_qwen35  # noqa: E402

_LOG_CB = None


def quiet_llama() -> None:
    """Silence llama.cpp's stderr logging (keeps the callback alive for the process)."""
    global _LOG_CB
    if _LOG_CB is None:
        _LOG_CB = llama_cpp.llama_log_callback(lambda level, text, user: None)
        llama_cpp.llama_log_set(_LOG_CB, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()


class HybridRunner:
    """One model + one context on seq 0. ``n_rs_seq``: recurrent snapshots per sequence (a
    tail removal of up to that many positions of the last decode); ``n_ubatch`` must be at
    least ``n_rs_seq + 2`` (llama.cpp asserts it)."""

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 256,
        n_rs_seq: int = 0,
        n_ubatch: int | None = None,
        load_mtp: bool = False,
        n_threads: int = 1,
    ):
        quiet_llama()
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        mp.load_mtp = load_mtp
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama_model_load_from_file returned NULL for {path}")
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_ctx
        cp.n_ubatch = n_ubatch or n_ctx
        cp.n_seq_max = 1
        cp.n_rs_seq = n_rs_seq
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise RuntimeError("llama_init_from_model returned NULL")
        self.mem = llama_cpp.llama_get_memory(self.ctx)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self.model))
        self.batch = llama_cpp.llama_batch_init(n_ctx, 0, 1)
        self.n_past = 0

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ctx)
            llama_cpp.llama_model_free(self.model)
            self.ctx = None

    def __enter__(self) -> "HybridRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(self.mem, True)
        self.n_past = 0

    def decode(self, tokens: list[int]) -> np.ndarray:
        """Append ``tokens`` at the next positions in one llama_decode; the logits of each."""
        b = self.batch
        b.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            b.token[i] = t
            b.pos[i] = self.n_past + i
            b.n_seq_id[i] = 1
            b.seq_id[i][0] = 0
            b.logits[i] = True
        rc = llama_cpp.llama_decode(self.ctx, b)
        assert rc == 0, f"llama_decode returned {rc}"
        self.n_past += len(tokens)
        return np.stack(
            [
                np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()
                for i in range(len(tokens))
            ]
        )

    def greedy(self, prompt: list[int], n: int) -> list[int]:
        """Greedy continuation of ``prompt``, decoding one token at a time."""
        self.reset()
        out = [int(np.argmax(self.decode(prompt)[-1]))]
        while len(out) < n:
            out.append(int(np.argmax(self.decode([out[-1]])[-1])))
        return out

    def verified(self, prompt: list[int], path: list[int], chunk: int) -> list[int]:
        """The greedy choice after each token of ``prompt + path``'s continuation, with
        ``path`` decoded ``chunk`` tokens per llama_decode (a verify step that accepts all):
        equals ``path`` when n-token batches agree with single-token ones."""
        self.reset()
        out = [int(np.argmax(self.decode(prompt)[-1]))]
        for i in range(0, len(path) - 1, chunk):
            rows = self.decode(path[i : min(i + chunk, len(path) - 1)])
            out.extend(int(np.argmax(r)) for r in rows)
        return out


MAKERS = {"lfm2": make_tiny_lfm2, "qwen35": make_tiny_qwen35}
PROMPT = [1, 104, 101, 108, 108, 111, 37, 119, 111, 114, 108, 100]  # BOS + a few byte tokens
# a prompt that repeats itself, as code and chat do: what prompt lookup drafts from
REPEATING = [1] + [60, 61, 62, 63, 64, 65, 66, 67] * 3


@pytest.fixture(scope="module", params=["lfm2", "qwen35"])
def hybrid(request, tiny_lfm2, tiny_qwen35) -> tuple[str, Path]:
    return request.param, {"lfm2": tiny_lfm2, "qwen35": tiny_qwen35}[request.param]


def test_loads_as_a_hybrid_with_snapshots(hybrid):
    arch, path = hybrid
    with HybridRunner(path, n_rs_seq=4, n_ubatch=64) as r:
        assert r.n_vocab == 320
        assert llama_cpp.llama_model_is_hybrid(r.model)
        assert not llama_cpp.llama_model_is_recurrent(r.model)
        buf = ctypes.create_string_buffer(64)
        llama_cpp.llama_model_meta_val_str(r.model, b"general.architecture", buf, len(buf))
        assert buf.value.decode() == arch
        # both archs support recurrent-state rollback: the context keeps what it asked for
        assert llama_cpp.llama_n_rs_seq(r.ctx) == 4
        logits = r.decode(PROMPT)
        assert logits.shape == (len(PROMPT), 320)
        assert np.isfinite(logits).all()
        # well-spread logits, control tokens far down
        assert 3.0 < float(logits[-1].std()) < 12.0
        assert int(np.argmax(logits[-1])) >= 5


@pytest.mark.parametrize("chunk", [4, 8])
@pytest.mark.parametrize("small_ubatch", [False, True], ids=["ubatch64", "ubatch-min"])
def test_batch_verify_equals_single_token_greedy(hybrid, chunk, small_ubatch):
    """30 greedy tokens decoded one at a time equal the same tokens verified ``chunk`` per
    batch, with snapshots on (``n_rs_seq`` = chunk - 1); with the smallest ``n_ubatch``
    llama.cpp allows (``n_rs_seq + 2``) a 40-token prompt also crosses ubatch boundaries."""
    _, path = hybrid
    n_ubatch = chunk + 1 if small_ubatch else 64
    prompt = PROMPT + list(range(100, 128)) if small_ubatch else PROMPT
    with HybridRunner(path, n_rs_seq=chunk - 1, n_ubatch=n_ubatch) as r:
        assert llama_cpp.llama_n_rs_seq(r.ctx) == chunk - 1
        single = r.greedy(prompt, 30)
        assert r.verified(prompt, single, chunk) == single
        assert len(set(single)) > 2  # not stuck on one token


def lookup_hit_rate(prompt: list[int], out: list[int], n: int = 2) -> float:
    """Share of ``out``'s tokens that prompt lookup would have drafted: the token that followed
    the latest earlier occurrence of the ``n`` tokens before it (prompt and output)."""
    seq = prompt + out
    hits = 0
    for i in range(len(prompt), len(seq)):
        key = seq[i - n : i]
        hits += next((seq[j] for j in range(i - 1, n - 1, -1) if seq[j - n : j] == key), None) == seq[i]
    return hits / len(out)


def test_greedy_output_falls_into_loops(hybrid):
    """Random models settle into cycles, so prompt lookup finds drafts: over 64 greedy tokens
    a fair share repeat what followed the same two tokens earlier (~0.35 on the lfm2 fixture,
    ~0.25 on the qwen35 one; the tiny llama target ~0.4), without collapsing into one token."""
    _, path = hybrid
    rng = np.random.default_rng(0)
    prompts = [PROMPT, REPEATING] + [[1] + rng.integers(5, 320, 20).tolist() for _ in range(4)]
    rates = []
    with HybridRunner(path) as r:
        for prompt in prompts:
            out = r.greedy(prompt, 64)
            assert max(out.count(t) for t in set(out)) < 32, out
            assert 2 not in out  # no EOS by accident
            rates.append(lookup_hit_rate(prompt, out))
    assert np.mean(rates) > 0.15, rates


def test_tail_rollback_restores_the_state(hybrid):
    """With ``n_rs_seq`` snapshots a verify batch's rejected tail can be removed: decode 4
    drafted tokens in one batch, keep the first, and greedy decoding goes on exactly as if
    only that one had been decoded."""
    _, path = hybrid
    prompt, draft = PROMPT, [200, 201, 202, 203]
    with HybridRunner(path, n_rs_seq=3, n_ubatch=64) as r:
        want = r.greedy(prompt + draft[:1], 16)
        r.reset()
        r.decode(prompt)
        rows = r.decode(draft)
        assert llama_cpp.llama_memory_seq_rm(r.mem, 0, len(prompt) + 1, -1)
        r.n_past = len(prompt) + 1
        got = [int(np.argmax(rows[0]))]
        while len(got) < 16:
            got.append(int(np.argmax(r.decode([got[-1]])[-1])))
        assert got == want


def test_files_are_deterministic_and_fast(tmp_path):
    for arch, make in MAKERS.items():
        t0 = time.perf_counter()
        a = make(tmp_path / f"{arch}-a.gguf", seed=3)
        assert time.perf_counter() - t0 < 1.0
        b = make(tmp_path / f"{arch}-b.gguf", seed=3)
        c = make(tmp_path / f"{arch}-c.gguf", seed=4)
        assert a.read_bytes() == b.read_bytes()
        assert a.read_bytes() != c.read_bytes()


def test_qwen35_with_an_mtp_layer(tmp_path, tiny_qwen35):
    """``nextn=True``: one MTP block after the same trunk; the trunk's output is unchanged
    whether or not llama.cpp loads the MTP tensors."""
    path = make_tiny_qwen35(tmp_path / "mtp.gguf", nextn=True)
    with HybridRunner(tiny_qwen35) as r:
        want = r.decode(PROMPT)
    for load_mtp in (False, True):
        with HybridRunner(path, load_mtp=load_mtp) as r:
            assert llama_cpp.llama_model_is_hybrid(r.model)
            buf = ctypes.create_string_buffer(16)
            llama_cpp.llama_model_meta_val_str(r.model, b"qwen35.nextn_predict_layers", buf, len(buf))
            assert buf.value == b"1"
            np.testing.assert_allclose(r.decode(PROMPT), want, rtol=0, atol=1e-4)


def test_shape_true_writer_at_small_dimensions(tmp_path, monkeypatch):
    """make_shape_true_qwen35's writer (Q8_0 blocks drawn directly, F16 the same values,
    tensor by tensor) at small dimensions: llama.cpp loads both, as hybrids, with the MTP
    layer, and their logits agree. (The real 0.8B file takes ~10 s and 770 MiB: measured
    once, see its docstring, not on every run.)"""
    import tiny_hybrid

    small = dict(tiny_hybrid._SHAPE_TRUE_QWEN35["0.8b"])
    small.update(n_embd=64, n_ff=128, n_head=4, head_dim=32, d_state=32, n_group=2, n_v_heads=4, n_vocab=512)
    small.update(n_layer=8, n_ctx_train=4096)
    monkeypatch.setitem(tiny_hybrid._SHAPE_TRUE_QWEN35, "small", small)
    logits = {}
    for dtype in ("q8_0", "f16"):
        path = tiny_hybrid.make_shape_true_qwen35(tmp_path / f"{dtype}.gguf", "small", dtype=dtype, nextn=True)
        with HybridRunner(path, n_rs_seq=4, n_ubatch=16, load_mtp=True) as r:
            assert r.n_vocab == 512
            assert llama_cpp.llama_model_is_hybrid(r.model)
            assert llama_cpp.llama_n_rs_seq(r.ctx) == 4
            logits[dtype] = r.decode(PROMPT)
            assert np.isfinite(logits[dtype]).all()
    # the same weights; Q8_0 matmuls also round the activations to 8 bits, hence not equal
    corr = np.corrcoef(logits["q8_0"].ravel(), logits["f16"].ravel())[0, 1]
    assert corr > 0.98, corr


def test_q8_0_quantizer_is_the_reference(tmp_path):
    """The shape-true writer's Q8_0 quantizer gives gguf's bytes (bit-exact with
    ggml-quants.c's reference), ties and zero blocks included, and comes back through
    gguf's dequantizer within half a step (and the fp16 scale's rounding: 127 x 2^-11 of
    a step more)."""
    import gguf

    import tiny_hybrid

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((6, 128)) * 0.3).astype(np.float32)
    x[1, :32] = 0.0  # a zero block
    x[2, :32] = np.arange(32, dtype=np.float32) - 15.5  # halves: rounded away from zero
    x[3] = np.eye(6, 128, 3, dtype=np.float32)[0]  # an identity row
    ours = tiny_hybrid._quantize_q8_0(x)
    assert ours.tobytes() == gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0).tobytes()
    back = gguf.quants.dequantize(ours, gguf.GGMLQuantizationType.Q8_0)
    step = np.abs(x).reshape(6, 4, 32).max(axis=2, keepdims=True) / 127
    assert (np.abs(back - x).reshape(6, 4, 32) <= step * (0.5 + 127 / 2048) + 1e-6).all()
    assert (back[1, :32] == 0).all() and back[3, 3] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.parametrize("dtype", ["q8_0", "f16"])
def test_shape_true_right_head_at_small_dimensions(tmp_path, monkeypatch, dtype):
    """``make_shape_true_qwen35(right_head=True)`` at small dimensions: the tensors read back
    as built (zero output projections, ``eh_proj`` the identity on the embedding half, the
    other tensors the bytes of the plain ``nextn`` file), llama.cpp loads it, greedy output
    repeats the last token (tied embeddings: argmax(emb · norm(emb(x))) = x), and through
    edgespec's ``--draft mtp`` at k = 3 every draft of the right head is accepted; a
    perturbed head has some rejected and the same tokens. The same with ``tied=False``,
    whose greedy output does not repeat."""
    import gguf

    import tiny_hybrid
    from edgespec import DraftingOptions, Engine

    small = dict(tiny_hybrid._SHAPE_TRUE_QWEN35["0.8b"])
    small.update(n_embd=64, n_ff=128, n_head=4, head_dim=32, d_state=32, n_group=2, n_v_heads=4, n_vocab=512)
    small.update(n_layer=8, n_ctx_train=4096)
    monkeypatch.setitem(tiny_hybrid._SHAPE_TRUE_QWEN35, "small", small)
    make = tiny_hybrid.make_shape_true_qwen35
    plain = make(tmp_path / "plain.gguf", "small", dtype=dtype, nextn=True)
    right = make(tmp_path / "right.gguf", "small", dtype=dtype, nextn=True, right_head=True)
    bent = make(tmp_path / "bent.gguf", "small", dtype=dtype, nextn=True, right_head=True, perturb=3.0)
    with pytest.raises(ValueError):
        make(tmp_path / "x.gguf", "small", right_head=True)

    def tensors(path):
        r = gguf.GGUFReader(str(path))
        return {t.name: t for t in r.tensors}

    ref, got = tensors(plain), tensors(right)
    assert set(ref) == set(got)
    for key, t in got.items():
        vals = (
            gguf.quants.dequantize(t.data, t.tensor_type) if t.tensor_type != gguf.GGMLQuantizationType.F32 else t.data
        )
        if key.endswith(("attn_output.weight", "ssm_out.weight", "ffn_down.weight")):
            assert not np.any(vals), key
        elif key == "blk.8.nextn.eh_proj.weight":
            assert vals.shape == (64, 128)
            np.testing.assert_allclose(vals[:, :64], np.eye(64), atol=1e-3)
            assert not np.any(vals[:, 64:])
        else:
            assert bytes(t.data) == bytes(ref[key].data), key
    prompt = [1, 104, 101, 108, 108, 111, 37, 119, 111, 114, 108, 100]
    with HybridRunner(right, load_mtp=True) as r:
        assert r.greedy(prompt, 6) == [prompt[-1]] * 6

    def run(path, draft):
        with Engine(path, draft, n_ctx=256, n_threads=1, drafting=DraftingOptions(k=3)) as e:
            return e.generate(prompt, max_tokens=24)

    want = run(right, None).token_ids
    assert want == [prompt[-1]] * 24
    r = run(right, "mtp")
    assert r.token_ids == want
    assert r.stats.drafted >= 15 and r.stats.accepted == r.stats.drafted
    b = run(bent, "mtp")
    assert b.token_ids == want and b.stats.accepted < b.stats.drafted
    # untied (a random output matrix): greedy output wanders, the right head still has
    # every draft accepted, and the other tensors are the tied file's bytes
    untied = make(tmp_path / "untied.gguf", "small", dtype=dtype, nextn=True, right_head=True, tied=False)
    extra = tensors(untied)
    assert set(extra) == set(got) | {"output.weight"}
    assert all(bytes(extra[k].data) == bytes(t.data) for k, t in got.items())
    want = run(untied, None).token_ids
    assert len(set(want)) > 12 and not set(want) & {0, 1, 2, 3, 4}
    r = run(untied, "mtp")
    assert r.token_ids == want
    assert r.stats.drafted >= 15 and r.stats.accepted == r.stats.drafted
