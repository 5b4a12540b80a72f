"""Logit bias, ``ignore_eos`` and ``min_tokens`` (issue 22, item 6), in the library:
the sampling functions, then whole generations (single stream, speculative, batch) on a
tiny model whose greedy choice is end-of-generation at once (``eos_bias``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from edgespec import Engine
from edgespec.batching.run import PreparedBatch, Request
from edgespec.decoding.params import SamplingParams, params_from
from edgespec.decoding.sampling import apply_logit_bias, ban
from edgespec.decoding.text import TextAssembler
from edgespec.errors import InputError
from edgespec.events import Token
from tiny_models import make_tiny_model

PROMPT = "the quick brown fox"


def test_logit_bias_adds_and_bans_and_ban_sets_minus_infinity():
    row = np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    out = apply_logit_bias(row, ((0, 5.0), (3, -math.inf), (0, 1.0)))
    assert out.tolist() == [7.0, 2.0, 3.0, -math.inf]  # an id given twice gets both
    assert row.tolist() == [1.0, 2.0, 3.0, 4.0]  # the caller's row is left alone
    assert ban(row, (1, 2)).tolist() == [1.0, -math.inf, -math.inf, 4.0]


def test_params_from_takes_a_mapping_and_names_bad_options():
    p = params_from({"logit_bias": {5: -2.0, 7: -math.inf}, "ignore_eos": True, "min_tokens": 3})
    assert p.logit_bias == ((5, -2.0), (7, -math.inf)) and p.ignore_eos and p.min_tokens == 3 and p.bans_eog
    with pytest.raises(InputError, match="unknown generation option: top_q"):
        params_from({"top_q": 0.5})
    with pytest.raises(InputError, match="min_tokens"):
        params_from({"min_tokens": -1})
    with pytest.raises(InputError, match="logit_bias"):
        params_from({"logit_bias": {3: math.inf}})
    with pytest.raises(InputError, match="logit_bias"):
        SamplingParams(logit_bias=((400, 1.0),)).check_vocab(320)


@pytest.fixture(scope="module")
def eos_first(tmp_path_factory):
    # EOS is the greedy choice at every position: plain greedy decoding stops at once
    return make_tiny_model(tmp_path_factory.mktemp("eos_first") / "eos.gguf", eos_bias=30.0)


@pytest.fixture(scope="module")
def plain(eos_first, engines):
    return engines(eos_first, n_ctx=256)


def test_ignore_eos_and_min_tokens_keep_generating(plain):
    base = plain.generate(PROMPT, max_tokens=12)
    assert base.finish_reason == "stop" and len(base.token_ids) <= 1
    free = plain.generate(PROMPT, max_tokens=12, ignore_eos=True)
    assert free.finish_reason == "length" and len(free.token_ids) == 12
    assert not any(plain.target_model.is_eog(t) for t in free.token_ids)
    least = plain.generate(PROMPT, max_tokens=12, min_tokens=5)
    # EOS is banned for the first 5 tokens, then greedy picks it soon (it often leads)
    assert least.finish_reason == "stop" and 5 <= len(least.token_ids) < 12
    assert least.token_ids == free.token_ids[: len(least.token_ids)]


def test_min_tokens_holds_stop_strings_back_too(plain):
    free = plain.generate(PROMPT, max_tokens=12, ignore_eos=True)
    stop = free.text[:2]
    assert stop and plain.generate(PROMPT, max_tokens=12, ignore_eos=True, stop=stop).text == ""
    late = plain.generate(PROMPT, max_tokens=12, ignore_eos=True, stop=stop, min_tokens=6)
    assert len(late.token_ids) >= 6


def test_logit_bias_changes_greedy_choices(tiny_target):
    with Engine(tiny_target, draft=None, n_ctx=256, exact=True, n_threads=1) as e:
        base = e.generate(PROMPT, max_tokens=8)
        first = base.token_ids[0]
        banned = e.generate(PROMPT, max_tokens=8, logit_bias={first: -math.inf})
        assert banned.token_ids[0] != first and first not in banned.token_ids
        forced = e.generate(PROMPT, max_tokens=6, logit_bias={100: 100.0})
        assert forced.token_ids == [100] * 6


@pytest.mark.parametrize("draft", ["same", "ngram"])
def test_speculation_follows_the_same_bias_and_bans(tiny_target, tiny_same, eos_first, plain, draft):
    """Speculative decoding under these options gives plain decoding's tokens (exact kernels)."""
    cases = [
        (tiny_target, {"logit_bias": {50: 6.0, 51: -math.inf}}),
        (eos_first, {"ignore_eos": True}),
        (eos_first, {"min_tokens": 7}),
    ]
    for model, options in cases:
        with (
            Engine(model, draft=None, n_ctx=256, exact=True, n_threads=1) as ref,
            Engine(
                model,
                draft=(tiny_same if draft == "same" and model == tiny_target else "ngram"),
                n_ctx=256,
                exact=True,
                n_threads=1,
            ) as spec,
        ):
            prompt = PROMPT + " " + PROMPT
            want = ref.generate(prompt, max_tokens=16, **options)
            got = spec.generate(prompt, max_tokens=16, **options)
            assert got.token_ids == want.token_ids, options
            assert got.finish_reason == want.finish_reason


def test_batch_sequences_honour_the_options_like_solo_runs(eos_first, plain):
    reqs = [
        Request(0, PROMPT, {"max_tokens": 10, "ignore_eos": True}),
        Request(1, PROMPT, {"max_tokens": 10, "min_tokens": 4}),
        Request(2, PROMPT, {"max_tokens": 10}),
        Request(3, PROMPT, {"max_tokens": 10, "ignore_eos": True, "logit_bias": {60: 50.0}}),
    ]
    out = {o.key: o for o in PreparedBatch(plain, reqs, parallel=4)}
    for r in reqs:
        want = plain.generate(r.prompt, **r.options)
        assert out[r.key].error is None
        assert out[r.key].result.token_ids == want.token_ids, r.options
    assert len(out[1].result.token_ids) >= 4 and out[1].result.finish_reason == "stop"


def test_a_stop_string_straddling_min_tokens_counts_and_one_ending_before_does_not():
    """A stop string counts when it ends in a piece checked for stops (the ``min_tokens``-th
    token's or later): one that starts in the unchecked pieces before it is caught and cut
    at its start, with none of it released; one that ends before is text."""
    t = TextAssembler(["bc"])
    assert t.push("ab", check=False) == ("a", False)  # "b" may start the stop string: held
    assert t.push("cd", check=True) == ("", True)  # it ends here: the reply ends at "a"
    assert t.text == "a" and t.hit
    t = TextAssembler(["bc"])
    assert t.push("abc", check=False) == ("abc", False)  # ended before the boundary: text
    assert t.push("d", check=True) == ("d", False) and not t.hit
    # a stop string inside held text, ended before the boundary, does not count later
    t = TextAssembler(["bc", "xbcy"])
    assert t.push("xbc", check=False) == ("", False)
    assert t.push("z", check=True) == ("xbcz", False) and t.text == "xbcz"
    assert TextAssembler(["bc"]).finish("abc", check=False) == "abc"


def test_a_stop_string_across_the_min_tokens_boundary_ends_the_reply(plain):
    free = [ev for ev in plain.stream(PROMPT, max_tokens=24, ignore_eos=True) if isinstance(ev, Token)]
    pieces = [ev.text for ev in free if ev.id >= 0]  # the text each token released
    text = "".join(ev.text for ev in free)
    # the stop string: the last character of one token's text and the first of the next
    # one's, where it first occurs in the reply (token j + 1 completes it, 1-based)
    j = next(
        j
        for j in range(2, len(pieces))
        if pieces[j - 1] and pieces[j] and text.index(pieces[j - 1][-1] + pieces[j][0]) == len("".join(pieces[:j])) - 1
    )
    stop = pieces[j - 1][-1] + pieces[j][0]
    start = text.index(stop)
    for min_tokens in (j, j + 1):  # the boundary's token is the one before, or the one completing it
        got = plain.generate(PROMPT, max_tokens=24, ignore_eos=True, stop=stop, min_tokens=min_tokens)
        assert got.finish_reason == "stop" and got.text == text[:start], min_tokens
        assert len(got.token_ids) == j + 1
        streamed = "".join(
            ev.text
            for ev in plain.stream(PROMPT, max_tokens=24, ignore_eos=True, stop=stop, min_tokens=min_tokens)
            if isinstance(ev, Token)
        )
        assert streamed == got.text  # nothing of the stop string was streamed
    # it ends in token j + 1: with min_tokens j + 2 it does not count
    late = plain.generate(PROMPT, max_tokens=24, ignore_eos=True, stop=stop, min_tokens=j + 2)
    assert late.text.startswith(text[: start + len(stop)]) and len(late.token_ids) >= j + 2
    # a batch sequence ends at the same token (it builds its reply the same way)
    options = {"max_tokens": 24, "ignore_eos": True, "stop": stop, "min_tokens": j + 1}
    out = next(iter(PreparedBatch(plain, [Request(0, PROMPT, options)], parallel=2)))
    assert out.result.text == text[:start] and len(out.result.token_ids) == j + 1
