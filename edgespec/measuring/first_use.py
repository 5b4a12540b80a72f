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

An engine drafting with the target's own MTP head (``--draft mtp``) also times one head
step (one (token, hidden row) pair through its ``MtpContext``) against one target step
(``decode_times.time_mtp_step``), starts its policy's γ from that ratio and keeps it beside
c(n) for the file; the planner weighs the head with it from then on (``planning.mtp_head``).
Where it was measured before, the engine starts from the kept γ without measuring.

Nothing is measured for an engine that drafts nothing or drafts a fixed k (c(n) and γ
decide nothing there), over RPC (the link's share is in every time), or when
``EDGESPEC_FIRST_USE=0`` (the tests' default; what a script sets to load without it).

Writes only the cache; prints nothing (the caller shows the line it returns).
"""

from __future__ import annotations

import os
import time
from typing import Any

from ..catalog import verify_cache
from ..llama import Context
from .decode_times import back, fit_verify_cost, hold, time_decodes, time_mtp_step
from .perplexity import heldout_text

SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16)  # the tiles of repacked kernels (4, 8, 16) and what lies between
REPEATS = 3  # timed sweeps at most, after a warm-up one
MTP_REPEATS = 8  # timed (target step, head step) pairs at most, after a warm-up pair
BUDGET_S = 8.0  # the warm-up sweep included: fewer timed sweeps where three would take longer
PREFIX_TOKENS = 64  # the KV position the batches are timed at
ENV = "EDGESPEC_FIRST_USE"


def _off(even_if_off: bool) -> bool:
    return not even_if_off and os.environ.get(ENV, "1").strip() == "0"


def _local_learning(engine: Any) -> bool:
    """It drafts under the learned policy, on local layers: what c(n) and γ decide."""
    drafting = engine.drafting
    return drafting.kind != "none" and drafting.adaptive and not getattr(engine.target_model, "rpc", None)


def wanted(engine: Any, *, even_if_off: bool = False) -> bool:
    """Whether ``engine`` should measure its target's c(n) now: it drafts under the
    learned policy, on local layers, nothing was measured for its file here, and
    ``EDGESPEC_FIRST_USE`` is not "0" (``even_if_off``: whatever it says, for a
    benchmark that measures on purpose)."""
    if _off(even_if_off) or not _local_learning(engine):
        return False
    return verify_cache.measured_entry(engine.target_model.path, exact=bool(engine.exact_kernels)) is None


def mtp_wanted(engine: Any, *, even_if_off: bool = False) -> bool:
    """Whether ``engine`` should time its MTP head's step now: it drafts with the head
    under the learned policy, on local layers, and no γ was kept for its file here."""
    if _off(even_if_off) or not _local_learning(engine) or engine.drafting.kind != "mtp":
        return False
    return verify_cache.measured_mtp_gamma(engine.target_model.path, exact=bool(engine.exact_kernels)) is None


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
    """Measure c(n) for the engine's target if ``wanted``, and its MTP head's γ if
    ``mtp_wanted``: start the engine's cost model and policy from them and keep them for
    the file. The one line to show, or None when nothing was measured."""
    want_c, want_g = wanted(engine, even_if_off=even_if_off), mtp_wanted(engine, even_if_off=even_if_off)
    if not want_g:
        _start_from_kept_gamma(engine)
    if not (want_c or want_g):
        return None
    ctx: Context = engine.ctx
    model = engine.target_model
    sizes = tuple(n for n in SIZES if n <= min(ctx.n_batch, ctx.n_ctx - PREFIX_TOKENS - 1))
    want_c = want_c and len(sizes) >= 2
    prefix = model.tokenize(heldout_text(), add_special=False, parse_special=False)[:PREFIX_TOKENS]
    if len(prefix) < 8 or not (want_c or want_g):
        return None
    t0 = time.perf_counter()
    times = gamma = None
    try:
        if want_c:
            repeats = min(repeats, _sweeps_within(ctx, prefix, engine.verify_cost, sizes))
            times = time_decodes(ctx, prefix, repeats=repeats, sizes=sizes)
        if want_g:
            gamma = _time_head(engine, prefix)
    finally:
        ctx.rollback(0)  # the engine's first request starts from an empty cache, as without this
    seconds = time.perf_counter() - t0
    shown, saved = [], None
    exact, how = bool(engine.exact_kernels), "measured at the first use of the file"
    head = (gamma, f"{how} (one head step against one target step)") if gamma is not None else None
    if times is not None:
        curve = fit_verify_cost(times.relative)
        engine.drafting.start_cost_from(curve)
        saved = verify_cache.record(
            model.path,
            curve,
            step_ms=times.step_ms,
            threads=int(engine.n_threads),
            exact=exact,
            source=f"{how} ({repeats} sweeps of batches {', '.join(map(str, sizes))})",
            mtp_gamma=head,
        )
        shown.append(", ".join(f"c({n}) {curve(n):.2f}" for n in (2, 4, 8) if n in sizes))
    elif head is not None:
        saved = verify_cache.record_mtp_gamma(model.path, head[0], exact=exact, source=head[1])
    if gamma is not None:
        engine.drafting.set(mtp_gamma=gamma)  # before any request: no policy judged it yet
        shown.append(f"MTP head step γ {gamma:.2f}")
    what = "verify cost" if times is not None else "the MTP head's step cost"
    where = "later runs plan from it" if saved is not None else "not kept: the cache cannot be written"
    return f"{what} of {model.path.name} measured at first use in {seconds:.1f} s ({'; '.join(shown)}): {where}"


def _time_head(engine: Any, prefix: list[int]) -> float:
    """γ of the engine's MTP head: one head step over one target step, as many pairs as fit
    in ``BUDGET_S`` (at most ``MTP_REPEATS``)."""
    ctx, head = engine.ctx, engine.drafting.mtp.ctx
    ctx.rollback(0)
    step_ms, head_ms = time_mtp_step(ctx, head, prefix, repeats=1)  # a warm-up, and the pace
    repeats = max(1, min(MTP_REPEATS, int(BUDGET_S / max((step_ms + head_ms) * 1e-3, 1e-9))))
    step_ms, head_ms = time_mtp_step(ctx, head, prefix, repeats=repeats)
    return head_ms / max(step_ms, 1e-9)


def _start_from_kept_gamma(engine: Any) -> None:
    """An engine drafting with its MTP head and no γ of its own starts from the one kept
    for its file here (the planner's engines are handed it already)."""
    drafting = engine.drafting
    if drafting.kind != "mtp" or drafting.options.mtp_gamma is not None or getattr(engine.target_model, "rpc", None):
        return
    kept = verify_cache.measured_mtp_gamma(engine.target_model.path, exact=bool(engine.exact_kernels))
    if kept is not None:
        drafting.set(mtp_gamma=kept)
