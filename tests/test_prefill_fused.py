"""The prompt's uncached tail and the first verify batch are one decode (decoding.generation,
``SpeculativeLoop.prefill``), as llama-server's prompt decode gives its first token: no
extra weight read before the first token, the output unchanged (the round that carried
the prompt is kept out of the cost model's and the stop-loss's timings: untimed)."""

from __future__ import annotations

import numpy as np

from edgespec import Engine
from edgespec.llama import Context, Model


def test_chunks_are_cut_from_the_end_so_the_last_rows_stay_together(tiny_target):
    model = Model(tiny_target, exact=True)
    ids = [5 + (i * 7) % 50 for i in range(19)]
    try:
        ctx = Context(model, n_ctx=64, n_batch=8)
        rows = ctx.decode(ids, rows=range(11, 19)).copy()  # 8 rows across what were chunks 2 and 3
        assert ctx.tokens == ids and ctx.pos_max() == 18
        ctx.close()
        ref = Context(model, n_ctx=64, n_batch=32)
        np.testing.assert_allclose(rows, ref.decode(ids, rows=range(11, 19)), atol=1e-3)
        ref.close()
    finally:
        model.close()


def test_the_first_token_comes_from_the_prompts_own_decode(tiny_target):
    prompt = "the quick brown fox jumps over the lazy dog the quick brown fox"
    with (
        Engine(tiny_target, draft="ngram", n_ctx=256, exact=True, n_threads=1) as e,
        Engine(tiny_target, draft=None, n_ctx=256, exact=True, n_threads=1) as plain,
    ):
        calls = e.ctx.n_decode_calls
        one = e.generate(prompt, max_tokens=1, raw=True)
        assert e.ctx.n_decode_calls - calls == 1  # prompt and first token: one decode
        assert one.stats.prompt_tokens_processed == one.stats.prompt_tokens and one.stats.t_prompt > 0
        other = "over the lazy dog the quick brown fox jumps over the lazy dog the quick"
        done = e.generate(other, max_tokens=24, raw=True)
        assert done.token_ids == plain.generate(other, max_tokens=24, raw=True).token_ids
        # the generation's clock starts where the prompt's decode ended
        assert done.stats.t_generate <= done.stats.t_total - done.stats.t_prompt + 1e-6
