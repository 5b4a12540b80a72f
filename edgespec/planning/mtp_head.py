"""The target's own multi-token-prediction head as the cost model sees it (``--draft mtp``).

``head_for(target, prof)`` is None unless the target's file here keeps nextn layers
(``catalog.gguf.mtp_head``); otherwise the ``DrafterOption`` the planner weighs, with where
each figure came from:

* α: the profile's ``cost.mtp.alpha`` (what users report on this kind of device), else
  ``MTP_ALPHA_PRIOR``;
* γ, one head step in target steps: measured for this very file on this machine (the first
  use of an engine drafting with it times one head step against one target step,
  ``measuring.first_use``, kept beside c(n) in ``catalog.verify_cache``), else the profile's
  ``cost.mtp.gamma`` (what the reports imply here: on Apple's M1/M2 the verify is
  compute-bound and the head's own decode is far from free), else the cost model's formula
  over the weights one head step reads (its block and the LM head, ``draft_cost_ratio``);
* the longest draft: the profile's ``cost.mtp.k_max``, else ``MTP_K_MAX``;
* ``note``: the profile's reports in one line, which the plan quotes.

``models pairs`` lists the head among a target's drafters (``candidate``). Reads the
profile, the file's headers and the cache; chooses nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import catalog
from ..catalog import gguf, verify_cache
from ..costmodel import adaptive
from ..profiles import Profile

# The acceptance of a model's own MTP head before any is measured: upstream reports 0.7 to
# 0.95 for the first draft on Qwen3.5/3.6 (llama.cpp PR #22673; #23011: 95.6%).
MTP_ALPHA_PRIOR = 0.75
# One head drafts its later tokens from its own rows, and they fall off fast: peers draft
# 1-3 with it (the engine's bound, decoding.drafting.DEFAULT_K_MAX["mtp"]).
MTP_K_MAX = 3
NAME = "mtp (its own head)"


@dataclass(frozen=True)
class Head:
    """The target's MTP head as a drafter option, and where its figures came from."""

    option: adaptive.DrafterOption
    alpha_status: str
    gamma_status: str
    note: str = ""

    def words(self, k: int, s: float) -> str:
        """What the head is predicted to do here, for the plan's reasons."""
        o = self.option
        return (
            f"mtp (the target's own head) {s:.2f}× at best (k={k}; α={o.alpha:.2f} {self.alpha_status}, "
            f"γ={o.gamma:.2f} {self.gamma_status})"
        )

    def verdict(self, s: float) -> str:
        """One line for a plan that does not draft with the head: its prediction and the
        reports behind it."""
        why = f"; {self.note}" if self.note else ""
        gamma = f"γ={self.option.gamma:.2f} {self.gamma_status}"
        return f"the model's own MTP head is predicted {s:.2f}× here ({gamma}{why})"


def head_for(target: str, prof: Profile, *, exact: bool = False) -> Head | None:
    """The MTP head of ``target`` (a catalog name or a path) on ``prof``; None when its
    file is not here, cannot be read, or keeps no nextn layers."""
    path = catalog.local_path(target)
    if path is None:
        return None
    try:
        n_nextn, share = gguf.mtp_head(path)
        size = catalog.model_info(target).size_bytes if n_nextn > 0 else 0
    except Exception:  # noqa: BLE001 - an unreadable file: no head to weigh
        return None
    if n_nextn <= 0:
        return None
    figs = prof.mtp
    alpha, a_status = MTP_ALPHA_PRIOR, "a prior from upstream reports"
    if figs.alpha is not None:
        alpha, a_status = figs.alpha.value, f"the profile's, {figs.alpha.status}"
    measured = verify_cache.measured_mtp_gamma(path, exact=exact)
    if measured is not None:
        gamma, g_status = measured, "measured for this file"
    elif figs.gamma is not None:
        gamma, g_status = figs.gamma.value, f"the profile's, {figs.gamma.status} from users' reports"
    else:
        over, gbs = prof.overhead_ms.value, prof.decode_gbs.value
        gamma = adaptive.draft_cost_ratio(int(size * share), size, overhead_ms=over, gbs=gbs)
        g_status = "estimated from the head's weights"
    k_max = figs.k_max or MTP_K_MAX
    return Head(adaptive.DrafterOption("mtp", alpha, gamma, k_max=k_max), a_status, g_status, figs.note)


def curve(target: str, prof: Profile, *, exact: bool = False) -> adaptive.VerifyCost:
    """c(n) for ``target`` here as ``models pairs`` weighs its head: measured for the file
    (``catalog.verify_cache``), else the profile's curve for its weight type."""
    path = catalog.local_path(target)
    measured = verify_cache.measured_curve(path, exact=exact) if path is not None else None
    if measured is not None:
        return measured
    try:
        mix = gguf.weight_mix(path) if path is not None else None
    except Exception:  # noqa: BLE001 - an unreadable header: the curve for any weights
        mix = None
    return prof.verify_for(mix).cost
