"""The plan as a record: what to run on a device, how it drafts, and why (``Plan``, ``Explanation``).

``Plan`` is frozen and whole: the planner (``planning.planner.plan``) fills every field,
the command line's options included (threads, the memory), and nobody patches it after.
It carries what the engine needs as the engine takes it: the model names, the context
and the kernels, and one ``DraftingOptions`` record (``costmodel.drafting``) for how it
drafts. ``engine_kwargs`` only resolves the names to files. ``Explanation`` is the why:
the reason in full, its one-line headline, and the notes gathered on the way.

It decides nothing and knows nothing about llama.cpp.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import catalog
from ..costmodel.drafting import DraftingOptions
from ..errors import ProfileError


@dataclass(frozen=True)
class Explanation:
    """Why the plan is what it is: ``reason`` in full (for -v and ``profiles detect``),
    ``headline`` its one line for every run (empty: ``reason`` is one line already), and
    the ``notes`` gathered while planning (detection, memory fit, pairs skipped, ...)."""

    reason: str
    headline: str = ""
    notes: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        """The choice in one line."""
        return self.headline or self.reason


@dataclass(frozen=True)
class Plan:
    """What to run, and why: the answer to ``--profile``.

    ``target``/``draft`` are catalog names or paths; ``draft`` is None unless the
    drafter is "model". ``k`` is the cost model's best k for the drafter (under the
    learned policy, its prediction; with ``--k``, that k: ``drafting.k``), and
    ``predicted_speedup`` the cost model's speedup for it. ``options``: (drafter, best
    k, predicted speedup) of every drafter weighed.
    """

    profile: str
    backend: str
    target: str
    draft: str | None
    drafter: str  # "model" | "ngram" | "mtp" | "none"
    k: int
    p_min: float  # the profile's fixed confidence cut-off (used with a fixed k only)
    n_ctx: int
    n_threads: int | None
    n_gpu_layers: int
    predicted_speedup: float
    explanation: Explanation
    pair: str | None = None
    options: tuple[tuple[str, int, float], ...] = ()
    # the target's kernels (Engine's ``exact``): llama.cpp's own unless --exact asks for
    # batch-invariant ones (token-for-token equality with plain greedy decoding)
    exact: bool = False
    # the target's layers on these llama.cpp RPC servers (HOST:PORT), split by memory or
    # by ``tensor_split``; the drafter stays local
    rpc: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()
    # how the engine drafts: a fixed k or the learned policy, its priors, the memory
    drafting: DraftingOptions = field(default_factory=DraftingOptions)

    @property
    def reason(self) -> str:
        return self.explanation.reason

    @property
    def headline(self) -> str:
        return self.explanation.headline

    @property
    def notes(self) -> tuple[str, ...]:
        return self.explanation.notes

    @property
    def summary(self) -> str:
        """The choice in one line."""
        return self.explanation.summary

    @property
    def adaptive(self) -> bool:
        """Whether the engine's drafting policy learns each round's length (no ``--k``)."""
        return self.drafting.adaptive

    def engine_kwargs(self, *, offline: bool | None = None) -> dict:
        """Keyword arguments for ``edgespec.engine.Engine``: the plan's fields as the
        engine takes them, with catalog names resolved to local files (assembling or
        downloading them if needed). ``edgespec.load`` builds the engine from them and
        keeps the plan as ``engine.plan``."""
        if self.drafter == "model":
            if self.draft is None:  # pragma: no cover - plan() never builds this
                raise ProfileError("plan has drafter 'model' but no draft model")
            draft: Path | str | None = catalog.resolve_model(self.draft, offline=offline)
        else:
            draft = self.drafter if self.drafter in ("ngram", "mtp") else None
        over_rpc = {"rpc": ",".join(self.rpc), "tensor_split": self.tensor_split} if self.rpc else {}
        return {
            "target": catalog.resolve_model(self.target, offline=offline),
            "draft": draft,
            "drafting": self.drafting,
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "n_gpu_layers": self.n_gpu_layers,
            "exact": self.exact,
            **over_rpc,
            # messages name a model by the name it was given, not by its file (an Ollama blob)
            "names": (given_name(self.target), given_name(self.draft) if self.drafter == "model" else None),
        }

    def to_dict(self) -> dict:
        return {
            "name": self.profile,
            "profile": self.profile,
            "backend": self.backend,
            "pair": self.pair,
            "target": self.target,
            "draft": self.draft,
            "drafter": self.drafter,
            "k": self.k,
            "k_max": self.drafting.k,  # a fixed k bounds every round (None: the policy's own bound)
            "p_min": self.p_min,
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "n_gpu_layers": self.n_gpu_layers,
            "predicted_speedup": round(self.predicted_speedup, 3),
            "reason": self.reason,
            "headline": self.summary,
            "notes": list(self.notes),
            "options": [{"drafter": d, "k": k, "predicted_speedup": round(s, 3)} for d, k, s in self.options],
        }


def given_name(name: str | None) -> str | None:
    """The name to show for a model found in another tool's store (an Ollama blob's file
    name says nothing); None for a path or a catalog name: the file's name says it."""
    return None if not name or Path(name).expanduser().is_file() or catalog.find_model(name) else name
