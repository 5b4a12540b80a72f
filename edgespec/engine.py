"""Engine: the public API. Loads the models, holds the session, streams events.

``Engine.stream()`` turns a prompt (text, chat messages or token ids) into a stream of
``Token`` / ``Round`` events ending with ``Done``; ``Engine.generate()`` is a few lines
over it. The engine owns the models (the target, its context, a draft model when one is
given) and the prompt side — chat template, tokenization, prefix reuse of the KV cache
across calls (a chat turn decodes only its new tokens). How it drafts is one object,
``decoding.drafting.Drafting`` (the drafter, its policy, k, the learned costs, the memory
of earlier answers), built from one ``DraftingOptions`` record. One generation (prefill,
the rounds of ``decoding.speculative.SpeculativeLoop``, the reply, the structure's
outcome) is ``decoding.generation.run``'s; a ``response_format`` compiles through
``edgespec.constraints``. It never prints and never exits: problems are
``EdgespecError`` subclasses.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from .constraints import Constraint, compile_constraint, tokenizer_for
from .costmodel.costs import (
    CPU_BATCH_PRIOR,
    GPU_BATCH_PRIOR,
    OnlineCost,
    VerifyCost,
)
from .costmodel.drafting import DraftingOptions
from .costmodel.priors import verify_prior
from .decoding import generation
from .decoding.drafters import Drafter, sentence_breaks
from .decoding.drafting import DEFAULT_K, Drafting, draft_kind, open_model_drafter, rollback_needed
from .decoding.params import params_from
from .decoding.policy import DraftPolicy, FixedPolicy
from .decoding.sequence import Prepared, check_request
from .decoding.suffix import SuffixIndex
from .errors import InputError
from .events import Done, Event, Result, Stats
from .llama import Context, Model, default_threads

if TYPE_CHECKING:  # pragma: no cover
    from .batching.run import PreparedBatch, Request

PromptLike = str | Sequence[dict] | Sequence[int]


class Engine:
    """A target model, an optional drafter, and the KV session between calls.

    ``draft`` is ``None``/``"none"`` (plain decoding through the same loop),
    ``"ngram"`` (prompt lookup), ``"mtp"`` (the target's own multi-token-prediction head,
    ``decoding.mtp``), or the path of a GGUF draft model from the target's family (its
    vocabulary is checked against the target's) or of a Gemma 4 target's assistant
    (``decoding.assistant``: it reads the target's KV cache).

    ``drafting`` (a ``DraftingOptions``; default: the learned policy with the engine's
    own priors) says how it drafts: how many tokens each round drafts is the drafting
    policy's choice (``edgespec.decoding.policy``), the length with the most expected
    tokens per unit of cost, from the verify cost c(n), the draft cost γ and acceptance
    learned during each generation; or exactly ``k`` every round. The record also holds
    the priors (c(n), γ, the batch cost C(n)) and the memory of earlier answers:
    prompt lookup also drafts from the answers this engine wrote before, across
    ``generate`` calls, chat turns and the lines of a batch (``edgespec.decoding.memory``):
    ``engine.memory``, a ``SuffixIndex`` of the last ``memory_cap`` tokens written, first
    in, first out. Assign another index (``decoding.suffix_store.load``) to start warm, or
    None to draft from each request alone; a request's ``memory`` option picks one per
    request.

    ``n_gpu_layers`` follows llama.cpp (0 = CPU only, -1 = all layers on the GPU);
    ``rpc`` ("HOST:PORT,...") puts the target's layers on llama.cpp RPC servers, split by
    memory or ``tensor_split`` (``edgespec.llama.rpc``).

    ``exact`` picks the target's kernels (see ``edgespec.llama``). ``False`` (the
    default): llama.cpp's own, fastest kernels; speculation is lossless as the field
    means it (the committed tokens follow the target's distribution; a greedy run can
    differ from plain decoding only where rounding between batch sizes flips a near-tie,
    as in llama.cpp, vLLM and transformers). ``True``: batch-invariant kernels, so greedy
    speculation equals this engine's plain greedy decoding token for token, at ~1.2-1.3x
    the cost per step on a CPU. A draft model uses the target's kind of kernels.
    ``names`` = (target name, draft name): how messages name the models (the name of a
    model in another tool's store: an Ollama blob's file name says nothing); by default
    their file names.

    ``plan``: the planner's ``Plan`` the engine was built from (``edgespec.load`` and the
    CLI set it); None for an engine built by hand. ``last_stats``: the ``Stats`` of the
    last generation, also of one closed early (which has no ``Done``); None before any.
    """

    plan: Any = None
    last_stats: Stats | None = None

    def __init__(
        self,
        target: str | os.PathLike,
        draft: str | os.PathLike | None = None,
        *,
        drafting: DraftingOptions | None = None,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        draft_n_gpu_layers: int | None = None,
        exact: bool | None = False,
        rpc: str | Sequence[str] | None = None,
        tensor_split: Sequence[float] = (),
        names: tuple[str | None, str | None] = (None, None),
    ) -> None:
        if n_ctx < 16:
            raise InputError(f"n_ctx must be at least 16 (got {n_ctx})")
        if n_batch < 2:
            # a verify batch is the last committed token plus at least one draft
            raise InputError(f"n_batch must be at least 2 (got {n_batch})")
        options = drafting if drafting is not None else DraftingOptions()
        self.n_threads = n_threads or default_threads()
        self._n_batch = n_batch
        self._gpu_layers = n_gpu_layers
        self._draft_gpu_layers = n_gpu_layers if draft_n_gpu_layers is None else draft_n_gpu_layers
        kind = draft_kind(draft)
        self._rollback = rollback_needed(options, kind)  # a recurrent target's snapshots
        self._load_target(target, n_ctx, exact=bool(exact), rpc=(rpc, tuple(tensor_split)), mtp=kind == "mtp")
        self.target_model.label = names[0] or self.target_model.label
        on_gpu = self._on_gpu()
        self.drafting = Drafting(
            options,
            verify_cost=self._default_verify_cost(),
            batch_cost=GPU_BATCH_PRIOR if on_gpu else CPU_BATCH_PRIOR,
            max_k=self.ctx.max_drafts,
            is_break=self.is_break,
        )
        try:
            self.set_drafter(draft, name=names[1])
        except BaseException:
            self.close()
            raise

    def _load_target(self, path, n_ctx: int, *, exact: bool, rpc: tuple = (None, ()), mtp: bool = False) -> None:
        model = Model(path, n_gpu_layers=self._gpu_layers, exact=exact, rpc=rpc[0], tensor_split=rpc[1], mtp=mtp)
        try:
            self.n_ctx = min(n_ctx, max(model.n_ctx_train, 16)) if model.n_ctx_train else n_ctx
            self.ctx = self._context(model)
        except BaseException:
            model.close()
            raise
        self.target_model, self.is_break = model, sentence_breaks(model)  # one cache per model

    def _on_gpu(self) -> bool:
        from .llama import supports_gpu_offload

        return self._gpu_layers != 0 and supports_gpu_offload()

    def _default_verify_cost(self) -> VerifyCost:
        """c(n) when the options give none: ``costmodel.priors``' row for this backend and weight type."""
        gpu = ("metal" if sys.platform == "darwin" else "cuda") if self._on_gpu() else None
        backend = gpu or ("cpu-exact" if self.target_model.exact else "cpu")
        return verify_prior(backend, self.target_model.file_type or None)

    @property
    def verify_cost(self) -> VerifyCost:
        """c(n) as this engine knows it now: the prior refined by its timed rounds."""
        return self.drafting.cost.as_verify_cost()

    def draft_policy(self) -> DraftPolicy | FixedPolicy:
        """The current drafter's policy for the next generation (c(n), γ learned carry over)."""
        return self.drafting.policy()

    @property
    def exact_kernels(self) -> bool:
        """Whether the target runs batch-invariant kernels (speculation is then
        token-for-token identical to plain greedy decoding)."""
        return self.ctx.batch_invariant

    # -- configuration ------------------------------------------------------------
    @property
    def target_path(self) -> Path:
        return self.target_model.path

    @property
    def draft_model(self) -> Model | None:
        """The loaded draft model (a Gemma 4 assistant's, when it drafts; None without one)."""
        return self.drafting.draft_model

    @property
    def draft_path(self) -> Path | None:
        return self.draft_model.path if self.draft_model else None

    @property
    def draft_ctx(self) -> Context | None:
        """The loaded draft model's context (None without a draft model)."""
        return self.drafting.model.ctx if self.drafting.model is not None else None

    @property
    def drafter_name(self) -> str:
        return self.drafting.kind

    @property
    def memory(self) -> SuffixIndex | None:
        """The memory of earlier answers (``decoding.memory``); assign another index to
        start warm, or None to draft from each request alone."""
        return self.drafting.memory

    @memory.setter
    def memory(self, index: SuffixIndex | None) -> None:
        self.drafting.memory = index

    @property
    def n_batch(self) -> int:
        """The decode batch asked for (``n_batch``; a batch's context takes at least it)."""
        return self._n_batch

    @property
    def k(self) -> int:
        """The fixed k of every round; under the learned policy, the most a round drafts."""
        return self.drafting.k

    @property
    def adaptive_k(self) -> bool:
        """Whether the learned policy picks each round's length (else exactly ``k``)."""
        return self.drafting.adaptive

    @adaptive_k.setter
    def adaptive_k(self, adaptive: bool) -> None:
        if adaptive != self.adaptive_k:
            self.drafting.set(k=None if adaptive else DEFAULT_K)

    @property
    def p_min(self) -> float:
        return self.drafting.options.p_min

    @property
    def k_max(self) -> int:
        """The largest k a round may use: the drafter's bound (or the options'), and never
        more than one verify batch can hold (``n_batch`` = x_last + k drafts)."""
        return self.drafting.k_max_for(self.drafting.kind)

    def k_max_for(self, drafter: str) -> int:
        return self.drafting.k_max_for(drafter)

    def batch_cost_prior(self) -> VerifyCost:
        """C(n): one decode of n sequences relative to one (the options', or a prior)."""
        return self.drafting.batch_cost_prior()

    def batch_cost(self) -> OnlineCost:
        """C(n) as this engine's batches have measured it, from ``batch_cost_prior`` on:
        one estimate across ``generate_many`` calls and server batches, so a job's second
        batch starts from what the first learned, and its last steps (fewer sequences
        than slots, plain steps at the end) give the next one its plain-step level."""
        return self.drafting.batch_cost()

    def generate_many(self, prompts: Iterable[PromptLike], *, parallel: int | str = "auto", **options) -> PreparedBatch:
        """Generate every prompt, ``parallel`` sequences per decode (continuous batching,
        see ``edgespec.batching.runner``); iterate the answer for ``Outcome(key, result, error)``
        in the order they finish, ``key`` being the prompt's index. ``options`` are
        ``stream``'s, for every prompt. Prompt lookup drafts per sequence when it pays
        for the batch; a draft model is not used inside batches."""
        from .batching.runner import Request

        return self.run_many([Request(i, p, dict(options)) for i, p in enumerate(prompts)], parallel=parallel)

    def run_many(self, requests: Iterable[Request], *, parallel: int | str = "auto") -> PreparedBatch:
        """``generate_many`` for ``batching.runner.Request``s, each with its own key and options."""
        from .batching.run import PreparedBatch

        return PreparedBatch(self, requests, parallel=parallel)

    def set_k(self, k: int) -> None:
        """Draft exactly ``k`` tokens every round (``adaptive_k = True`` returns to the policy)."""
        self.drafting.set(k=k)

    def set_k_max(self, k_max: int | None) -> None:
        """Bound the adaptive k (None: the drafter's default bound)."""
        self.drafting.set(k_max=k_max)

    def set_p_min(self, p_min: float) -> None:
        """The model drafter's confidence cut-off, for this and later drafters."""
        self.drafting.set(p_min=p_min)

    def set_drafter(self, draft: str | os.PathLike | None, *, name: str | None = None) -> None:
        """Switch the drafter: ``None``/``"none"``, ``"ngram"``, ``"model"`` (the draft
        model already loaded), ``"mtp"`` (the target's MTP head, for an engine built with
        it), ``"assistant"`` (the Gemma 4 assistant loaded) or a GGUF draft model's path,
        a Gemma 4 assistant's too (``name``: how messages name it)."""
        kind = draft_kind(draft)
        if kind == "none":
            self.drafting.use("none")
        elif kind in ("mtp", "assistant") or str(draft) in ("ngram", "model"):
            self._fit_rollback(kind)
            if kind == "mtp":  # opened once; the target's context (maybe new) keeps its hidden rows
                self.drafting.open_mtp(self.ctx, self.target_model, p_min=self.p_min)
            self.drafting.use(kind)
        else:
            path = Path(draft).expanduser()
            if self.drafting.loaded(path):
                return self.drafting.use(self.drafting.loaded(path))
            drafter = open_model_drafter(
                path,
                self.ctx,
                n_gpu_layers=self._draft_gpu_layers,
                n_ctx=self.n_ctx,
                n_batch=self._n_batch,
                n_threads=self.n_threads,
                p_min=self.p_min,
                name=name,
            )
            self._fit_rollback(drafter.name)
            self.drafting.use_model(drafter, target_bytes=self.target_model.size_bytes)

    def _fit_rollback(self, kind: str) -> None:
        """A recurrent target whose context keeps fewer snapshots than drafter ``kind``
        may undo gets a context that keeps enough (its cache starts empty)."""
        need = rollback_needed(self.drafting.options, kind)
        if self.ctx.recurrent and need > self._rollback:
            self.ctx.close()
            self._rollback = need
            self.ctx = self._context(self.target_model)
            self.drafting.max_k = self.ctx.max_drafts

    def _context(self, model: Model) -> Context:
        return Context(
            model, n_ctx=self.n_ctx, n_batch=self._n_batch, n_threads=self.n_threads, rollback=self._rollback
        )

    def new_drafter(self, name: str, memory: SuffixIndex | None = None) -> Drafter:
        """A fresh model-less drafter ``name`` for a batch sequence, drafting from ``memory`` too."""
        return self.drafting.new_drafter(name, memory)

    def reset(self) -> None:
        """Forget the cached conversation in both models."""
        self.ctx.clear()
        if self.draft_ctx is not None:
            self.draft_ctx.clear()

    @property
    def n_cached(self) -> int:
        """Tokens of the previous prompt + reply currently held in the target's KV."""
        return self.ctx.n_past

    def close(self) -> None:
        drafting = getattr(self, "drafting", None)
        if drafting is not None:
            drafting.close()
        for obj in (getattr(self, "ctx", None), getattr(self, "target_model", None)):
            if obj is not None:
                obj.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- prompts ------------------------------------------------------------------
    def apply_chat_template(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """Render ``messages`` with the target's own chat template (from its GGUF),
        in a sandboxed Jinja environment. Models without a template get ChatML."""
        from .llama.chat_template import render

        return render(self.target_model, messages, add_generation_prompt=add_generation_prompt)

    def tokenize(self, text: str, *, add_special: bool = True, parse_special: bool = True) -> list[int]:
        return self.target_model.tokenize(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self.target_model.detokenize(ids)

    def prompt_tokens(self, prompt: PromptLike, *, raw: bool = False) -> list[int]:
        """The token ids a prompt turns into (what ``stream`` will feed the model)."""
        from .llama.chat_template import prompt_ids

        return prompt_ids(self.target_model, prompt, raw=raw)

    # -- generation ---------------------------------------------------------------
    def stream(self, prompt: PromptLike, **options) -> Iterator[Event]:
        """Generate from ``prompt``, yielding ``Token`` and ``Round`` events, then ``Done``.

        Options (all keyword): ``max_tokens`` (256), ``temperature`` (0: greedy),
        ``top_k``, ``top_p``, ``min_p``, ``repeat_penalty``, ``frequency_penalty``,
        ``presence_penalty``, ``penalty_last_n``, ``seed``, ``logit_bias``,
        ``ignore_eos``, ``min_tokens`` (``SamplingParams``), ``stop`` (a string or
        several), ``raw`` (no chat template for a text prompt), ``response_format``
        (OpenAI's shapes plus regex and grammar, see ``edgespec.constraints``; with
        ``lenient_schema`` keywords the engine lacks are relaxed) or ``constraint`` (one
        already compiled for this engine's target): structured output, the events'
        ``Done`` then says whether the structure is complete (if not, why:
        ``structure_error``), holds the parsed JSON and what was ``relaxed``.
        ``logprobs`` (an int, 0 to 20): every ``Token`` carries the target's
        log-probability of it and of that many likeliest tokens at its position
        (``edgespec.decoding.logprob``), ``Done`` all of them; the default None computes none.
        ``cache_reuse`` (tokens, 0: off): also keep cached runs that long that the prompt
        holds further back, moved (llama-server's ``--cache-reuse``; ``Context.reuse_chunks``).
        The prompt is checked before any work: one that
        leaves no room to generate in the context raises ContextOverflowError. Closing
        the iterator early or a KeyboardInterrupt leaves both caches consistent; the next
        call reuses them.
        """
        return generation.run(self, self.prepare(prompt, **options))

    def prepare(
        self,
        prompt: PromptLike,
        *,
        max_tokens: int = 256,
        stop: Sequence[str] | str = (),
        raw: bool = False,
        response_format: dict | None = None,
        constraint: Constraint | None = None,
        logprobs: int | None = None,
        lenient_schema: bool = False,
        memory: bool | SuffixIndex = True,
        cache_reuse: int = 0,
        **sampling_options,
    ) -> Prepared:
        """A generation request checked and tokenized (``decoding.sequence.Prepared``).
        ``sampling_options`` are ``SamplingParams``' fields (``decoding.params.params_from``).
        Raises on anything invalid (``ConstraintError`` for a response_format that does
        not compile). ``lenient_schema``: schema keywords the constraint engine lacks are
        relaxed instead of refused (the result's ``relaxed`` says which). ``memory``: the
        memory of earlier answers it drafts from and is written into: True, the engine's
        (``engine.memory``); False, none; or an index of its own (one API key's)."""
        if constraint is not None and response_format is not None:
            raise InputError("pass response_format or a compiled constraint, not both")
        if constraint is None:
            constraint = compile_constraint(response_format, self.target_model, lenient=lenient_schema)
        elif constraint.tokenizer is not tokenizer_for(self.target_model):
            raise InputError("the constraint was compiled for another model than this engine's target")
        if not isinstance(memory, (bool, SuffixIndex)):
            raise InputError("memory must be True, False or a SuffixIndex")
        index = (self.memory if memory else None) if isinstance(memory, bool) else memory
        return check_request(
            self.target_model,
            self.n_ctx,
            self.prompt_tokens(prompt, raw=raw),
            params_from(sampling_options),
            max_tokens=max_tokens,
            stop=stop,
            constraint=constraint,
            logprobs=logprobs,
            memory=index,
            cache_reuse=cache_reuse,
        )

    def generate(self, prompt: PromptLike, **kwargs) -> Result:
        """Run ``stream`` to the end and return the text, token ids, reason and stats."""
        done = None
        for ev in self.stream(prompt, **kwargs):
            if isinstance(ev, Done):
                done = ev
        assert done is not None
        return Result.from_done(done)
