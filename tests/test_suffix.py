"""The suffix memory (edgespec.decoding.suffix): drafts scored by count ratios, documents
written concurrently, FIFO eviction under a cap, and the request index reset per request.

The property tests hold the index to two references: a fresh index built from the
tokens the window still holds (after any history of appends, closes and evictions the
state must be the same), and a brute-force proposer over the window's text (every draft
is a continuation seen there, with the same count ratios)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgespec.decoding.suffix import END, OPEN, SuffixIndex


def index_of(*docs, cap=1000, close=True, **kw):
    ix = SuffixIndex(cap, **kw)
    for toks in docs:
        d = ix.open()
        ix.extend(d, toks)
        if close:
            ix.close(d)
    return ix


# -- scoring ------------------------------------------------------------------------
def test_count_ratios_make_the_path_probability():
    # "1 2 3" was followed by 4 twice and by 9 once: p(4) = 2/3; then 5 after both 4s
    ix = index_of([1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 5, 7], [1, 2, 3, 9, 9, 9])
    p = ix.propose([8, 1, 2, 3], 8)
    assert p.ids == [4, 5, 7] and p.match_len == 3 and p.q is None
    assert p.probs == pytest.approx((2 / 3, 2 / 3, 1 / 3))


def test_a_proposal_is_a_fixed_proposal_from_the_memory():
    p = index_of([1, 2, 3]).propose([1, 2], 2)
    assert (p.ids, p.q, p.source, p.forced, p.confidence) == ([3], None, "memory", 0, ())


def test_draft_stops_under_the_minimum_probability():
    # ten continuations, all different: p = 0.1 for the first is not under 0.1; 1/11 is
    docs = [[5, 6, 10 + i] for i in range(10)]
    assert index_of(*docs).propose([5, 6], 4).ids == [19]  # ties: the most recent
    assert index_of(*docs, [5, 6, 99]).propose([5, 6], 4).ids == []


def test_draft_length_is_alpha_times_the_match_and_at_most_k():
    ix = index_of([1, 2, 3, 4, 5, 6, 7, 8, 9])
    assert ix.propose([1, 2], 8).ids == [3, 4]  # match 2, alpha 1
    assert ix.propose([1, 2, 3, 4], 8).ids == [5, 6, 7, 8]
    assert ix.propose([1, 2, 3, 4], 3).ids == [5, 6, 7]
    assert index_of([1, 2, 3, 4, 5, 6, 7, 8, 9], alpha=2.0).propose([1, 2], 8).ids == [3, 4, 5, 6]


def test_the_longest_match_wins_over_more_frequent_shorter_ones():
    ix = index_of([7, 1, 2, 3, 0], [8, 2, 3, 5], [8, 2, 3, 5], [8, 2, 3, 5])
    assert ix.propose([7, 1, 2, 3], 4).ids == [0]  # the 4-token match, seen once
    p = ix.propose([6, 1, 9, 2, 3], 4)  # "2 3" only: 5 three times of four, then the ends
    assert p.ids == [5] and p.probs == (0.75,)


def test_an_open_document_never_matches_its_own_tail():
    ix = SuffixIndex(100)
    d = ix.open()
    ix.extend(d, [1, 2, 3, 4])
    assert ix.propose([1, 2, 3, 4], 4).ids == []  # its only occurrence has no continuation yet
    ix.extend(d, [1, 2, 3, 4])
    assert ix.propose([1, 2, 3, 4], 4).ids == [1, 2, 3, 4]


def test_a_closed_document_end_counts_as_a_continuation_that_stopped():
    ix = index_of([1, 2, 3], [1, 2, 4])  # "1 2" -> 3 once, 4 once, each then ended
    p = ix.propose([1, 2], 4)
    assert p.ids == [4] and p.probs == (0.5,)


def test_concurrent_documents_draft_from_each_other_as_they_are_written():
    ix = SuffixIndex(100)
    a, b = ix.open(), ix.open()
    for t in [10, 11, 12, 13, 14, 15]:
        ix.append(a, t)
        ix.append(b, 50 + t)  # interleaved in the ring
    ix.extend(b, [10, 11])
    assert ix.propose([60, 61, 10, 11], 4).ids == [12, 13]
    ix.append(a, 16)
    assert ix.propose([60, 61, 10, 11, 12, 13, 14, 15], 4).ids == [16]


# -- the cap and eviction -----------------------------------------------------------
def test_the_cap_evicts_first_in_first_out():
    ix = SuffixIndex(8)
    d = ix.open()
    ix.extend(d, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12])
    assert len(ix) == 8 and ix.start == 4
    assert ix.documents() == [(list(range(4, 12)), [5, 6, 7, 8, 9, 10, 11, 12], False)]
    assert ix.propose([1, 2], 4).ids == []  # evicted
    assert ix.propose([3, 4], 4).ids == []  # "4" left: the bigram is not whole
    assert ix.propose([6, 7], 4).ids == [8, 9]


def test_eviction_keeps_a_chain_whose_newer_entries_are_whole():
    # a slow document's bigram starts first but ends last; evicting its start must not
    # drop the other document's entry for the same bigram from the chain head
    ix = SuffixIndex(6)
    a, b = ix.open(), ix.open()
    ix.append(a, 1)  # pos 0
    ix.extend(b, [1, 2, 3])  # pos 1..3
    ix.append(a, 2)  # pos 4: "1 2" of a ends here, starts at 0
    ix.append(b, 4)  # pos 5
    ix.append(b, 0)  # pos 6: evicts pos 0
    assert ix.propose([1, 2], 4).ids == [3, 4]


def heads_are_whole(ix):
    """Every chain head points at an entry whose n-gram is still whole in the window
    (so that the heads, like the window, are bounded by the cap)."""
    return all(
        e >= ix.start and ix._kstart[i][e % ix.cap] >= ix.start
        for i, head in enumerate(ix._head)
        for e in head.values()
    )


def test_a_chain_head_skips_entries_broken_by_interleaved_evictions():
    # three documents write "1 2" interleaved: the chain is C (start 3) -> B (start 1) ->
    # A (start 0); evicting 0 and 1 breaks A and B in the middle of the chain, and when
    # C's start leaves, the head must not fall back onto B (broken, never cleaned again)
    ix = SuffixIndex(8)
    a, b, c, d = ix.open(), ix.open(), ix.open(), ix.open()
    for doc, t in [(a, 1), (b, 1), (a, 2), (c, 1), (b, 2), (c, 2)]:
        ix.append(doc, t)
    for t in range(100, 106):
        ix.append(d, t)
        assert heads_are_whole(ix)
    assert ix.propose([1, 2], 4).ids == []


def test_taking_back_drafts_restores_what_the_index_answers():
    ix = SuffixIndex(100)
    d = ix.open()
    ix.extend(d, [1, 2, 3, 4, 1, 2, 3, 4, 1, 2])
    before = ix.propose([1, 2], 4)
    ix.extend(d, [9, 9, 9])  # drafts the target rejected
    ix.pop(d, 3)
    assert ix.propose([1, 2], 4) == before and len(ix) == 10
    ix.extend(d, [3, 5])  # "4 1 2 3" -> 4 before, 5 now; the 9s are gone
    assert ix.documents()[0][1] == [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 5]
    p = ix.propose([4, 1, 2, 3], 4)
    assert p.ids == [5] and p.probs == (0.5,)
    assert ix.propose([2, 9], 4).ids == [] and ix.propose([9, 9], 4).ids == []
    other = ix.open()
    ix.append(other, 7)
    with pytest.raises(ValueError):
        ix.pop(d, 1)  # another document wrote after it


def test_clear_forgets_every_token():
    ix = index_of([1, 2, 3, 4])
    ix.clear()
    assert len(ix) == 0 and ix.documents() == [] and ix.propose([1, 2], 4).ids == []


def test_bad_arguments_are_refused():
    with pytest.raises(ValueError):
        SuffixIndex(0)
    with pytest.raises(ValueError):
        SuffixIndex(10, key_lens=(30,), max_match=24)


# -- properties ---------------------------------------------------------------------
ops = st.lists(
    st.one_of(
        st.tuples(st.just("open")),
        st.tuples(st.just("append"), st.integers(0, 3), st.integers(0, 3)),
        st.tuples(st.just("close"), st.integers(0, 3)),
        st.tuples(st.just("pop"), st.integers(0, 3), st.integers(1, 3)),
    ),
    max_size=80,
)


def run_history(cap, history, **kw):
    ix = SuffixIndex(cap, **kw)
    docs = [ix.open()]
    for op in history:
        if op[0] == "open":
            docs.append(ix.open())
        elif op[0] == "append":
            d = docs[op[1] % len(docs)]
            if d in ix._docs:
                ix.append(d, op[2])
        elif op[0] == "pop":
            d = docs[op[1] % len(docs)]
            if d in ix._docs:
                try:
                    ix.pop(d, op[2])
                except ValueError:
                    pass  # not the newest tokens of the index: refused (maybe after a few)
        else:
            ix.close(docs[op[1] % len(docs)])
        assert len(ix) <= cap and ix.chain_heads() <= 2 * len(ix) and heads_are_whole(ix)
    return ix


def gram_at(ix, start, n):
    out, q = [], start
    for _ in range(n):
        out.append(ix._tok[q % ix.cap])
        q = ix._fwd[q % ix.cap]
    return tuple(out)


def canonical(ix):
    """The index's state relative to its window start: each position's token and links,
    and each key length's chains (the whole entries, newest first)."""
    s, cap = ix.start, ix.cap
    rel = lambda p: p - s if p >= s else (p if p in (OPEN, END) else -1)  # noqa: E731
    cells = [(ix._tok[p % cap], rel(ix._back[p % cap]), rel(ix._fwd[p % cap])) for p in range(s, ix._next)]
    chains = []
    for i, n in enumerate(ix.key_lens):
        chain = {}
        for e in ix._head[i].values():
            assert e >= s and ix._kstart[i][e % cap] >= s, "a chain head points at a broken entry"
            gram, entries = gram_at(ix, ix._kstart[i][e % cap], n), []
            while e >= s:
                if ix._kstart[i][e % cap] >= s:
                    entries.append(e - s)
                e = ix._prev[i][e % cap]
            chain[gram] = entries
        chains.append(chain)
    return cells, chains


def rebuilt(ix):
    """A fresh index fed the window's tokens in their order, one document per fragment."""
    fresh = SuffixIndex(ix.cap, key_lens=ix.key_lens, max_match=ix.max_match)
    frags = ix.documents()
    owner = {p: f for f, (positions, _, _) in enumerate(frags) for p in positions}
    docs = {}
    for p in range(ix.start, ix._next):
        f = owner[p]
        if f not in docs:
            docs[f] = fresh.open()
        fresh.append(docs[f], ix._tok[p % ix.cap])
    for f, (_, _, closed) in enumerate(frags):
        if closed:
            fresh.close(docs[f])
    return fresh


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 12), ops)
def test_after_any_history_the_index_equals_a_fresh_one_of_its_window(cap, history):
    ix = run_history(cap, history, key_lens=(3, 1), max_match=6)
    assert canonical(ix) == canonical(rebuilt(ix))


def brute_force(ix, context, k):
    """The proposal by its definition, over the window's text."""
    best, occ = 0, []
    for positions, toks, closed in ix.documents():
        for j in range(len(toks)):
            if j == len(toks) - 1 and not closed:
                continue  # no continuation written yet
            m = 0
            while m < ix.max_match and m < len(context) and j - m >= 0 and toks[j - m] == context[-1 - m]:
                m += 1
            if m >= min(ix.key_lens) and m >= best:
                if m > best:
                    best, occ = m, []
                occ.append((positions[j], toks, j + 1, closed))
    occ.sort(key=lambda o: -o[0])
    cur = [(toks, j, closed) for _, toks, j, closed in occ]
    ids, prob = [], 1.0
    while best and len(ids) < min(k, int(ix.alpha * best + 1e-9)):
        counts, den = {}, 0
        for toks, j, closed in cur:
            if j < len(toks) or closed:
                den += 1
            if j < len(toks):
                counts[toks[j]] = counts.get(toks[j], 0) + 1
        if not counts:
            break
        t, c = max(counts.items(), key=lambda kv: kv[1])
        prob *= c / den
        if prob < ix.min_prob:
            break
        ids.append(t)
        cur = [(toks, j + 1, closed) for toks, j, closed in cur if j < len(toks) and toks[j] == t]
    return ids, best if ids else None


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 16), ops, st.lists(st.integers(0, 3), min_size=1, max_size=8), st.integers(1, 6))
def test_proposals_are_the_brute_force_continuations_of_the_window(cap, history, context, k):
    ix = run_history(cap, history, key_lens=(4, 2), max_match=6, max_candidates=10**6)
    p = ix.propose(context, k)
    ids, m = brute_force(ix, context, k)
    assert p.ids == ids
    if ids:
        assert p.match_len == m
        # and it is literally there: the matched context followed by the draft
        needle = list(context[-m:]) + p.ids
        assert any(needle == toks[i : i + len(needle)] for _, toks, _ in ix.documents() for i in range(len(toks)))
        assert all(a >= b for a, b in zip(p.probs, p.probs[1:])) and p.probs[-1] >= ix.min_prob
