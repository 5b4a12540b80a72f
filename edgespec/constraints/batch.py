"""The masks of many matchers at once: one step of a batch of constrained sequences.

A batch step verifies, for every running sequence, ``x_last`` and its drafts; under a
constraint each of those rows needs the grammar's mask after the drafts before it
(``Matcher.masks``, one sequence at a time). Here the rows of ALL the sequences of the
step are computed together by llguidance's executor
(``LLExecutor.unsafe_compute_mask_ptr_with_draft_token`` for the sequences that draft,
``unsafe_compute_mask_ptr`` for the rest), which walks each matcher along its drafts on
llguidance's own thread pool, without the GIL, writes every row into one shared bitmask
and rolls each matcher back to where it was.

What the executor does not know is kept here, as ``Matcher`` keeps it for one sequence:
a lazy grammar whose trigger has not fired (its masks depend on free text; such a
matcher is asked on its own) and the end-of-generation token (a draft after it is never
a candidate: its rows are None, and the executor sees the drafts before it only). The
seconds spent are shared among the matchers in proportion to their rows (``t_mask``).
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np
from llguidance import LLExecutor

from ..errors import ConstraintStateError
from .matcher import Matcher

_executor: LLExecutor | None = None


def _pool() -> LLExecutor:
    global _executor
    if _executor is None:  # llguidance's threads, started on first use
        _executor = LLExecutor()
    return _executor


def batch_masks(
    items: Sequence[tuple[Matcher, Sequence[int]]], is_eog: Callable[[int], bool] = lambda t: False
) -> list[list[np.ndarray | None]]:
    """For each ``(matcher, drafts)``: the masks of its verify rows, exactly as
    ``matcher.masks(drafts, is_eog)`` gives them (row i is the grammar state after the
    drafts before i; None past an end-of-generation draft, and for every row while a
    lazy grammar is not in force). Every matcher is left where it was. Raises
    ``ConstraintStateError`` when a matcher is in its error state or allows nothing."""
    out: list[list[np.ndarray | None] | None] = [None] * len(items)
    jobs: list[tuple[int, Matcher, list[int], int]] = []  # (item, matcher, drafts seen, first row)
    n_rows = 0
    for i, (m, drafts) in enumerate(items):
        if m._trigger is not None:  # lazy: free text may start the grammar mid-draft
            out[i] = m.masks(drafts, is_eog)
            continue
        seen = list(drafts)
        eog = next((j for j, d in enumerate(seen) if is_eog(d)), None)
        if eog is not None:
            seen = seen[:eog]  # rows 0..eog are read; the rows after the EOG draft are not
        jobs.append((i, m, [int(d) for d in seen], n_rows))
        n_rows += len(seen) + 1
    if not jobs:
        return out  # type: ignore[return-value]
    words = jobs[0][1]._words
    bits = np.zeros((n_rows, words), dtype=np.int32)
    t0 = time.perf_counter()
    pool = _pool()
    # llguidance takes the matchers with drafts and those without in separate calls
    drafting = [(m._m, first, seen) for _, m, seen, first in jobs if seen]
    single = [(m._m, first) for _, m, seen, first in jobs if not seen]
    if drafting:
        pool.unsafe_compute_mask_ptr_with_draft_token(drafting, bits.ctypes.data, words * 4, n_rows)
    if single:
        pool.unsafe_compute_mask_ptr(single, bits.ctypes.data, words * 4, n_rows)
    seconds = time.perf_counter() - t0
    for i, m, seen, first in jobs:
        m.t_mask += seconds * (len(seen) + 1) / n_rows
        m._check("the grammar failed computing its masks")
        rows = [bits[first + j] for j in range(len(seen) + 1)]
        for j, row in enumerate(rows):
            if not row.any():
                raise ConstraintStateError(f"the grammar allows no token after {m.consumed + j} tokens")
        out[i] = rows + [None] * (len(items[i][1]) - len(seen))
    return out  # type: ignore[return-value]
