"""Checks that the generated tiny GGUF models are what the engine tests assume.

These drive llama.cpp through llama-cpp-python's low-level API directly (not through
edgespec.llama), so a failure here points at the fixtures, not at edgespec.
"""

from __future__ import annotations

import ctypes
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

llama_cpp = pytest.importorskip("llama_cpp")
pytest.importorskip("gguf")

from tiny_models import build_vocab, make_tiny_model  # noqa: E402

_LOG_CB = None


def quiet_llama() -> None:
    """Silence llama.cpp's stderr logging (keeps the callback alive for the process)."""
    global _LOG_CB
    if _LOG_CB is None:
        _LOG_CB = llama_cpp.llama_log_callback(lambda level, text, user: None)
        llama_cpp.llama_log_set(_LOG_CB, ctypes.c_void_p(0))
        llama_cpp.llama_backend_init()


class Runner:
    """One model + one context on seq 0, decoding through llama_batch / llama_decode."""

    def __init__(self, path: str | Path, n_ctx: int = 256, n_threads: int = 1):
        quiet_llama()
        mp = llama_cpp.llama_model_default_params()
        mp.n_gpu_layers = 0
        self.model = llama_cpp.llama_model_load_from_file(str(path).encode(), mp)
        if not self.model:
            raise RuntimeError(f"llama_model_load_from_file returned NULL for {path}")
        cp = llama_cpp.llama_context_default_params()
        cp.n_ctx = n_ctx
        cp.n_batch = n_ctx
        cp.n_ubatch = n_ctx
        cp.n_threads = n_threads
        cp.n_threads_batch = n_threads
        self.ctx = llama_cpp.llama_init_from_model(self.model, cp)
        if not self.ctx:
            llama_cpp.llama_model_free(self.model)
            raise RuntimeError("llama_init_from_model returned NULL")
        self.vocab = llama_cpp.llama_model_get_vocab(self.model)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(self.vocab)
        self.batch = llama_cpp.llama_batch_init(n_ctx, 0, 1)
        self.n_past = 0

    def close(self) -> None:
        if self.ctx:
            llama_cpp.llama_batch_free(self.batch)
            llama_cpp.llama_free(self.ctx)
            llama_cpp.llama_model_free(self.model)
            self.ctx = None

    def __enter__(self) -> "Runner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def reset(self) -> None:
        llama_cpp.llama_memory_clear(llama_cpp.llama_get_memory(self.ctx), True)
        self.n_past = 0

    def decode(self, tokens: list[int]) -> np.ndarray:
        """Append ``tokens`` at the next positions; return the logits of every one of them."""
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
        rows = [
            np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,)).copy()
            for i in range(len(tokens))
        ]
        return np.stack(rows)

    def tokenize(self, text: str, add_special: bool = True) -> list[int]:
        data = text.encode()
        buf = (llama_cpp.llama_token * (len(data) + 8))()
        n = llama_cpp.llama_tokenize(self.vocab, data, len(data), buf, len(buf), add_special, False)
        assert n >= 0, n
        return list(buf[:n])

    def piece(self, token: int, special: bool = False) -> bytes:
        buf = ctypes.create_string_buffer(64)
        n = llama_cpp.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, special)
        assert n >= 0, n
        return buf.raw[:n]

    def greedy(self, prompt: list[int], n: int, chunk: int = 1) -> list[int]:
        """Greedy continuation; after the prompt, feed generated tokens ``chunk`` at a time.

        With ``chunk > 1`` this mimics speculative verification: the model decodes a
        batch of already-known tokens and the greedy choices are read off each row,
        re-synchronising whenever a row disagrees with the token that followed it.
        """
        self.reset()
        out: list[int] = []
        nxt = int(np.argmax(self.decode(prompt)[-1]))
        while len(out) < n:
            out.append(nxt)
            if chunk == 1:
                nxt = int(np.argmax(self.decode([nxt])[-1]))
                continue
            # Guess the next chunk with a single-token pass (a "perfect drafter"), then
            # roll back and verify the whole chunk in one batch, as the loop does.
            start = self.n_past
            guess = [nxt]
            for _ in range(chunk - 1):
                guess.append(int(np.argmax(self.decode([guess[-1]])[-1])))
            llama_cpp.llama_memory_seq_rm(llama_cpp.llama_get_memory(self.ctx), 0, start, -1)
            self.n_past = start
            rows = self.decode(guess)
            verified = [int(np.argmax(r)) for r in rows]
            # row i predicts the token after guess[i]
            for i in range(chunk - 1):
                if verified[i] != guess[i + 1]:
                    raise AssertionError(f"batch verify disagrees with single decode at step {len(out) + i}")
                out.append(guess[i + 1])
            nxt = verified[-1]
        return out[:n]


def top1_agreement(target: Path, draft: Path, prompts: list[list[int]], n: int) -> float:
    """Share of positions on the target's greedy path where the draft's argmax agrees."""
    agree = total = 0
    with Runner(target) as t, Runner(draft) as d:
        for prompt in prompts:
            path = t.greedy(prompt, n)
            seq = prompt + path
            t.reset()
            d.reset()
            pt = t.decode(seq)[len(prompt) - 1 : -1].argmax(axis=1)
            pd = d.decode(seq)[len(prompt) - 1 : -1].argmax(axis=1)
            agree += int((pt == pd).sum())
            total += len(pt)
    return agree / total


def random_prompts(n_vocab: int, count: int, length: int, seed: int = 0, low: int = 5) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[1] + rng.integers(low, n_vocab, size=length - 1).tolist() for _ in range(count)]


# ------------------------------------------------------------------------- tests


def test_models_load_and_decode(tiny_target, tiny_same, tiny_noisy, tiny_other_vocab, tiny_small_vocab):
    for path, n_vocab in [
        (tiny_target, 320),
        (tiny_same, 320),
        (tiny_noisy, 320),
        (tiny_other_vocab, 300),
        (tiny_small_vocab, 36),
    ]:
        with Runner(path) as r:
            assert r.n_vocab == n_vocab
            logits = r.decode([1, 7, 8, 9])
            assert logits.shape == (4, n_vocab)
            assert np.isfinite(logits).all()


def test_generation_is_fast_and_deterministic(tmp_path):
    t0 = time.perf_counter()
    a = make_tiny_model(tmp_path / "a.gguf", seed=3)
    assert time.perf_counter() - t0 < 1.0
    b = make_tiny_model(tmp_path / "b.gguf", seed=3)
    c = make_tiny_model(tmp_path / "c.gguf", seed=4)
    assert a.read_bytes() == b.read_bytes()
    assert a.read_bytes() != c.read_bytes()


def test_same_has_identical_weights(tiny_target, tiny_same):
    gguf = pytest.importorskip("gguf")
    ta = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(tiny_target)).tensors}
    tb = {t.name: np.array(t.data) for t in gguf.GGUFReader(str(tiny_same)).tensors}
    assert ta.keys() == tb.keys()
    for k in ta:
        np.testing.assert_array_equal(ta[k], tb[k])
    with Runner(tiny_target) as t, Runner(tiny_same) as s:
        seq = [1, 50, 60, 70, 80]
        np.testing.assert_array_equal(t.decode(seq), s.decode(seq))


def test_tokenizer_round_trip(tiny_target):
    text = "hello world, the quick brown fox 123"
    with Runner(tiny_target) as r:
        ids = r.tokenize(text)
        assert ids[0] == 1  # BOS added
        assert len(ids) < len(text)  # merges are used
        assert all(5 <= i < r.n_vocab for i in ids[1:])
        assert b"".join(r.piece(i) for i in ids[1:]).decode() == text
        assert r.piece(2, special=True) == b"<|eos|>"
        assert llama_cpp.llama_vocab_bos(r.vocab) == 1
        assert llama_cpp.llama_vocab_eos(r.vocab) == 2
        assert llama_cpp.llama_vocab_is_eog(r.vocab, 2)
        # arbitrary bytes survive (byte-level BPE)
        odd = "naïve café\n\tdef f(x):  return x**2 # ünïcödé ✓"
        assert b"".join(r.piece(i) for i in r.tokenize(odd, add_special=False)).decode() == odd


def test_vocab_texts_are_distinct():
    for kind in ("base", "other", "small"):
        v = build_vocab(kind)
        assert len(set(v.tokens[5:])) == len(v.tokens) - 5
        assert all(t == 3 for t in v.token_types[:5])
    assert build_vocab("base").tokens != build_vocab("other").tokens


def test_other_vocab_differs_from_target(tiny_target, tiny_other_vocab):
    with Runner(tiny_target) as t, Runner(tiny_other_vocab) as o:
        assert t.n_vocab != o.n_vocab
        differing = sum(t.piece(i, True) != o.piece(i, True) for i in range(min(t.n_vocab, o.n_vocab)))
        assert differing > 100


def test_small_vocab_runs_on_token_ids(tiny_small_vocab):
    with Runner(tiny_small_vocab) as r:
        assert r.n_vocab == 36
        logits = r.decode([1, 10, 11, 12])[-1]
        p = np.exp(logits - logits.max())
        p /= p.sum()
        # spread enough for a chi-square test: several tokens carry real mass
        assert (p > 0.02).sum() >= 5
        assert p[:5].sum() < 1e-6  # control tokens are suppressed
        assert r.tokenize("the cat", add_special=False)


def test_greedy_batch_verify_matches_single_decode(tiny_target):
    prompts = random_prompts(320, count=20, length=40, seed=11)
    distinct = []
    with Runner(tiny_target) as r:
        for prompt in prompts:
            single = r.greedy(prompt, 18)
            batched = r.greedy(prompt, 18, chunk=9)
            assert single == batched
            # no collapse into EOS or into one token repeated forever (short cycles of
            # 2+ tokens do happen: a random model is close to a token -> token map)
            assert 2 not in single
            assert len(set(single[-8:])) > 1
            distinct.append(len(set(single)))
    assert np.mean(distinct) > 8


def test_noisy_draft_agreement_in_range(tiny_target, tiny_noisy):
    prompts = random_prompts(320, count=8, length=24, seed=5)
    rate = top1_agreement(tiny_target, tiny_noisy, prompts, n=32)
    assert 0.5 <= rate <= 0.85, rate


def test_noisy_draft_shares_tokenizer_metadata(tiny_target, tiny_noisy):
    gguf = pytest.importorskip("gguf")

    def tok_meta(path):
        r = gguf.GGUFReader(str(path))
        return {
            k: (f.types, [bytes(f.parts[i]) for i in f.data]) for k, f in r.fields.items() if k.startswith("tokenizer.")
        }

    assert tok_meta(tiny_target) == tok_meta(tiny_noisy)


_LOAD_SNIPPET = """
import ctypes, sys, llama_cpp
cb = llama_cpp.llama_log_callback(lambda level, text, user: None)
llama_cpp.llama_log_set(cb, ctypes.c_void_p(0))
mp = llama_cpp.llama_model_default_params()
m = llama_cpp.llama_model_load_from_file(sys.argv[1].encode(), mp)
print("NULL" if not m else "LOADED")
"""


@pytest.mark.parametrize("fixture", ["tiny_truncated", "tiny_not_gguf"])
def test_corrupt_files_return_null(fixture, request):
    path = request.getfixturevalue(fixture)
    # In a subprocess first: if llama.cpp aborted instead of returning NULL, only the
    # child would die and the test would say so.
    res = subprocess.run([sys.executable, "-c", _LOAD_SNIPPET, str(path)], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, f"llama.cpp crashed on {fixture}: rc={res.returncode} {res.stderr[-500:]}"
    assert res.stdout.strip() == "NULL"
    # and in-process, which is what the engine will do
    quiet_llama()
    m = llama_cpp.llama_model_load_from_file(str(path).encode(), llama_cpp.llama_model_default_params())
    assert not m
