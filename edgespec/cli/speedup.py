"""What the readout says about speculation's effect, in numbers and words: the speedup
estimate from round timings and the drafting figures (acceptance, k). Pure arithmetic
over the event stream's figures; knows nothing of Rich or the terminal (``cli.readout``
draws it).

**The speedup estimate.** A round in which the drafter proposed nothing is exactly one
step of plain decoding: one target decode of one token. Its wall time, measured between
consecutive ``Round`` events, is the plain step time ``t1`` on this machine, at this
context length, including the same per-step Python overhead as a plain run. (Only rounds
of the ``none`` and ``ngram`` drafters count: a draft model that proposed nothing may
still have spent a decode finding that out, which would inflate ``t1``.) Plain
decoding makes one token per ``t1``, so the speedup of what we are watching is
``tokens_per_second * t1`` (``t1`` = the median of the last plain rounds seen in this
``Readout``'s lifetime: a chat reply with ``/draft off``, n-gram rounds that found no
match, ...). Without any plain round to measure, we show an upper bound instead: a round
costs at least one target step, so the speedup is at most the tokens committed per
round (``≤ 2.4×``). It is labelled as a bound because on compute-bound machines (CPU)
verifying k tokens costs several steps and the true speedup can be below 1.

When nothing or almost nothing was drafted (fewer than ``MIN_DRAFTING`` of the rounds),
the run was plain decoding, and the estimate would only measure its own error (the
mean round against the median plain step: a few percent, either way): the readout says
so instead of printing a ratio.

**Forced tokens** (structured output) are drafts: the grammar proposed them, the target
verified them, and ``Stats.drafted`` / ``accepted`` count them as ``--json`` shows.
The lines count them with the drafter's and then say how many were forced.

**k.** What the status line and the summary show as k is the length actually drafted
(the mean over the rounds that drafted), with the bound the policy or ``--k`` allows.
"""

from __future__ import annotations

import statistics
from collections import deque

PLAIN_STEP_DRAFTERS = ("none", "ngram")
"""Drafters whose empty rounds cost exactly one plain step (no draft model decode)."""
MIN_DRAFTING = 0.05
"""Below this share of rounds that drafted, a run is plain decoding: no speedup ratio."""


class SpeedupEstimate:
    """Plain-step timing seen so far, and the speedup estimate built on it (see module doc)."""

    def __init__(self, window: int = 64, min_samples: int = 3):
        self._plain: deque[float] = deque(maxlen=window)
        self.min_samples = min_samples

    def add_plain_round(self, seconds: float) -> None:
        if seconds > 0:
            self._plain.append(seconds)

    @property
    def t_plain(self) -> float | None:
        """Median wall time of one plain decoding step, or None if not measured yet."""
        if len(self._plain) < self.min_samples:
            return None
        return statistics.median(self._plain)

    def speedup(self, tokens_per_second: float, tokens_per_round: float) -> tuple[float, bool] | None:
        """``(value, measured)``: an estimate (measured=True) or an upper bound (False)."""
        t1 = self.t_plain
        if t1 is not None and tokens_per_second > 0:
            return tokens_per_second * t1, True
        if tokens_per_round > 0:
            return tokens_per_round, False
        return None

    def format(self, tokens_per_second: float, tokens_per_round: float, drafting: float = 1.0) -> str:
        """The estimate in words; empty below ``MIN_DRAFTING`` (``drafting``: the share of
        rounds that drafted), where the run was plain decoding."""
        if drafting < MIN_DRAFTING:
            return ""
        s = self.speedup(tokens_per_second, tokens_per_round)
        if s is None:
            return ""
        value, measured = s
        return f"~{value:.2f}× vs plain" if measured else f"≤{value:.1f}× vs plain"


def num(n: int) -> str:
    """An integer with thousands separators."""
    return f"{n:,}"


def drafting_parts(
    rounds: int, drafting: int, drafted: int, accepted: int, bound: int, live: bool = False
) -> list[str]:
    """How much was drafted, for the summary (or, ``live``, the shorter status line): the
    acceptance and the length actually drafted (k: the mean over the rounds that
    drafted, and the bound), or that nothing or almost nothing was."""
    if not drafted:
        return ["nothing drafted yet" if live else "nothing drafted: plain decoding"]
    mean, per_round = drafted / max(drafting, 1), accepted / max(rounds, 1)
    parts = (
        [f"accepted {accepted / drafted:.0%}", f"{per_round:.2f}/round", f"k {mean:.1f} (≤{bound})"]
        if live
        else [
            f"accepted {accepted}/{drafted} ({accepted / drafted:.0%})",
            f"{per_round:.2f} accepted/round",
            f"k {mean:.1f} avg (≤{bound})",
        ]
    )
    if drafting < MIN_DRAFTING * rounds:
        parts.append(f"drafted in {drafting} of {num(rounds)} rounds" + ("" if live else ": about plain decoding"))
    return parts


def forced_part(forced: int, accepted: int, live: bool = False) -> str:
    """How many of the accepted drafts the grammar forced (structured output): drafts like
    the drafter's, counted in ``accepted`` too, so never beside "nothing drafted"."""
    return f"forced {forced}" if live else f"forced {forced} of the {accepted} accepted"


SOURCE_NAMES = {
    "memory": "earlier answers",
    "prompt": "the prompt",
    "grammar": "the grammar",
    "model": "the draft model",
    "mtp": "the model's own MTP head",
    "assistant": "the Gemma 4 assistant",
}
"""Where accepted drafts came from (``Stats.accepted_by_source``'s keys), in words."""
_SHORT_NAMES = {
    "memory": "earlier answers",
    "prompt": "prompt",
    "grammar": "grammar",
    "model": "draft model",
    "mtp": "MTP head",
    "assistant": "assistant",
}


def sources_part(kept: dict[str, int], live: bool = False) -> str:
    """Where the accepted drafts came from, most first: "kept 40 drafted tokens: 25 from
    earlier answers, 10 from the prompt, 5 from the grammar" (``live``: "kept 25 earlier
    answers, 10 prompt, 5 grammar"); "" when none were kept."""
    counts = sorted(((n, s) for s, n in kept.items() if n > 0), key=lambda c: -c[0])
    total = sum(n for n, _ in counts)
    if not total:
        return ""
    if live:
        return "kept " + ", ".join(f"{num(n)} {_SHORT_NAMES.get(s, s)}" for n, s in counts)
    head = f"kept {num(total)} drafted token{'s' if total != 1 else ''}"
    if len(counts) == 1:
        return f"{head}, all from {SOURCE_NAMES.get(counts[0][1], counts[0][1])}"
    return f"{head}: " + ", ".join(f"{num(n)} from {SOURCE_NAMES.get(s, s)}" for n, s in counts)
