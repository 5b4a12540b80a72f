"""The target's step time and verify cost c(n), and γ, timed on the real machine.

``time_decodes`` times one ``Context.decode`` of n tokens with logits at every row (exactly
what a verify batch asks for), n = 1..16, at one KV position: each batch is decoded, timed
and rolled back, in sweeps that alternate direction so slow drift does not tilt the curve;
the draft model's single step is timed in the same sweeps. ``fit_verify_cost`` turns the
medians into c(n) as measured (dips kept: a CPU's tiled GEMM really does decode 8 or 16
tokens for less than 7 or 15). ``step_model`` fits the step-time model to the two measured
steps and ``p_min_for`` derives the model drafter's confidence floor from γ and c(n).
``time_mtp_step`` times one step of the target's own MTP head (one (token, hidden row)
pair through its ``MtpContext``) against one target step, alternately: the head's γ.

Knows nothing of drafters' generations, choices or profiles (``tune`` and ``tune_save``).
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from ..costmodel import adaptive
from ..errors import InputError
from ..llama import Context, MtpContext, common_prefix_len

N_MAX = 16
P_MIN_CAP = 0.95


@dataclass(frozen=True)
class DecodeTimes:
    """Median wall times of decoding batches at one KV position."""

    position: int  # KV length the batches were decoded after
    repeats: int
    target_ms: dict[int, float]  # n -> ms to decode n tokens with logits at all n rows
    draft_ms: float | None  # ms of one draft-model token, or None

    @property
    def step_ms(self) -> float:
        return self.target_ms[1]

    @property
    def relative(self) -> dict[int, float]:
        """c(n) as measured: time(n) / time(1)."""
        return {n: t / self.step_ms for n, t in self.target_ms.items()}

    @property
    def gamma(self) -> float | None:
        return self.draft_ms / self.step_ms if self.draft_ms is not None else None


def hold(ctx: Context, tokens: Sequence[int]) -> None:
    """Make ``ctx`` hold exactly ``tokens`` (reusing what it already has). A recurrent
    state cannot undo a whole timed decode: it keeps a checkpoint here to come back to."""
    if ctx.recurrent:
        keep = ctx.reuse_chunks(tokens, 0)
    else:
        keep = common_prefix_len(ctx.tokens, tokens)
        ctx.rollback(keep)
    if len(tokens) > keep:
        ctx.decode(tokens[keep:], rows=())
    if ctx.recurrent:
        ctx.checkpoint()


def back(ctx: Context, prefix: Sequence[int]) -> None:
    """Undo the batch just timed: a KV cache's tail, a recurrent state's checkpoint."""
    if ctx.recurrent:
        hold(ctx, prefix)
    else:
        ctx.rollback(len(prefix))


def time_decodes(
    target: Context,
    prefix: Sequence[int],
    *,
    n_max: int = N_MAX,
    repeats: int = 5,
    draft: Context | None = None,
    clock: Callable[[], float] = time.perf_counter,
    sizes: Sequence[int] | None = None,
) -> DecodeTimes:
    """Time decoding n = 1..n_max tokens after ``prefix`` (and one draft token); with
    ``sizes``, those batch sizes alone (1 is always among them: c(n) is relative to it).

    The first sweep warms up and is discarded; then ``repeats`` sweeps, alternately
    n = n_max..1 and 1..n_max. The draft model's single step is timed four times per
    sweep, spread through it, so both models see the same load. Both contexts are left
    holding ``prefix``.
    """
    if sizes is not None:
        n_max = max(sizes, default=0)
    if len(prefix) < 1 or repeats < 1 or n_max < 1:
        raise InputError("time_decodes needs a non-empty prefix, repeats ≥ 1 and n_max ≥ 1")
    if len(prefix) + n_max > target.n_ctx:
        raise InputError(f"the context ({target.n_ctx}) cannot hold the prefix plus {n_max} tokens")
    hold(target, prefix)
    if draft is not None:
        hold(draft, prefix)
    pos = len(prefix)
    batch = [prefix[i % pos] for i in range(n_max)]  # real tokens of the prompt
    ns = sorted({1, *sizes}) if sizes is not None else list(range(1, n_max + 1))
    samples: dict[int, list[float]] = {n: [] for n in ns}
    draft_samples: list[float] = []
    draft_at = {1, n_max, max(1, n_max // 3), max(1, 2 * n_max // 3)}
    for sweep in range(repeats + 1):
        order = ns if sweep % 2 else ns[::-1]
        for n in order:
            t0 = clock()
            target.decode(batch[:n], rows=range(n))
            dt = clock() - t0
            back(target, prefix)
            if sweep:
                samples[n].append(dt)
            if draft is not None and n in draft_at:
                t0 = clock()
                draft.decode(batch[:1])
                dt = clock() - t0
                back(draft, prefix)
                if sweep:
                    draft_samples.append(dt)
    return DecodeTimes(
        position=pos,
        repeats=repeats,
        target_ms={n: statistics.median(v) * 1e3 for n, v in samples.items()},
        draft_ms=statistics.median(draft_samples) * 1e3 if draft_samples else None,
    )


def time_mtp_step(
    target: Context,
    head: MtpContext,
    prefix: Sequence[int],
    *,
    repeats: int = 8,
    clock: Callable[[], float] = time.perf_counter,
) -> tuple[float, float]:
    """(target step ms, head step ms): the medians of one target decode of one token and
    one head decode of one (token, row) pair, alternately, both after ``prefix`` (the
    head's positions hold it paired with zero rows: a step costs the same whatever the
    rows say), after a warm-up pair thrown away. The target is left holding ``prefix``,
    the head empty (its drafter starts from the target's own rows)."""
    if len(prefix) < 1 or repeats < 1:
        raise InputError("time_mtp_step needs a non-empty prefix and repeats ≥ 1")
    hold(target, prefix)
    head.clear()
    head.decode(prefix, np.zeros((len(prefix), head.n_embd), dtype=np.float32))
    tok, row = prefix[-1], np.zeros((1, head.n_embd), dtype=np.float32)
    steps: list[float] = []
    heads: list[float] = []
    try:
        for i in range(repeats + 1):
            t0 = clock()
            target.decode([tok], rows=(0,))
            t1 = clock()
            back(target, prefix)
            t2 = clock()
            head.decode([tok], row)
            t3 = clock()
            head.rollback(len(prefix))
            if i:
                steps.append(t1 - t0)
                heads.append(t3 - t2)
    finally:
        head.clear()
    return statistics.median(steps) * 1e3, statistics.median(heads) * 1e3


def fit_verify_cost(relative: dict[int, float]) -> adaptive.VerifyCost:
    """c(n) from measured ratios: c(1) = 1 and never below 1; dips are kept (a tiled
    GEMM's batches of 8 and 16 cost less than 7 and 15, which the policy exploits)."""
    ns = sorted(n for n in relative if n >= 2)
    return adaptive.VerifyCost((1, *ns), (1.0, *(max(1.0, relative[n]) for n in ns)))


def step_model(target_ms: float, draft_ms: float, target_bytes: int, draft_bytes: int) -> tuple[float, float] | None:
    """(overhead_ms, decode_gbs) such that ``costmodel.adaptive.step_ms`` reproduces both measured
    steps, or None when the two do not determine a sensible pair (two models of about
    one size, or a draft slower per byte than the target)."""
    db = target_bytes - draft_bytes
    dt = target_ms - draft_ms
    if db <= 0 or dt <= 0:
        return None
    gbs = db / (dt * 1e-3) / 1e9
    overhead = target_ms - target_bytes / (gbs * 1e9) * 1e3
    return (overhead, gbs) if overhead >= 0 else None


def p_min_for(gamma: float, c: adaptive.VerifyCost, k: int) -> float:
    """The draft confidence below which the model drafter should stop.

    One more drafted token costs a draft step and a wider verify batch — about
    γ + (c(k+1) − 1)/k target steps — and saves one target step if it is accepted. A
    token whose draft probability is below that cost loses on average. Capped at 0.95
    (above it the drafter would almost never draft; the choice then is plain decoding
    anyway)."""
    k = max(1, k)
    return round(min(P_MIN_CAP, max(0.0, gamma + (c(k + 1) - 1.0) / k)), 2)
