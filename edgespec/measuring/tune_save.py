"""Saving what ``tune`` measured: into the user's profile, and per pair where there is none.

``save`` writes a ``TuneResult``'s figures through ``profiles.record_measurements`` (c(n),
batch cost, the exact kernels' slowdown, the n-gram drafter's α, the MTP head's α and γ; the
step time, α, γ and the step-time model only for a catalog pair, else α and γ go to
``catalog.measured``);
``save_network`` writes, after a tune over RPC, only the network's cost per target decode.
``pair_of`` finds the catalog pair of a target and draft. Measures nothing; prints nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import catalog, profiles
from .decode_times import step_model

if TYPE_CHECKING:
    from .tune_result import TuneResult


def pair_of(target: str, draft: str | None) -> str | None:
    """The catalog pair of a target and draft given as catalog names, catalog file
    names or paths to files named like the catalog's."""
    if not draft:
        return None
    for t, d in ((target, draft), (Path(target).name, Path(draft).name)):
        p = catalog.find_pair(t, d)
        if p is not None:
            return p.name
    return None


def save_network(
    result: TuneResult, profile: str, *, local_step_ms: float, extends: str | None = None, when: Any = None
) -> tuple[Path, float, list[str]]:
    """After a tune over RPC: write the network's cost per target decode (the step over
    RPC less the local compute step ``local_step_ms``) as ``cost.rpc_round_trip_ms``; the
    path, that cost, and what was not saved."""
    r = max(0.0, result.times.step_ms - local_step_ms)
    source = (
        f"edgespec tune --rpc: {result.times.step_ms:.1f} ms step over RPC less "
        f"{local_step_ms:.1f} ms local, {Path(result.settings['target']).name}"
    )
    path = profiles.record_measurements(profile, rpc_round_trip_ms=r, source=source, when=when, extends=extends)
    return (
        path,
        r,
        [
            "c(n), step time and γ measured over RPC: they describe this link; the planner derives "
            "them from the local figures and the network cost"
        ],
    )


def save(
    result: TuneResult, profile: str, *, pair: str | None, extends: str | None = None, when: Any = None
) -> tuple[Path, list[str]]:
    """Write the measured figures into the user profile ``profile``; return its path and
    what could not be saved (figures of a model pair need a catalog pair)."""
    s = result.settings
    source = (
        f"edgespec tune: {Path(s['target']).name}, {s['n_threads']} threads, "
        f"{len(s['prompts'])} calibration prompts x {s['max_tokens']} tokens, "
        f"load {s['load_average']}"
    )
    verify = {n: result.verify(n) for n in sorted(result.times.target_ms) if n >= 2}
    model, ngram = result.drafter("model"), result.drafter("ngram")
    skipped: list[str] = []
    kwargs: dict[str, Any] = {"verify": verify}
    if result.batch_cost:
        kwargs["batch"] = {n: c for n, c in result.batch_cost.items() if n >= 2}
    if result.exact_tokens_per_second is not None:
        kwargs["exact_slowdown"] = min(5.0, max(0.5, result.exact_slowdown))
    if ngram is not None:
        kwargs.update(alpha_ngram=min(ngram.alpha, 0.99), ngram_hit=ngram.hit)
    head = result.drafter("mtp")
    if head is not None:  # the device's figures for a model's own head (its file's γ is kept per file too)
        kwargs.update(mtp_alpha=min(head.alpha, 0.99), mtp_gamma=min(head.gamma, 10.0))
    if pair is not None:
        kwargs["target_step_ms"] = result.times.step_ms
        if model is not None:
            kwargs.update(alpha=min(model.alpha, 0.99), gamma=model.gamma)
            try:
                pc = catalog.get_pair(pair)
                sizes = catalog.model_info(pc.target).size_bytes, catalog.model_info(pc.draft).size_bytes
            except Exception:  # noqa: BLE001 - sizes are only needed for the device fit
                sizes = None
            fitted = step_model(result.times.step_ms, result.times.draft_ms or 0.0, *sizes) if sizes else None
            # the profile schema's ranges; outside them the two steps did not determine a
            # sensible fit (noise, or models far from the catalog's sizes)
            if fitted is not None and 0 <= fitted[0] <= 10_000 and 0.01 <= fitted[1] <= 100_000:
                kwargs.update(overhead_ms=fitted[0], decode_gbs=fitted[1])
            else:
                skipped.append("the step-time model (overhead_ms, decode_gbs): the measured steps do not fit it")
    else:
        if model is not None and s.get("draft"):  # α (and γ here) per pair, for the next automatic choice
            t, d = catalog.describe_file(s["target"]), catalog.describe_file(s["draft"])
            catalog.measured.record(
                t, d, alpha=model.alpha, gamma=model.gamma, profile=profile, source=source, when=when
            )
        skipped.append(
            "target step time and c(n) per pair: the models are not a catalog pair, so c(n) is "
            "saved for the device"
            + (
                " and α, γ for the pair in " + str(catalog.measured.store_path())
                if model is not None and s.get("draft")
                else ""
            )
        )
    path = profiles.record_measurements(profile, pair=pair, source=source, when=when, extends=extends, **kwargs)
    return path, skipped
