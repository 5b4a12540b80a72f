"""The first use of a model file on a machine: its verify cost c(n), measured in a few seconds.

Before ``tune``, a plan rests on priors: the profile's curve or the backend's table row
for the target's weight type (``costmodel.priors``), measured on another machine or
estimated. Whether a draft pays is decided by c(n) (a draft of one token on Q4_K_M on a
2-core CPU pays only if it is right 90% of the time), and a prior that is off by 15%
turns drafts that break even into a loss for as long as the engine takes to learn the
host's costs from its own rounds: over the first requests of a first run, which are the
ones a user sees first.

So when nothing was measured for the target file on this machine yet, ``measure_first_use``
times one decode of n tokens (all rows' logits, as a verify asks) against one of a single
token right after the engine loads (``decode_times.time_decodes``, the sizes the policy
verifies: 1..8, 12 and 16, three sweeps after a warm-up one, fewer where that would
take over 8 s: 4-7 s for a 1.5B model on a 2-core CPU), starts the engine's cost model
from that curve, and keeps it for the file (``catalog.verify_cache``) so that the next
run plans from it without measuring. ``tune`` stays the full measurement and replaces
the entry.

Nothing is measured for an engine that drafts nothing or drafts a fixed k (c(n) decides
nothing there), over RPC (the link's share is in every time), or when
``EDGESPEC_FIRST_USE=0`` (the tests' default; what a script sets to load without it).

Writes only the cache; prints nothing (the caller shows the line it returns).
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..catalog import verify_cache
from ..llama import Context
from .decode_times import back, fit_verify_cost, hold, time_decodes
from .perplexity import heldout_text

SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)  # the tiles of repacked kernels (4, 8, 16) and what lies between
REPEATS = 3  # timed sweeps at most, after a warm-up one
BUDGET_S = 8.0  # the warm-up sweep included: fewer timed sweeps where three would take longer
PREFIX_TOKENS = 64  # the KV position the batches are timed at
ENV = "EDGESPEC_FIRST_USE"


def wanted(engine: Any, *, even_if_off: bool = False) -> bool:
    """Whether ``engine`` should measure its target's c(n) now: it drafts under the
    learned policy, on local layers, nothing was measured for its file here, and
    ``EDGESPEC_FIRST_USE`` is not "0" (``even_if_off``: whatever it says, for a
    benchmark that measures on purpose)."""
    if not even_if_off and os.environ.get(ENV, "1").strip() == "0":
        return False
    drafting = engine.drafting
    if drafting.kind == "none" or not drafting.adaptive:
        return False
    model = engine.target_model
    if getattr(model, "rpc", None):
        return False
    return verify_cache.measured_entry(model.path, exact=bool(engine.exact_kernels)) is None


def _sweeps_within(ctx: Context, prefix: list[int], prior: Any, sizes: tuple[int, ...]) -> int:
    """How many timed sweeps fit in ``BUDGET_S`` with the warm-up one (at least 1): a
    sweep costs about one step times the prior's c(n) summed over the sizes. Leaves
    ``ctx`` holding ``prefix``."""
    ctx.rollback(0)
    hold(ctx, prefix)
    t0 = time.perf_counter()
    ctx.decode(prefix[:1], rows=(0,))
    step = time.perf_counter() - t0
    back(ctx, prefix)
    sweep = step * sum(prior(n) for n in sizes)
    return max(1, int(BUDGET_S / max(sweep, 1e-9)) - 1)


def measure_first_use(engine: Any, *, repeats: int = REPEATS, even_if_off: bool = False) -> str | None:
    """Measure c(n) for the engine's target if ``wanted``: start its cost model from the
    curve and keep it for the file. The one line to show, or None when nothing was done."""
    if not wanted(engine, even_if_off=even_if_off):
        return None
    ctx: Context = engine.ctx
    model = engine.target_model
    sizes = tuple(n for n in SIZES if n <= min(ctx.n_batch, ctx.n_ctx - PREFIX_TOKENS - 1))
    if len(sizes) < 2:
        return None
    prefix = model.tokenize(heldout_text(), add_special=False, parse_special=False)[:PREFIX_TOKENS]
    if len(prefix) < 8:
        return None
    t0 = time.perf_counter()
    try:
        repeats = min(repeats, _sweeps_within(ctx, prefix, engine.verify_cost, sizes))
        times = time_decodes(ctx, prefix, repeats=repeats, sizes=sizes)
    finally:
        ctx.rollback(0)  # the engine's first request starts from an empty cache, as without this
    seconds = time.perf_counter() - t0
    curve = fit_verify_cost(times.relative)
    engine.drafting.start_cost_from(curve)
    saved = verify_cache.record(
        model.path,
        curve,
        step_ms=times.step_ms,
        threads=int(engine.n_threads),
        exact=bool(engine.exact_kernels),
        source=f"measured at the first use of the file ({repeats} sweeps of batches {', '.join(map(str, sizes))})",
    )
    shown = ", ".join(f"c({n}) {curve(n):.2f}" for n in (2, 4, 8) if n in sizes)
    where = "later runs plan from it" if saved is not None else "not kept: the cache cannot be written"
    return f"verify cost of {model.path.name} measured at first use in {seconds:.1f} s ({shown}): {where}"
