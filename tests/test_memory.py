"""The memory drafter (decoding/memory.py): prompt lookup per request, plus a global index
of earlier answers that outlives requests, and what the policy learns of each source."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.costmodel.costs import CPU_VERIFY_PRIOR, OnlineCost
from edgespec.decoding.acceptance import MemoryAcceptance
from edgespec.decoding.drafters import NgramDrafter, Proposal
from edgespec.decoding.memory import MemoryDrafter
from edgespec.decoding.policy import DraftPolicy
from edgespec.decoding.suffix import SuffixIndex


def drafter(memory: SuffixIndex | None, seed_len: int = 2) -> MemoryDrafter:
    return MemoryDrafter(NgramDrafter(), memory, seed_len=seed_len)


def sources(d: MemoryDrafter, tokens, k=4) -> dict[str, list[int]]:
    return {p.source: p.ids for p in d.candidates(tokens, k)}


def test_a_finished_requests_context_cannot_steer_the_next_ones_context_matches():
    memory = SuffixIndex(1000)
    d = drafter(memory, seed_len=6)
    secret = [901, 902, 903, 904, 905, 906, 907, 908]
    first = [1, 2, 3, *secret, 4, 5]
    d.begin(first)
    assert sources(d, first + [901, 902])["prompt"][:2] == [903, 904]  # its own prompt drafts
    d.end(first + [30, 31])
    second = [6, 901, 902, 903]
    d.begin(second)
    # prompt lookup holds the second prompt only: "902 903 -> 904" came from the first
    # request's prompt, which the memory never held (it keeps answers, seeded with the
    # prompt's last tokens)
    assert d.lookup._tokens == second
    assert sources(d, second) == {}
    # the first answer (its rejected drafts 901 902 taken back), then the second's seed
    assert [toks for _, toks, _ in memory.documents()] == [[*secret[-4:], 4, 5, 30, 31], second]


def test_without_a_memory_nothing_carries_over():
    d = drafter(None)
    d.begin([1, 2, 3, 4, 5, 6])
    assert d.propose([1, 2, 3, 4, 5, 6, 1, 2], 4).ids == [3, 4, 5, 6]
    d.end([1, 2, 3, 4, 5, 6, 1, 2])
    d.begin([9, 1, 2])
    assert d.candidates([9, 1, 2], 4) == []


def test_an_answer_is_written_into_the_memory_and_drafts_the_next_answers_first_ids():
    memory = SuffixIndex(1000)
    d = drafter(memory)
    header = [100, 101]
    d.begin([5, 5, *header])
    d.end([5, 5, *header, 20, 21, 22, 23])
    d.begin([6, 6, *header])
    p = d.propose([6, 6, *header], 4)
    assert p.source == "memory" and p.ids == [20, 21] and p.probs == (1.0, 1.0)
    d.accepted(p, 2)  # the loop credits the source it verified
    assert memory.accepted_ids == 2 and memory.hits == 1


def test_the_memory_is_credited_with_its_own_kept_ids_not_the_grammars():
    from edgespec.decoding.verify import with_forced

    memory = SuffixIndex(1000)
    d = drafter(memory)
    p = with_forced(Proposal([20, 21, 22], source="memory"), [7, 8])  # two forced ids lead it
    d.accepted(p, 4)  # both forced ids and two of the memory's three
    assert (memory.proposed, memory.accepted_ids) == (3, 2)
    d.accepted(p, 1)  # a forced id lost: none of the memory's was kept
    assert (memory.proposed, memory.accepted_ids) == (6, 2)


def test_two_sequences_of_one_batch_draft_from_each_others_answer_as_it_is_written():
    memory = SuffixIndex(1000)
    a, b = drafter(memory), drafter(memory)
    a.begin([1, 100, 101])
    b.begin([2, 100, 101])
    a.candidates([1, 100, 101, 30, 31, 32, 33], 4)  # a has written 30..33, still open
    assert sources(b, [2, 100, 101]) == {"memory": [30, 31]}


def test_grammar_drafts_the_target_did_not_keep_are_taken_back():
    memory = SuffixIndex(1000)
    d = drafter(memory)
    prompt = list(range(100, 400))
    d.begin(prompt)
    d.candidates(prompt + [7, 8, 9], 4)  # the grammar's likely tokens, handed in as text
    d.candidates(prompt + [7, 5], 4)  # 8 and 9 were rejected
    d.end(prompt + [7, 5, 6])
    assert [toks for _, toks, _ in memory.documents()] == [prompt[-2:] + [7, 5, 6]]


def test_when_another_sequence_wrote_after_the_drafts_the_answer_goes_on_in_a_new_document():
    memory = SuffixIndex(1000)
    a, b = drafter(memory), drafter(memory)
    a.begin([1, 2, 3])
    b.begin([4, 5, 6])
    a.candidates([1, 2, 3, 7, 8, 9], 4)
    b.candidates([4, 5, 6, 10], 4)
    a.candidates([1, 2, 3, 7, 5], 4)  # 8 9 rejected, but b's 10 came after them
    assert [(toks, closed) for _, toks, closed in memory.documents()] == [
        ([2, 3, 7, 8, 9], True),
        ([5, 6, 10], False),
        ([3, 7, 5], False),
    ]


def test_a_drafter_built_for_a_request_drafts_from_its_memory_only():
    mine, theirs = SuffixIndex(100), SuffixIndex(100)
    d = drafter(theirs)
    d.begin([1, 100, 101])
    d.end([1, 100, 101, 40, 41, 42])
    d = MemoryDrafter(d.lookup, mine, seed_len=2)  # the next request's drafter (Drafting.for_request)
    d.begin([2, 100, 101])
    assert d.candidates([2, 100, 101], 4) == []  # another key's answers are not drafted from
    d.end([2, 100, 101, 50, 51])
    assert [t for _, t, _ in mine.documents()] == [[100, 101, 50, 51]]


# -- the policy's view of the memory ----------------------------------------------------
def test_memory_rates_are_learned_and_kept_across_generations():
    pol = DraftPolicy("ngram", OnlineCost(CPU_VERIFY_PRIOR))
    probs = (0.9, 0.81, 0.73)
    before = pol.mem.rates(8, probs, 3, pol.mem.beta.mean())
    for _ in range(40):
        pol.observe(batch=4, tested=3, accepted=3, verify_seconds=0.0, source="memory", match_len=8, probs=probs)
    pol.begin()  # a new generation: prompt lookup's rates start over, the memory's stay
    after = pol.mem.rates(8, probs, 3, pol.mem.beta.mean())
    assert all(a > b + 0.1 for a, b in zip(after, before)) and min(after) > 0.85


def test_the_memorys_rates_are_its_own_so_each_index_learns_its_workload():
    probs = (0.9, 0.81, 0.73)
    mine, theirs = SuffixIndex(100), SuffixIndex(100)
    pol = DraftPolicy("ngram", OnlineCost(CPU_VERIFY_PRIOR))
    pol.begin(memory=mine)
    for _ in range(40):
        pol.observe(batch=4, tested=3, accepted=0, verify_seconds=0.0, source="memory", match_len=8, probs=probs)
    assert pol.mem is mine.rates
    pol.begin(memory=theirs)  # another API key's requests: judged by what theirs learned
    fresh = MemoryAcceptance().rates(8, probs, 3, MemoryAcceptance().beta.mean())
    assert pol.mem.rates(8, probs, 3, pol.mem.beta.mean()) == fresh
    assert max(mine.rates.rates(8, probs, 3, mine.rates.beta.mean())) < 0.1
    pol.begin(memory=None)  # a request without the memory leaves the last one's rates alone
    assert pol.mem is theirs.rates


def test_the_loop_verifies_the_candidate_the_policy_ranks_higher():
    pol = DraftPolicy("ngram", OnlineCost(CPU_VERIFY_PRIOR))
    for _ in range(60):  # this workload's memory drafts are always right
        pol.observe(batch=9, tested=8, accepted=8, verify_seconds=0.0, source="memory", match_len=12, probs=(1.0,) * 8)
    pol.limit(15)
    short_lookup = pol.rank([1, 2, 3], match_len=2, source="prompt")
    long_memory = pol.rank(list(range(8)), match_len=12, source="memory", probs=(1.0,) * 8)
    assert long_memory > short_lookup > 0


def test_the_prior_discounts_the_count_ratio_most_for_short_matches():
    acc = MemoryAcceptance()
    means = acc.beta.mean()
    short, long_ = means[acc.bucket(2, 1.0)], means[acc.bucket(20, 1.0)]
    assert short < long_ < 1.0 and means[acc.bucket(20, 0.3)] < long_
    assert np.all((means > 0) & (means < 1))


@pytest.mark.parametrize("accepted", [0, 2])
def test_a_forced_prefix_is_not_learned_as_the_memorys(accepted):
    pol = DraftPolicy("ngram", OnlineCost(CPU_VERIFY_PRIOR))
    acc, rej = pol.mem.beta.acc.copy(), pol.mem.beta.rej.copy()
    # two forced tokens, then one memory id: a forced one lost (0), or both kept and the
    # memory's id rejected (2)
    pol.observe(
        batch=4, tested=3, accepted=accepted, verify_seconds=0.0, forced=2, source="memory", match_len=6, probs=(0.9,)
    )
    b = pol.mem.bucket(6, 0.9)
    if accepted == 0:  # the memory's id was never tested
        assert np.array_equal(pol.mem.beta.acc, acc) and np.array_equal(pol.mem.beta.rej, rej)
    else:
        assert pol.mem.beta.rej[b] == pytest.approx(rej[b] * pol.mem.beta.decay + 1.0)
        assert pol.mem.beta.acc[b] == pytest.approx(acc[b] * pol.mem.beta.decay)


# -- on a real (tiny) model ----------------------------------------------------------------
from edgespec import DraftingOptions, Engine  # noqa: E402

# prompts that differ at the start and end alike: their answers share a shape
REPEATS = [
    f"{w} the quick brown fox jumps over the lazy dog and then"
    for w in ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot")
]
SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer", "minimum": 0, "maximum": 999},
        "name": {"type": "string", "maxLength": 12},
    },
    "required": ["id", "name"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engines(tiny_target):
    with (
        Engine(tiny_target, draft=None, n_ctx=512, exact=True, n_threads=1) as plain,
        Engine(
            tiny_target, draft="ngram", n_ctx=512, exact=True, n_threads=1, drafting=DraftingOptions(k=4)
        ) as remembering,
    ):  # (a fixed k: every proposal is verified)
        yield plain, remembering


@pytest.mark.parametrize(
    "options",
    [
        {"max_tokens": 40},
        {
            "max_tokens": 40,
            "response_format": {"type": "json_schema", "json_schema": {"name": "thing", "schema": SCHEMA}},
        },
    ],
)
def test_with_exact_kernels_greedy_output_with_the_memory_equals_plain_decoding(engines, options):
    plain, remembering = engines
    remembering.memory.clear()
    kept = 0
    for p in REPEATS:
        want = plain.generate(p, raw=True, **options)
        got = remembering.generate(p, raw=True, **options)
        assert got.token_ids == want.token_ids and got.structured_complete == want.structured_complete
        kept += got.stats.accepted_by_source.get("memory", 0)
    assert kept > 0, "the memory never drafted: the test would prove nothing"
    assert len(remembering.memory) > 0


def test_a_request_may_draft_from_no_memory_or_its_own(engines):
    _, e = engines
    e.memory.clear()
    mine = SuffixIndex(1000)
    e.generate(REPEATS[0], raw=True, max_tokens=20, memory=mine)
    assert len(mine) > 0 and len(e.memory) == 0  # written into the request's index only
    r = e.generate(REPEATS[0], raw=True, max_tokens=20, memory=False)
    assert "memory" not in r.stats.drafted_by_source and len(e.memory) == 0
    with pytest.raises(Exception, match="memory must be"):
        e.generate(REPEATS[0], raw=True, max_tokens=4, memory="yes")


def test_the_sequences_of_a_batch_write_into_the_engines_memory(engines):
    plain, e = engines
    e.memory.clear()
    out = {o.key: o.result for o in e.generate_many(REPEATS, parallel=3, raw=True, max_tokens=24)}
    assert len(e.memory) > 0
    for i, p in enumerate(REPEATS):  # and each still answers as plain decoding does
        assert out[i].token_ids == plain.generate(p, raw=True, max_tokens=24).token_ids


def test_an_engine_without_memory_has_none(tiny_target):
    with Engine(tiny_target, draft="ngram", n_ctx=128, n_threads=1, drafting=DraftingOptions(memory=False)) as e:
        assert e.memory is None
        r = e.generate(REPEATS[0], raw=True, max_tokens=8)
        assert "memory" not in r.stats.drafted_by_source
    with pytest.raises(Exception, match="memory cap"):
        Engine(tiny_target, n_ctx=128, drafting=DraftingOptions(memory_cap=0))
