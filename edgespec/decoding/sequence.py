"""One decoding sequence, start to ``Done``: what the single stream and every sequence of
a batch share.

A request, once checked and tokenized (``Prepared``: the engine's ``prepare``), becomes a
``DecodeSequence`` on a target context (the engine's own, or one sequence's view of a
batch's KV pool): its stats, its random generator, its drafter begun on the prompt, its
drafting policy begun with the request's seed, the round machinery
(``decoding.speculative.SpeculativeLoop``, with its own grammar matcher under a
constraint), its reply (``decoding.reply.Reply``) and its budget: ``max_tokens``, within
the ``n_ctx`` tokens the sequence may hold, the one place either is enforced (every
round is asked for at most ``remaining`` tokens, and the sequence ends when they are
spent). ``push`` turns each settled round into its
events (the reply's held-back tail too, once the sequence has ended); ``events`` runs the
rounds on a context of its own (``decoding.generation.run``); a batch settles the rounds
itself, many sequences per decode (``batching.runner``), and pushes them here.
``finish_stats`` completes the stats, ``done`` builds the ``Done``: text, token ids,
logprobs when asked for, and under a constraint whether the structure is complete (and
its parsed JSON value, what was relaxed, or why not: ``Matcher.outcome``).

It knows nothing of prefix reuse or prefill (the caller's: one context or a pool), of
batches, or of the screen.
"""

from __future__ import annotations

import time
from typing import Any, Iterator, NamedTuple, Sequence

from ..constraints import Constraint
from ..errors import ContextOverflowError, InputError
from ..events import Done, Event, Stats
from ..llama import Model
from . import sampling
from .drafters import Drafter
from .logprob import MAX_TOP
from .params import SamplingParams
from .policy import DraftPolicy, FixedPolicy
from .reply import Reply
from .speculative import RoundResult, SpeculativeLoop


class Prepared(NamedTuple):
    """A checked, tokenized request (``Engine.prepare``)."""

    ids: list[int]
    params: SamplingParams
    max_tokens: int
    stops: list[str]
    constraint: Constraint | None = None
    logprobs: int | None = None  # each token's logprob and this many alternatives
    # the memory of earlier answers this request drafts from and is written into
    # (``decoding.suffix.SuffixIndex``; None: none, prompt lookup alone)
    memory: Any = None
    # shifted KV reuse: cached runs of at least this many tokens that the prompt holds
    # further back are kept (``llama.Context.reuse_chunks``); 0, the common prefix alone
    cache_reuse: int = 0


def check_request(
    model: Model,
    n_ctx: int,
    prompt_ids: list[int],
    params: SamplingParams,
    *,
    max_tokens: int,
    stop: Sequence[str] | str,
    constraint: Constraint | None,
    logprobs: int | None,
    memory: Any = None,
    cache_reuse: int = 0,
) -> Prepared:
    """A tokenized request checked before any work (``Engine.prepare``): its sampling
    parameters against the vocabulary, ``max_tokens``, ``logprobs``, and a prompt that
    leaves room to generate in ``n_ctx`` (else ``ContextOverflowError``)."""
    params.check_vocab(model.n_vocab)
    if max_tokens < 1:
        raise InputError(f"max_tokens must be at least 1 (got {max_tokens})")
    if logprobs is not None and (
        isinstance(logprobs, bool) or not isinstance(logprobs, int) or not 0 <= logprobs <= MAX_TOP
    ):
        raise InputError(f"logprobs must be an integer from 0 to {MAX_TOP} (got {logprobs!r})")
    if isinstance(cache_reuse, bool) or not isinstance(cache_reuse, int) or cache_reuse < 0:
        raise InputError(f"cache_reuse must be a whole number of tokens, 0 for off (got {cache_reuse!r})")
    stops = [stop] if isinstance(stop, str) else [s for s in stop if s]
    if not prompt_ids:
        raise InputError("the prompt is empty")
    if len(prompt_ids) >= n_ctx:
        raise ContextOverflowError(
            f"the prompt is {len(prompt_ids)} tokens but the context holds {n_ctx}, "
            "leaving no room for a reply; shorten the prompt or raise --n-ctx"
            + (f" (the model was trained for {model.n_ctx_train})" if model.n_ctx_train > n_ctx else "")
        )
    return Prepared(prompt_ids, params, max_tokens, stops, constraint, logprobs, memory, cache_reuse)


class DecodeSequence:
    """One generation's decoding state on ``target``: loop, reply, stats and budget.

    ``n_ctx``: the tokens the sequence may hold, prompt and reply (the engine's context,
    or what a batch sequence reserved of the pool). ``t_start`` is when it was built;
    ``t_gen``, when it began to generate (set by ``events``: its first round's start, or
    that round's decode's end when it carried the prompt; or by a batch's first verify
    step for it): ``finish_stats`` measures ``t_total`` and ``t_generate`` from them."""

    def __init__(
        self, target, drafter: Drafter, req: Prepared, *, model: Model, policy: DraftPolicy | FixedPolicy, n_ctx: int
    ) -> None:
        ids, params = req.ids, req.params
        self.t_start = time.perf_counter()
        self.t_gen: float | None = None
        self.stats = Stats(drafter=drafter.name, prompt_tokens=len(ids), prompt_tokens_processed=len(ids))
        rng = sampling.make_rng(params.seed)
        # the drafter was built with the request's memory (decoding.drafting); the policy
        # judges that memory's drafts by what the memory has learned of them
        drafter.begin(ids, params, rng)
        policy.begin(params.seed, memory=req.memory)
        self.loop = SpeculativeLoop(
            target=target,
            drafter=drafter,
            committed=list(ids),
            params=params,
            rng=rng,
            policy=policy,
            stats=self.stats,
            n_vocab=model.n_vocab,
            is_eog=model.is_eog,
            eog_ids=model.eog_ids if params.bans_eog else (),
            matcher=req.constraint.matcher() if req.constraint is not None else None,
            logprobs=req.logprobs,
        )
        self.reply = Reply(model, req.stops, params.min_tokens, logprobs=req.logprobs is not None)
        # the tokens it may generate: max_tokens, within the context (the one place both are enforced)
        self.max_tokens = req.max_tokens
        self.budget = min(req.max_tokens, min(n_ctx, target.n_ctx) - len(ids))
        self.produced = 0  # tokens its rounds committed (the reply may end before them)

    @property
    def matcher(self):
        """The grammar matcher under a constraint (None: free generation)."""
        return self.loop.matcher

    @property
    def remaining(self) -> int:
        """How many more tokens its rounds may commit."""
        return self.budget - self.produced

    @property
    def ended(self) -> bool:
        """Whether the reply has stopped (end of generation, a stop string) or the budget
        (``max_tokens``, the context) is spent."""
        return self.reply.done or self.produced >= self.budget

    def push(self, res: RoundResult) -> list[Event]:
        """The events of one settled round; when the sequence ends with it, then the
        reply's held-back text too (a last ``Token`` with id -1)."""
        self.produced += len(res.tokens)
        events = self.reply.push(res)
        if self.ended:
            events += self.reply.finish(self.loop.rounds)
        return events

    def events(self) -> Iterator[Event]:
        """Its rounds on a context of its own (its prompt cached but for the tail the first
        round decodes, ``SpeculativeLoop.prefill``), each asked for
        at most the tokens that remain, until it ends (``push`` then adds the reply's tail)."""
        self.t_gen = time.perf_counter()
        while not self.ended:
            res = self.loop.round(self.remaining)
            if self.loop.prompt_done is not None and self.loop.rounds == 1:
                self.t_gen = self.loop.prompt_done  # the prompt's decode gave this round
            yield from self.push(res)

    @property
    def t_prompt_end(self) -> float:
        """When the prompt was in the cache: its decode's end (the first round's, which
        carried it), else when the rounds began (nothing to prefill) or now."""
        return self.loop.prompt_done or self.t_gen or time.perf_counter()

    def finish_stats(self) -> Stats:
        """The stats completed: tokens generated, the wall times, the last round's k bound;
        and the drafter told the answer ended (``Drafter.end``: the memory keeps it)."""
        self.loop.drafter.end(self.loop.committed)
        st, now = self.stats, time.perf_counter()
        st.generated_tokens = len(self.reply.ids)
        st.t_total, st.t_generate = now - self.t_start, now - (self.t_gen or now)
        st.k_final = self.loop.last_k
        return st

    def done(self) -> Done:
        """The finished sequence as ``Done``; under a constraint, whether the structure is
        complete and its parsed value, judged on the reply as it ended."""
        m, reply = self.matcher, self.reply
        return Done(
            finish_reason=reply.finish_reason,
            stats=self.stats,
            text=reply.text,
            token_ids=tuple(reply.ids),
            logprobs=reply.logprobs_out(),
            **(m.outcome(reply, self.max_tokens) if m is not None else {}),
        )
