"""c(n) learned from a run's own rounds, kept for the next run: the first use on a device.

Before ``tune``, a plan rests on priors: the profile's curve or the backend's table row
for the target's weight type (``costmodel.priors``), measured elsewhere or estimated.
Every round of a run times its own verify, and the engine's ``OnlineCost`` turns those
timings into c(n) for the sizes the policy verified (ratios of quiet times measured
close together, so a busy machine does not skew them). At the end of a run,
``keep_learned_costs`` saves that curve for the target file on this machine
(``catalog.verify_cache``) when nothing was measured for the file yet and the run
measured at least ``MIN_SIZES`` verify sizes against plain steps over at least
``MIN_ROUNDS`` timed rounds (the cost model's first blocks are short, so that a wrong
prior is corrected within a few rounds; a curve kept for good needs more): the next run plans
from a measurement, and ``tune`` stays the full one (it replaces this entry).

Reads the engine's learned costs; writes only the cache; prints nothing (the caller
shows the line it returns).
"""

from __future__ import annotations

from typing import Any

from ..catalog import verify_cache

MIN_SIZES = 2  # verify sizes (n >= 2) measured before a run's curve is worth keeping
MIN_ROUNDS = 48  # timed rounds (OnlineCost observations) before it is


def keep_learned_costs(engine: Any) -> str | None:
    """Save the c(n) the engine learned for its target file, if it is the first
    measurement there; the one line to show, or None when nothing was saved."""
    cost = engine.drafting.cost
    sizes = [n for n in range(2, cost.n_max + 1) if cost.measured(n) is not None]
    model = engine.target_model
    if len(sizes) < MIN_SIZES or cost.count < MIN_ROUNDS or not cost.step_seconds or getattr(model, "rpc", None):
        return None  # too little measured, or the network's share is in every time (RPC)
    exact = bool(engine.exact_kernels)
    if verify_cache.measured_entry(model.path, exact=exact) is not None:
        return None
    shown = ", ".join(f"c({n}) {cost.measured(n):.2f}" for n in sizes[:4])
    saved = verify_cache.record(
        model.path,
        cost.as_verify_cost(),
        step_ms=cost.step_seconds * 1e3,
        threads=int(engine.n_threads),
        exact=exact,
        source=f"learned from a run's own rounds (measured: {', '.join(map(str, sizes))})",
    )
    if saved is None:
        return None
    return f"verify cost of {model.path.name} learned from this run ({shown}): the next run plans from it"
