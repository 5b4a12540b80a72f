"""Suffix memory: drafts from everything already written (SuffixDecoding, arXiv 2411.04975).

``SuffixIndex`` is the global index of earlier outputs that the engine holds across
requests, capped in tokens; ``decoding.memory.MemoryDrafter`` reads it beside prompt
lookup (the request's own index) and writes each answer into it. Sequences of one batch
each write into their own open *document* of the index as their tokens are committed,
so concurrent sequences draft from each other.

A proposal (the paper's scoring, our code): find the longest earlier match of the
context's suffix (at most ``max_match`` tokens), take every occurrence matching that far,
and walk their continuations greedily. At each step the next id is the one most of the
surviving occurrences continue with; its probability is the count ratio
``count(child) / count(node)`` and the *path probability* of the j-th id is the product of
the ratios up to it. The draft stops where the path probability falls under ``min_prob``
(0.1), at ``alpha x match length`` ids (α = 1) or at ``k``. The sum of the path
probabilities is the expected number of accepted ids, which is what a policy weighs
against the cost of verifying them. Ids are a fixed proposal (``q is None``): the loop
verifies them by match, exact at any temperature.

The data structure, and why. We measured a depth-limited suffix trie against this one
(benchmarks/suffix_overhead.py, benchmarks/results/suffix-overhead-2core.json): a trie
of depth 16 as Python dicts cost ~3.7 KB and ~70 µs of CPU per token appended on real
token streams, and it bounds match + continuation together by its depth. We keep instead a ring buffer of the last
``cap`` tokens and, per key length n (6 and 2), LZ77-style hash chains:
``head[hash(n-gram)]`` is the newest position where that n-gram ends and ``prev[pos]``
the one before it. Each position stores its token, the previous and next position of its
document (``back``/``fwd``: documents interleave in the ring), and per key length its
chain link, its n-gram's start and key, and where the n-gram starting there ends, all in
``array.array`` (compact, and indexing it returns plain ints, which is what the Python
loops want): ~200 bytes per token with the chain heads, 7-9 µs of CPU per append and
~50 µs per proposal at a cap of 262,144 tokens, and continuations read from the ring at
any length.

Eviction is first in, first out: the token at the window's start leaves, and with it the
n-grams that start there (found in O(1) per key length); a chain head that pointed at one
moves to the next entry that is still whole (an entry is skipped at most once: amortized
O(key lengths) per evicted token). Entries in the middle of a chain whose start left the
window are skipped by the walks (at most ``4 x max_candidates`` steps), and an entry
older than the window ends a walk, so after any history the index answers like a fresh
one built from the tokens it still holds (tests/test_suffix.py).

It knows token ids only: no model, no KV cache, no file format (``suffix_store``). It
carries what its drafts proved worth (``rates``, the drafting policy's learned
``MemoryAcceptance``): a property of the workload that wrote it, so each API key's index
learns its own, and a saved index comes back with it.
"""

from __future__ import annotations

from array import array
from typing import Iterable, Sequence

from .acceptance import MemoryAcceptance
from .drafters import Proposal

DEFAULT_CAP = 1 << 18  # 262,144 tokens in the global index: ~50 MB at ~200 bytes a token
OPEN = -1  # fwd of an open document's last token: its next token is not written yet
END = -2  # fwd of a closed document's last token: nothing followed it


class _Doc:
    __slots__ = ("last", "tail", "pos")

    def __init__(self) -> None:
        self.last = -1  # position of its last token, -1 before the first
        self.tail: list[int] = []  # its last few tokens (the longest key length)
        self.pos: list[int] = []  # and their positions


class SuffixIndex:
    """The last ``cap`` tokens of any number of documents, searchable by suffix.

    ``open()`` a document, ``append``/``extend`` it as tokens are committed, ``pop`` the
    newest ones back if the target rejected them, ``close`` it when its text ends;
    ``propose(context, k)`` drafts from every document in the window.
    Positions are global and only grow: position p lives in slot ``p % cap``.
    """

    def __init__(
        self,
        cap: int = DEFAULT_CAP,
        *,
        key_lens: Sequence[int] = (6, 2),
        max_match: int = 24,
        max_candidates: int = 32,
        alpha: float = 1.0,
        min_prob: float = 0.1,
        name: str = "global",
    ) -> None:
        if cap < 1:
            raise ValueError("the cap must be at least one token")
        if not key_lens or min(key_lens) < 1 or max(key_lens) > max_match:
            raise ValueError("need 1 <= key lengths <= max_match")
        self.cap = cap
        self.key_lens = tuple(sorted(set(key_lens), reverse=True))  # longest first
        self.max_match = max_match
        self.max_candidates = max_candidates
        self.alpha = alpha
        self.min_prob = min_prob
        self.name = name
        self.proposals = self.hits = self.proposed = self.accepted_ids = 0
        self.rates = MemoryAcceptance()  # how its drafts fared, learned by the policies that verify them
        self.clear()

    # -- state ----------------------------------------------------------------------
    def clear(self) -> None:
        """Forget every token and document (the hit counters and the rates stay)."""
        self._tok = array("i")
        self._back = array("q")
        self._fwd = array("q")
        nk = len(self.key_lens)
        self._head: list[dict[int, int]] = [{} for _ in range(nk)]
        self._prev = [array("q") for _ in range(nk)]  # the chain: the entry before, by end position
        self._kstart = [array("q") for _ in range(nk)]  # at an n-gram's end: where it starts
        self._khash = [array("q") for _ in range(nk)]  # at its end: its key
        self._kend = [array("q") for _ in range(nk)]  # at its start: where it ends (for eviction)
        self._keys = list(zip(self.key_lens, self._head, self._prev, self._kstart, self._khash, self._kend))
        self._per_key = [*self._prev, *self._kstart, *self._khash, *self._kend]
        self._next = 0  # the position the next token takes
        self._start = 0  # the oldest position in the window
        self._docs: dict[int, _Doc] = {}
        self._next_doc = 0

    @property
    def start(self) -> int:
        """The oldest position still in the window."""
        return self._start

    def __len__(self) -> int:
        return self._next - self.start

    def nbytes(self) -> int:
        """Bytes held: the per-token arrays plus the chain heads (dict entries and their
        int keys and values, as CPython lays them out)."""
        arrays = [self._tok, self._back, self._fwd, *self._per_key]
        per_entry = 8 * 3 + 32 + 32 + 8  # dict entry (hash, key, value) + int key + int value + index slot
        return sum(a.itemsize * len(a) for a in arrays) + per_entry * sum(len(h) for h in self._head)

    def chain_heads(self) -> int:
        return sum(len(h) for h in self._head)

    def snapshot(self) -> dict:
        """Everything the index holds, for ``suffix_store``: the window (``start``,
        ``next``), the per-token arrays by slot (``tok``, ``back``, ``fwd``, and per key
        length, longest first, ``prev``, ``kstart``, ``khash``, ``kend``) and the chain
        heads (one dict per key length). The live objects, not copies: read them before
        the next write. Open documents are not in it (``restore`` has none)."""
        return {
            "cap": self.cap,
            "key_lens": self.key_lens,
            "start": self._start,
            "next": self._next,
            "tok": self._tok,
            "back": self._back,
            "fwd": self._fwd,
            "prev": self._prev,
            "kstart": self._kstart,
            "khash": self._khash,
            "kend": self._kend,
            "head": self._head,
        }

    @classmethod
    def restore(cls, snap: dict, **options) -> "SuffixIndex":
        """An index holding a ``snapshot``'s arrays as they are (the caller checked them;
        an open document's last token should be marked ``END`` there: it has none), with
        ``options`` for the rest (``max_match``, ``alpha``, ...)."""
        ix = cls(int(snap["cap"]), key_lens=tuple(snap["key_lens"]), **options)
        if tuple(snap["key_lens"]) != ix.key_lens:
            raise ValueError("key lengths must be given longest first")
        ix._tok, ix._back, ix._fwd = snap["tok"], snap["back"], snap["fwd"]
        ix._head, ix._prev, ix._kstart = list(snap["head"]), list(snap["prev"]), list(snap["kstart"])
        ix._khash, ix._kend = list(snap["khash"]), list(snap["kend"])
        ix._keys = list(zip(ix.key_lens, ix._head, ix._prev, ix._kstart, ix._khash, ix._kend))
        ix._per_key = [*ix._prev, *ix._kstart, *ix._khash, *ix._kend]
        ix._start, ix._next = int(snap["start"]), int(snap["next"])
        return ix

    # -- writing --------------------------------------------------------------------
    def open(self) -> int:
        """A new document; its id for ``append``/``close``."""
        doc = self._next_doc
        self._next_doc += 1
        self._docs[doc] = _Doc()
        return doc

    def close(self, doc: int) -> None:
        """End a document: what followed its last token is known to be nothing."""
        d = self._docs.pop(doc, None)
        if d is not None and d.last >= self.start:
            self._fwd[d.last % self.cap] = END

    def extend(self, doc: int, tokens: Iterable[int]) -> None:
        for t in tokens:
            self.append(doc, t)

    def append(self, doc: int, token: int) -> None:
        """Add one token at the end of an open document (evicting the oldest at the cap)."""
        d = self._docs[doc]
        p, cap = self._next, self.cap
        if p - self._start >= cap:
            self._evict(self._start)
            self._start += 1
        start = self._start
        slot = p % cap
        b = d.last if d.last >= start else -1
        if slot == len(self._tok):  # still growing
            self._tok.append(token)
            self._back.append(b)
            self._fwd.append(OPEN)
            for a in self._per_key:
                a.append(-1)
        else:
            self._tok[slot] = token
            self._back[slot] = b
            self._fwd[slot] = OPEN
            for a in self._kend:
                a[slot] = -1  # no n-gram starting here is written yet
        if b >= 0:
            self._fwd[b % cap] = p
        tail, pos = d.tail, d.pos
        tail.append(token)
        pos.append(p)
        if len(tail) > self.key_lens[0]:
            del tail[0], pos[0]
        nt = len(tail)
        for n, head, prev, kstart, khash, kend in self._keys:
            if nt < n or pos[-n] < start:  # the n-gram is not whole in the window
                prev[slot] = kstart[slot] = -1
                continue
            key = hash(tuple(tail[-n:]))
            s = pos[-n]
            prev[slot] = head.get(key, -1)
            kstart[slot] = s
            khash[slot] = key
            kend[s % cap] = p
            head[key] = p
        d.last = p
        self._next = p + 1

    def _evict(self, q: int) -> None:
        """Position q (the oldest) leaves the window, and with it the n-grams starting at
        q: a chain head that pointed at one moves to the next whole entry."""
        cap = self.cap
        qs, new_start = q % cap, q + 1
        for _, head, prev, kstart, khash, kend in self._keys:
            e = kend[qs]
            if e < q:
                continue  # no n-gram starting at q was written
            key = khash[e % cap]
            if head.get(key) != e:
                continue  # e is inside the chain: walks skip it from now on
            nxt = prev[e % cap]
            while nxt >= new_start and kstart[nxt % cap] < new_start:
                nxt = prev[nxt % cap]  # an entry broken earlier by an interleaved eviction
            if nxt >= new_start:
                head[key] = nxt
            else:
                del head[key]

    def pop(self, doc: int, n: int = 1) -> None:
        """Take back a document's last ``n`` tokens (drafts the target did not keep). Only
        the newest tokens of the whole index can be taken back: ValueError otherwise."""
        d = self._docs[doc]
        cap = self.cap
        q = d.last
        for i in range(n):  # checked before anything changes
            if q < self._start or q != self._next - 1 - i:
                raise ValueError("only the newest tokens of the index can be taken back")
            q = self._back[q % cap]
        for _ in range(n):
            p = self._next - 1
            slot = p % cap
            for _, head, prev, kstart, khash, kend in self._keys:
                s = kstart[slot]
                if s < self._start:
                    continue  # p ended no whole n-gram of this length (an eviction moved its head)
                kend[s % cap] = -1
                key, nxt = khash[slot], prev[slot]  # p is its chain's head: the newest entry
                while nxt >= self._start and kstart[nxt % cap] < self._start:
                    nxt = prev[nxt % cap]
                if nxt >= self._start:
                    head[key] = nxt
                else:
                    del head[key]
            b = self._back[slot]
            if b >= self._start:
                self._fwd[b % cap] = OPEN
            d.last = b if b >= self._start else -1
            self._next = p
        # the document's last tokens again (its keys' tails), from the back links
        d.tail, d.pos = [], []
        q = d.last
        while q >= self._start and len(d.tail) < self.key_lens[0]:
            d.tail.insert(0, self._tok[q % cap])
            d.pos.insert(0, q)
            q = self._back[q % cap]

    # -- reading --------------------------------------------------------------------
    def propose(self, context: Sequence[int], k: int) -> Proposal:
        """Draft up to ``k`` ids continuing ``context`` (see the module docstring). The
        context's own tail in an open document has no continuation yet, so it never
        matches itself."""
        self.proposals += 1
        L = len(context)
        if k <= 0 or L == 0 or self._next == 0:
            return Proposal([], source="memory")
        best, occ = self._matches(context, L)
        if best == 0:
            return Proposal([], source="memory")
        limit = min(k, int(self.alpha * best + 1e-9))
        cap, tok, fwd = self.cap, self._tok, self._fwd
        cur = [fwd[e % cap] for e in occ]
        ids: list[int] = []
        probs: list[float] = []
        prob = 1.0
        while len(ids) < limit:
            counts: dict[int, int] = {}
            den = 0
            for p in cur:
                if p == OPEN:
                    continue  # a document still being written: unknown, not "ended"
                den += 1
                if p >= 0:
                    t = tok[p % cap]
                    counts[t] = counts.get(t, 0) + 1
            if not counts:
                break
            # the most frequent next id; ties go to the most recent occurrence (first seen)
            t, c = max(counts.items(), key=lambda kv: kv[1])
            prob *= c / den
            if prob < self.min_prob:
                break
            ids.append(t)
            probs.append(prob)
            cur = [fwd[p % cap] for p in cur if p >= 0 and tok[p % cap] == t]
        if ids:
            self.hits += 1  # (``proposed``/``accepted_ids``: what the loop verified, by the drafter)
        return Proposal(ids, match_len=best, probs=tuple(probs), source="memory")

    def _matches(self, context: Sequence[int], L: int) -> tuple[int, list[int]]:
        """The longest match length and the end positions of the occurrences matching
        that far (newest first), from the longest key length that has any."""
        start, cap = self.start, self.cap
        fwd, back, tok = self._fwd, self._back, self._tok
        for n, head, prev, kstart, _, _ in self._keys:
            if L < n:
                continue
            e = head.get(hash(tuple(context[L - n :])), -1)
            best, occ, steps = 0, [], 0
            while e >= start and steps < 4 * self.max_candidates and len(occ) < self.max_candidates:
                steps += 1
                slot = e % cap
                if kstart[slot] >= start and fwd[slot] != OPEN:
                    m, p = 0, e  # how far back the context agrees with the text before e
                    while m < self.max_match and m < L and p >= start and tok[p % cap] == context[L - 1 - m]:
                        m += 1
                        p = back[p % cap]
                    if m >= n:  # (below n: a hash collision)
                        if m > best:
                            best, occ = m, [e]
                        elif m == best:
                            occ.append(e)
                e = prev[slot]
            if best:
                return best, occ
        return 0, []

    # -- the window, for tests and the store ----------------------------------------
    def documents(self) -> list[tuple[list[int], list[int], bool]]:
        """The window as document fragments in order of their first position: (positions,
        tokens, closed) each. A fragment starts where its document entered the window."""
        start, cap = self.start, self.cap
        out = []
        for p in range(start, self._next):
            slot = p % cap
            if self._back[slot] >= start:
                continue  # not the first of its fragment
            positions, q = [], p
            while q >= 0:
                positions.append(q)
                q = self._fwd[q % cap]
            out.append((positions, [self._tok[x % cap] for x in positions], q == END))
        return out
