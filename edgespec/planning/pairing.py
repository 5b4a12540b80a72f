"""The drafter for any target: every model on this machine that can draft for it, ranked
by the cost model, and which catalog drafter to get when none can.

``rank(target, prof, ...)`` reads the target's header, takes every local model whose
vocabulary passes llama.cpp's rules for it and is at least twice smaller
(``catalog.local``), and predicts each one's speedup with the planner's cost model
(``costmodel.adaptive.best_k``): γ from the two sizes and the profile's step-time model, c(n) from
the profile, and α from, in this order, what ``edgespec tune --save`` measured for the
pair (``catalog.measured``, or the profile's figure for a catalog pair) or the prior

    α = α_model − 0.04 · (log2(size ratio) − 2),  × 0.8 across families

clamped to [0.2, 0.9]: ``alpha_model`` is the profile's figure for a same-family draft
about 4× smaller (the catalog's pairs); every further halving of the draft costs a few
points of acceptance, and a draft of another family that happens to share the tokenizer
agrees less often. A candidate must fit in memory beside the target (weights + both KV
caches + headroom). The planner weighs the best one against prompt lookup and plain
decoding. It knows nothing about llama.cpp; the engine checks the vocabularies again on
the loaded models.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from .. import catalog
from ..catalog import archs, measured
from ..costmodel import adaptive
from ..errors import EdgespecError, ProfileError
from ..profiles import GB, Profile, detect_profile, load_profile
from . import mtp_head

DIFFERENT_FAMILY = 0.8


@dataclass(frozen=True)
class Candidate:
    """One local drafter for the target, as the cost model sees it."""

    name: str
    source: str
    path: str
    alpha: float
    alpha_status: str  # "measured 2026-12-01" | "prior by size and family" | profile's status
    gamma: float
    gamma_status: str
    k: int
    speedup: float
    fits: bool
    fit_text: str
    catalog: str | None = None
    assistant: bool = False  # a Gemma 4 assistant (it reads the target's KV cache: archs.assists)

    def line(self) -> str:
        where = "" if self.fits else f"; does not fit beside the target ({self.fit_text})"
        what = "; a Gemma 4 assistant" if self.assistant else ""
        return (
            f"{self.name} ({self.source}{what}): {self.speedup:.2f}× at k={self.k} (α={self.alpha:.2f} "
            f"{self.alpha_status}, γ={self.gamma:.2f} {self.gamma_status}){where}"
        )


@dataclass(frozen=True)
class Ranking:
    """The candidates, best first (those that fit before those that do not)."""

    target: catalog.LocalModel | None
    candidates: tuple[Candidate, ...] = ()
    suggestion: str = ""  # with no candidate: the catalog drafter that would do, and how to get it

    @property
    def best(self) -> Candidate | None:
        return next((c for c in self.candidates if c.fits), None)

    def lines(self) -> list[str]:
        if self.target is None:
            return []
        head = f"drafters on this machine for {self.target.name}"
        if not self.candidates:
            return [f"{head}: none ({self.suggestion or 'no catalog drafter shares its tokenizer either'})"]
        return [f"{head}, best first:", *(f"  {c.line()}" for c in self.candidates)]


def acceptance_prior(alpha_model: float, target_bytes: int, draft_bytes: int, same_family: bool) -> float:
    """α before anything is measured (see the module docstring)."""
    ratio = max(1.0, target_bytes / max(1, draft_bytes))
    alpha = alpha_model - 0.04 * (math.log2(ratio) - 2.0)
    if not same_family:
        alpha *= DIFFERENT_FAMILY
    return min(0.9, max(0.2, alpha))


def target_model(target: str) -> catalog.LocalModel | None:
    """The target as a local model (a path, a local name, or a catalog model already
    here), or None when it is not on this machine or cannot be read."""
    try:
        path = Path(target).expanduser()
        if path.is_file():
            return catalog.describe_file(path)
        if catalog.find_model(target) is not None:
            here = catalog.local_path(target)
            return catalog.describe_file(here) if here is not None else None
        return catalog.lookup(target)
    except (EdgespecError, OSError):  # unreadable: no local ranking, the catalog's choice stands
        return None


def rank(
    target: str | catalog.LocalModel,
    prof: Profile,
    *,
    budget: int,
    headroom: int,
    c: adaptive.VerifyCost,
    slowdown: float = 1.0,
    pair_alpha: tuple[str, float] | None = None,
) -> Ranking:
    """Every local model that can draft for ``target``, ranked (see the module docstring).
    ``pair_alpha``: the profile's α for the target's catalog pair (its draft's name, α)."""
    t = target if isinstance(target, catalog.LocalModel) else target_model(target)
    if t is None:
        return Ranking(None)
    out: list[Candidate] = []
    seen: set[str] = set()
    for d in catalog.drafter_candidates(t):
        if d.key in seen:
            continue  # one file in two stores: weigh it once
        seen.add(d.key)
        alpha, a_status, gamma, g_status = _figures(t, d, prof, pair_alpha)
        k, s = adaptive.best_k(alpha, c, gamma, k_min=prof.k_min, k_max=prof.k_max, slowdown=slowdown)
        fit = _fit_beside(t, d, prof.n_ctx, budget, headroom)
        out.append(
            Candidate(
                d.name,
                d.source,
                str(d.path),
                alpha,
                a_status,
                gamma,
                g_status,
                k,
                s,
                fit.fits,
                fit.describe(),
                d.catalog,
                d.header.architecture == archs.ASSISTANT_ARCH,
            )
        )
    out.sort(key=lambda cand: (not cand.fits, -cand.speedup))
    return Ranking(t, tuple(out), "" if out else suggest_catalog_drafter(t, prof, budget, headroom))


def _fit_beside(t: catalog.LocalModel, d: catalog.LocalModel, n_ctx: int, budget: int, headroom: int) -> catalog.Fit:
    """Whether ``d`` fits in memory beside ``t`` (both KV caches at ``n_ctx``; a hybrid's
    KV only for its attention layers, and its recurrent state with the snapshots drafting
    keeps: ``catalog.check_fit`` reads their layer kinds), else from the headers already read."""
    try:
        return catalog.check_fit(t.path, d.path, n_ctx=n_ctx, available_bytes=budget, headroom_bytes=headroom)
    except Exception:  # noqa: BLE001 - an unreadable file: the headers' figures
        kv = catalog.kv_cache_bytes(t.header.shape, n_ctx) + catalog.kv_cache_bytes(d.header.shape, n_ctx)
        return catalog.Fit(t.size_bytes + d.size_bytes, kv, headroom, budget)


def _figures(
    t: catalog.LocalModel, d: catalog.LocalModel, prof: Profile, pair_alpha: tuple[str, float] | None
) -> tuple[float, str, float, str]:
    """α and γ for ``d`` drafting for ``t``, each with where it comes from."""
    gamma = adaptive.draft_cost_ratio(
        d.size_bytes, t.size_bytes, overhead_ms=prof.overhead_ms.value, gbs=prof.decode_gbs.value
    )
    g_status = "estimated from sizes"
    rec = measured.lookup(t.key, d.key)
    if rec is not None:
        if rec.get("gamma") is not None and rec.get("profile") == prof.name:
            gamma, g_status = float(rec["gamma"]), f"measured {rec.get('date', '')}".strip()
        return float(rec["alpha"]), f"measured {rec.get('date', '')}".strip(), gamma, g_status
    if pair_alpha is not None and d.catalog == pair_alpha[0]:
        return pair_alpha[1], "the profile's for this pair", gamma, g_status
    # a Gemma 4 assistant is its target's own (its name is the target's plus "-assistant")
    same = t.header.family.lower() == d.header.family.lower() or d.header.architecture == archs.ASSISTANT_ARCH
    alpha = acceptance_prior(prof.alpha_model.value, t.size_bytes, d.size_bytes, same)
    return alpha, "prior by size and family" + ("" if same else " (another family)"), gamma, g_status


# The catalog's tokenizer families, told apart by what a header says (the catalog knows
# no headers: its files may not be here). A guess for the suggestion only: the engine
# checks the real vocabularies when the models load.
_FAMILIES = (
    ("qwen3", lambda tok, arch: tok.pre == "qwen2" and arch.startswith("qwen3")),
    ("qwen2", lambda tok, arch: tok.pre == "qwen2" and abs(tok.n_tokens - 151936) <= 128),
    ("llama3", lambda tok, arch: tok.pre == "llama-bpe" and tok.n_tokens == 128256),
    ("gemma3", lambda tok, arch: arch.startswith("gemma3") and tok.n_tokens >= 262144),
    ("qwen35", lambda tok, arch: tok.pre == "qwen35"),
    ("lfm2", lambda tok, arch: tok.pre == "lfm2"),
    ("gemma4", lambda tok, arch: arch.startswith("gemma4")),
)


def catalog_family(t: catalog.LocalModel) -> str | None:
    tok = t.header.tokenizer
    if tok is None:
        return None
    return next((fam for fam, test in _FAMILIES if test(tok, t.header.architecture)), None)


def suggest_catalog_drafter(t: catalog.LocalModel, prof: Profile, budget: int, headroom: int) -> str:
    """Which catalog drafter would do for ``t`` (its tokenizer family, ≥ 3× smaller, fits
    beside it), and the command that gets it; "" when none."""
    fam = catalog_family(t)
    if fam is None:
        return ""
    base = t.header.basename.lower()  # "qwen2.5-coder": a Coder drafter first

    def order(m: catalog.CatalogModel) -> tuple[int, bool]:
        return m.size_bytes, not (base and m.title.lower().startswith(base))

    for m in sorted((m for m in catalog.MODELS if m.vocab == fam and m.size_bytes * 3 <= t.size_bytes), key=order):
        fit = catalog.check_fit(str(t.path), m.name, n_ctx=prof.n_ctx, available_bytes=budget, headroom_bytes=headroom)
        if fit.fits:
            return (
                f"the catalog's {m.name} ({m.size_bytes / GB:.2f} GB, {fam} tokenizer) would fit: "
                f"`edgespec models pull {m.name}`"
            )
    return ""


@dataclass(frozen=True)
class ForTarget:
    """The draft model candidate for a target named on the command line: the local
    ranking's best, else the catalog pair's draft, else a catalog draft of its family."""

    draft: str | None
    pair: str | None
    chosen: Candidate | None  # the local drafter taken, with its α and γ
    ranking: Ranking
    notes: tuple[str, ...] = ()  # the ranking's lines, or why there is no candidate


def for_target(
    target: str, prof: Profile, mode: str, draft_kw: str, *, budget: int, headroom: int, slowdown: float
) -> ForTarget:
    """``mode`` as the planner's ``Ask``: "auto", "model", "given", "assistant", "ngram" or "none"."""
    if mode == "assistant":
        return assistant_for(target, prof, budget=budget, headroom=headroom, slowdown=slowdown)
    if mode == "given":
        p = catalog.find_pair(target, draft_kw)
        return ForTarget(draft_kw, p.name if p else None, None, Ranking(None))
    p = catalog.find_pair(target)
    pc = prof.pair_cost(p.name if p else None)
    ranking = Ranking(None)
    notes: tuple[str, ...] = ()
    if mode in ("auto", "model"):
        ranking = rank(
            target,
            prof,
            budget=budget,
            headroom=headroom,
            c=(pc.verify or prof.verify).cost,
            slowdown=slowdown,
            pair_alpha=(p.draft, pc.alpha.value) if p and pc.alpha else None,
        )
        notes = tuple(ranking.lines())
    best = ranking.best
    if best is not None and not (mode == "model" and p is not None):
        return ForTarget(best.name, p.name if p is not None and best.catalog == p.draft else None, best, ranking, notes)
    if p is not None:
        return ForTarget(p.draft, p.name, None, ranking, notes)
    same = catalog.drafts_for(target)
    if same:
        return ForTarget(same[0].name, None, None, ranking, notes)
    if mode in ("auto", "model"):
        notes += (f"no known draft model for {target}; pass --draft PATH to use one",)
    return ForTarget(None, None, None, ranking, notes)


def mtp_candidate(t: catalog.LocalModel, prof: Profile) -> Candidate | None:
    """The target's own MTP head as one of its drafters (``planning.mtp_head``: a file with
    nextn layers), predicted on the target's c(n) here; None for a file without them."""
    head = mtp_head.head_for(str(t.path), prof)
    if head is None:
        return None
    o = head.option
    c = mtp_head.curve(str(t.path), prof)
    k, s = adaptive.best_k(o.alpha, c, o.gamma, k_min=prof.k_min, k_max=o.bound(prof.k_max))
    return Candidate(
        "mtp", "its own head", str(t.path), o.alpha, head.alpha_status, o.gamma, head.gamma_status, k, s, True, ""
    )


def assistant_for(target: str, prof: Profile, *, budget: int, headroom: int, slowdown: float) -> ForTarget:
    """``--draft assistant``: the Gemma 4 assistant on this machine for ``target`` (a
    ``gemma4-assistant`` file of its width, in the same store or folder or any other: the
    ranking's best that fits), else a clear ``ProfileError`` saying where to put one."""
    p = catalog.find_pair(target)
    pc = prof.pair_cost(p.name if p else None)
    c = (pc.verify or prof.verify).cost
    ranking = rank(target, prof, budget=budget, headroom=headroom, c=c, slowdown=slowdown)
    found = [cand for cand in ranking.candidates if cand.assistant]
    if not found:
        raise ProfileError(
            f"--draft assistant: no Gemma 4 assistant for {target} on this machine. Put its "
            "-assistant GGUF (gemma4-assistant, the one published for this Gemma 4 size) beside "
            "it, in the same folder or store, or pass the file: --draft PATH"
        )
    best = next((cand for cand in found if cand.fits), found[0])
    return ForTarget(best.name, None, best, ranking, tuple(ranking.lines()))


def machine_pairs(profile: str | Profile = "auto") -> tuple[Profile, list[tuple[catalog.LocalModel, Candidate]]]:
    """Every (target, drafter) pair on this machine with its predicted speedup on the
    profile (``"auto"``: this machine's), best pairs of each target first; a target whose
    file keeps nextn layers lists its own MTP head among them (``mtp_candidate``)."""
    if isinstance(profile, Profile):
        prof, available = profile, None
    elif profile == "auto":
        det = detect_profile()
        prof, available = det.profile, det.machine.available_bytes
    else:
        prof, available = load_profile(profile), None
    budget = int(prof.models_gb.value * GB)
    budget = min(budget, available) if available is not None else budget
    out = []
    seen: set[str] = set()
    for t in catalog.scan().models:
        if t.key in seen:
            continue
        seen.add(t.key)
        own = mtp_candidate(t, prof)
        found = catalog.scan().drafters_for(t)
        r = rank(t, prof, budget=budget, headroom=int(prof.headroom_gb * GB), c=prof.verify.cost) if found else None
        cands = [*(r.candidates if r is not None else ()), *((own,) if own is not None else ())]
        cands.sort(key=lambda cand: (not cand.fits, -cand.speedup))
        out.extend((t, cand) for cand in cands)
    return prof, out
