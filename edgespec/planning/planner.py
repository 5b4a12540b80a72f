"""The plan: which model pair, drafter and k to run on a device, and why.

``plan()`` turns a profile (or the detected machine) and command-line overrides into a
``Plan``: the model pair that fits memory, the drafter and k from the cost model in
``costmodel.adaptive``, and the reason. It knows nothing about llama.cpp;
``Plan.engine_kwargs()`` resolves catalog names to files for ``Engine``.

It sits between the profile data (``profiles``), the machine (``detect``), the model
table and memory fit (``catalog``) and the engine; it reads them and never writes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

from ..costmodel import adaptive
from .. import catalog
from . import pairing
from .explain import explain as _explain
from .explain import x as _x
from ..errors import ProfileError
from ..profiles import GB, Profile, detect_profile, load_profile


@dataclass(frozen=True)
class Plan:
    """What to run, and why: the answer to ``--profile``.

    ``target``/``draft`` are catalog names or paths; ``draft`` is None unless the
    drafter is "model". ``predicted_speedup`` is the cost model's, for the chosen k.
    """

    profile: str
    backend: str
    target: str
    draft: str | None
    drafter: str  # "model" | "ngram" | "none"
    k: int
    p_min: float
    n_ctx: int
    n_threads: int | None
    n_gpu_layers: int
    predicted_speedup: float
    reason: str
    pair: str | None = None
    k_max: int | None = None  # most tokens a round drafts (None: the engine's default)
    notes: tuple[str, ...] = ()
    options: tuple[tuple[str, int, float], ...] = ()  # (drafter, best k, predicted speedup)
    # the target's kernels (Engine's ``exact``): llama.cpp's own unless --exact asks for
    # batch-invariant ones (token-for-token equality with plain greedy decoding)
    exact: bool = False
    # the learned drafting policy (True), or exactly k per round (--k given)
    adaptive: bool = True
    # the policy's priors: c(n) and the draft model's cost per token (None: the engine's)
    verify_cost: adaptive.VerifyCost | None = None
    draft_gamma: float | None = None
    # C(n) of n sequences per decode, for --parallel auto (None: the engine's prior)
    batch_cost: adaptive.VerifyCost | None = None
    # ``reason`` in one line, for the line printed on every run (the full reason is for
    # -v and `edgespec profiles detect`); empty: ``reason`` is one line already
    headline: str = ""
    # the target's layers on these llama.cpp RPC servers (HOST:PORT), split by memory or
    # by ``tensor_split``; the drafter stays local
    rpc: tuple[str, ...] = ()
    tensor_split: tuple[float, ...] = ()
    memory: bool = True  # the memory of earlier answers: Engine's memory, memory_cap (None: its default)
    memory_cap: int | None = None

    def engine_kwargs(self, *, offline: bool | None = None) -> dict:
        """Keyword arguments for ``edgespec.engine.Engine`` (the plan itself among them,
        kept as ``engine.plan``); resolves catalog names to local files (assembling or
        downloading them if needed)."""
        if self.drafter == "model":
            if self.draft is None:  # pragma: no cover - plan() never builds this
                raise ProfileError("plan has drafter 'model' but no draft model")
            draft: Path | str | None = catalog.resolve_model(self.draft, offline=offline)
        elif self.drafter == "ngram":
            draft = "ngram"
        else:
            draft = None
        over_rpc = {"rpc": ",".join(self.rpc), "tensor_split": self.tensor_split} if self.rpc else {}
        return {
            **over_rpc,
            "plan": self,  # kept on the engine as engine.plan
            "target": catalog.resolve_model(self.target, offline=offline),
            "draft": draft,
            # without a drafter k is unused, but Engine wants k >= 1
            "k": max(1, self.k),
            "k_max": self.k_max,
            "adaptive_k": self.adaptive,
            # the learned policy weighs the draft's confidence itself; a fixed k keeps
            # the profile's fixed cut-off
            "p_min": self.p_min if self.drafter == "model" and not self.adaptive else 0.0,
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "n_gpu_layers": self.n_gpu_layers,
            "exact": self.exact,
            "verify_cost": self.verify_cost,
            "draft_gamma": self.draft_gamma if self.drafter == "model" else None,
            "batch_cost": self.batch_cost,
            # messages name a model by the name it was given, not by its file (an Ollama blob)
            "target_name": _given_name(self.target),
            "draft_name": _given_name(self.draft) if self.drafter == "model" else None,
            "memory": self.memory, **({"memory_cap": self.memory_cap} if self.memory_cap else {}),
        }

    @property
    def summary(self) -> str:
        """The choice in one line."""
        return self.headline or self.reason

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
            "k_max": self.k_max,
            "p_min": self.p_min,
            "n_ctx": self.n_ctx,
            "n_threads": self.n_threads,
            "n_gpu_layers": self.n_gpu_layers,
            "predicted_speedup": round(self.predicted_speedup, 3),
            "reason": self.reason,
            "headline": self.summary,
            "notes": list(self.notes),
            "options": [
                {"drafter": d, "k": k, "predicted_speedup": round(s, 3)} for d, k, s in self.options
            ],
        }


def _given_name(name: str | None) -> str | None:
    """A store model's name for messages (None for a path or a catalog name: the file's name says it)."""
    return None if not name or Path(name).expanduser().is_file() or catalog.find_model(name) else name


def plan(
    profile: str | Profile | None = "auto",
    *,
    target: str | None = None,
    draft: str | None = None,
    k: int | None = None,
    n_ctx: int | None = None,
    n_gpu_layers: int | None = None,
    probe: Any = None,
    offline: bool | None = None,
    exact: bool = False, rpc: Sequence[str] = (), tensor_split: Sequence[float] = (),
) -> Plan:
    """Choose the pair, drafter and k for a profile ("auto" or None: the detected
    machine), then apply command-line overrides.

    ``draft`` may be "none", "ngram", "auto" (same as None), "model" (the pair's draft),
    a catalog name or a path. ``k`` fixes the draft length of every round instead of the
    learned policy. ``exact`` asks for batch-invariant kernels, whose slowdown on a CPU
    the cost model then counts. ``probe`` replaces the machine for detection (tests).
    ``offline`` (default ``HF_HUB_OFFLINE``) skips pairs not here; ``rpc`` adds network cost.
    """
    notes: list[str] = []
    prof, available = _load(profile, probe, notes)
    prof = replace(prof, **{key: v for key, v in (("n_ctx", n_ctx), ("n_gpu_layers", n_gpu_layers)) if v is not None})
    if k is not None and k < 0:
        raise ProfileError(f"--k: found {k}; allowed: an integer ≥ 0")
    ask = _Ask.of(draft, k)
    room = _Room.of(prof, available, offline, notes)

    # 1. the target and the draft model candidate
    given = None
    if target is not None:
        given = _given_target(target, prof, ask, room, exact, notes)
        tgt, draft_model, pair_name = target, given.draft, given.pair
    else:
        tgt, draft_model, pair_name = _choose_pair(prof, ask.mode, ask.draft, room.budget, room.headroom,
                                                   room.offline, notes)
    if ask.mode in ("model", "given") and draft_model is None:
        raise ProfileError(f"--draft {ask.draft}: no draft model is known for target {tgt}; pass a path")
    # 2. the drafter and k
    costs = _costs(prof, pair_name, draft_model, tgt, ask.mode, exact, notes if rpc else None, given)
    choice, reason, headline = _choose_drafter(prof, ask, costs)
    choice, kk, s, reason, headline = _with_k(ask, choice, costs, reason, headline, notes)

    return Plan(
        profile=prof.name, backend=prof.backend, target=tgt,
        draft=draft_model if choice.drafter == "model" else None,
        drafter=choice.drafter, k=kk if choice.drafter != "none" else 0, p_min=prof.p_min,
        n_ctx=prof.n_ctx, n_threads=prof.n_threads, n_gpu_layers=prof.n_gpu_layers,
        predicted_speedup=s, reason=reason, headline=headline, pair=pair_name,
        k_max=kk if k is not None else None,
        notes=tuple(notes + list(prof.notes)), options=choice.options,
        exact=exact, adaptive=k is None,
        # the profile's c(n) and C(n) are for llama.cpp's kernels on CPUs; under exact the
        # engine's own priors serve better until its timings take over
        verify_cost=None if exact and prof.n_gpu_layers == 0 and not rpc else costs.c, draft_gamma=costs.gamma,
        batch_cost=prof.batch.cost if prof.batch and not exact else None,
        rpc=tuple(rpc), tensor_split=tuple(tensor_split),
    )


def _load(profile: str | Profile | None, probe: Any, notes: list[str]) -> tuple[Profile, int | None]:
    """The profile asked for, and the memory available now when it was detected."""
    if isinstance(profile, Profile):
        return profile, None
    if profile in (None, "auto"):
        det = detect_profile(probe)
        notes.append(det.explanation)
        return det.profile, det.machine.available_bytes
    prof = load_profile(profile)
    notes.append(f"profile {prof.name} ({prof.origin}): {prof.description}")
    return prof, None


@dataclass(frozen=True)
class _Ask:
    """What the command line asked of the drafter. ``mode``: "auto" (choose), "none",
    "ngram", "model" (the pair's draft model) or "given" (a catalog name or a path)."""

    mode: str
    draft: str  # the --draft text, "auto" when not given
    k: int | None

    @classmethod
    def of(cls, draft: str | None, k: int | None) -> "_Ask":
        draft_kw = (draft or "auto").strip()
        if adaptive.is_no_draft(draft_kw):
            draft_kw = "none"
        low = draft_kw.lower()
        return cls(low if low in ("none", "ngram", "model", "auto") else "given", draft_kw, k)

    @property
    def wants_model(self) -> bool:
        return self.mode in ("auto", "model", "given")


@dataclass(frozen=True)
class _Room:
    """The memory the models may use, in bytes, and whether to stay offline."""

    budget: int
    headroom: int
    offline: bool

    @classmethod
    def of(cls, prof: Profile, available: int | None, offline: bool | None, notes: list[str]) -> "_Room":
        budget = int(prof.models_gb.value * GB)
        if available is not None and available < budget:
            notes.append(f"memory limited to the {available / GB:.1f} GB available now")
            budget = available
        return cls(budget, int(prof.headroom_gb * GB), catalog.is_offline(offline))


def _given_target(target: str, prof: Profile, ask: _Ask, room: _Room, exact: bool,
                  notes: list[str]) -> pairing.ForTarget:
    """The target named on the command line, its draft model candidate (every model on
    this machine that can draft for it is weighed: ``planning.pairing``) and its pair."""
    slow = prof.exact_slowdown.value if exact and prof.n_gpu_layers == 0 else 1.0
    given = pairing.for_target(target, prof, ask.mode, ask.draft, budget=room.budget, headroom=room.headroom,
                               slowdown=slow, notes=notes)
    with_draft = given.draft if ask.wants_model else None
    fit = _fit(target, with_draft, prof, room.budget, room.headroom)
    if fit is not None:
        what = f"{target}" + (f" + {with_draft}" if with_draft else "")
        notes.append(f"{what}: {fit.describe()}" + ("" if fit.fits else " — may not fit"))
    return given


@dataclass(frozen=True)
class _Costs:
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


def _costs(prof: Profile, pair_name: str | None, draft_model: str | None, tgt: str, mode: str,
           exact: bool = False, rpc_notes: list[str] | None = None, given: pairing.ForTarget | None = None) -> _Costs:
    """The cost model's inputs; with ``rpc_notes`` (over RPC) the network's share added.
    ``given``: for a target named on the command line, the drafter found on this machine
    (with its own α and γ) or the catalog drafter to get."""
    local = given.chosen if given is not None else None
    pc = prof.pair_cost(pair_name)
    c_fig = pc.verify or prof.verify
    options: list[adaptive.DrafterOption] = []
    gamma_status = ""
    gamma = None
    label = f"{local.name} ({local.source})" if local is not None else ""
    if draft_model is not None and (mode in ("model", "given") or (mode == "auto" and "model" in prof.drafters)):
        alpha = (pc.alpha or prof.alpha_model).value
        if local is not None:
            alpha, gamma, gamma_status = local.alpha, local.gamma, local.gamma_status
        elif pc.gamma is not None:
            gamma, gamma_status = pc.gamma.value, pc.gamma.status
        else:
            gamma, gamma_status = _gamma_estimate(draft_model, tgt, prof), "estimated from sizes"
        options.append(adaptive.DrafterOption("model", alpha, gamma))
    if mode == "ngram" or (mode == "auto" and "ngram" in prof.drafters):
        # the learned policy drafts only where a draft pays: prompt lookup cannot lose
        options.append(adaptive.DrafterOption("ngram", prof.alpha_ngram.value, prof.gamma_ngram.value,
                                              prof.ngram_hit.value, floor=1.0))
    # with --exact the target runs batch-invariant kernels, slower per token on a CPU
    # than the llama.cpp kernels plain decoding would otherwise run on
    slow = prof.exact_slowdown.value if exact and prof.n_gpu_layers == 0 else 1.0
    costs = _Costs(options, c_fig.cost, c_fig.status, gamma_status, slow, gamma, label,
                   given.ranking.suggestion if given is not None else "")
    return costs if rpc_notes is None else _over_network(costs, prof, pair_name, tgt, rpc_notes)


def _choose_drafter(prof: Profile, ask: _Ask, costs: _Costs) -> tuple[adaptive.Choice, str, str]:
    """The drafter and k: the cost model's choice, or the one the command line named.
    Returns the choice, the full reason and its one-line headline."""
    c, slow = costs.c, costs.slowdown
    if ask.mode == "none":
        reason = "plain decoding: --draft none"
        return adaptive.Choice("none", 0, 1.0), reason, reason
    if ask.mode == "auto":
        choice = adaptive.choose(costs.options, c, k_min=prof.k_min, k_max=prof.k_max, min_gain=prof.min_gain,
                                 slowdown=slow)
        head, parts = _explain(choice, prof, costs.options, c, costs.c_status, costs.gamma_status, slow,
                               costs.label)
        if costs.suggestion and choice.drafter != "model":
            head += f"; nothing here can draft for this target: {costs.suggestion}"
        return choice, head + ("; " + "; ".join(parts) if parts else ""), head
    # the drafter was named on the command line: use it, say what it is predicted to do
    opt = costs.options[0]
    kk, s = adaptive.best_k(opt.alpha, c, opt.gamma, k_min=prof.k_min, k_max=prof.k_max, hit=opt.hit,
                            slowdown=slow)
    # without --k the drafting policy picks each round's length (up to the engine's bound),
    # and a drafter whose policy cannot lose (prompt lookup) is predicted at least its floor
    s = max(s, opt.floor / slow)
    what = f"{opt.drafter} drafter" + (f" {costs.label}" if opt.drafter == "model" and costs.label else "")
    reason = f"{what} as asked (--draft {ask.draft}); predicted {_x(s)}"
    if s < 1.0:
        reason += ", slower than plain decoding on this device"
    return adaptive.Choice(opt.drafter, kk, s, ((opt.drafter, kk, s),)), reason, reason


def _with_k(ask: _Ask, choice: adaptive.Choice, costs: _Costs, reason: str, headline: str,
            notes: list[str]) -> tuple[adaptive.Choice, int, float, str, str]:
    """Apply ``--k``: k=0 means plain decoding; another k replaces the chosen one."""
    kk, s, k = choice.k, choice.speedup, ask.k
    if k is not None:
        if choice.drafter == "none":
            if k > 0:
                notes.append(f"k={k} ignored: no drafter (pass --draft ngram or a model to force one)")
        else:
            opt = next(o for o in costs.options if o.drafter == choice.drafter)
            kk = k
            s = adaptive.speedup(opt.alpha, k, costs.c, opt.gamma, opt.hit, costs.slowdown)
            reason += f"; k={k} in every round from the command line (predicted {_x(s)})"
            headline = (f"{choice.drafter} drafter, k={k} in every round from the command line: predicted {_x(s)}"
                        if ask.mode == "auto" else reason)
    if kk == 0 and choice.drafter != "none":
        choice = adaptive.Choice("none", 0, 1.0, choice.options)
        s = 1.0
        reason = headline = "plain decoding: k=0 from the command line"
    return choice, kk, s, reason, headline


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


RPC_ROUND_TRIP_ESTIMATE_MS = 2.0  # a wired LAN: a few round trips and the logits per decode


def _over_network(costs: _Costs, prof: Profile, pair_name: str | None, tgt: str, notes: list[str]) -> _Costs:
    """The costs when every target decode also crosses the network (``costmodel.adaptive.over_network``).
    The exact kernels cost nothing extra there: RPC servers never repack weights."""
    fig = prof.rpc_round_trip_ms
    r = fig.value if fig else RPC_ROUND_TRIP_ESTIMATE_MS
    t = local_step_ms(prof, pair_name, tgt)
    c, gamma = adaptive.over_network(costs.c, costs.gamma, step_ms=t, round_trip_ms=r)
    options = [replace(o, gamma=o.gamma * t / (t + r)) for o in costs.options]
    status = f"{fig.status} ({fig.source})" if fig else "estimated for a wired LAN"
    notes.append(f"over RPC: {r:.2f} ms of network per target decode ({status}) on a {t:.1f} ms step")
    return replace(costs, options=options, c=c, c_status=f"{costs.c_status}, over RPC", slowdown=1.0,
                   gamma=gamma)


def _gamma_estimate(draft: str, target: str, prof: Profile) -> float:
    try:
        d, t = catalog.model_info(draft), catalog.model_info(target)
    except Exception:  # noqa: BLE001 - an unreadable file: assume a 5× smaller draft
        return 0.25
    return adaptive.draft_cost_ratio(
        d.size_bytes, t.size_bytes, overhead_ms=prof.overhead_ms.value, gbs=prof.decode_gbs.value
    )


def _fit(target: str, draft: str | None, prof: Profile, budget: int, headroom: int) -> catalog.Fit | None:
    try:
        return catalog.check_fit(target, draft, n_ctx=prof.n_ctx, available_bytes=budget, headroom_bytes=headroom)
    except Exception:  # noqa: BLE001 - a file that cannot be read yet: no verdict here
        return None


def _choose_pair(
    prof: Profile, mode: str, draft_kw: str, budget: int, headroom: int, offline: bool, notes: list[str]
) -> tuple[str, str | None, str | None]:
    """The first preferred pair that fits in ``budget`` with its draft (or, failing
    that, the first whose target fits alone, for n-gram or plain decoding). Offline,
    pairs that are not available locally are skipped."""
    want_draft = mode in ("auto", "model", "given")
    fallback: tuple[str, str | None, str | None] | None = None
    for pname in prof.pairs:
        p = catalog.get_pair(pname)
        draft_model = draft_kw if mode == "given" else p.draft
        if offline and not (
            catalog.is_available(p.target) and (not want_draft or catalog.is_available(draft_model))
        ):
            notes.append(f"skipped {pname}: not available offline")
            continue
        fit = catalog.check_fit(p.target, draft_model if want_draft else None, n_ctx=prof.n_ctx,
                                available_bytes=budget, headroom_bytes=headroom)
        if fit.fits:
            notes.append(f"pair {pname}: {fit.describe()}")
            return p.target, draft_model, (pname if mode != "given" else None)
        alone = catalog.check_fit(p.target, None, n_ctx=prof.n_ctx, available_bytes=budget,
                                  headroom_bytes=headroom)
        if alone.fits and fallback is None:
            fallback = (p.target, None, pname)
            notes.append(f"{pname}: the target fits only without its draft ({fit.describe()})")
        else:
            notes.append(f"skipped {pname}: {fit.describe()}")
    if fallback is not None:
        return fallback
    last = catalog.get_pair(prof.pairs[-1])
    notes.append(f"no preferred pair fits in {budget / GB:.1f} GB; using {last.name} anyway")
    return last.target, (draft_kw if mode == "given" else last.draft), last.name
