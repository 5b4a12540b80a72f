"""One generation on the engine's own context, start to ``Done``.

``Engine.stream`` checks and tokenizes the request (``Engine.prepare``) and hands over
here: reuse the cached prefix of the KV cache and prefill the rest of the prompt, run
``decoding.speculative.SpeculativeLoop``'s rounds, build the reply (``decoding.reply.Reply``: text, stop
strings, end of generation) and, under a constraint, give the generation its own
grammar matcher and say at the end whether the structure is complete (and its parsed
JSON value). It never prints; errors propagate as ``EdgespecError`` subclasses, and a
matcher's error state ends the generation with ``ConstraintStateError``.
"""

from __future__ import annotations

import time
from typing import Any, Iterator

from . import sampling
from ..constraints import Constraint
from ..events import Done, Event, Stats
from ..llama import common_prefix_len
from .reply import Reply
from .sampling import SamplingParams
from .speculative import SpeculativeLoop


def run(engine: Any, prompt_ids: list[int], params: SamplingParams, max_tokens: int,
        stops: list[str], constraint: Constraint | None = None, logprobs: int | None = None) -> Iterator[Event]:
    """The events of one generation from checked ``prompt_ids`` on ``engine`` (an
    ``edgespec.Engine``; see ``Engine.stream``); ``logprobs``: each token's logprob and
    that many alternatives (None: none)."""
    stats = Stats(drafter=engine.drafter.name, prompt_tokens=len(prompt_ids))
    t_start = time.perf_counter()
    target = engine.ctx
    draft_ctx = engine.draft_ctx if engine.drafter_name == "model" else None

    # Prefix reuse: the target KV holds the previous prompt + reply; keep what this
    # prompt shares with it and decode the rest, except the prompt's last token,
    # which the first verify batch decodes (see decoding/speculative.py on x_last).
    keep = common_prefix_len(target.tokens, prompt_ids[:-1])
    target.rollback(keep)
    if len(prompt_ids) - 1 > keep:
        target.decode(prompt_ids[keep:-1], rows=())
    stats.prompt_tokens_processed = len(prompt_ids) - 1 - keep + 1
    rng = sampling.make_rng(params.seed)
    engine.drafter.begin(prompt_ids, params, rng)
    stats.t_prompt = time.perf_counter() - t_start
    draft_t0 = draft_ctx.t_decode if draft_ctx else 0.0  # after the draft's prefill

    policy = engine._policy()
    policy.begin(params.seed)
    matcher = constraint.matcher() if constraint is not None else None
    loop = SpeculativeLoop(target=target, drafter=engine.drafter, committed=list(prompt_ids),
                           params=params, rng=rng, policy=policy, stats=stats,
                           n_vocab=engine.target_model.n_vocab, is_eog=engine.target_model.is_eog,
                           eog_ids=engine.target_model.eog_ids if params.bans_eog else (), matcher=matcher,
                           logprobs=logprobs)
    reply = Reply(engine.target_model, stops, max_tokens, params.min_tokens, logprobs=logprobs is not None)
    t_gen = time.perf_counter()
    verify_t0 = target.t_decode
    try:
        for res in loop.run(min(max_tokens, engine.n_ctx - len(prompt_ids))):
            yield from reply.push(res)
            if reply.done:
                break
        yield from reply.finish(loop.rounds)
    finally:
        stats.generated_tokens = len(reply.ids)
        stats.t_verify = target.t_decode - verify_t0
        stats.t_decode_draft = (draft_ctx.t_decode - draft_t0) if draft_ctx else 0.0
        stats.t_generate = time.perf_counter() - t_gen
        stats.t_total = time.perf_counter() - t_start
        stats.k_final = loop.last_k
        engine.last_stats = stats
    structure = matcher.outcome(reply) if matcher is not None else {}
    yield Done(finish_reason=reply.finish_reason, stats=stats, text=reply.text,
               token_ids=tuple(reply.ids), logprobs=reply.logprobs_out(), **structure)
