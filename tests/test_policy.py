"""The drafting policy (edgespec.decoding.policy) on synthetic costs, timings and acceptances."""

from __future__ import annotations

import numpy as np
import pytest

from edgespec.costmodel.adaptive import VerifyCost
from edgespec.costmodel.costs import CPU_VERIFY_PRIOR, OnlineCost
from edgespec.decoding.acceptance import MatchAcceptance, match_bucket
from edgespec.decoding.drafters import BaseDrafter, Proposal
from edgespec.decoding.params import SamplingParams
from edgespec.decoding.policy import DraftPolicy, best_length
from edgespec.decoding.speculative import SpeculativeLoop
from edgespec.events import Stats

FLAT = VerifyCost((1, 16), (1.0, 1.05))
LINEAR = VerifyCost(tuple(range(1, 17)), tuple(float(n) for n in range(1, 17)))
# a CPU's tiled GEMM: 8 and 16 rows cost less than 7 and 15
TILED = VerifyCost(
    tuple(range(1, 17)),
    (1.0, 1.67, 2.2, 2.69, 3.3, 3.85, 4.61, 4.57, 5.3, 5.8, 6.2, 6.49, 7.2, 7.8, 8.31, 6.84),
)


def lengths(c: VerifyCost, alpha: float, l_max: int = 15) -> int:
    return best_length([alpha] * l_max, OnlineCost(c))[0]


def test_flat_cost_gives_long_drafts():
    assert lengths(FLAT, 0.9) == 15
    assert lengths(FLAT, 0.6) >= 4


def test_linear_cost_gives_no_drafts_whatever_the_acceptance():
    for alpha in (0.5, 0.9, 0.99):
        assert lengths(LINEAR, alpha) == 0


def test_tile_effect_gives_drafts_of_7_or_15():
    for alpha in (0.95, 0.97, 0.99):
        assert lengths(TILED, alpha) == 15
    # with 8 or 9 tokens on offer, 7 (a batch of 8) beats both
    for available in (8, 9):
        assert best_length([0.99] * available, OnlineCost(TILED))[0] == 7
    # at a middling acceptance a short draft pays best; the curve decides, not a rule
    assert lengths(TILED, 0.9) == 3


def test_low_acceptance_on_a_cpu_drafts_nothing():
    assert lengths(TILED, 0.3) == 0


def test_plain_step_ratio_is_one_and_sunk_cost_counts():
    n, r = best_length([], OnlineCost(FLAT))
    assert (n, r) == (0, 1.0)
    n, r = best_length([0.0, 0.0], OnlineCost(FLAT), sunk=0.5)
    assert n == 0 and r == pytest.approx(1 / 1.5)


def test_online_cost_learns_c_from_timings():
    cost = OnlineCost(TILED)
    assert cost(8) == pytest.approx(4.57)
    # the machine really has c(n) = 1 + 0.1 (n - 1) with a 20 ms step (a GPU-like curve)
    for _ in range(60):
        for n in (1, 4, 8, 16):
            cost.observe(n, 0.020 * (1 + 0.1 * (n - 1)))
    assert cost.step_seconds == pytest.approx(0.020, rel=1e-6)
    assert cost(4) == pytest.approx(1.3, rel=0.1)
    assert cost(8) == pytest.approx(1.7, rel=0.1)
    assert cost(16) == pytest.approx(2.5, rel=0.1)
    # an n never measured follows the prior's shape, scaled like its measured
    # neighbours (8 and 16 cost ~0.37 of their prior, so 12 does too: 2.1 really)
    assert cost(12) == pytest.approx(6.49 * 0.37, rel=0.15)
    vc = cost.as_verify_cost()
    assert vc(1) == 1.0 and vc(16) == pytest.approx(cost(16))


def test_online_cost_scale_comes_from_any_batch_before_plain_steps():
    cost = OnlineCost(TILED)
    for _ in range(5):
        cost.observe(16, 0.030 * 6.84)  # only full verify batches so far
    assert cost.step_seconds == pytest.approx(0.030, rel=1e-6)
    cost.observe(0, 1.0)  # out of range: ignored
    cost.observe(3, float("nan"))
    assert cost.step_seconds == pytest.approx(0.030, rel=1e-6)


def test_online_cost_scales_the_prior_between_measured_batches():
    # a machine twice as slow at batches as the prior, measured only at 4 and 16 (what a
    # policy drafting 3 or 15 tokens sees): every n in between is believed slower too
    cost = OnlineCost(TILED)
    for _ in range(30):
        for n in (1, 4, 16):
            cost.observe(n, 0.01 * (1 + 2 * (TILED(n) - 1)))
    for n in (6, 8, 12):
        assert cost(n) == pytest.approx(1 + 2 * (TILED(n) - 1), rel=0.2)
    # past the last measured n, the last measured ratio holds
    cost = OnlineCost(TILED)
    for _ in range(30):
        cost.observe(1, 0.01)
        cost.observe(8, 0.01 * 0.5 * TILED(8))
    assert cost(12) == pytest.approx(max(1.0, 0.5 * TILED(12)), rel=0.05)


def test_online_cost_keeps_the_dip_it_measures():
    cost = OnlineCost(LINEAR)
    for _ in range(40):
        for n in (1, 7, 8):
            cost.observe(n, 0.01 * TILED(n))
    assert cost(8) < cost(7)


def test_match_buckets_are_ordered():
    assert [match_bucket(m) for m in (1, 2, 3, 5, 6, 7, 8)] == [0, 1, 2, 4, 5, 5, 6]
    assert match_bucket(500) == match_bucket(40)
    acc = MatchAcceptance()
    prior = acc.beta.mean()[: acc.brk]  # the last bucket is the break bucket
    assert all(np.diff(prior) > 0)  # longer matches are believed more


def simulate(policy: DraftPolicy, accept: callable, rounds: int, match_len: int = 12) -> list[int]:
    """Run ``rounds`` rounds where each draft is accepted iff accept(round, j); returns
    the number of drafts verified per round."""
    verified = []
    for r in range(rounds):
        l_max = policy.limit(15)
        ids = list(range(l_max))
        n = policy.choose(ids, match_len)
        acc = 0
        while acc < n and accept(r, acc):
            acc += 1
        # as the loop does: when every draft was kept, the next proposed id is judged
        # by the round's own next token, for free
        next_ok = accept(r, n) if acc == n and n < len(ids) else None
        policy.observe(
            batch=n + 1,
            tested=n,
            accepted=acc,
            verify_seconds=0.02 * TILED(n + 1),
            match_len=match_len,
            next_ok=next_ok,
        )
        verified.append(n)
    return verified


def test_backs_off_when_acceptance_collapses_and_comes_back_when_copying_resumes():
    policy = DraftPolicy("ngram", OnlineCost(TILED), seed=1)
    copying = lambda r, j: True  # noqa: E731
    first = simulate(policy, copying, 30)
    assert np.mean(first[-10:]) >= 7  # a copied span: long drafts
    collapsed = simulate(policy, lambda r, j: False, 60)
    assert collapsed[-20:].count(0) >= 17  # nothing accepted: it stops drafting ...
    # ... paying for few looks: a plain round sees whether the proposal was right for free
    assert sum(1 for n in collapsed[-40:] if n) <= 10
    resumed = simulate(policy, copying, 80)
    assert np.mean(resumed[-10:]) >= 7  # copying again: long drafts again


def test_policy_is_reproducible_and_begin_forgets_the_text_not_the_machine():
    a = DraftPolicy("ngram", OnlineCost(TILED), seed=3)
    b = DraftPolicy("ngram", OnlineCost(TILED), seed=3)
    pattern = lambda r, j: (r + j) % 3 != 0  # noqa: E731
    assert simulate(a, pattern, 40) == simulate(b, pattern, 40)
    learned_cost = a.cost(16)
    a.begin()
    assert np.allclose(a.acc.beta.mean(), MatchAcceptance().beta.mean())
    assert a.cost(16) == learned_cost


def test_model_drafter_stops_when_the_next_token_cannot_pay():
    # GPU-like costs, cheap drafts: keep drafting while confident, stop when not
    policy = DraftPolicy("model", OnlineCost(FLAT), gamma=0.05, l_max=8, seed=0)
    policy.observe(batch=1, tested=0, accepted=0, verify_seconds=0.008)  # the plain step the stop-loss counts in
    for _ in range(40):  # what this generation showed: confident drafts pass, unsure ones fail
        policy.limit(8)
        for j, conf in enumerate((0.999, 0.999, 0.05), start=1):
            policy.keep_drafting(j, conf)
        policy.observe(batch=4, tested=3, accepted=2, verify_seconds=0.01)
    assert policy.limit(8) == 8
    assert policy.keep_drafting(1, 0.999) and policy.keep_drafting(2, 0.999)
    assert not policy.keep_drafting(3, 0.05)
    assert policy.choose([5, 6, 7], confidence=(0.999, 0.999, 0.05)) >= 2
    # CPU-like costs and a draft costing half a step: even a sure token cannot pay
    cpu = DraftPolicy("model", OnlineCost(TILED), gamma=0.55, seed=0)
    assert cpu.limit(8) == 0


def test_model_drafter_learns_gamma_from_timings():
    policy = DraftPolicy("model", OnlineCost(FLAT), gamma=0.5, seed=0)
    for _ in range(30):
        policy.limit(8)
        policy.observe(batch=1, tested=0, accepted=0, verify_seconds=0.010)  # plain steps
        policy.observe(batch=3, tested=2, accepted=2, verify_seconds=0.0105, draft_seconds=0.002 * 2, drafted=2)
    assert policy.gamma == pytest.approx(0.2, abs=0.03)


def test_cpu_prior_has_the_tiles():
    assert CPU_VERIFY_PRIOR(8) < CPU_VERIFY_PRIOR(7)
    assert CPU_VERIFY_PRIOR(16) < CPU_VERIFY_PRIOR(15)


# -- where a copied span ends: the break bucket, and outcomes seen for free ------------------


def quoting(
    policy: DraftPolicy, rounds: int, breaks: bool, rng: np.random.Generator, continues: bool = False
) -> tuple[int, int, float]:
    """Rounds over a text that copies sentences of varying length: each proposal's
    span ends at a sentence break (at a random draft position, whatever the match
    length) unless ``continues`` (code: copying goes on across lines). Returns drafts
    verified, drafts accepted and the verify cost spent."""
    verified = accepted = 0
    cost = 0.0
    for _ in range(rounds):
        l_max = policy.limit(15)
        m, end = int(rng.integers(8, 40)), int(rng.integers(3, 12))
        ids = list(range(l_max))
        after = tuple(j == end for j in range(l_max)) if breaks else ()
        n = policy.choose(ids, m, (), after)
        acc = n if continues else min(n, end)
        next_ok = (continues or n < end) if acc == n and n < l_max else None
        policy.observe(
            batch=n + 1,
            tested=n,
            accepted=acc,
            verify_seconds=0.02 * TILED(n + 1),
            match_len=m,
            next_ok=next_ok,
            after_break=after,
        )
        verified, accepted, cost = verified + n, accepted + acc, cost + TILED(n + 1)
    return verified, accepted, cost


def test_a_learned_break_stops_drafts_at_the_end_of_the_copied_span():
    rng = np.random.default_rng(0)
    with_breaks = DraftPolicy("ngram", OnlineCost(TILED), seed=1)
    quoting(with_breaks, 40, True, rng)
    assert with_breaks.acc.beta.mean()[with_breaks.acc.brk] < 0.2  # spans end at breaks
    v, a, c = quoting(with_breaks, 60, True, rng)
    assert v - a <= 0.1 * v  # it stops at the break: few drafts wasted past it
    blind = DraftPolicy("ngram", OnlineCost(TILED), seed=1)
    quoting(blind, 40, False, rng)
    vb, ab, cb = quoting(blind, 60, False, rng)
    assert vb - ab > 3 * (v - a)  # without the feature it drafts past the end
    # tokens committed per unit of verify cost: knowing the break pays
    assert (a + 60) / c > 1.1 * (ab + 60) / cb


def test_breaks_do_not_cut_drafts_where_copying_goes_on_across_lines():
    rng = np.random.default_rng(0)
    policy = DraftPolicy("ngram", OnlineCost(TILED), seed=2)
    quoting(policy, 30, True, rng, continues=True)
    assert policy.acc.beta.mean()[policy.acc.brk] > 0.9
    v, a, _ = quoting(policy, 20, True, rng, continues=True)
    assert v >= 20 * 12 and a == v  # long drafts straight through the breaks


def test_plain_rounds_learn_from_the_proposal_they_did_not_verify():
    # A short match is not trusted at first (no drafts); plain steps whose token keeps
    # matching the proposal raise its rate for free, until drafting it pays.
    policy = DraftPolicy("ngram", OnlineCost(TILED), seed=0)
    acc = policy.acc

    def pays() -> int:
        return best_length(acc.rates(4, 15, acc.beta.mean()), policy.cost)[0]

    assert pays() == 0
    for _ in range(10):  # plain rounds: nothing verified, the next token was the proposal's
        policy.observe(batch=1, tested=0, accepted=0, verify_seconds=0.02, match_len=4, next_ok=True)
    assert pays() > 0
    for _ in range(10):  # and wrong ones count against it
        policy.observe(batch=1, tested=0, accepted=0, verify_seconds=0.02, match_len=4, next_ok=False)
    assert pays() == 0


class _CountingTarget:
    """A stand-in target context whose greedy next token is always the last one + 1."""

    n_ctx = 1 << 20
    n_batch = 512
    max_drafts = 511  # what a KV cache can undo: the whole verify

    def decode(self, tokens, rows):
        out = np.zeros((len(rows), 64), dtype=np.float32)
        for r in rows:
            out[r, (tokens[r] + 1) % 64] = 1.0
        return out

    def rollback(self, n):
        pass


class _Proposes(BaseDrafter):
    name = "ngram"

    def __init__(self, ids, after_break=()):
        self.ids, self.after_break = ids, after_break

    def propose(self, tokens, k, keep_drafting=None, guide=None, pick=None):
        return Proposal(list(self.ids[:k]), match_len=9, after_break=tuple(self.after_break[:k]))


class _Verifies:
    """A policy stub that verifies ``n`` drafts and records what the loop tells it."""

    bound = 15

    def __init__(self, n):
        self.n, self.seen = n, []

    def limit(self, l_max):
        return l_max

    def keep_drafting(self, j, conf):
        return True

    def choose(self, ids, match_len=0, confidence=(), after_break=(), forced=0, **_):
        return min(self.n, len(ids))

    def observe(self, **kw):
        self.seen.append(kw)


@pytest.mark.parametrize(
    "n, ids, next_ok",
    [
        (0, [6, 7, 8], True),  # plain step: the target's token 6 is the proposal's first id
        (0, [9, 7, 8], False),  # ... and here it is not
        (2, [6, 7, 8], True),  # both drafts kept: the bonus token 8 judges the third id
        (2, [6, 7, 3], False),
        (2, [6, 0, 8], None),  # a draft rejected: nothing more is known
        (3, [6, 7, 8], None),  # everything proposed was verified
    ],
)
def test_the_loop_tells_the_policy_the_outcome_of_the_first_unverified_id(n, ids, next_ok):
    policy = _Verifies(n)
    loop = SpeculativeLoop(
        target=_CountingTarget(),
        drafter=_Proposes(ids, (False, True, False)),
        committed=[4, 5],
        params=SamplingParams(temperature=0.0),
        rng=np.random.default_rng(0),
        policy=policy,
        stats=Stats(),
        n_vocab=64,
    )
    res = loop.round(16)
    assert res.tokens[: len(res.tokens) - 1] == ids[: len(res.tokens) - 1]
    seen = policy.seen[-1]
    assert seen["next_ok"] is next_ok and seen["after_break"] == (False, True, False)
    assert seen["match_len"] == 9


def test_prompt_lookup_marks_the_ids_that_follow_a_sentence_or_line_break():
    from edgespec.decoding.drafters import NgramDrafter, sentence_breaks

    pieces = {1: b"The", 2: b" cat", 3: b" sat", 4: b".", 5: b" It", 6: b" ran", 7: b"\n", 8: b" away"}

    class Vocab:
        asked: list[int] = []

        def token_to_bytes(self, t):
            self.asked.append(t)
            return pieces[t]

    vocab = Vocab()
    is_break = sentence_breaks(vocab)
    text = [1, 2, 3, 4, 5, 6, 7, 8, 2, 1, 2]
    prop = NgramDrafter(is_break=is_break).propose(text, 8)
    assert prop.ids == [3, 4, 5, 6, 7, 8, 2, 1] and prop.match_len == 2
    # the id after "." and the one after the newline; the first id follows " cat"
    assert prop.after_break == (False, False, True, False, False, True, False, False)
    asked = len(vocab.asked)
    NgramDrafter(is_break=is_break).propose(text, 8)
    assert len(vocab.asked) == asked  # cached: llama.cpp is asked once per id
    assert NgramDrafter().propose(text, 8).after_break == ()


def test_the_policy_measures_again_now_and_then_a_length_no_round_chooses():
    from edgespec.costmodel.costs import CPU_VERIFY_PRIOR, OnlineCost

    cost = OnlineCost(CPU_VERIFY_PRIOR)
    pol = DraftPolicy("ngram", cost)
    pol.begin(0)
    verified = []
    for _ in range(3000):
        pol.limit(15)
        n = pol.choose(list(range(15)), match_len=2, source="prompt")  # 2-token matches: rarely worth it
        verified.append(n + 1)
        cost.observe(n + 1, 0.02 * CPU_VERIFY_PRIOR(n + 1))
    assert pol.stats.probed_rounds > 0
    assert len(set(verified)) >= 8  # many lengths measured, not only the one chosen
    # within the budget: probes cost about 1% of the steps
    extra = sum(CPU_VERIFY_PRIOR(r) for r in verified) / sum(1 for _ in verified)
    assert extra < 1.5


# a CPU running Q4_K_M: verifying is dear (c(2) ~ 1.9, measured on the shell workload)
DEAR = VerifyCost((1, 2, 3, 4, 8, 16), (1.0, 1.9, 2.6, 3.2, 5.3, 9.4))


def explorations(monkeypatch, budget: bool, rounds: int = 1500) -> tuple[DraftPolicy, float]:
    """Rounds of prompt-lookup drafts right 60% of the time over matches of many lengths,
    where verifying is dear (a draft of one pays from 90%): the means say a draft does not
    pay, the posterior's draws of a bucket seen a few times often say it does. Returns the
    policy and the steps the rounds cost per token they gave (plain decoding: 1)."""
    import edgespec.decoding.policy as policy_module

    if not budget:
        monkeypatch.setattr(policy_module, "EXPLORE_ALLOWANCE", 1e9)
    rng = np.random.default_rng(5)
    cost = OnlineCost(DEAR)
    pol = DraftPolicy("ngram", cost, seed=3)
    pol.begin(0)
    steps = tokens = 0.0
    for _ in range(rounds):
        pol.limit(15)
        m = int(rng.integers(1, 40))
        n = pol.choose(list(range(15)), match_len=m, source="prompt")
        acc = 0
        while acc < n and rng.random() < 0.6:
            acc += 1
        next_ok = bool(rng.random() < 0.6) if acc == n else None
        pol.observe(
            batch=n + 1, tested=n, accepted=acc, verify_seconds=0.02 * DEAR(n + 1), match_len=m, next_ok=next_ok
        )
        steps += DEAR(n + 1)
        tokens += acc + 1
    return pol, steps / tokens


def test_explorations_where_drafts_do_not_pay_are_held_to_a_budget(monkeypatch):
    from edgespec.decoding.policy import EXPLORE_ALLOWANCE, EXPLORE_SHARE

    free, free_cost = explorations(monkeypatch, budget=False)  # every draw that says draft
    monkeypatch.undo()
    held, held_cost = explorations(monkeypatch, budget=True)
    assert held._explore_steps <= EXPLORE_SHARE * held.cost.observed_steps + EXPLORE_ALLOWANCE
    assert held.stats.explored_rounds <= 0.75 * free.stats.explored_rounds
    # what exploring costs is bounded: within a few percent of plain decoding's step a token
    assert held_cost < free_cost
    assert held_cost < 1.035


class _ForcesAKey:
    """A grammar stub: at the start it forces ``key`` (as a JSON schema forces the next
    key of an object), then lets anything through; it moves with the loop's tokens."""

    def __init__(self, key):
        self.key, self.consumed, self.t_mask = list(key), 0, 0.0

    def forced(self):
        return list(self.key) if self.consumed == 0 else []

    def likely(self):
        return []

    def consume(self, ids):
        self.consumed += len(ids)

    def rollback(self, n):
        self.consumed -= n

    def validate(self, ids):
        return len(ids)

    def masks(self, drafts, is_eog=None):
        return [None] * (len(drafts) + 1)


class _Chooses(_Verifies):
    def choose(self, ids, match_len=0, confidence=(), after_break=(), forced=0, **_):
        self.seen.append({"choose_match_len": match_len, "forced": forced, "ids": list(ids)})
        return forced


def test_a_lookup_after_the_grammars_tokens_is_judged_by_the_match_before_them():
    # The context holds an earlier item: 6, then key 10 11 12, then its value 20 21 22.
    # The grammar forces the key again after the model's own 6: prompt lookup finds the
    # earlier key and proposes the earlier value. Its match (6 10 11 12) is 4 tokens
    # long, but 3 of them are the grammar's, which match wherever the key repeats: the
    # evidence that the model copies is the one token before them.
    from edgespec.decoding.drafters import NgramDrafter

    policy = _Chooses(0)
    drafter = NgramDrafter()
    committed = [5, 6, 10, 11, 12, 20, 21, 22, 30, 6]
    drafter.begin(committed, None, None)
    loop = SpeculativeLoop(
        target=_CountingTarget(),
        drafter=drafter,
        committed=list(committed),
        params=SamplingParams(temperature=0.0),
        rng=np.random.default_rng(0),
        policy=policy,
        stats=Stats(),
        n_vocab=64,
        matcher=_ForcesAKey([10, 11, 12]),
        n_prompt=len(committed),
    )
    loop.round(16)
    chose = policy.seen[0]
    assert chose["forced"] == 3 and chose["ids"][:6] == [10, 11, 12, 20, 21, 22]
    assert chose["choose_match_len"] == 1
    assert policy.seen[-1]["match_len"] == 1  # and it learns in that match length's bucket
