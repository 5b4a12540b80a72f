"""Prefix reuse: what a context keeps of its cache for the next prompt.

A KV cache keeps the common prefix of what it holds and the new prompt, and, asked (llama-
server's ``--cache-reuse``), the later runs the prompt holds further forward, moved back.
A recurrent state (a hybrid model, ``llama.recurrent``) cannot be cut back anywhere: it
keeps the whole cache when that begins the prompt, the common prefix when the rest lies
within its last decode's snapshots, else restores the longest checkpoint that begins the
prompt, else starts empty. ``Context.last_reuse`` says which: "prefix", "rollback",
"checkpoint" or "none".
"""

from __future__ import annotations

from typing import Any, Sequence

from .backend import _llama

Context = Any  # a llama.Context (context.py imports this module: no import back)


def keep_prefix(ctx: Context, prompt: Sequence[int], min_chunk: int) -> int:
    """Keep what ``ctx``'s cache holds of ``prompt``: its common prefix, then every later
    run of at least ``min_chunk`` cached tokens that ``prompt`` holds further forward,
    moved back to the prompt's positions (``llama_memory_seq_add``; for a window of a file
    that scrolled: the lines that left it are gone and the rest moved up). The rest of the
    cache is removed; returns how many tokens of ``prompt`` it now holds.

    A moved run's keys are rotated to their new positions, but they were computed after
    the text that came before them then: close to what decoding them again gives, not
    equal to it. Runs can only move back (llama.cpp decodes a sequence's positions in
    order), so text inserted before a run is decoded again with it."""
    cache = ctx.tokens
    head_p = common_prefix_len(cache, prompt)
    if ctx.recurrent:
        return keep_recurrent(ctx, prompt, head_p)
    ctx.last_reuse = "prefix" if head_p == len(cache) else "rollback"
    if min_chunk > 0 and _llama.llama_memory_can_shift(ctx._mem):
        head_c = head_p
        while head_c < len(cache) and head_p < len(prompt):
            n = 0
            while head_c + n < len(cache) and head_p + n < len(prompt) and cache[head_c + n] == prompt[head_p + n]:
                n += 1
            if n < min_chunk:
                head_c += 1
                continue
            ctx.remove_range(head_p, head_c)  # what lies between, then move the run
            _llama.llama_memory_seq_add(ctx._mem, 0, head_c, head_c + n, head_p - head_c)
            cache[head_p : head_p + n] = cache[head_c : head_c + n]
            head_p, head_c = head_p + n, head_c + n
    ctx.rollback(head_p)
    return head_p


def keep_recurrent(ctx: Context, prompt: Sequence[int], head: int) -> int:
    """Keep what a recurrent state can of ``prompt`` (the cache shares ``head`` tokens with
    it): all of the cache when it is a prefix of the prompt; the common prefix when the
    rest is within what the last decode's snapshots undo; else the longest checkpoint that
    begins the prompt; else nothing (the prompt is decoded again)."""
    n = ctx.n_past
    if head == n:
        ctx.last_reuse = "prefix"
        return head
    if head > 0 and n - head <= (ctx.rollback_room(0) or 0):
        ctx.rollback(head)
        ctx.last_reuse = "rollback"
        return head
    ckpt = ctx.checkpoints.best(0, prompt) if ctx.checkpoints is not None else None
    if ckpt is not None and ctx.checkpoints.restore(0, ckpt):
        ctx.tokens[:] = ckpt.tokens
        ctx.restored(0)
        ctx.last_reuse = "checkpoint"
        return len(ckpt.tokens)
    ctx.clear()
    ctx.last_reuse = "none"
    return 0


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
