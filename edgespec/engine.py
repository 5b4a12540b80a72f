"""Engine: the public API. Loads the models, holds the session, streams events.

``Engine.stream()`` turns a prompt (text, chat messages or token ids) into a stream of
``Token`` / ``Round`` events ending with ``Done``; ``Engine.generate()`` is a few lines
over it. The engine owns the prompt side — chat template, tokenization, prefix reuse of
the KV cache across calls (a chat turn decodes only its new tokens) — and the text side:
streaming detokenization and stop strings. One generation (prefill, the rounds of
``decoding.speculative.SpeculativeLoop``, the reply, the structure's outcome) is
``decoding.generation.run``'s; a ``response_format`` compiles through ``edgespec.constraints``.

It never prints and never exits: problems are ``EdgespecError`` subclasses.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Sequence

from .decoding import generation
from .decoding.params import params_from
from .constraints import Constraint, compile_constraint, tokenizer_for
from .decoding.drafters import Drafter, ModelDrafter, NgramDrafter, NoDrafter, sentence_breaks
from .decoding.memory import MemoryDrafter
from .decoding.suffix import DEFAULT_CAP, SuffixIndex
from .errors import InputError
from .events import Done, Event, Result
from .llama import Context, Model, check_vocab_compatible, default_threads
from .decoding.sequence import Prepared, check_request
from .costmodel.costs import (CPU_BATCH_PRIOR, CPU_EXACT_VERIFY_PRIOR, CPU_VERIFY_PRIOR, GPU_BATCH_PRIOR,
                    GPU_VERIFY_PRIOR, OnlineCost, VerifyCost, BATCH_COST_SIZES)
from .decoding.policy import DraftPolicy, FixedPolicy
from .costmodel.adaptive import NO_DRAFT_ALIASES

if TYPE_CHECKING:  # pragma: no cover
    from .batching.run import PreparedBatch, Request

DEFAULT_K = 4
# The most tokens one round drafts. 15 makes a verify batch of 16, which a CPU's tiled
# GEMM decodes for less than 15 (see costmodel.costs.CPU_VERIFY_PRIOR).
DEFAULT_K_MAX = {"model": 8, "ngram": 15, "none": 1}


PromptLike = str | Sequence[dict] | Sequence[int]


def _is_drafter(draft: str | os.PathLike | None) -> bool:
    return draft is not None and str(draft) not in NO_DRAFT_ALIASES


class Engine:
    """A target model, an optional drafter, and the KV session between calls.

    ``draft`` is ``None``/``"none"`` (plain decoding through the same loop),
    ``"ngram"`` (prompt lookup), or the path of a GGUF draft model from the target's
    family (its vocabulary is checked against the target's).

    How many tokens each round drafts is the drafting policy's choice
    (``edgespec.decoding.policy``): the length with the most expected tokens per unit of cost,
    from the verify cost c(n) — ``verify_cost`` is the prior, from the profile or
    ``tune``, refined by this engine's own timings — the draft cost ``draft_gamma``
    (target steps per drafted token; estimated from the model sizes when not given) and
    acceptance learned during each generation. At most ``k_max`` per round (15 for prompt
    lookup, 8 for a draft model). With ``adaptive_k=False`` every round drafts exactly
    ``k`` instead (for sweeps), and ``p_min`` is that mode's fixed confidence cut-off for
    the draft model. ``ngram_min_match`` is the shortest context match prompt lookup
    drafts from (2: the policy learns which lengths pay). ``n_gpu_layers`` follows llama.cpp (0 = CPU only, -1 = all layers on the GPU); ``rpc`` ("HOST:PORT,...") puts the target's layers on llama.cpp RPC servers, split by memory or ``tensor_split`` (``edgespec.llama.rpc``).

    ``exact`` picks the target's kernels (see ``edgespec.llama``). ``False`` (the
    default): llama.cpp's own, fastest kernels; speculation is lossless as the field
    means it (the committed tokens follow the target's distribution; a greedy run can
    differ from plain decoding only where rounding between batch sizes flips a near-tie,
    as in llama.cpp, vLLM and transformers). ``True``: batch-invariant kernels, so greedy
    speculation equals this engine's plain greedy decoding token for token, at ~1.2-1.3x
    the cost per step on a CPU. A draft model uses the target's kind of kernels.
    ``target_name`` and ``draft_name`` are how messages name the models (the name of a
    model in another tool's store: an Ollama blob's file name says nothing); by default
    their file names. ``plan``: the planner's ``Plan`` the engine was built from
    (``Plan.engine_kwargs()`` passes it, for ``edgespec.load`` and the CLI), kept as
    ``engine.plan``; None for an engine built by hand.

    ``memory`` (on by default): prompt lookup also drafts from the answers this engine
    wrote before, across ``generate`` calls, chat turns and the lines of a batch
    (``edgespec.decoding.memory``): ``engine.memory``, a ``SuffixIndex`` of the last
    ``memory_cap`` tokens written (262,144 by default, ~50 MB), first in, first out.
    Assign another index (``decoding.suffix_store.load``) to start warm, or None to draft
    from each request alone; a request's ``memory`` option picks one per request.
    """

    def __init__(
        self,
        target: str | os.PathLike,
        draft: str | os.PathLike | None = None,
        *,
        k: int = DEFAULT_K,
        k_max: int | None = None,
        p_min: float = 0.0,
        verify_cost: VerifyCost | None = None,
        draft_gamma: float | None = None,
        n_ctx: int = 4096,
        n_batch: int = 512,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        draft_n_gpu_layers: int | None = None,
        adaptive_k: bool = True,
        ngram_min_match: int = 2,
        exact: bool | None = False,
        batch_cost: VerifyCost | None = None,
        rpc: str | Sequence[str] | None = None, tensor_split: Sequence[float] = (),
        target_name: str | None = None, draft_name: str | None = None,
        plan: Any = None,
        memory: bool = True, memory_cap: int = DEFAULT_CAP,
    ) -> None:
        if k < 1:
            raise InputError(f"k must be at least 1 (got {k})")
        if n_ctx < 16:
            raise InputError(f"n_ctx must be at least 16 (got {n_ctx})")
        if not 0.0 <= p_min < 1.0:
            raise InputError(f"p_min must be in [0, 1) (got {p_min})")
        if n_batch < 2:
            # a verify batch is the last committed token plus at least one draft
            raise InputError(f"n_batch must be at least 2 (got {n_batch})")
        if memory_cap < 1:
            raise InputError(f"the memory cap must be at least 1 token (got {memory_cap})")
        self.plan = plan
        self.memory: SuffixIndex | None = SuffixIndex(memory_cap) if memory else None
        self.n_threads = n_threads or default_threads()
        self._n_batch = n_batch
        self._gpu_layers = n_gpu_layers
        self._n_ctx_asked = n_ctx
        self._load_target(target, exact=bool(exact), rpc=(rpc, tuple(tensor_split)))
        self.target_model.label = target_name or self.target_model.label
        self._cost = OnlineCost(verify_cost or self._default_verify_cost())
        self._draft_gamma = draft_gamma
        self._batch_cost = batch_cost
        self._batch_online: OnlineCost | None = None  # what its batches measured (batch_cost)
        self._policies: dict[str, DraftPolicy] = {}
        self.k = k
        self._k_max_override = k_max
        self.p_min = p_min
        self.adaptive_k = adaptive_k
        self.ngram_min_match = ngram_min_match
        self._draft_gpu_layers = n_gpu_layers if draft_n_gpu_layers is None else draft_n_gpu_layers
        self.draft_model: Model | None = None
        self._model_drafter: ModelDrafter | None = None
        self.drafter: Drafter = NoDrafter()
        self._template = None
        try:
            self.set_drafter(draft, name=draft_name)
        except BaseException:
            self.close()
            raise

    def _load_target(self, path: str | os.PathLike, *, exact: bool, rpc: tuple = (None, ())) -> None:
        model = Model(path, n_gpu_layers=self._gpu_layers, exact=exact, rpc=rpc[0], tensor_split=rpc[1])
        try:
            n_ctx = self._n_ctx_asked
            self.n_ctx = min(n_ctx, max(model.n_ctx_train, 16)) if model.n_ctx_train else n_ctx
            self.ctx = Context(model, n_ctx=self.n_ctx, n_batch=self._n_batch, n_threads=self.n_threads)
        except BaseException:
            model.close()
            raise
        self.target_model, self.is_break = model, sentence_breaks(model)  # one cache per model

    def _on_gpu(self) -> bool:
        from .llama import supports_gpu_offload

        return self._gpu_layers != 0 and supports_gpu_offload()

    def _default_verify_cost(self) -> VerifyCost:
        if self._on_gpu():
            return GPU_VERIFY_PRIOR
        return CPU_EXACT_VERIFY_PRIOR if self.target_model.exact else CPU_VERIFY_PRIOR

    @property
    def verify_cost(self) -> VerifyCost:
        """c(n) as this engine knows it now: the prior refined by its timed rounds."""
        return self._cost.as_verify_cost()

    def draft_policy(self) -> DraftPolicy | FixedPolicy:
        """The drafting policy for the current drafter, for the next generation (what it
        learned about the machine — c(n), the draft cost — carries over between them)."""
        name = self.drafter.name
        if name == "none":
            return FixedPolicy(0)
        if not self.adaptive_k:
            return FixedPolicy(self.k)
        pol = self._policies.get(name)
        if pol is None:
            gamma = 0.0
            if name == "model":
                gamma = self._draft_gamma if self._draft_gamma is not None else min(
                    1.0, 1.2 * self.draft_model.size_bytes / max(1, self.target_model.size_bytes))
            pol = self._policies[name] = DraftPolicy(name, self._cost, gamma=gamma)
        pol.l_max = self.k_max
        return pol

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
    def draft_path(self) -> Path | None:
        return self.draft_model.path if self.draft_model else None

    @property
    def draft_ctx(self) -> Context | None:
        """The loaded draft model's context (None without a draft model)."""
        return self._model_drafter.ctx if self._model_drafter is not None else None

    @property
    def drafter_name(self) -> str:
        return self.drafter.name

    @property
    def n_batch(self) -> int:
        """The decode batch asked for (``n_batch``; a batch's context takes at least it)."""
        return self._n_batch

    @property
    def k_max(self) -> int:
        """The largest k a round may use: the drafter's bound (or the override), and never
        more than one verify batch can hold (``n_batch`` = x_last + k drafts)."""
        return self.k_max_for(self.drafter.name)

    def k_max_for(self, drafter: str) -> int:
        k_max = self._k_max_override or DEFAULT_K_MAX.get(drafter, 16)
        return min(k_max, self.ctx.n_batch - 1)

    def batch_cost_prior(self) -> VerifyCost:
        """C(n): one decode of n sequences relative to one (the profile's, or a prior)."""
        if self._batch_cost is not None:
            return self._batch_cost
        return GPU_BATCH_PRIOR if self._on_gpu() else CPU_BATCH_PRIOR

    def batch_cost(self) -> OnlineCost:
        """C(n) as this engine's batches have measured it, from ``batch_cost_prior`` on:
        one estimate across ``generate_many`` calls and server batches, so a job's second
        batch starts from what the first learned, and its last steps (fewer sequences
        than slots, plain steps at the end) give the next one its plain-step level."""
        if self._batch_online is None:
            self._batch_online = OnlineCost(self.batch_cost_prior(), n_max=BATCH_COST_SIZES)
        return self._batch_online

    def generate_many(self, prompts: Iterable[PromptLike], *, parallel: int | str = "auto",
                      **options) -> PreparedBatch:
        """Generate every prompt, ``parallel`` sequences per decode (continuous batching,
        see ``edgespec.batching.runner``); iterate the answer for ``Outcome(key, result, error)``
        in the order they finish, ``key`` being the prompt's index. ``options`` are
        ``stream``'s, for every prompt. Prompt lookup drafts per sequence when it pays
        for the batch; a draft model is not used inside batches."""
        from .batching.runner import Request

        return self.run_many([Request(i, p, dict(options)) for i, p in enumerate(prompts)],
                             parallel=parallel)

    def run_many(self, requests: Iterable[Request], *, parallel: int | str = "auto") -> PreparedBatch:
        """``generate_many`` for ``batching.runner.Request``s, each with its own key and options."""
        from .batching.run import PreparedBatch

        return PreparedBatch(self, requests, parallel=parallel)

    def set_k(self, k: int) -> None:
        if k < 1:
            raise InputError(f"k must be at least 1 (got {k})")
        self.k = k

    def set_k_max(self, k_max: int | None) -> None:
        """Bound the adaptive k (None: the drafter's default bound)."""
        if k_max is not None and k_max < 1:
            raise InputError(f"k_max must be at least 1 (got {k_max})")
        self._k_max_override = k_max

    def set_p_min(self, p_min: float) -> None:
        """The model drafter's confidence cut-off, for this and later drafters."""
        if not 0.0 <= p_min < 1.0:
            raise InputError(f"p_min must be in [0, 1) (got {p_min})")
        self.p_min = p_min
        if self._model_drafter is not None:
            self._model_drafter.p_min = p_min

    def set_drafter(self, draft: str | os.PathLike | None, *, name: str | None = None) -> None:
        """Switch the drafter: ``None``/``"none"``, ``"ngram"``, ``"model"`` (the draft
        model already loaded) or a path to a GGUF draft model (``name``: how messages
        name it, by default its file name)."""
        if not _is_drafter(draft):
            self.drafter = NoDrafter()
            return
        if str(draft) == "ngram":
            self.drafter = self.new_drafter("ngram")
        elif str(draft) == "model":
            if self._model_drafter is None:
                raise InputError("no draft model is loaded; pass a draft model path instead")
            self.drafter = self._model_drafter
        else:
            path = Path(draft).expanduser()
            if self.draft_model is None or self.draft_model.path.resolve() != path.resolve():
                model = Model(path, n_gpu_layers=self._draft_gpu_layers, exact=self.target_model.exact)
                model.label = name or model.label
                try:
                    check_vocab_compatible(self.target_model, model)
                    drafter = ModelDrafter(model, n_ctx=self.n_ctx, n_batch=self._n_batch,
                                           n_threads=self.n_threads, p_min=self.p_min)
                except BaseException:
                    model.close()
                    raise
                if self._model_drafter is not None:
                    self._model_drafter.close()
                    self.draft_model.close()
                self.draft_model, self._model_drafter = model, drafter
                self._policies.pop("model", None)  # a new draft model has its own cost
            self.drafter = self._model_drafter

    def new_drafter(self, name: str) -> Drafter:
        """A fresh drafter of kind ``name`` that needs no model of its own: ``"ngram"``
        (prompt lookup with this engine's ``ngram_min_match`` and the target's sentence
        breaks, and the memory of earlier answers: ``decoding.memory``), anything else
        none (each sequence of a batch gets its own)."""
        if name == "ngram":
            return MemoryDrafter(NgramDrafter(min_match=self.ngram_min_match, is_break=self.is_break),
                                 self.memory)
        return NoDrafter()

    def reset(self) -> None:
        """Forget the cached conversation in both models."""
        self.ctx.clear()
        if self._model_drafter is not None:
            self._model_drafter.ctx.clear()

    @property
    def n_cached(self) -> int:
        """Tokens of the previous prompt + reply currently held in the target's KV."""
        return self.ctx.n_past

    def close(self) -> None:
        for obj in (self._model_drafter, getattr(self, "ctx", None), self.draft_model,
                    getattr(self, "target_model", None)):
            if obj is not None:
                obj.close()
        self._model_drafter = None
        self.draft_model = None

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
        if isinstance(prompt, str):
            if raw:
                return self.tokenize(prompt)
            text = self.apply_chat_template([{"role": "user", "content": prompt}])
            return self._tokenize_rendered(text)
        items = list(prompt)
        if items and isinstance(items[0], dict):
            return self._tokenize_rendered(self.apply_chat_template(items))
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in items):
            raise InputError("a prompt must be a string, a list of chat messages or a list of token ids")
        bad = [t for t in items if not 0 <= t < self.target_model.n_vocab]
        if bad:
            raise InputError(f"token id {bad[0]} is outside the vocabulary (0..{self.target_model.n_vocab - 1})")
        return [int(t) for t in items]

    def _tokenize_rendered(self, text: str) -> list[int]:
        from .llama.chat_template import tokenize_rendered

        return tokenize_rendered(self.target_model, text)

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
        The prompt is checked before any work: one that
        leaves no room to generate in the context raises ContextOverflowError. Closing
        the iterator early or a KeyboardInterrupt leaves both caches consistent; the next
        call reuses them.
        """
        return generation.run(self, self.prepare(prompt, **options))

    def prepare(self, prompt: PromptLike, *, max_tokens: int = 256, stop: Sequence[str] | str = (),
                raw: bool = False, response_format: dict | None = None, constraint: Constraint | None = None,
                logprobs: int | None = None, lenient_schema: bool = False, memory: bool | SuffixIndex = True,
                **sampling_options) -> Prepared:
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
        return check_request(self.target_model, self.n_ctx, self.prompt_tokens(prompt, raw=raw),
                             params_from(sampling_options), max_tokens=max_tokens, stop=stop,
                             constraint=constraint, logprobs=logprobs, memory=index)

    def generate(self, prompt: PromptLike, **kwargs) -> Result:
        """Run ``stream`` to the end and return the text, token ids, reason and stats."""
        done = None
        for ev in self.stream(prompt, **kwargs):
            if isinstance(ev, Done):
                done = ev
        assert done is not None
        return Result.from_done(done)
