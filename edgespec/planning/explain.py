"""The automatic choice in words: one line for every run, the reasons behind it for -v
and ``profiles detect``. Reads the cost model's numbers; decides nothing."""

from __future__ import annotations

from ..costmodel import adaptive
from ..profiles import Profile
from .mtp_head import Head


def x(s: float) -> str:
    return f"{s:.2f}×"


def explain(
    choice: adaptive.Choice,
    prof: Profile,
    options: list[adaptive.DrafterOption],
    c: adaptive.VerifyCost,
    c_status: str,
    gamma_status: str,
    slowdown: float = 1.0,
    label: str = "",
    mtp: Head | None = None,
) -> tuple[str, list[str]]:
    """The automatic choice in one line, and the reasons behind it (one per drafter
    weighed, and the exact kernels' cost). ``label`` names the draft model and where it
    was found, for the line; ``mtp``: the target's own MTP head, where it was weighed (a
    head predicted not to pay says so in the line, with the reports behind it)."""
    by = {d: (k, s) for d, k, s in choice.options}
    opts = {o.drafter: o for o in options}
    parts = []
    if "model" in by:
        parts.append(_explain_model(choice, prof, opts["model"], *by["model"], c, c_status, gamma_status))
    if "ngram" in by:
        parts.append(_explain_ngram(prof, opts["ngram"], *by["ngram"], c, slowdown))
    if "mtp" in by and mtp is not None:
        parts.append(mtp.words(*by["mtp"]))
    if choice.drafter == "none":
        if choice.options:
            head = f"plain decoding: no drafter is predicted to beat it by {prof.min_gain:.0%}"
        else:
            head = "plain decoding: no drafter is enabled in this profile"
    elif choice.drafter == "ngram" and choice.speedup < 1.0 + prof.min_gain:
        head = (
            "ngram drafter (prompt lookup): it drafts only where the text repeats its input or "
            "an earlier answer, so it can only help"
        )
    else:
        named = f" {label}" if choice.drafter == "model" and label else ""
        head = f"{choice.drafter} drafter{named}, up to k={choice.k}: predicted {x(choice.speedup)}"
    if "mtp" in by and mtp is not None and choice.drafter != "mtp" and by["mtp"][1] < 1.0 + prof.min_gain:
        head += f"; {mtp.verdict(by['mtp'][1])}"
    if slowdown > 1.0 and choice.options:
        parts.append(
            f"--exact runs batch-invariant kernels, {slowdown:.2f}× slower per token here than "
            f"llama.cpp's own ({prof.exact_slowdown.status}); included above"
        )
    return head, parts


def _explain_model(
    choice: adaptive.Choice,
    prof: Profile,
    o: adaptive.DrafterOption,
    k: int,
    s: float,
    c: adaptive.VerifyCost,
    c_status: str,
    gamma_status: str,
) -> str:
    if choice.drafter == "model":
        verdict = "wins"
    elif s < 1.0:
        verdict = "loses"
    elif s < 1.0 + prof.min_gain:
        verdict = "gains too little"
    else:
        verdict = f"is beaten by {choice.drafter}"
    return (
        f"model drafter {verdict}: {x(s)} at best (k={k}; α={o.alpha:.2f}, "
        f"γ={o.gamma:.2f} {gamma_status}, c({k + 1})={c(k + 1):.2f} "
        f"{c_status if k + 1 in c.n else 'interpolated from ' + c_status + ' figures'})"
    )


def _explain_ngram(
    prof: Profile, o: adaptive.DrafterOption, k: int, s: float, c: adaptive.VerifyCost, slowdown: float
) -> str:
    # on a prompt the answer copies from, the drafter proposes in nearly every round
    _, s_copy = adaptive.best_k(o.alpha, c, o.gamma, k_min=prof.k_min, k_max=prof.k_max, hit=1.0, slowdown=slowdown)
    if s_copy >= 1.0 + prof.min_gain:
        copy = f"on prompts that quote their input (code edits, summaries) it is predicted {x(s_copy)}"
    else:
        copy = f"even on prompts that quote their input it is predicted at most {x(s_copy)} here"
    floor = (
        "; its policy drafts only when a draft is expected to pay, so elsewhere it stays at plain decoding's speed"
        if o.floor * 1.0 / max(slowdown, 1e-9) >= 1.0
        else ""
    )
    return (
        f"ngram {x(s)} at k={k} for a typical prompt mix (it proposes in ~{o.hit:.0%} of "
        f"rounds, α≈{o.alpha:.2f}, {prof.alpha_ngram.status}); {copy}{floor}"
    )
