"""What batching asks of the engine: ``BatchEngine``, a small ``typing.Protocol``.

``batching.run`` (``PreparedBatch``, ``check_parallel``), ``batching.runner`` (``BatchRunner``)
and ``batching.sequence`` (``BatchSeq``) take an engine typed with it and use nothing
else of it: the target model, the engine's settings (its context, threads, decode batch,
k and whether k adapts, its drafter's name), its checks (``prepare``), its priors
(``batch_cost_prior``, ``k_max_for``), the batch cost it learns (``batch_cost``) and one fresh drafter per sequence
(``new_drafter``). ``edgespec.Engine`` is one (tests/test_generation.py checks it); the
batch never reaches an engine's private state. ``results.run_batch`` calls only the
engine's public API (``generate``, ``run_many``).
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from ..costmodel.adaptive import VerifyCost
from ..costmodel.costs import OnlineCost
from ..decoding.drafters import Drafter
from ..decoding.sequence import Prepared
from ..llama import Model


@runtime_checkable
class BatchEngine(Protocol):
    """The engine as batching sees it (an ``edgespec.Engine``)."""

    @property
    def target_model(self) -> Model: ...

    @property
    def n_ctx(self) -> int: ...

    @property
    def n_threads(self) -> int: ...

    @property
    def n_batch(self) -> int:
        """The decode batch the engine was asked for (a batch's context takes at least it)."""

    @property
    def k(self) -> int: ...

    @property
    def adaptive_k(self) -> bool: ...

    @property
    def drafter_name(self) -> str: ...

    def prepare(self, prompt, **options) -> Prepared:
        """A request checked and tokenized (``Engine.prepare``)."""

    def batch_cost_prior(self) -> VerifyCost:
        """C(n): one decode of n sequences relative to one."""

    def batch_cost(self) -> OnlineCost:
        """C(n) as the engine's batches measured it so far (one across its batches)."""

    def k_max_for(self, drafter: str) -> int:
        """The largest k a round of ``drafter`` may draft."""

    def new_drafter(self, name: str, memory=None) -> Drafter:
        """A fresh drafter of kind ``name`` for one sequence ("ngram" or "none"), drafting
        from ``memory`` (a ``SuffixIndex``) too."""
