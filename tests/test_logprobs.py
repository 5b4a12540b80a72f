"""Token log-probabilities (issue 28, item 7): ``logprobs`` on ``Engine.stream`` /
``generate`` and batch sequences. Under greedy decoding with ``exact`` kernels a
speculative run (prompt lookup, the target drafting for itself) commits plain
decoding's tokens, and each token's logprob is read from the verify row it was chosen
from: the same numbers as plain decoding's, within float tolerance. Asked for nothing,
nothing is computed."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgespec import DraftingOptions, Engine
from edgespec.batching.run import PreparedBatch, Request
from edgespec.decoding.logprob import token_logprob
from edgespec.errors import InputError
from edgespec.events import Token

PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"
TOP = 5


def test_token_logprob_is_the_log_softmax_with_the_likeliest_first():
    row = np.array([1.0, 3.0, -math.inf, 2.0, 3.0], dtype=np.float32)
    lse = math.log(math.exp(1) + 2 * math.exp(3) + math.exp(2))
    lp = token_logprob(row, 3, 4)
    assert lp.id == 3 and lp.logprob == pytest.approx(2 - lse)
    assert [t for t, _ in lp.top] == [1, 4, 3, 0]  # highest first; a banned token never listed
    assert [v for _, v in lp.top] == pytest.approx([3 - lse, 3 - lse, 2 - lse, 1 - lse])
    assert sum(math.exp(v) for _, v in lp.top) == pytest.approx(1.0)
    assert token_logprob(row, 1, 0).top == ()
    assert len(token_logprob(row, 1, 20).top) == 4  # at most the finite ones


@pytest.fixture(scope="module")
def plain(tiny_target, engines):
    return engines(tiny_target)


def assert_same_logprobs(got, want):
    assert got.token_ids == want.token_ids
    assert len(got.logprobs) == len(want.logprobs) == len(want.token_ids)
    for a, b, tok in zip(got.logprobs, want.logprobs, want.token_ids):
        assert a.id == b.id == tok
        assert a.logprob == pytest.approx(b.logprob, abs=1e-4)
        assert [t for t, _ in a.top] == [t for t, _ in b.top]
        assert [v for _, v in a.top] == pytest.approx([v for _, v in b.top], abs=1e-4)


CASES = [
    {},
    {"logit_bias": {50: 4.0, 51: -math.inf}, "repeat_penalty": 1.3},  # the row as the sampler sees it
    {"response_format": {"type": "regex", "regex": "[a-z ]{4,40}"}},  # masked rows
]


@pytest.mark.parametrize("draft", ["ngram", "same", "noisy"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_speculation_gives_plain_decodings_logprobs(tiny_target, tiny_same, tiny_noisy, plain, draft, case):
    options = {"max_tokens": 24, "logprobs": TOP, **CASES[case]}
    want = plain.generate(PROMPT, **options)
    assert len(want.token_ids) > 4
    drafter = {"ngram": "ngram", "same": tiny_same, "noisy": tiny_noisy}[draft]
    with Engine(tiny_target, draft=drafter, n_ctx=512, drafting=DraftingOptions(k=4), exact=True, n_threads=1) as spec:
        got = spec.generate(PROMPT, **options)
    # drafts were verified (and, from the noisy drafter, rejected): the logprobs came from
    # verify rows past accepted drafts and from correction rows (prompt lookup finds
    # matches in the free reply only: the bias and penalty steer the others off them)
    if draft != "ngram" or case == 0:
        assert got.stats.accepted > 0 and (draft != "noisy" or got.stats.rejected > 0)
    assert_same_logprobs(got, want)
    for lp in want.logprobs:
        assert lp.logprob <= 0 and len(lp.top) == TOP
        assert lp.top[0][0] == lp.id  # greedy: the chosen token is the likeliest
        assert lp.top[0][1] == pytest.approx(lp.logprob)


def test_every_token_event_carries_its_logprob_and_none_when_not_asked(plain):
    events = [ev for ev in plain.stream(PROMPT, max_tokens=8, logprobs=0) if isinstance(ev, Token) and ev.id >= 0]
    assert events and all(ev.logprob is not None and ev.logprob.id == ev.id and ev.logprob.top == () for ev in events)
    off = plain.generate(PROMPT, max_tokens=8)
    assert off.logprobs is None and "logprobs" not in off.to_dict()
    assert all(ev.logprob is None for ev in plain.stream(PROMPT, max_tokens=8) if isinstance(ev, Token))
    assert len(plain.generate(PROMPT, max_tokens=8, logprobs=2).to_dict()["logprobs"]) == 8


def test_logprobs_do_not_depend_on_the_temperature(plain):
    """The numbers are the log-softmax before temperature (and before top-k): a sampled
    run's first token is scored as the greedy run scores that same token at the same
    position. top_k=20 keeps every sampled token among the 20 the greedy run lists, so
    each seed makes a comparison, and some seed samples another token than greedy's."""
    greedy = plain.generate(PROMPT, max_tokens=1, logprobs=20)
    table = dict(greedy.logprobs[0].top)
    assert len(table) == 20
    sampled = []
    for seed in range(8):
        hot = plain.generate(PROMPT, max_tokens=1, logprobs=0, temperature=1.5, top_k=20, seed=seed)
        tok = hot.logprobs[0].id
        assert tok in table
        assert hot.logprobs[0].logprob == pytest.approx(table[tok], abs=1e-4)
        sampled.append(tok)
    assert set(sampled) - {greedy.logprobs[0].id}, "every seed sampled the greedy token: nothing was tempered"


def test_batch_sequences_give_their_solo_runs_logprobs(tiny_target, plain):
    reqs = [Request(i, PROMPT + " " * i, {"max_tokens": 10 + 3 * i, "logprobs": 3}) for i in range(3)]
    reqs.append(Request(3, PROMPT, {"max_tokens": 6}))  # not asked: none
    with Engine(tiny_target, draft="ngram", n_ctx=512, exact=True, n_threads=1) as ngram:
        out = {o.key: o for o in PreparedBatch(ngram, reqs, parallel=4)}
    for r in reqs[:3]:
        assert out[r.key].error is None
        assert_same_logprobs(out[r.key].result, plain.generate(r.prompt, **r.options))
    assert out[3].result.logprobs is None


def test_logprobs_out_of_range_is_an_input_error(plain):
    for bad in (-1, 21, True, 1.5):
        with pytest.raises(InputError, match="logprobs"):
            plain.generate(PROMPT, max_tokens=2, logprobs=bad)
