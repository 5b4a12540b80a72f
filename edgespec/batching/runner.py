"""Many sequences per decode: continuous batching over one multi-sequence context.

Up to ``n_parallel`` sequences share one KV pool (``llama.MultiContext``). Each step is
ONE ``llama_decode`` holding, for every running sequence, its verify batch (the last
committed token and whatever it drafts this round), and, in the room left, the next
chunk of a waiting prompt: a long prompt is prefilled a chunk per step beside the
running sequences instead of stalling them; a prompt prefix that another sequence
already holds (a shared system prompt, a common instruction) is not computed again
(``MultiContext.share``). A sequence that ends (end of generation,
``max_tokens``, a stop string) gives its cells back (``llama_memory_seq_rm``) and the
next request takes its place at once.

Each sequence runs the same round as a single generation (``SpeculativeLoop``'s
``propose`` / ``settle``) and builds its reply the same way (``Reply``), so it ends for
the same reasons at the same token. What changes is who chooses the draft lengths: with
many rows per decode, a draft row costs real compute on a CPU, so the lengths are
chosen for the batch as a whole: the set of lengths with the most expected committed
tokens per unit of the combined batch's cost C(T), T its rows, learned online from the
batch's own timings (``costmodel.costs.OnlineCost``, the engine's: ``Engine.batch_cost``),
each sequence's acceptance learned from its
own text (``DraftPolicy``). Often that drafts nothing on a CPU, more on a GPU. Whatever
the policy (a large fixed ``--k`` too), the drafts are cut to the rows one decode holds.
A sequence's times (``Stats``) are its share of each step, in proportion to its rows.

Structured output: a request may carry a ``response_format`` (or a compiled
``constraint``) like a single generation; its sequence then has its own grammar matcher
that moves with its own cache (``batching.sequence``), its forced tokens and grammar-valid
prompt-lookup drafts enter the batch's choice of draft lengths like any others, and the
masks of all the constrained rows of a step are computed together, in one parallel call
(``constraints.batch_masks``), before the decode.

Under ``exact`` (batch-invariant kernels) a sequence's tokens do not depend on which
others shared its batches (tests/test_batch_runner.py checks it against solo runs).
"""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator

from ..costmodel.adaptive import batch_draft_lengths, fit_drafts
from ..decoding.policy import DraftPolicy, FixedPolicy
from ..decoding.sequence import DecodeSequence, Prepared
from ..errors import ConstraintStateError, ContextOverflowError, EdgespecError, InputError
from ..llama import MultiContext, max_parallel_sequences
from ..llama.context import common_prefix_len
from .protocol import BatchEngine
from .sequence import BatchSeq, step_masks

# Prompt tokens prefilled per step beside the running sequences: small enough that a
# step stays a few single-token steps long, large enough to fill the matmuls.
DEFAULT_CHUNK = 128
# A prompt prefix another sequence already holds is shared (its cells copied by id, not
# recomputed) when it is at least this long; shorter ones are not worth a scan.
MIN_SHARED = 8


@dataclass
class Request:
    """One prompt of a batch: ``key`` comes back with its outcome; ``options`` are the
    keyword arguments ``Engine.stream`` takes (max_tokens, temperature, stop, ...),
    ``response_format`` or a compiled ``constraint`` included (structured output: the
    sequence gets its own matcher)."""

    key: Any
    prompt: Any
    options: dict = field(default_factory=dict)
    prepared: Prepared | None = None  # Engine.prepare's answer, once asked
    # streaming (the server): each of the sequence's events as it happens, and a check
    # between steps whether the caller has gone (its slot is then freed at once)
    on_event: Callable[[Any], None] | None = None
    cancelled: Callable[[], bool] | None = None


@dataclass
class Outcome:
    """A finished request: its result, or the error that kept it from running."""

    key: Any
    result: Any = None
    error: EdgespecError | None = None
    cancelled: bool = False


@dataclass
class BatchStats:
    """What a batch run did, for the progress line and ``bench``."""

    steps: int = 0
    sequences: int = 0
    tokens: int = 0  # generated tokens, all sequences
    prompt_tokens: int = 0  # prompt tokens computed
    prompt_shared: int = 0  # prompt tokens taken from another sequence's cells
    drafted: int = 0
    accepted: int = 0
    t_decode: float = 0.0
    t_steps: float = 0.0  # wall time of the steps (decode and the Python around it)
    running_sum: int = 0  # running sequences, summed over steps
    t_start: float = field(default_factory=time.perf_counter)

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / self.elapsed if self.elapsed > 0 else 0.0

    @property
    def mean_running(self) -> float:
        return self.running_sum / self.steps if self.steps else 0.0


def check_sequence_limit(n_parallel: int) -> None:
    """Refuse more sequences than one llama.cpp context holds (it fails giving no reason)."""
    if n_parallel > (limit := max_parallel_sequences()):
        raise InputError(
            f"--parallel {n_parallel} is more sequences than llama.cpp holds in one context ({limit}); lower --parallel"
        )


class BatchRunner:
    """Runs requests ``n_parallel`` at a time over one engine's target model.

    Drafting: ``"none"`` or ``"ngram"`` (prompt lookup, one drafter per sequence). A
    draft model is not run inside batches (it would need its own multi-sequence
    context; on the machines we measured, batching alone gains more): the engine's
    ``"model"`` drafter falls back to plain decoding here, and says so in
    ``drafter_name``.
    """

    def __init__(
        self,
        engine: BatchEngine,
        n_parallel: int,
        *,
        n_ctx_seq: int,
        chunk: int = DEFAULT_CHUNK,
        draft: str | None = None,
        adaptive: bool | None = None,
        k: int | None = None,
    ) -> None:
        if n_parallel < 1:
            raise InputError(f"--parallel must be at least 1 (got {n_parallel})")
        if chunk < 1:
            raise InputError(f"the prefill chunk must be at least 1 token (got {chunk})")
        check_sequence_limit(n_parallel)
        self.engine = engine
        name = draft if draft is not None else engine.drafter_name
        self.drafter_name = name if name in ("none", "ngram") else "none"
        self.adaptive = engine.adaptive_k if adaptive is None else adaptive
        self.k = k or engine.k
        self.n_parallel = n_parallel
        self.n_ctx_seq = n_ctx_seq
        self.chunk = chunk
        n_batch = max(engine.n_batch, n_parallel * 16 + chunk)
        self.ctx = MultiContext(
            engine.target_model,
            n_seq=n_parallel,
            n_ctx=n_parallel * n_ctx_seq,
            n_batch=n_batch,
            n_threads=engine.n_threads,
            rollback=0 if self.drafter_name == "none" else (self.k if not self.adaptive else engine.k_max_for("ngram")),
        )
        self.cost = engine.batch_cost()  # the engine's, learned across its batches
        self.stats = BatchStats()
        self._free = list(range(n_parallel))
        self._running: list[BatchSeq] = []

    def close(self) -> None:
        self.ctx.close()

    def new_policy(self) -> DraftPolicy | FixedPolicy:
        """A sequence's own drafting policy, learning c(n) from the batch's cost (its
        sequence begins it with the request's seed)."""
        if self.drafter_name == "none":
            return FixedPolicy(0)
        if not self.adaptive:
            return FixedPolicy(self.k)
        # (what the memory's drafts are worth it takes from the memory: DraftPolicy.begin)
        return DraftPolicy("ngram", self.cost, l_max=self.engine.k_max_for("ngram"))

    # -- admission ----------------------------------------------------------------------
    def _prepare(self, req: Request, slot: int) -> BatchSeq:
        if req.prepared is None:
            req.prepared = self.engine.prepare(req.prompt, **req.options)
        ids = req.prepared.ids
        if len(ids) >= self.n_ctx_seq:
            raise ContextOverflowError(
                f"the prompt is {len(ids)} tokens but a parallel sequence holds "
                f"{self.n_ctx_seq}; shorten it, raise --n-ctx, or lower --parallel"
            )
        # on its own view of the pool; its times are its share of each step it had rows
        # in (see _attribute)
        drafter = self.engine.new_drafter(self.drafter_name, req.prepared.memory)
        seq = DecodeSequence(
            self.ctx.view(slot, self.n_ctx_seq),
            drafter,
            req.prepared,
            model=self.engine.target_model,
            policy=self.new_policy(),
            n_ctx=self.n_ctx_seq,
        )
        return BatchSeq(req, slot, seq)

    @property
    def has_room(self) -> bool:
        return bool(self._free)

    @property
    def active(self) -> int:
        return len(self._running)

    def admit(self, req: Request) -> Outcome | None:
        """Start ``req`` in the lowest free slot (a heap: it keeps the running sequence
        ids consecutive, one micro-batch on per-sequence streams). Returns its error
        outcome if it cannot run, else None."""
        try:
            self._running.append(self._prepare(req, self._free[0]))
        except EdgespecError as e:
            return Outcome(req.key, error=e)
        heapq.heappop(self._free)
        return None

    def step(self) -> list[Outcome]:
        """One decode for every running sequence (dropping cancelled ones first); the
        outcomes of the sequences that ended."""
        done: list[Outcome] = []
        for seq in [s for s in self._running if s.req.cancelled is not None and s.req.cancelled()]:
            self._release(seq)
            done.append(Outcome(seq.req.key, cancelled=True))
        if self._running:
            for seq in self._step(self._running):
                self._release(seq)
                done.append(
                    Outcome(seq.req.key, error=seq.error)
                    if seq.error is not None
                    else Outcome(seq.req.key, result=self._result(seq))
                )
        return done

    def _release(self, seq: BatchSeq) -> None:
        self._running.remove(seq)
        self.ctx.free(seq.slot)
        heapq.heappush(self._free, seq.slot)

    def release_all(self) -> None:
        """Drop every running sequence (their slots go back to the pool)."""
        for seq in list(self._running):
            self._release(seq)

    def run(self, requests: Iterable[Request]) -> Iterator[Outcome]:
        """Outcomes in the order the requests finish. Closing the iterator (or Ctrl-C)
        stops at a step boundary; nothing is yielded twice."""
        queue = iter(requests)
        exhausted = False
        try:
            while True:
                while self.has_room and not exhausted:
                    req = next(queue, None)
                    if req is None:
                        exhausted = True
                    elif (failed := self.admit(req)) is not None:
                        yield failed
                if not self._running:
                    return
                yield from self.step()
        finally:
            self.release_all()

    # -- one step -------------------------------------------------------------------------
    def _step(self, running: list[BatchSeq]) -> list[BatchSeq]:
        """One decode for every running sequence; the sequences that ended."""
        t_step = time.perf_counter()
        for s in running:
            if s.prefilling:
                self._adopt(s)
        gen = sorted((s for s in running if not s.prefilling), key=lambda s: s.slot)
        for s in gen:
            s.seq.t_gen = t_step if s.seq.t_gen is None else s.seq.t_gen
            try:  # under a constraint: forced tokens first, drafts cut to the grammar
                s.proposal, s.t_draft = s.loop.propose(s.seq.remaining)
            except ConstraintStateError as e:
                s.error = e
        failed = [s for s in gen if s.error is not None]
        gen = [s for s in gen if s.error is None]
        # the drafts share what one decode holds with a verify row per sequence and a
        # prefill chunk of the prompts waiting
        waiting = sum(len(s.ids) - 1 - s.prefilled for s in running if s.prefilling)
        lengths = self._draft_lengths(gen, self.ctx.n_batch - len(gen) - min(waiting, self.chunk))
        parts, room = [], self.ctx.n_batch
        for s, n in zip(gen, lengths):
            s.drafts = s.loop.drafts(s.proposal, n)
            parts.append((s.slot, [s.loop.committed[-1], *s.drafts.ids], range(len(s.drafts.ids) + 1)))
            room -= len(s.drafts.ids) + 1
        step_masks(gen, self.engine.target_model.is_eog)  # every constrained row, in one call
        room = min(room, self.chunk)
        filling = []
        for s in running:
            if s.prefilling and room > 0 and not self._shares_with(s, filling):
                take = min(room, len(s.ids) - 1 - s.prefilled)
                parts.append((s.slot, s.ids[s.prefilled : s.prefilled + take], ()))
                filling.append((s, take))
                room -= take
        if not parts:  # every generating sequence's matcher failed, nothing to prefill
            return failed
        # in slot order: with one KV stream per sequence (exact kernels) llama.cpp splits
        # a batch into micro-batches over consecutive sequence ids
        order = sorted(range(len(parts)), key=lambda i: parts[i][0])
        t0 = time.perf_counter()
        sorted_outs = self.ctx.decode([parts[i] for i in order])
        seconds = time.perf_counter() - t0
        outs = [None] * len(parts)
        for j, i in enumerate(order):
            outs[i] = sorted_outs[j]
        rows = sum(len(p[1]) for p in parts)
        if not filling:  # prefill rows cost differently (no logits); learn from pure steps
            self.cost.observe(rows, seconds)
        st = self.stats
        st.steps += 1
        st.t_decode += seconds
        st.running_sum += len(gen)
        for s, take in filling:
            s.prefilled += take
            st.prompt_tokens += take
        ended = failed
        for s, logits in zip(gen, outs):
            if s.error is None:
                try:
                    res = s.loop.settle(s.drafts, logits, draft_seconds=s.t_draft, masks=s.masks)
                except ConstraintStateError as e:
                    s.error = e
            if s.error is not None:  # its matcher failed: the sequence ends with the error
                ended.append(s)
                continue
            st.drafted += res.info.drafted
            st.accepted += res.info.accepted
            n_before = len(s.seq.reply.ids)
            events = s.seq.push(res)  # and the reply's tail, if it ended
            st.tokens += len(s.seq.reply.ids) - n_before
            if s.seq.ended:
                ended.append(s)
            if s.req.on_event is not None:
                for ev in events:
                    s.req.on_event(ev)
        self._attribute(gen, filling, seconds, time.perf_counter() - t_step)
        return ended

    def _attribute(self, gen: list[BatchSeq], filling: list[tuple[BatchSeq, int]], decode: float, step: float) -> None:
        """Each sequence's share of the step, in proportion to its rows: a prefilling
        one's share of the whole step is prompt time (``t_prompt``); a generating one's
        share of the decode is verify time (``t_verify``) and its share of the whole step
        its round time in the batch (``t_batch``, which holds the Python overhead too)."""
        self.stats.t_steps += step
        rows = sum(len(s.drafts.ids) + 1 for s in gen) + sum(take for _, take in filling)
        for s, take in filling:
            s.seq.stats.t_prompt += step * take / rows
        for s in gen:
            n = len(s.drafts.ids) + 1
            s.seq.stats.t_verify += decode * n / rows
            s.seq.stats.t_batch += step * n / rows

    def _adopt(self, s: BatchSeq) -> None:
        """Give prefilling ``s`` the longest prefix of its prompt that another sequence
        already holds in the pool (at least ``MIN_SHARED`` tokens more than it has)."""
        limit, best, donor = len(s.ids) - 1, s.prefilled, None
        if self.ctx.recurrent:  # a recurrent state after a prefix is gone: nothing to share
            return
        for o in self._running:
            held = self.ctx.tokens[o.slot]
            if o is not s and len(held) > best:
                p = min(common_prefix_len(held, s.ids), limit)
                if p > best:
                    best, donor = p, o
        if donor is None or best - s.prefilled < MIN_SHARED:
            return
        self.ctx.share(donor.slot, s.slot, best)
        saved, s.prefilled = best - s.prefilled, best
        s.seq.stats.prompt_tokens_processed -= saved
        self.stats.prompt_shared += saved

    def _shares_with(self, s: BatchSeq, filling: list[tuple[BatchSeq, int]]) -> bool:
        """Whether a sequence prefilling in this step computes a prefix of ``s``'s prompt
        that ``s`` lacks: then ``s`` waits one step and takes those cells instead."""
        if self.ctx.recurrent:
            return False
        for o, take in filling:
            p = min(common_prefix_len(o.ids, s.ids), o.prefilled + take, len(s.ids) - 1)
            if p >= s.prefilled + MIN_SHARED:
                return True
        return False

    def _draft_lengths(self, gen: list[BatchSeq], room: int) -> list[int]:
        """Draft lengths for the batch (``costmodel.adaptive.batch_draft_lengths`` over each
        sequence's expected-tokens curve); a fixed policy drafts what it proposes. Either
        way they are cut to the ``room`` the decode has for drafts (``fit_drafts``)."""
        lengths = [0] * len(gen)
        if self.drafter_name == "none":
            return lengths
        curves = []
        for i, s in enumerate(gen):
            pol = s.loop.policy
            # the grammar's forced tokens lead the proposal, drafted for free
            if isinstance(pol, FixedPolicy):
                lengths[i] = pol.choose(s.proposal.ids, forced=s.proposal.forced)
                curves.append(None)
            else:
                p = s.proposal
                curves.append(
                    pol.expected_tokens(
                        p.ids, p.match_len, p.after_break, forced=p.forced, source=p.source, probs=p.probs
                    )
                )
        lengths = fit_drafts(batch_draft_lengths(curves, lengths, self.cost, max_rows=len(gen) + room), room)
        for s, n in zip(gen, lengths):
            s.loop.policy.note_choice(n)
        return lengths

    def _result(self, seq: BatchSeq):
        self.stats.sequences += 1
        return seq.result()
