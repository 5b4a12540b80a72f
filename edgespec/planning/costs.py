"""The cost model's inputs for one pair on one profile: ``Costs`` and ``costs_for``.

Which drafters to weigh and with what acceptance α and draft cost γ (a local drafter's
own figures from ``planning.pairing``, the pair's measured ones, or γ estimated from the
sizes with ``costmodel.adaptive.draft_cost_ratio``; the target's own MTP head's from
``planning.mtp_head``), the verify cost c(n) and where it came from, and the exact
kernels' slowdown that speculation pays on a CPU. Over RPC the network's share is added
(``costmodel.adaptive.over_network``), with a note saying so.

Reads the profile and the catalog's sizes; chooses nothing (``planning.choice`` does).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .. import catalog
from ..catalog import gguf, verify_cache
from ..costmodel import adaptive, priors
from ..profiles import Profile
from . import mtp_head, pairing

RPC_ROUND_TRIP_ESTIMATE_MS = 2.0  # a wired LAN: a few round trips and the logits per decode


@dataclass(frozen=True)
class Costs:
    """The cost model's inputs for one pair: the drafters to weigh, c(n) and its status,
    how γ was found, and the exact kernels' slowdown speculation pays."""

    options: list[adaptive.DrafterOption]
    c: adaptive.VerifyCost
    c_status: str
    gamma_status: str
    slowdown: float
    gamma: float | None = None
    label: str = ""  # the draft model's name and where it was found, for the plan line
    suggestion: str = ""  # nothing on this machine drafts for the target: the catalog drafter to get
    notes: tuple[str, ...] = ()  # over RPC: the network's share
    k_max: int | None = None  # the longest draft the target's weights make worth verifying (None: the profile's)
    mix: str | None = None  # the target's weight-type mix, read from its header (None: not on this machine)
    mtp: mtp_head.Head | None = None  # the target's own MTP head, where its file keeps one


@dataclass(frozen=True)
class Verify:
    """The target's c(n) and why it is that one, with what the evidence for its weight
    type says drafting is worth: ``k_max`` and ``drafters`` (None: the profile's)."""

    cost: adaptive.VerifyCost
    status: str
    mix: str | None = None
    k_max: int | None = None
    drafters: tuple[str, ...] | None = None
    note: str = ""  # where the curve came from, for the plan's explanation


def target_verify(prof: Profile, tgt: str, *, exact: bool = False) -> Verify:
    """c(n) for the target file on this profile's device (``costmodel.priors``' order): a
    curve measured for this very file here (``tune``, ``models optimize``, a first run),
    else a curve ``tune --save`` measured on this machine into the profile, else the
    profile's curve for its weight-type mix, else the backend's table row for the
    mix, else the profile's curve for any weights. A target not on this machine yet has
    no header to read: the profile's curve for any weights then."""
    path = catalog.local_path(tgt)
    mix = measured = None
    if path is not None:
        try:
            mix = gguf.weight_mix(path)
        except Exception:  # noqa: BLE001 - an unreadable header: the engine's load says why
            mix = None
        measured = verify_cache.measured_curve(path, exact=exact)
    # the plan weighs c(n) on llama.cpp's kernels times the exact kernels' slowdown
    # (``exact_slowdown``); the engine under --exact starts from its own exact prior
    backend = prof.backend if prof.n_gpu_layers != 0 and prof.backend in priors.VERIFY_PRIORS else "cpu"
    fig = prof.verify_for(mix)
    per_mix = fig is not prof.verify
    if measured is None and not per_mix and prof.verify.status == "measured":
        # ``tune --save`` measured this machine: that beats a table row from another one
        note = f"c(n): measured on this machine ({prof.verify.source})"
        return Verify(prof.verify.cost, "measured", mix, note=note)
    choice = priors.choose_verify_prior(backend, mix, prof.verify_curves(), measured=measured)
    if choice.origin == "measured":
        status = "measured for this file"
    elif choice.origin.startswith("profile:"):
        status = f"{fig.status} for {mix}"
    elif choice.origin == "profile":
        status = prof.verify.status
    else:  # the backend's table
        table = priors.VERIFY_PRIORS[backend]
        row = table.get(priors.mix_key(mix) or "default", table["default"])
        status = row.status if choice.origin == f"table:{backend}/default" else f"{row.status} for {mix}"
    note = f"c(n) for {mix or 'the target'}: {status} ({choice.source})"
    return Verify(choice.cost, status, mix, fig.k_max if per_mix else None, fig.drafters if per_mix else None, note)


def exact_slowdown(prof: Profile, exact: bool) -> float:
    """With --exact the target runs batch-invariant kernels, slower per token on a CPU
    than the llama.cpp kernels plain decoding would otherwise run on (1 on a GPU)."""
    return prof.exact_slowdown.value if exact and prof.n_gpu_layers == 0 else 1.0


def costs_for(
    prof: Profile,
    pair_name: str | None,
    draft_model: str | None,
    tgt: str,
    mode: str,
    exact: bool = False,
    rpc: bool = False,
    given: pairing.ForTarget | None = None,
) -> Costs:
    """The cost model's inputs; with ``rpc`` (the target over the network) the network's
    share added. ``mode`` as the planner's ``Ask``. ``given``: for a target named on the
    command line, the drafter found on this machine (with its own α and γ) or the
    catalog drafter to get."""
    local = given.chosen if given is not None else None
    pc = prof.pair_cost(pair_name)
    v = Verify(pc.verify.cost, pc.verify.status) if pc.verify else target_verify(prof, tgt, exact=exact)
    drafters = prof.drafters if v.drafters is None else v.drafters
    options: list[adaptive.DrafterOption] = []
    gamma_status = ""
    gamma = None
    label = f"{local.name} ({local.source})" if local is not None else ""
    named = mode in ("model", "given", "assistant")  # (a Gemma 4 assistant: a draft model to the plan)
    if draft_model is not None and (named or (mode == "auto" and "model" in drafters)):
        alpha = (pc.alpha or prof.alpha_model).value
        if local is not None:
            alpha, gamma, gamma_status = local.alpha, local.gamma, local.gamma_status
        elif pc.gamma is not None:
            gamma, gamma_status = pc.gamma.value, pc.gamma.status
        else:
            gamma, gamma_status = _gamma_estimate(draft_model, tgt, prof), "estimated from sizes"
        options.append(adaptive.DrafterOption("model", alpha, gamma))
    head = mtp_head.head_for(tgt, prof, exact=exact) if mode in ("mtp", "auto") else None
    if head is not None:
        options.append(head.option)
    if mode == "ngram" or (mode == "auto" and "ngram" in drafters):
        # the learned policy drafts only where a draft pays: prompt lookup cannot lose
        options.append(
            adaptive.DrafterOption(
                "ngram", prof.alpha_ngram.value, prof.gamma_ngram.value, prof.ngram_hit.value, floor=1.0
            )
        )
    costs = Costs(
        options,
        v.cost,
        v.status,
        gamma_status,
        exact_slowdown(prof, exact),
        gamma,
        label,
        given.ranking.suggestion if given is not None else "",
        (v.note,) if v.note else (),
        v.k_max,
        v.mix,
        head,
    )
    return _over_network(costs, prof, pair_name, tgt) if rpc else costs


def local_step_ms(prof: Profile, pair_name: str | None, tgt: str) -> float:
    """The target's compute step in ms: the pair's measured figure, or the estimate from
    its size and the profile's step-time model."""
    step = prof.pair_cost(pair_name).target_step_ms
    if step is not None:
        return step.value
    try:
        size = catalog.model_info(tgt).size_bytes
    except Exception:  # noqa: BLE001 - an unreadable file: a 1 GB target
        size = 1_000_000_000
    return adaptive.step_ms(size, overhead_ms=prof.overhead_ms.value, gbs=prof.decode_gbs.value)


def _over_network(costs: Costs, prof: Profile, pair_name: str | None, tgt: str) -> Costs:
    """The costs when every target decode also crosses the network (``costmodel.adaptive.over_network``).
    The exact kernels cost nothing extra there: RPC servers never repack weights."""
    fig = prof.rpc_round_trip_ms
    r = fig.value if fig else RPC_ROUND_TRIP_ESTIMATE_MS
    t = local_step_ms(prof, pair_name, tgt)
    c, gamma = adaptive.over_network(costs.c, costs.gamma, step_ms=t, round_trip_ms=r)
    options = [replace(o, gamma=o.gamma * t / (t + r)) for o in costs.options]
    head = costs.mtp
    if head is not None:
        head = replace(head, option=next(o for o in options if o.drafter == "mtp"))
    status = f"{fig.status} ({fig.source})" if fig else "estimated for a wired LAN"
    note = f"over RPC: {r:.2f} ms of network per target decode ({status}) on a {t:.1f} ms step"
    return replace(
        costs,
        options=options,
        c=c,
        c_status=f"{costs.c_status}, over RPC",
        slowdown=1.0,
        gamma=gamma,
        notes=costs.notes + (note,),
        mtp=head,
    )


def _gamma_estimate(draft: str, target: str, prof: Profile) -> float:
    try:
        d, t = catalog.model_info(draft), catalog.model_info(target)
    except Exception:  # noqa: BLE001 - an unreadable file: assume a 5× smaller draft
        return 0.25
    return adaptive.draft_cost_ratio(
        d.size_bytes, t.size_bytes, overhead_ms=prof.overhead_ms.value, gbs=prof.decode_gbs.value
    )
