"""One generation on the engine's own context, start to ``Done``.

``Engine.stream`` checks and tokenizes the request (``Engine.prepare``) and hands over
here, the engine typed as ``OwnContext`` (its target context, its target model and its
``decoding.drafting.Drafting``): the request becomes a ``decoding.sequence.DecodeSequence``
on that context (the drafter built with the request's memory, its drafting policy, the
rounds, the reply, the structure's outcome), and this module adds what a context of its
own allows: reuse the cached prefix of the KV cache and hand the rest of the prompt to
the first round (which decodes it with its verify batch), then run the sequence's rounds
and time the target's and the draft model's decodes. On a recurrent target the state at
the end of the turn is kept as a checkpoint (``llama.recurrent``), as the first round
keeps the prompt's. It never prints; errors
propagate as ``EdgespecError`` subclasses, and a matcher's error state ends the
generation with ``ConstraintStateError``.
"""

from __future__ import annotations

from typing import Iterator, Protocol

from ..events import Event, Stats
from ..llama import Context, Model
from .drafting import Drafting
from .sequence import DecodeSequence, Prepared


class OwnContext(Protocol):
    """What a generation on a context of its own needs of the engine (an ``edgespec.Engine``)."""

    ctx: Context
    target_model: Model
    n_ctx: int
    drafting: Drafting
    last_stats: Stats | None  # set here: the last generation's stats, a stopped one's too


def run(engine: OwnContext, req: Prepared) -> Iterator[Event]:
    """The events of one generation of checked request ``req`` on ``engine``'s own
    context (see ``Engine.stream``); with ``req.logprobs``, each token's logprob and
    that many alternatives."""
    target, drafting = engine.ctx, engine.drafting
    drafter, policy = drafting.for_request(req.memory)
    draft_ctx = drafting.draft_ctx  # the draft model's or the MTP head's (their decode time)
    seq = DecodeSequence(target, drafter, req, model=engine.target_model, policy=policy, n_ctx=engine.n_ctx)
    stats, ids = seq.stats, req.ids

    # Prefix reuse: the target KV holds the previous prompt + reply; keep what this
    # prompt shares with it (``cache_reuse``: and the runs it holds further on). The rest
    # the first round decodes, its verify batch behind it (decoding/speculative.py:
    # ``prefill``, and x_last).
    keep = target.reuse_chunks(ids[:-1], req.cache_reuse)  # with later runs moved back, if asked
    seq.loop.prefill = list(ids[keep:-1])
    stats.prompt_tokens_processed, stats.prompt_reuse = len(ids) - keep, target.last_reuse
    draft_t0 = draft_ctx.t_decode if draft_ctx else 0.0  # after the draft's prefill
    verify_t0 = target.t_decode
    try:
        yield from seq.events()
    finally:
        target.checkpoint()  # a recurrent state's copy at the turn's end (a chat's next turn may edit after it)
        seq.finish_stats()
        stats.t_prompt = seq.t_prompt_end - seq.t_start
        stats.t_verify = target.t_decode - verify_t0 - seq.loop.prefill_seconds
        stats.t_decode_draft = (draft_ctx.t_decode - draft_t0) if draft_ctx else 0.0
        engine.last_stats = stats  # a generation closed early has no Done to carry them
    yield seq.done()
