"""The plan: which model pair, drafter and k to run on a device, and why.

``plan()`` turns a profile (or the detected machine) and the command line's options
into a frozen ``Plan`` (``planning.record``): the model pair that fits memory and the
drafter and k (``planning.choice``) from the cost model's inputs (``planning.costs``),
the engine's settings and drafting options, and the explanation. It knows nothing about
llama.cpp; ``Plan.engine_kwargs()`` resolves catalog names to files for ``Engine``.

It sits between the profile data (``profiles``), the machine (``detect``), the model
table and memory fit (``catalog``) and the engine; it reads them and never writes.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from .. import catalog
from ..catalog import optimized as optimized_copies
from ..costmodel.drafting import MEMORY_CAP, DraftingOptions
from ..errors import ProfileError
from ..profiles import Detection, Profile, detect_profile, load_profile
from .choice import (
    Ask,
    Drafter,
    Pair,
    Room,
    choose_drafter,
    choose_pair,
    given_target,
    no_rollback,
    snapshot_room,
    with_k,
)
from .costs import Costs, costs_for, local_step_ms
from .record import Explanation, Plan

__all__ = ["Plan", "plan", "local_step_ms"]


def plan(
    profile: str | Profile | Detection | None = "auto",
    *,
    target: str | None = None,
    draft: str | None = None,
    k: int | None = None,
    n_ctx: int | None = None,
    n_gpu_layers: int | None = None,
    n_threads: int | None = None,
    probe: Any = None,
    offline: bool | None = None,
    exact: bool = False,
    rpc: Sequence[str] = (),
    tensor_split: Sequence[float] = (),
    memory: bool = True,
    memory_cap: int | None = None,
    optimized: bool = True,
) -> Plan:
    """Choose the pair, drafter and k for a profile ("auto" or None: the detected
    machine; a ``Detection`` already made: its profile, its explanation the first note),
    with the command line's options on top.

    ``draft`` in the form ``costmodel.adaptive.normalize_draft`` gives: None (choose),
    "none", "ngram", "model" (the pair's draft), "mtp" (the target's own MTP head: a file
    with nextn layers, else ``ProfileError``), "assistant" (a Gemma 4 target's assistant
    found on this machine, else ``ProfileError``), a catalog name or a path. ``k`` fixes
    the draft length of every round instead of the learned policy (0: plain decoding).
    ``exact`` asks for batch-invariant kernels, whose slowdown on a CPU the cost model
    then counts. ``probe`` replaces the machine for detection (tests). ``offline``
    (default ``HF_HUB_OFFLINE``) skips pairs not here; ``rpc`` adds network cost.
    ``n_threads`` (None: the profile's), ``memory`` and ``memory_cap`` (None: the
    default) go to the engine as they are. ``optimized``: run the copy of the target that
    ``edgespec models optimize`` wrote, where there is one (``catalog.optimized``).
    """
    if k is not None and k < 0:
        raise ProfileError(f"--k: found {k}; allowed: an integer ≥ 0")
    prof, available, load_notes = _load(profile, probe)
    prof = _with_settings(prof, n_ctx=n_ctx, n_gpu_layers=n_gpu_layers, n_threads=n_threads)
    ask = Ask.of(draft, k)
    if ask.mode == "assistant" and target is None:
        raise ProfileError("--draft assistant needs --target: the Gemma 4 file whose assistant lies beside it")
    room = Room.of(prof, available, offline)
    pair = given_target(target, prof, ask, room, exact) if target is not None else choose_pair(prof, ask, room)
    if optimized:
        pair = _optimized(pair)
    if ask.mode in ("model", "given") and pair.draft is None:
        raise ProfileError(f"--draft {ask.draft}: no draft model is known for target {pair.target}; pass a path")
    costs = costs_for(prof, pair.name, pair.draft, pair.target, ask.mode, exact, bool(rpc), pair.given)
    _check_mtp(ask, pair.target, costs)
    chosen = with_k(ask, choose_drafter(prof, ask, costs), costs)
    chosen = no_rollback(chosen, pair.target)
    cap, cap_note = snapshot_room(chosen, pair, prof, room, costs.k_max)
    if cap is not None:
        costs = replace(costs, k_max=cap, notes=costs.notes + (cap_note,))
    rest = room.notes + pair.notes + costs.notes + chosen.notes + tuple(prof.notes)
    notes = load_notes + tuple(n for n in rest if n not in load_notes)
    drafting = _drafting(
        prof, chosen.choice.drafter, k, costs, exact=exact, rpc=bool(rpc), memory=memory, memory_cap=memory_cap
    )
    return _record(prof, pair, chosen, notes, drafting, exact=exact, rpc=rpc, tensor_split=tensor_split)


def _check_mtp(ask: Ask, target: str, costs: Costs) -> None:
    """--draft mtp on a target with no MTP head here: a clear error, before any loading."""
    if ask.mode == "mtp" and not costs.options:
        raise ProfileError(
            f"--draft mtp: {target} has no multi-token-prediction (nextn) layers here, so it "
            "cannot draft for itself; use a GGUF that keeps them (often published as -MTP-GGUF)"
        )


def _with_settings(prof: Profile, **settings: int | None) -> Profile:
    """The profile with the command line's run settings (those given) on top."""
    return replace(prof, **{key: v for key, v in settings.items() if v is not None})


def _record(
    prof: Profile,
    pair: Pair,
    chosen: Drafter,
    notes: tuple[str, ...],
    drafting: DraftingOptions,
    *,
    exact: bool,
    rpc: Sequence[str],
    tensor_split: Sequence[float],
) -> Plan:
    """The frozen Plan from what each step chose."""
    drafter = chosen.choice.drafter
    return Plan(
        profile=prof.name,
        backend=prof.backend,
        target=pair.target,
        draft=pair.draft if drafter == "model" else None,
        drafter=drafter,
        k=chosen.k if drafter != "none" else 0,
        p_min=prof.p_min,
        n_ctx=prof.n_ctx,
        n_threads=prof.n_threads,
        n_gpu_layers=prof.n_gpu_layers,
        predicted_speedup=chosen.speedup,
        explanation=Explanation(chosen.reason, chosen.headline, notes),
        pair=pair.name,
        options=chosen.choice.options,
        exact=exact,
        rpc=tuple(rpc),
        tensor_split=tuple(tensor_split),
        drafting=drafting,
    )


def _drafting(
    prof: Profile,
    drafter: str,
    k: int | None,
    costs: Costs,
    *,
    exact: bool,
    rpc: bool,
    memory: bool,
    memory_cap: int | None,
) -> DraftingOptions:
    """How the engine drafts: exactly ``k`` per round when --k gives one (the learned
    policy otherwise), from the profile's priors."""
    fixed = k if k and drafter != "none" else None
    return DraftingOptions(
        k=fixed,
        # what the evidence for the target's weight type says is the longest draft worth verifying
        k_max=costs.k_max if fixed is None else None,
        # the learned policy weighs the draft's confidence itself; a fixed k keeps the
        # profile's fixed cut-off
        p_min=prof.p_min if drafter == "model" and fixed is not None else 0.0,
        # the profile's c(n) and C(n) are for llama.cpp's kernels on CPUs; under exact the
        # engine's own priors serve better until its timings take over
        verify_cost=None if exact and prof.n_gpu_layers == 0 and not rpc else costs.c,
        # γ of the pair's draft model, for whenever a draft model drafts (bench, chat's /draft)
        draft_gamma=costs.gamma,
        # γ of the target's own MTP head (measured for the file here, else the profile's)
        mtp_gamma=costs.mtp.option.gamma if costs.mtp is not None else None,
        batch_cost=prof.batch.cost if prof.batch and not exact else None,
        memory=memory,
        memory_cap=memory_cap or MEMORY_CAP,
    )


def _optimized(pair: Pair) -> Pair:
    """The pair with its target replaced by the copy ``models optimize`` wrote, if there is one."""
    path = catalog.local_path(pair.target)
    copy = optimized_copies.optimized_copy_for(path) if path is not None else None
    if copy is None:
        return pair
    note = f"target: {copy.name}, the copy `edgespec models optimize` wrote of {path.name}"
    note += " (--no-optimized: the original)"
    return replace(pair, target=str(copy), notes=pair.notes + (note,))


def _load(profile: str | Profile | Detection | None, probe: Any) -> tuple[Profile, int | None, tuple[str, ...]]:
    """The profile asked for, the memory available now when it was detected, and a note
    on where it came from."""
    if isinstance(profile, Profile):
        return profile, None, ()
    if isinstance(profile, Detection):  # shown beside its plan (profiles show auto, profiles detect)
        return profile.profile, None, (profile.explanation,)
    if profile in (None, "auto"):
        det = detect_profile(probe)
        return det.profile, det.machine.available_bytes, (det.explanation,)
    prof = load_profile(profile)
    return prof, None, (f"profile {prof.name} ({prof.origin}): {prof.description}",)
