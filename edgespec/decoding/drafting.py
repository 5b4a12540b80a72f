"""An engine's drafting state, in one object: the drafter, its policy, k and the learned costs.

``Drafting`` is what an ``Engine`` holds to draft: the options it was given (one frozen
``costmodel.drafting.DraftingOptions``), which drafter runs ("none", "ngram", "model",
"mtp" or "assistant"), prompt lookup's index of the engine's own context, the draft model's
drafter when one is loaded, the target's own multi-token-prediction head when asked for
(``decoding.mtp``, ``open_mtp``), a Gemma 4 assistant reading the target's KV cache when its
file is the draft (``decoding.assistant``, ``open_model_drafter`` tells it apart), the
memory of earlier answers (``decoding.memory``), and what was learned about the machine:
c(n) (``OnlineCost``, refined by every round), the batch cost C(n) (refined by every batch)
and a drafting policy per drafter (``decoding.policy``: its γ learned as it drafts), kept
across generations.

Per generation it hands out a drafter built with the request's memory and the policy to
run it (``for_request``); per batch sequence, a fresh drafter and policy of its own
(``new_drafter``, ``new_policy``). The one γ formula is the cost model's
(``costmodel.adaptive.draft_cost_ratio``), from the models' sizes when no γ is given.

It knows llama.cpp only through the draft model's ``ModelDrafter`` or a Gemma 4 assistant's
``AssistantDrafter`` (``open_model_drafter`` loads either, checked against the target; the
engine hands it over, ``use_model``) and the MTP head's context (``open_mtp``, on the
target's model); it knows nothing of prompts, text or batches (a batch drafts with prompt
lookup or not at all).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Callable

from ..costmodel.adaptive import (
    DEFAULT_DECODE_GBS,
    DEFAULT_OVERHEAD_MS,
    NO_DRAFT_ALIASES,
    VerifyCost,
    draft_cost_ratio,
)
from ..costmodel.costs import BATCH_COST_SIZES, OnlineCost
from ..costmodel.drafting import DraftingOptions
from ..errors import InputError
from ..llama import AssistantContext, Context, Model, MtpContext, check_vocab_compatible, is_assistant
from .assistant import AssistantDrafter
from .drafters import Drafter, NgramDrafter, NoDrafter
from .memory import MemoryDrafter
from .model_drafter import ModelDrafter
from .mtp import MtpDrafter
from .policy import DraftPolicy, FixedPolicy
from .suffix import SuffixIndex

DEFAULT_K = 4  # a fixed k when asked for one without a number (``adaptive_k = False``)
# The most tokens one round drafts. 15 makes a verify batch of 16, which a CPU's tiled
# GEMM decodes for less than 15 (see costmodel.costs.CPU_VERIFY_PRIOR).
# An MTP head is one layer trained for the next token but one: its later drafts, fed its
# own hidden rows, fall off fast (peers draft 1-3 with it). A Gemma 4 assistant drafts every
# token at one position, on its own rows after the first: a few more than a head.
DEFAULT_K_MAX = {"model": 8, "ngram": 15, "mtp": 3, "assistant": 4, "none": 1}
KINDS = ("none", "ngram", "model", "mtp", "assistant")
DRAFT_FILES = ("model", "assistant")  # the kinds a draft file opens (open_model_drafter)


def draft_kind(draft: object) -> str:
    """The kind of drafter an engine's ``draft`` argument names: None or one of
    ``NO_DRAFT_ALIASES``, "none"; "ngram", "mtp" and "assistant" (the one loaded)
    themselves; anything else a draft model (its path, or "model": the one loaded; a
    Gemma 4 assistant's path too, told apart when it loads)."""
    if draft is None or str(draft) in NO_DRAFT_ALIASES:
        return "none"
    return str(draft) if str(draft) in ("ngram", "mtp", "assistant") else "model"


def open_model_drafter(
    path: Path,
    target: Context,
    *,
    n_gpu_layers: int,
    n_ctx: int,
    n_batch: int,
    n_threads: int,
    p_min: float,
    name: str | None = None,
) -> ModelDrafter | AssistantDrafter:
    """The draft model at ``path`` loaded for the target context ``target`` (its vocabulary
    checked against the target's; its kernels the target's kind), with its own context;
    a Gemma 4 assistant's file instead opens an ``AssistantDrafter`` whose context reads
    ``target``'s KV cache (``llama.check_assistant`` first: a clear error for any other
    target), and the target's context keeps its hidden rows from then on. ``name``: how
    messages name it (its file name by default)."""
    model = Model(path, n_gpu_layers=n_gpu_layers, exact=target.model.exact)
    model.label = name or model.label
    try:
        if is_assistant(model):
            drafter = AssistantDrafter(AssistantContext(model, target, n_threads=n_threads), p_min=p_min)
            target.keep_hidden()
            return drafter
        check_vocab_compatible(target.model, model)
        return ModelDrafter(model, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads, p_min=p_min)
    except BaseException:
        model.close()
        raise


def open_mtp(target: Context, *, p_min: float = 0.0) -> MtpDrafter:
    """The MTP head of ``target``'s model (loaded with its MTP layers, ``Model(mtp=True)``;
    else a clear ``InputError``) as a drafter, with a context of its own as long as the
    target's; the target's context keeps its hidden rows from now on."""
    ctx = MtpContext(target.model, n_ctx=target.n_ctx, n_batch=target.n_batch, n_threads=target.n_threads)
    target.keep_hidden()
    return MtpDrafter(ctx, p_min=p_min)


def mtp_gamma(target: Model) -> float:
    """γ prior of an MTP head step, the cost model's formula (``draft_cost_ratio``) over the
    weights one step reads: about a layer's worth for its decoder block and ``eh_proj``,
    and the shared LM head (a large share of a small model: a fifth of Qwen3.5-0.8B),
    plus a decode's overhead; the policy learns the real figure from its rounds."""
    bytes_per_param = target.size_bytes / max(1, target.n_params)
    per_layer = target.size_bytes / max(1, target.n_layer + target.n_layer_nextn)
    head = target.n_vocab * target.n_embd * bytes_per_param
    return draft_cost_ratio(
        int(per_layer + head), target.size_bytes, overhead_ms=DEFAULT_OVERHEAD_MS, gbs=DEFAULT_DECODE_GBS
    )


def rollback_needed(options: DraftingOptions, kind: str) -> int:
    """The most drafts one round of drafter ``kind`` may verify under ``options``: what
    a recurrent target's context must be able to undo (its snapshots, ``llama.Context``)."""
    if kind == "none":
        return 0
    return options.k or options.k_max or DEFAULT_K_MAX.get(kind, 16)


class Drafting:
    """The drafting state of one engine. ``verify_cost`` is the c(n) prior (the options'
    when they have one), ``batch_cost`` the C(n) prior; ``max_k``: the most drafts one
    verify batch holds (the target context's ``n_batch`` less the last committed token);
    ``is_break``: the target's sentence breaks, for prompt lookup."""

    def __init__(
        self,
        options: DraftingOptions,
        *,
        verify_cost: VerifyCost,
        batch_cost: VerifyCost,
        max_k: int,
        is_break: Callable[[int], bool] | None = None,
    ) -> None:
        self.options = options
        self.cost = OnlineCost(options.verify_cost or verify_cost)
        self._batch_prior = options.batch_cost or batch_cost
        self._batch: OnlineCost | None = None
        self.max_k = max_k
        self.is_break = is_break
        self.memory: SuffixIndex | None = SuffixIndex(options.memory_cap) if options.memory else None
        self.kind = "none"
        self.model: ModelDrafter | None = None
        self.mtp: MtpDrafter | None = None  # the target's own MTP head (open_mtp)
        self.assistant: AssistantDrafter | None = None  # a Gemma 4 assistant (use_model)
        self._gamma_sizes: dict[str, tuple[int, int]] = {}  # kind -> (draft, target) bytes, for γ from sizes
        self._mtp_gamma = 0.0
        self._lookup = NgramDrafter(min_match=options.ngram_min_match, is_break=is_break)
        self._policies: dict[str, DraftPolicy] = {}

    # -- what runs --------------------------------------------------------------------
    def use(self, kind: str) -> None:
        """Draft with ``kind``: "none", "ngram", "model" (the draft model handed over),
        "mtp" (the MTP head, ``open_mtp``) or "assistant" (the assistant handed over)."""
        if kind not in KINDS:
            raise InputError(f"unknown drafter {kind!r}; use one of {', '.join(KINDS)}")
        if kind == "model" and self.model is None:
            raise InputError("no draft model is loaded; pass a draft model path instead")
        if kind == "assistant" and self.assistant is None:
            raise InputError("no Gemma 4 assistant is loaded; pass its file as the draft")
        if kind == "mtp" and self.mtp is None:
            raise InputError("the target's MTP head is not open; build the engine with draft='mtp'")
        self.kind = kind

    def open_mtp(self, target: Context, model: Model, *, p_min: float = 0.0) -> None:
        """Draft with the MTP head of ``target``'s model (opened once, ``open_mtp``); the
        target's context keeps its hidden rows (again, if it is a new one). Its γ starts
        from the share of the target's weights one head step reads (``mtp_gamma``)."""
        if self.mtp is None:
            self.mtp = open_mtp(target, p_min=p_min)
            self._mtp_gamma = mtp_gamma(model)
            self._policies.pop("mtp", None)
        target.keep_hidden()
        self.kind = "mtp"

    def use_model(self, drafter: ModelDrafter | AssistantDrafter, *, target_bytes: int) -> None:
        """Draft with a newly loaded draft model or Gemma 4 assistant (the previous one of
        its kind is closed); its γ starts from the options' or, failing
        that, from the two models' sizes."""
        kind = "assistant" if isinstance(drafter, AssistantDrafter) else "model"
        self.close_model(kind)
        if isinstance(drafter, AssistantDrafter):
            self.assistant = drafter
        else:
            self.model = drafter
        self._gamma_sizes[kind] = (drafter.model.size_bytes, target_bytes)
        self._policies.pop(kind, None)  # a new draft model has its own cost
        self.kind = kind

    def loaded(self, path: Path) -> str | None:
        """The kind ("model", "assistant") of the loaded draft whose file is ``path``, or None."""
        for kind, d in (("model", self.model), ("assistant", self.assistant)):
            if d is not None and d.model.path.resolve() == path.resolve():
                return kind
        return None

    @property
    def draft_model(self) -> Model | None:
        """The model of the running draft file (the draft model's, the assistant's), else
        the loaded draft model's, else None."""
        running = {"model": self.model, "assistant": self.assistant}.get(self.kind) or self.model
        return running.model if running is not None else None

    def close_model(self, kind: str = "model") -> None:
        """Close the draft model's drafter (``kind`` "assistant": the assistant's) and its
        model (plain decoding if it ran)."""
        drafter = self.assistant if kind == "assistant" else self.model
        if drafter is not None:
            drafter.close()
            drafter.model.close()
        if kind == "assistant":
            self.assistant = None
        else:
            self.model = None
        if self.kind == kind:
            self.kind = "none"

    # -- k ----------------------------------------------------------------------------
    @property
    def adaptive(self) -> bool:
        return self.options.adaptive

    @property
    def k(self) -> int:
        """The fixed k of every round; under the learned policy, the most a round drafts."""
        return self.options.k if self.options.k is not None else self.k_max_for(self.kind)

    def set(self, **changes) -> None:
        """Change options (``k``, ``k_max``, ``p_min``: checked by ``DraftingOptions``); a
        new ``p_min`` applies to the loaded draft model too."""
        self.options = replace(self.options, **changes)
        for drafter in (self.model, self.assistant):
            if drafter is not None:
                drafter.p_min = self.options.p_min

    def k_max_for(self, kind: str) -> int:
        """The largest k a round of ``kind`` may draft: the options' bound or the drafter's
        own, and never more than one verify batch holds."""
        return min(self.options.k_max or DEFAULT_K_MAX.get(kind, 16), self.max_k)

    # -- costs ------------------------------------------------------------------------
    @property
    def draft_ctx(self):
        """The running drafter's own context (the draft model's, the MTP head's, the
        assistant's), or None."""
        drafter = {"model": self.model, "mtp": self.mtp, "assistant": self.assistant}.get(self.kind)
        return drafter.ctx if drafter is not None else None

    def gamma(self, kind: str = "model") -> float:
        """The draft model's γ prior (``kind`` "assistant": the assistant's): the options',
        or the cost model's from the sizes; the MTP head's (``kind`` "mtp"): from the
        target's layers (``mtp_gamma``)."""
        if kind == "mtp":
            return self._mtp_gamma if self.options.mtp_gamma is None else self.options.mtp_gamma
        if self.options.draft_gamma is not None:
            return self.options.draft_gamma
        if kind not in self._gamma_sizes:
            return 0.0
        d, t = self._gamma_sizes[kind]
        return draft_cost_ratio(d, t, overhead_ms=DEFAULT_OVERHEAD_MS, gbs=DEFAULT_DECODE_GBS)

    def start_cost_from(self, cost: VerifyCost) -> None:
        """Start c(n) over from ``cost``, measured on this machine for this target before
        any round (a first use's short measurement, ``measuring.first_use``); the
        policies built on the old prior are dropped."""
        self.cost = OnlineCost(cost)
        self._policies.clear()

    def batch_cost_prior(self) -> VerifyCost:
        return self._batch_prior

    def batch_cost(self) -> OnlineCost:
        """C(n) as the engine's batches measured it (one estimate across its batches)."""
        if self._batch is None:
            self._batch = OnlineCost(self._batch_prior, n_max=BATCH_COST_SIZES)
        return self._batch

    # -- per generation ---------------------------------------------------------------
    def policy(self) -> DraftPolicy | FixedPolicy:
        """The policy of the running drafter for the next generation on the engine's own
        context (what it learned about the machine carries over between them)."""
        kind = self.kind
        if kind == "none":
            return FixedPolicy(0)
        if not self.adaptive:
            return FixedPolicy(self.k)
        pol = self._policies.get(kind)
        if pol is None:
            gamma = self.gamma(kind) if kind != "ngram" else 0.0
            pol = self._policies[kind] = DraftPolicy(kind, self.cost, gamma=gamma)
        pol.l_max = self.k_max_for(kind)
        return pol

    def for_request(self, memory: SuffixIndex | None) -> tuple[Drafter, DraftPolicy | FixedPolicy]:
        """The drafter for one generation on the engine's own context, built with the
        request's ``memory`` (prompt lookup keeps its index of the context between
        generations), and its policy."""
        if self.kind == "ngram":
            drafter: Drafter = MemoryDrafter(self._lookup, memory)
        elif self.kind == "model":
            drafter = self.model
        elif self.kind == "mtp":
            drafter = self.mtp
        elif self.kind == "assistant":
            drafter = self.assistant
        else:
            drafter = NoDrafter()
        return drafter, self.policy()

    def new_drafter(self, kind: str, memory: SuffixIndex | None = None) -> Drafter:
        """A fresh drafter of ``kind`` that needs no model of its own, for one sequence of
        a batch: "ngram" (prompt lookup with the options' shortest match and the target's
        sentence breaks, drafting from ``memory`` too), anything else none."""
        if kind == "ngram":
            return MemoryDrafter(NgramDrafter(min_match=self.options.ngram_min_match, is_break=self.is_break), memory)
        return NoDrafter()

    def close(self) -> None:
        self.close_model()
        self.close_model("assistant")  # before the target's context it reads
        if self.mtp is not None:
            self.mtp.close()
            self.mtp = None
        self._lookup.close()
