"""Shifted KV reuse (``llama.Context.reuse_chunks``, ``cache_reuse``, ``serve --cache-reuse``,
llama-server's ``n_cache_reuse``) on a tiny model: an editor's window that scrolled keeps
the cached run that moved up, the rest is decoded again, and what is decoded after it sees
the right positions and none of the text that left."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec import Engine
from edgespec.errors import InputError
from edgespec.llama import Context, Model


@pytest.fixture(scope="module")
def model(tiny_target):
    m = Model(tiny_target, exact=False)
    yield m
    m.close()


def _parts(model, seed: int, sizes=(12, 20, 60, 5)) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [[int(t) for t in rng.integers(5, model.n_vocab, n)] for n in sizes]


def _fresh(model, ids: list[int]) -> np.ndarray:
    ctx = Context(model, n_ctx=256)
    try:
        return ctx.decode(ids)[0].copy()
    finally:
        ctx.close()


def test_a_scrolled_window_keeps_the_run_that_moved_up(model):
    head, dropped, body, tail = _parts(model, 1)
    ctx = Context(model, n_ctx=256)
    try:
        ctx.decode(head + dropped + body, rows=())
        kept = ctx.reuse_chunks(head + body + tail, 16)
        assert kept == len(head) + len(body)
        assert ctx.tokens == head + body and ctx.pos_max() == kept - 1
        moved = ctx.decode(tail)[0].copy()  # the next positions decode in order after the run
    finally:
        ctx.close()
    # the tail sees the run at its new positions and not the dropped text: nearer a fresh
    # decode of the new prompt than a fresh decode with the dropped text still in it
    fresh, with_dropped = _fresh(model, head + body + tail), _fresh(model, head + dropped + body + tail)
    assert np.abs(moved - fresh).max() < np.abs(with_dropped - fresh).max()


def test_runs_shorter_than_the_minimum_are_decoded_again(model):
    head, dropped, body, tail = _parts(model, 2)
    for min_chunk, kept in ((len(body) + 1, len(head)), (0, len(head))):
        ctx = Context(model, n_ctx=256)
        try:
            ctx.decode(head + dropped + body, rows=())
            assert ctx.reuse_chunks(head + body + tail, min_chunk) == kept
            assert ctx.tokens == head and ctx.pos_max() == len(head) - 1
        finally:
            ctx.close()


def test_several_runs_move_and_what_lies_between_is_removed(model):
    a, gap1, b, gap2, c = _parts(model, 3, (8, 6, 20, 9, 20))
    ctx = Context(model, n_ctx=256)
    try:
        ctx.decode(a + gap1 + b + gap2 + c, rows=())
        assert ctx.reuse_chunks(a + b + c, 16) == len(a + b + c)
        assert ctx.tokens == a + b + c and ctx.pos_max() == len(a + b + c) - 1
    finally:
        ctx.close()


def test_a_generation_with_cache_reuse_processes_only_what_moved_in(tiny_target):
    with Engine(tiny_target, draft=None, n_ctx=512, n_threads=1) as e:
        rng = np.random.default_rng(4)
        head, dropped, body = ([int(t) for t in rng.integers(5, 60, n)] for n in (10, 30, 80))
        e.generate(head + dropped + body, max_tokens=4)
        new = head + body + [7, 8, 9]
        done = e.generate(new, max_tokens=4, cache_reuse=32)
        assert done.stats.prompt_tokens_processed == 3  # the 3 new tokens; the body moved up
        e.generate(head + dropped + body, max_tokens=4)
        assert e.generate(new, max_tokens=4).stats.prompt_tokens_processed == len(body) + 3  # off by default
        with pytest.raises(InputError, match="cache_reuse must be a whole number"):
            e.generate(new, max_tokens=4, cache_reuse=-1)
