"""One memory of earlier answers per API key: what a request may draft from in ``serve``.

The engine drafts from the answers already written (``edgespec.decoding.memory``): text
one request's answer held can come back, faster, in another's. Shared by every client,
that is a timing side channel (arXiv 2411.01076: from how fast an answer comes, a user
can tell whether other users' text is in the speculation cache). So the server gives
each API key an index of its own (``edgespec.decoding.suffix.SuffixIndex``), keyed by
the key's SHA-256, and one more, ``""``, for every request without a key: a request
drafts from, and is written into, its key's index only.

``KeyMemories.option(key)`` is the value of a request's ``memory`` option
(``Engine.stream``, a batch ``Request``'s options): its key's index, made on first use,
or ``False`` when cross-request drafting is off (``serve --no-memory``, or an engine
built without a memory, whose ``engine.memory`` is None). Each index holds at most the
engine's cap in tokens (``engine.memory.cap``); at most ``max_keys`` indexes are kept,
the least recently used dropped (a request already holding it writes on into it, and
it is gone with that request): at most ``max_keys`` x cap tokens in all.

Which key is a request's: ``key_of(headers, api_key)`` (``guard.given_keys``): on a
server with a key, the one that matched it; on one without, the key the request
presents, if any (a client may keep its memory apart by sending a key of its own);
``""`` otherwise. Called on the event loop only; the indexes are used on the worker
thread.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections import OrderedDict
from typing import Any, Mapping

from edgespec.decoding.suffix import DEFAULT_CAP, SuffixIndex

from .guard import given_keys

DEFAULT_MAX_KEYS = 64


def key_of(headers: Mapping[str, str], api_key: str | None) -> str:
    """The SHA-256 (hex) of the key this request's memory belongs to, "" for none."""
    keys = given_keys(headers)
    if api_key is not None:
        want = api_key.encode()
        keys = [k for k in keys if secrets.compare_digest(k.encode(), want)]
    return hashlib.sha256(keys[0].encode()).hexdigest() if keys else ""


class KeyMemories:
    """The per-key indexes of one server (``indexes``: key hash -> index, oldest use first)."""

    def __init__(self, engine: Any, *, enabled: bool = True, max_keys: int = DEFAULT_MAX_KEYS) -> None:
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1 (got {max_keys})")
        memory = getattr(engine, "memory", None)
        self.enabled = bool(enabled) and memory is not None
        self.cap: int = getattr(memory, "cap", DEFAULT_CAP)
        self.max_keys = max_keys
        self.indexes: OrderedDict[str, SuffixIndex] = OrderedDict()
        self._lock = threading.Lock()

    def option(self, key: str) -> SuffixIndex | bool:
        """The ``memory`` option of a request whose key hash is ``key``."""
        if not self.enabled:
            return False
        with self._lock:
            index = self.indexes.get(key)
            if index is None:
                index = self.indexes[key] = SuffixIndex(self.cap, name=f"key {key[:8]}" if key else "no key")
                while len(self.indexes) > self.max_keys:
                    self.indexes.popitem(last=False)
            else:
                self.indexes.move_to_end(key)
            return index

    def __len__(self) -> int:
        return len(self.indexes)

    def tokens(self) -> int:
        """Tokens held in all the indexes."""
        with self._lock:
            return sum(len(ix) for ix in self.indexes.values())
