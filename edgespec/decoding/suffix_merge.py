"""Two runs on one suffix-memory store (the rule docs/memory.md states): what a load saw,
and the merge a save makes of what another run saved since, for ``suffix_store``.

``ORIGINS`` maps each index that ``suffix_store.load`` returned (or ``save`` wrote) to its
``Origin``: the store's generation then (None: no lock), the file's lineage and window
end, its counters and its ``stamp``. At the save, under the store's lock, ``merge`` adds
to the index what the file on disk holds that its load did not: by position where both
continue one file (one lineage), by content otherwise, so neither run's answers are lost;
the counters add what the file gained since the load. ``replay`` writes one index's
window into another, document by document (a load at another cap or other key lengths).

It knows the index's documents and the meta's lineage, window end and counters; nothing
of files, locks or the format's bytes (``suffix_codec``, ``store_files``).
"""

from __future__ import annotations

import uuid
import weakref
from collections import Counter
from dataclasses import dataclass, field

from .suffix import SuffixIndex
from .suffix_codec import Corrupt, counters, decode

__all__ = ["ORIGINS", "Origin", "merge", "replay", "stamp"]


@dataclass
class Origin:
    """What ``load`` saw, for the save of the same index: the store's generation then
    (None: no lock), the file's lineage and window end (None: a cold start or a replay,
    whose positions are its own), its counters, and a refusal the load already reported."""

    generation: int | None = None
    lineage: str | None = None
    base_next: int = 0
    counters: list[int] = field(default_factory=lambda: [0, 0, 0, 0])
    refused: str = ""
    stamp: tuple = ()  # the loaded file's (saved_at, next, lineage): the same file at the save, nothing to merge
    tokens: int = 0  # the tokens the loaded file held (more than the index's cap: a smaller cap kept the newest)


ORIGINS: "weakref.WeakKeyDictionary[SuffixIndex, Origin]" = weakref.WeakKeyDictionary()


def stamp(meta: dict) -> tuple:
    """A saved file's (saved_at, next, lineage): equal at the save, it is the file the
    index was loaded from."""
    return meta["saved_at"], meta["next"], meta.get("lineage")


def replay(source: SuffixIndex, into: SuffixIndex) -> SuffixIndex:
    """``into`` with ``source``'s window written into it, fragment by fragment, each as a
    closed document (what a cap or key lengths other than the saved ones need)."""
    for _, tokens, _ in source.documents():
        _append(into, tokens)
    return into


def _append(index: SuffixIndex, tokens: list[int]) -> None:
    doc = index.open()
    index.extend(doc, tokens)
    index.close(doc)


def merge(index: SuffixIndex, current: tuple[dict, memoryview] | None, origin: Origin | None) -> str:
    """Add to ``index`` what the file on disk (``current``) holds that its load did not:
    another run's answers saved since. Where the file continues the one this index was
    loaded from (one lineage), those are its documents past the loaded window's end;
    otherwise (another run started cold, replayed, or merged) every document of the file
    that the index does not hold already, by content (then an answer this index dropped
    at its cap can come back, as the other run's). The counters add what the file gained
    since the load. Returns the lineage to save under (a new one after a merge:
    the positions are this index's)."""
    if origin is None or current is None:
        return (origin.lineage if origin is not None and current is None else None) or uuid.uuid4().hex
    meta, payload = current
    if origin.stamp and stamp(meta) == origin.stamp:
        return origin.lineage or uuid.uuid4().hex  # the file this index was loaded from: nothing new in it
    same = origin.lineage is not None and meta.get("lineage") == origin.lineage and meta["next"] >= origin.base_next
    if same and meta["next"] == origin.base_next:
        return origin.lineage  # nobody saved since: nothing to merge
    try:
        theirs = SuffixIndex.restore(decode(meta, payload))
    except (Corrupt, ValueError):
        return uuid.uuid4().hex  # arrays it cannot use: replaced
    documents = theirs.documents()
    if same:
        new = [tokens for positions, tokens, _ in documents if positions[0] >= origin.base_next]
    else:
        held = Counter(tuple(tokens) for _, tokens, _ in index.documents())
        new = []
        for _, tokens, _ in documents:
            if held[tuple(tokens)]:
                held[tuple(tokens)] -= 1
            else:
                new.append(tokens)
    for tokens in new:
        _append(index, tokens)
    gained = [max(0, a - b) for a, b in zip(counters(meta), origin.counters)]
    index.proposals += gained[0]
    index.hits += gained[1]
    index.proposed += gained[2]
    index.accepted_ids += gained[3]
    return uuid.uuid4().hex
