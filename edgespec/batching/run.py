"""A batch job over many sequences per decode, and how many sequences one may hold.

``PreparedBatch`` is ``Engine.generate_many`` / ``run_many``'s answer (``generate --input``):
it checks and tokenizes every request first, chooses N (``parallel="auto"``: from the
batch cost C(N), the request count and the KV memory) or checks the N asked for, and
runs them through a ``batching.runner.BatchRunner`` (the continuous-batching machine: a
``PreparedBatch`` is the batch made ready for it, so the two names say which is which).
``check_parallel`` is the one check of N: llama.cpp's limit on sequences per context and
the memory their KV cache takes; ``serve --parallel`` asks it too, before its runner is built.
"""

from __future__ import annotations

import json
from typing import Any, Iterable, Iterator

from ..costmodel.adaptive import choose_parallel
from ..detect import LocalProbe
from ..errors import EdgespecError, InputError
from ..llama import max_parallel_sequences
from .protocol import BatchEngine
from .runner import DEFAULT_CHUNK, BatchRunner, BatchStats, Outcome, Request, check_sequence_limit

KV_SHARE = 0.5  # of the free memory where the KV cache lives, what a batch's KV cache may take
UNKNOWN_MEMORY = 4 << 30  # free memory assumed by "auto" where it cannot be read


def kv_places(engine: BatchEngine) -> list[tuple[str, float, int | None]]:
    """Where the target's KV cache lives: (where, share of it, free bytes there or None).
    llama.cpp keeps each offloaded layer's K and V on its device, so a model on a GPU has
    its KV cache in the GPU's memory, not in RAM; a partly offloaded one has both."""
    model = engine.target_model
    on_device = float(getattr(model, "kv_device_share", 0.0))
    places: list[tuple[str, float, int | None]] = []
    if on_device > 0:
        places.append(("the GPU's free memory", on_device, model.device_free_bytes()))
    if on_device < 1:
        places.append(("the free memory", 1.0 - on_device, LocalProbe().memory()[1]))
    return places


def kv_room(engine: BatchEngine, n_ctx_seq: int, available: int | None = None) -> int:
    """How many sequences of ``n_ctx_seq`` tokens have their KV cache fit in ``KV_SHARE``
    of the free memory where it lives (``kv_places``; ``available``: that many bytes
    free wherever it lives, None: read them now, ``UNKNOWN_MEMORY`` where they cannot be).
    At least 1."""
    per_seq = max(1, n_ctx_seq * engine.target_model.kv_bytes_per_token)
    if available is not None:
        return max(1, int(available * KV_SHARE // per_seq))
    return max(
        1,
        min(
            int((free or UNKNOWN_MEMORY) * KV_SHARE // max(1.0, per_seq * share))
            for _where, share, free in kv_places(engine)
        ),
    )


def check_parallel(engine: BatchEngine, n_parallel: int, n_ctx_seq: int) -> None:
    """Refuse (``InputError``, exit 2) ``n_parallel`` sequences of ``n_ctx_seq`` tokens
    each that one llama.cpp context cannot hold, or whose KV cache does not fit in
    ``KV_SHARE`` of the free memory where it lives: the GPU's when the model is offloaded,
    RAM otherwise (``kv_places``; not checked where the free memory is unknown)."""
    check_sequence_limit(n_parallel)
    per_seq = n_ctx_seq * engine.target_model.kv_bytes_per_token
    for where, share, available in kv_places(engine):
        if not available:
            continue
        room = max(1, int(available * KV_SHARE // max(1.0, per_seq * share)))
        if n_parallel > room:
            need = n_parallel * per_seq * share
            raise InputError(
                f"--parallel {n_parallel} needs {_size(need)} of KV cache ({n_parallel} sequences "
                f"of {n_ctx_seq:,} tokens) but {KV_SHARE:.0%} of {where} "
                f"({_size(available * KV_SHARE)}) holds {room}; lower --parallel "
                "(or the context each sequence reserves: --n-ctx, max_tokens)"
            )


def _compiled_once(engine: BatchEngine, options: dict, compiled: dict[str, Any]) -> dict:
    """``options`` with its ``response_format`` replaced by the constraint compiled for
    it, compiled once per distinct value within the batch (each sequence still gets its
    own matcher from it)."""
    rf = options.get("response_format")
    if rf is None or "constraint" in options:
        return options
    from ..constraints import compile_constraint

    lenient = bool(options.get("lenient_schema"))
    key = json.dumps([rf, lenient], sort_keys=True, default=str)
    if key not in compiled:
        compiled[key] = compile_constraint(rf, engine.target_model, lenient=lenient)
    rest = {k: v for k, v in options.items() if k not in ("response_format", "lenient_schema")}
    return {**rest, "constraint": compiled[key]}


def _size(n: float) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.1f} MiB"


class PreparedBatch:
    """``Engine.generate_many``'s answer: iterate it for ``Outcome``s in the order the
    requests finish. Before iterating, ``n_parallel`` says how many sequences share each
    decode and why (``parallel_reason``); while and after, ``stats`` has the throughput.

    ``parallel="auto"`` picks N from the batch cost C(N) (the profile's or the prior's),
    the number of requests and the memory the KV cache of N sequences needs
    (``costmodel.adaptive.choose_parallel``). Every request is checked and tokenized first: one
    that cannot run (empty, too long, bad settings) comes back at once as an error.
    """

    def __init__(
        self,
        engine: BatchEngine,
        requests: Iterable[Request],
        *,
        parallel: int | str = "auto",
        chunk: int = DEFAULT_CHUNK,
        draft: str | None = None,
    ) -> None:
        self.engine = engine
        self.failed: list[Outcome] = []
        self.requests: list[Request] = []
        compiled: dict[str, Any] = {}  # requests sharing a response_format share its constraint
        for req in requests:
            try:
                req.prepared = engine.prepare(req.prompt, **_compiled_once(engine, req.options, compiled))
                self.requests.append(req)
            except EdgespecError as e:
                self.failed.append(Outcome(req.key, error=e))
        # Each sequence reserves room for its prompt, its reply and one verify batch.
        need = max((len(r.prepared.ids) + r.prepared.max_tokens + 16 for r in self.requests), default=64)
        self.n_ctx_seq = min(engine.n_ctx, -(-need // 64) * 64)
        self.max_by_memory = kv_room(engine, self.n_ctx_seq)
        if parallel == "auto":
            self.n_parallel = choose_parallel(
                engine.batch_cost().as_verify_cost(),
                len(self.requests),
                min(self.max_by_memory, max_parallel_sequences()),
            )
            self.parallel_reason = (
                f"auto: {self.n_parallel} sequences per decode (the batch cost C(N) over "
                f"{len(self.requests)} prompts in waves of N; KV room for {self.max_by_memory})"
            )
        else:
            if not isinstance(parallel, int) or parallel < 1:
                raise InputError(f"--parallel must be a positive number or 'auto' (got {parallel!r})")
            check_sequence_limit(parallel)  # whatever the number of prompts
            self.n_parallel = max(1, min(parallel, len(self.requests) or 1))
            check_parallel(engine, self.n_parallel, self.n_ctx_seq)
            self.parallel_reason = f"{self.n_parallel} sequences per decode (asked for {parallel})"
        self._chunk, self._draft = chunk, draft
        asked = draft if draft is not None else engine.drafter_name
        self.drafter_note = {
            "none": "",
            "ngram": "prompt lookup drafts for a sequence when the batch's cost says it pays",
            "mtp": "the MTP head does not draft inside parallel batches (--parallel 1 uses it)",
            # it reads the target's own context, and a batch decodes in another (a KV pool)
            "assistant": "the Gemma 4 assistant does not draft inside parallel batches (--parallel 1 uses it)",
        }.get(asked, "the draft model is not used inside parallel batches (--parallel 1 uses it)")
        self.runner: BatchRunner | None = None
        self.stats = BatchStats()

    def summary(self) -> str:
        """What the run did, in one line: throughput, sequences per decode, drafting."""
        st = self.stats
        line = (
            f"{st.tokens} tokens in {st.elapsed:.1f} s: {st.tokens_per_second:.1f} tok/s overall, "
            f"{self.n_parallel} sequences per decode ({st.mean_running:.1f} running on average)"
        )
        if st.prompt_shared:
            line += f"; {st.prompt_shared} prompt tokens shared, not recomputed"
        if st.drafted:
            line += f"; prompt lookup drafted {st.drafted}, accepted {st.accepted}"
        elif self.runner is not None and self.runner.drafter_name == "ngram":
            line += "; prompt lookup drafted nothing (it did not pay in this batch)"
        return line

    @property
    def kv_bytes(self) -> int:
        """The KV pool the run allocates (all sequences' reserved room)."""
        return self.n_parallel * self.n_ctx_seq * self.engine.target_model.kv_bytes_per_token

    def __iter__(self) -> Iterator[Outcome]:
        yield from self.failed
        if not self.requests:
            return
        self.runner = BatchRunner(
            self.engine, self.n_parallel, n_ctx_seq=self.n_ctx_seq, chunk=self._chunk, draft=self._draft
        )
        self.stats = self.runner.stats
        try:
            yield from self.runner.run(self.requests)
        finally:
            self.runner.close()
