"""One generation on the engine's own context, start to ``Done``.

``Engine.stream`` checks and tokenizes the request (``Engine.prepare``) and hands over
here: the request becomes a ``decoding.sequence.DecodeSequence`` on the engine's target
context (its drafter, its drafting policy, the rounds, the reply, the structure's
outcome), and this module adds what a context of its own allows: reuse the cached
prefix of the KV cache and prefill the rest of the prompt, then run the sequence's
rounds and time the target's and the draft model's decodes. It never prints; errors
propagate as ``EdgespecError`` subclasses, and a matcher's error state ends the
generation with ``ConstraintStateError``.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

from ..events import Event
from ..llama import common_prefix_len
from .sequence import DecodeSequence, Prepared


def run(engine: Any, req: Prepared) -> Iterator[Event]:
    """The events of one generation of checked request ``req`` on ``engine`` (an
    ``edgespec.Engine``; see ``Engine.stream``); with ``req.logprobs``, each token's
    logprob and that many alternatives."""
    target = engine.ctx
    draft_ctx = engine.draft_ctx if engine.drafter_name == "model" else None
    seq = DecodeSequence(target, engine.drafter, req, model=engine.target_model,
                         policy=engine.draft_policy(), n_ctx=engine.n_ctx)
    stats, ids = seq.stats, req.ids

    # Prefix reuse: the target KV holds the previous prompt + reply; keep what this
    # prompt shares with it and decode the rest, except the prompt's last token,
    # which the first verify batch decodes (see decoding/speculative.py on x_last).
    keep = common_prefix_len(target.tokens, ids[:-1])
    target.rollback(keep)
    if len(ids) - 1 > keep:
        target.decode(ids[keep:-1], rows=())
    stats.prompt_tokens_processed = len(ids) - 1 - keep + 1
    stats.t_prompt = time.perf_counter() - seq.t_start
    draft_t0 = draft_ctx.t_decode if draft_ctx else 0.0  # after the draft's prefill
    verify_t0 = target.t_decode
    try:
        yield from seq.events()
    finally:
        seq.finish_stats()
        stats.t_verify = target.t_decode - verify_t0
        stats.t_decode_draft = (draft_ctx.t_decode - draft_t0) if draft_ctx else 0.0
        engine.last_stats = stats
    yield seq.done()
