"""How an engine drafts, as one frozen record: ``DraftingOptions``.

The planner fills it from the profile and the command line (``planning``), and the
engine hands it to its drafting state (``decoding.drafting.Drafting``): one record from
the command line to the loop, so that no layer copies its fields into keyword arguments
of the next. It lives here, on the ground both of them stand on, because its priors are
the cost model's figures (c(n), γ, C(n)).

It knows what each field means and which values are allowed; it knows nothing of models,
drafters or devices.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import InputError
from .adaptive import VerifyCost

# The size of the memory of earlier answers, in tokens, when nothing else is said
# (``decoding.suffix.DEFAULT_CAP``, the index's own default; checked equal in the tests).
MEMORY_CAP = 1 << 18


@dataclass(frozen=True)
class DraftingOptions:
    """What drafting may do, and the priors it starts from.

    ``k``: None (the default) lets the drafting policy choose each round's length, up to
    ``k_max`` (None: the drafter's own bound, 15 for prompt lookup, 8 for a draft model);
    a number drafts exactly that many tokens every round (for sweeps; ``--k``). ``p_min``
    is the draft model's fixed confidence cut-off (0: none; the learned policy weighs the
    confidence itself). ``verify_cost`` (c(n)), ``draft_gamma`` (γ: a draft model's step
    in target steps) and ``batch_cost`` (C(n) of n sequences per decode) are the priors
    the engine refines with its own timings (None: its own priors; γ then from the model
    sizes, ``costmodel.adaptive.draft_cost_ratio``); ``mtp_gamma`` is γ of the target's
    own multi-token-prediction head (``--draft mtp``; None: from the target's layers).
    ``ngram_min_match`` is the shortest
    context match prompt lookup drafts from. ``memory``: prompt lookup also drafts from
    the answers the engine wrote before (``decoding.memory``), the last ``memory_cap``
    tokens of them.
    """

    k: int | None = None
    k_max: int | None = None
    p_min: float = 0.0
    verify_cost: VerifyCost | None = None
    draft_gamma: float | None = None
    mtp_gamma: float | None = None
    batch_cost: VerifyCost | None = None
    ngram_min_match: int = 2
    memory: bool = True
    memory_cap: int = MEMORY_CAP

    def __post_init__(self) -> None:
        if self.k is not None and (isinstance(self.k, bool) or self.k < 1):
            raise InputError(f"k must be at least 1, or None for the learned policy (got {self.k})")
        if self.k_max is not None and self.k_max < 1:
            raise InputError(f"k_max must be at least 1 (got {self.k_max})")
        if not 0.0 <= self.p_min < 1.0:
            raise InputError(f"p_min must be in [0, 1) (got {self.p_min})")
        if self.draft_gamma is not None and self.draft_gamma < 0:
            raise InputError(f"draft_gamma must be at least 0 (got {self.draft_gamma})")
        if self.mtp_gamma is not None and self.mtp_gamma < 0:
            raise InputError(f"mtp_gamma must be at least 0 (got {self.mtp_gamma})")
        if self.memory_cap < 1:
            raise InputError(f"the memory cap must be at least 1 token (got {self.memory_cap})")

    @property
    def adaptive(self) -> bool:
        """Whether the learned policy picks each round's length (no fixed ``k``)."""
        return self.k is None
