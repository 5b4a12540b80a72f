"""The choices a plan makes: the model pair that fits, then the drafter and k.

``Ask`` is what the command line asked of the drafter (``--draft``, already normalised by
``cli.plan_options``, and ``--k``); ``Room`` the memory the models may use. The pair:
``choose_pair`` takes the profile's first preferred pair that fits (offline, only pairs
here), ``given_target`` a target named on the command line with its best draft model
candidate (``planning.pairing``). The drafter: ``choose_drafter`` (the cost model's
choice, ``costmodel.adaptive.choose``, or the drafter named), then ``with_k`` applies
``--k``. Each returns what it chose with the notes it gathered; nothing is mutated.

Reads the profile, the catalog and the cost inputs (``planning.costs``); it knows
nothing about llama.cpp or the engine.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import catalog
from ..catalog import archs
from ..catalog.fit import MAX_RS_SEQ, recurrent_state_bytes
from ..costmodel import adaptive
from ..profiles import GB, Profile
from . import pairing
from .costs import Costs, exact_slowdown
from .explain import explain as _explain
from .explain import x as _x

DRAFT_MODES = ("none", "ngram", "model", "mtp", "assistant", "auto")


@dataclass(frozen=True)
class Ask:
    """What the command line asked of the drafter. ``mode``: "auto" (choose), "none",
    "ngram", "model" (the pair's draft model), "mtp" (the target's own MTP head),
    "assistant" (a Gemma 4 target's assistant found on this machine) or "given" (a
    catalog name or a path);
    ``draft`` the --draft text ("auto" when not given)."""

    mode: str
    draft: str
    k: int | None

    @classmethod
    def of(cls, draft: str | None, k: int | None) -> Ask:
        """``draft`` as ``costmodel.adaptive.normalize_draft`` gives it (None: auto)."""
        d = draft or "auto"
        return cls(d if d in DRAFT_MODES else "given", d, k)

    @property
    def wants_model(self) -> bool:
        return self.mode in ("auto", "model", "given", "assistant")


@dataclass(frozen=True)
class Room:
    """The memory the models may use, in bytes, and whether to stay offline."""

    budget: int
    headroom: int
    offline: bool
    notes: tuple[str, ...] = ()

    @classmethod
    def of(cls, prof: Profile, available: int | None, offline: bool | None) -> Room:
        budget = int(prof.models_gb.value * GB)
        notes: tuple[str, ...] = ()
        if available is not None and available < budget:
            notes = (f"memory limited to the {available / GB:.1f} GB available now",)
            budget = available
        return cls(budget, int(prof.headroom_gb * GB), catalog.is_offline(offline), notes)


@dataclass(frozen=True)
class Pair:
    """The chosen target, its draft model candidate (None: none fits or is known) and
    the catalog pair's name, with the notes gathered choosing them."""

    target: str
    draft: str | None
    name: str | None
    notes: tuple[str, ...] = ()
    given: pairing.ForTarget | None = None  # for a target named on the command line


def given_target(target: str, prof: Profile, ask: Ask, room: Room, exact: bool) -> Pair:
    """The target named on the command line, its draft model candidate (every model on
    this machine that can draft for it is weighed: ``planning.pairing``) and its pair."""
    given = pairing.for_target(
        target,
        prof,
        ask.mode,
        ask.draft,
        budget=room.budget,
        headroom=room.headroom,
        slowdown=exact_slowdown(prof, exact),
    )
    notes = given.notes
    with_draft = given.draft if ask.wants_model else None
    fit = _fit(target, with_draft, prof, room.budget, room.headroom)
    if fit is not None:
        what = f"{target}" + (f" + {with_draft}" if with_draft else "")
        notes += (f"{what}: {fit.describe()}" + ("" if fit.fits else " — may not fit"),)
    return Pair(target, given.draft, given.pair, notes, given)


def choose_pair(prof: Profile, ask: Ask, room: Room) -> Pair:
    """The first preferred pair that fits in the room with its draft (or, failing that,
    the first whose target fits alone, for n-gram or plain decoding). Offline, pairs
    that are not available locally are skipped."""
    mode, draft_kw, budget, headroom = ask.mode, ask.draft, room.budget, room.headroom
    want_draft = ask.wants_model
    notes: list[str] = []
    fallback: tuple[str, str | None, str | None] | None = None
    for pname in prof.pairs:
        p = catalog.get_pair(pname)
        draft_model = draft_kw if mode == "given" else p.draft
        if room.offline and not (
            catalog.is_available(p.target) and (not want_draft or catalog.is_available(draft_model))
        ):
            notes.append(f"skipped {pname}: not available offline")
            continue
        fit = catalog.check_fit(
            p.target,
            draft_model if want_draft else None,
            n_ctx=prof.n_ctx,
            available_bytes=budget,
            headroom_bytes=headroom,
        )
        if fit.fits:
            notes.append(f"pair {pname}: {fit.describe()}")
            return Pair(p.target, draft_model, pname if mode != "given" else None, tuple(notes))
        alone = catalog.check_fit(p.target, None, n_ctx=prof.n_ctx, available_bytes=budget, headroom_bytes=headroom)
        if alone.fits and fallback is None:
            fallback = (p.target, None, pname)
            notes.append(f"{pname}: the target fits only without its draft ({fit.describe()})")
        else:
            notes.append(f"skipped {pname}: {fit.describe()}")
    if fallback is not None:
        return Pair(*fallback, tuple(notes))
    last = catalog.get_pair(prof.pairs[-1])
    notes.append(f"no preferred pair fits in {budget / GB:.1f} GB; using {last.name} anyway")
    return Pair(last.target, draft_kw if mode == "given" else last.draft, last.name, tuple(notes))


def _fit(target: str, draft: str | None, prof: Profile, budget: int, headroom: int) -> catalog.Fit | None:
    try:
        return catalog.check_fit(target, draft, n_ctx=prof.n_ctx, available_bytes=budget, headroom_bytes=headroom)
    except Exception:  # noqa: BLE001 - a file that cannot be read yet: no verdict here
        return None


@dataclass(frozen=True)
class Drafter:
    """The drafter chosen and its k, the predicted speedup, and why (``reason`` in full,
    ``headline`` in one line, ``notes`` such as a --k ignored)."""

    choice: adaptive.Choice
    k: int
    speedup: float
    reason: str
    headline: str
    notes: tuple[str, ...] = ()


def choose_drafter(prof: Profile, ask: Ask, costs: Costs) -> Drafter:
    """The drafter and k: the cost model's choice, or the one the command line named."""
    c, slow = costs.c, costs.slowdown
    if ask.mode == "none":
        reason = "plain decoding: --draft none"
        return Drafter(adaptive.Choice("none", 0, 1.0), 0, 1.0, reason, reason)
    if ask.mode == "auto":
        choice = adaptive.choose(
            costs.options, c, k_min=prof.k_min, k_max=costs.k_max or prof.k_max, min_gain=prof.min_gain, slowdown=slow
        )
        head, parts = _explain(
            choice, prof, costs.options, c, costs.c_status, costs.gamma_status, slow, costs.label, costs.mtp
        )
        if costs.suggestion and choice.drafter != "model":
            head += f"; nothing here can draft for this target: {costs.suggestion}"
        return Drafter(choice, choice.k, choice.speedup, head + ("; " + "; ".join(parts) if parts else ""), head)
    # the drafter was named on the command line: use it, say what it is predicted to do
    opt = costs.options[0]
    kk, s = adaptive.best_k(
        opt.alpha,
        c,
        opt.gamma,
        k_min=prof.k_min,
        k_max=opt.bound(costs.k_max or prof.k_max),
        hit=opt.hit,
        slowdown=slow,
    )
    # without --k the drafting policy picks each round's length (up to the engine's bound),
    # and a drafter whose policy cannot lose (prompt lookup) is predicted at least its floor
    s = max(s, opt.floor / slow)
    what = f"{opt.drafter} drafter" + (f" {costs.label}" if opt.drafter == "model" and costs.label else "")
    reason = f"{what} as asked (--draft {ask.draft}); predicted {_x(s)}"
    if s < 1.0:
        reason += ", slower than plain decoding on this device"
    if opt.drafter == "mtp" and costs.mtp is not None:
        reason += f" ({costs.mtp.words(kk, s)}" + (f"; {costs.mtp.note})" if costs.mtp.note else ")")
    return Drafter(adaptive.Choice(opt.drafter, kk, s, ((opt.drafter, kk, s),)), kk, s, reason, reason)


def with_k(ask: Ask, chosen: Drafter, costs: Costs) -> Drafter:
    """Apply ``--k``: k=0 means plain decoding; another k replaces the chosen one."""
    choice, k = chosen.choice, ask.k
    kk, s, reason, headline, notes = chosen.k, chosen.speedup, chosen.reason, chosen.headline, chosen.notes
    if k is not None:
        if choice.drafter == "none":
            if k > 0:
                notes += (f"k={k} ignored: no drafter (pass --draft ngram or a model to force one)",)
        else:
            opt = next(o for o in costs.options if o.drafter == choice.drafter)
            kk = k
            s = adaptive.speedup(opt.alpha, k, costs.c, opt.gamma, opt.hit, costs.slowdown)
            reason += f"; k={k} in every round from the command line (predicted {_x(s)})"
            headline = (
                f"{choice.drafter} drafter, k={k} in every round from the command line: predicted {_x(s)}"
                if ask.mode == "auto"
                else reason
            )
    if kk == 0 and choice.drafter != "none":
        choice = adaptive.Choice("none", 0, 1.0, choice.options)
        s = 1.0
        reason = headline = "plain decoding: k=0 from the command line"
    return Drafter(choice, kk, s, reason, headline, notes)


def no_rollback(chosen: Drafter, target: str) -> Drafter:
    """Plain decoding for a target whose recurrent state cannot be rolled back
    (``catalog.archs``: a Mamba, RWKV, Jamba, Qwen3-Next... file here), with the reason;
    ``chosen`` as it is otherwise (a target not here yet: the engine finds out itself)."""
    if chosen.choice.drafter == "none":
        return chosen
    path = catalog.local_path(target)
    try:
        arch = catalog.read_header(path).architecture if path is not None else ""
    except Exception:  # noqa: BLE001 - an unreadable header: the engine's load says why
        arch = ""
    why = archs.speculation(arch)
    if why is None:
        return chosen
    reason = f"plain decoding: {why}"
    return Drafter(adaptive.Choice("none", 0, 1.0, chosen.choice.options), 0, 1.0, reason, reason, chosen.notes)


def snapshot_room(chosen: Drafter, pair: Pair, prof: Profile, room: Room, k_max: int | None) -> tuple[int | None, str]:
    """The most drafts a hybrid target's recurrent-state snapshots may cover in the memory
    left (each draft a round may verify costs one more copy of the state: llama.cpp's
    n_rs_seq), when that is fewer than ``k_max`` (None: the drafter's bound); with the note
    saying so. (None, "") where memory does not bound it."""
    if chosen.choice.drafter == "none":
        return None, ""
    draft = pair.draft if chosen.choice.drafter == "model" else None
    try:
        shape = catalog.model_info(pair.target).shape
        fit = catalog.check_fit(
            pair.target, draft, n_ctx=prof.n_ctx, available_bytes=room.budget, headroom_bytes=room.headroom, n_rs_seq=0
        )
    except Exception:  # noqa: BLE001 - a file that cannot be read yet: the engine finds out
        return None, ""
    plane = recurrent_state_bytes(shape)
    want = k_max or MAX_RS_SEQ
    if plane <= 0 or not fit.fits:
        return None, ""
    cap = int((fit.available_bytes - fit.need_bytes) // plane)
    if cap >= want:
        return None, ""
    return max(cap, 1), (
        f"drafts limited to {max(cap, 1)} a round: each costs one more copy of the recurrent state "
        f"({plane / GB * 1000:.0f} MB) and the memory left holds {cap}"
    )
