"""Regression tests for the five defects of issue 13's review, and for JSONL lines that
are not UTF-8 (issue 12). Each test failed on the code before its fix.

1. A batch's ``--output`` that is not edgespec's (no trailing newline, or the input
   itself) was cut or replaced; now it is refused and left byte for byte.
2. Draft and target vocabularies of different sizes (320 vs 328 tokens here; Qwen2.5-7B
   and its 0.5B drafter in the wild) crashed ``llama_decode`` both ways round.
3. ``Engine(n_batch=...)`` smaller than a verify batch crashed mid-generation.
4. ``read_jobs`` let through sampling values the engine refuses (``top_p: 0``, ``seed: -1``).
5. ``penalty_last_n = -1`` penalised all but the first token instead of all of them.

Also two found by tests/test_properties.py: a temperature below ~3e-39 and an extreme
``repeat_penalty``, both accepted by ``SamplingParams.validate``, broke the row.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from edgespec import Engine
from edgespec.decoding import sampling
from edgespec.batching.results import ResultWriter, parse_line, read_jobs, run_batch
from edgespec.cli.generate import generate
from edgespec.decoding.drafters import Proposal
from edgespec.errors import InputError
from edgespec.events import Stats
from edgespec.decoding.sampling import SamplingParams
from edgespec.decoding.policy import FixedPolicy
from edgespec.decoding.speculative import SpeculativeLoop, _penalized

from tiny_models import make_tiny_model

RECORD = {"id": "a", "text": "t", "finish_reason": "stop", "stats": {}}


def record_line(rec: dict = RECORD) -> bytes:
    """A result line exactly as ResultWriter.write writes it."""
    return (json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


# -- 1. the output file ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "content",
    [
        b"my notes, no trailing newline",
        b'{"id": 1, "prompt": "hello world"}',  # an input line, whole
        b'{"id":1,"prompt":"hello',  # an input line, cut short
        record_line() + b"my notes",  # results, then something else
        record_line() + b'{"id":"b","text":"x","finish_reason":"stop","stats":{}} trailing words',
        record_line() + b"  ",
        record_line() + b'{"id":"b","text":5',  # text is not a string
        "é".encode()[:1],  # half a character, and not a result
    ],
)
def test_output_that_is_not_a_result_file_is_refused_and_kept(tmp_path, content):
    out = tmp_path / "notes.txt"
    out.write_bytes(content)
    with pytest.raises(InputError, match="not a result line written by edgespec"):
        ResultWriter(out).open()
    assert out.read_bytes() == content


@pytest.mark.parametrize(
    "tail",
    [
        b'{"id":"b","text":"half a li',
        b'{"id": "b", "text": "half a li',  # the same, written with spaces
        b"{",
        b'{"i',
        b'{"id":"b","text":"caf\xc3',  # torn inside a two-byte character
        b'{"id":"b","text":"x","finish_reason":"stop","stats":{"drafter":"ng',
        b'{"id":"b","text":"x","finish_reason":"stop","stats":{}',  # only the brace lost
    ],
)
def test_only_a_torn_result_line_is_cut(tmp_path, tail):
    out = tmp_path / "out.jsonl"
    out.write_bytes(record_line() + tail)
    with ResultWriter(out) as w:
        assert (w.torn_line, w.torn_action) == (2, "dropped")
        assert w.done == {'"a"'}
    assert out.read_bytes() == record_line()


def test_a_file_holding_only_a_torn_result_is_emptied(tmp_path):
    out = tmp_path / "out.jsonl"
    out.write_bytes(b'{"id":"p0","text":"hal')
    with ResultWriter(out) as w:
        assert w.torn_action == "dropped" and not w.done
    assert out.read_bytes() == b""


def test_output_that_is_the_input_is_refused_also_through_links(tmp_path):
    one = tmp_path / "one.jsonl"
    content = b'{"id": 1, "prompt": "hello world"}'
    one.write_bytes(content)
    inp = read_jobs(one)
    assert [j.id for j in inp.jobs] == [1]
    (tmp_path / "soft.jsonl").symlink_to(one)
    os.link(one, tmp_path / "hard.jsonl")
    for path in (one, tmp_path / "soft.jsonl", tmp_path / "hard.jsonl", tmp_path / "." / "one.jsonl"):
        with pytest.raises(InputError, match="is the input file"):
            ResultWriter(path, input=inp).open()
    assert one.read_bytes() == content
    with ResultWriter(tmp_path / "other.jsonl", input=inp):  # another file is fine
        pass


def test_output_that_is_the_input_read_from_stdin_is_refused(tmp_path, monkeypatch):
    import io
    import sys

    one = tmp_path / "one.jsonl"
    one.write_bytes(b'{"id": 1, "prompt": "hello world"}\n')
    with open(one, "rb") as f:  # edgespec generate -i - -o one.jsonl < one.jsonl
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(f, encoding="utf-8"))
        inp = read_jobs("-")
        with pytest.raises(InputError, match="is the input file <stdin>"):
            ResultWriter(one, input=inp).open()
    assert one.read_bytes() == b'{"id": 1, "prompt": "hello world"}\n'


@pytest.fixture()
def run_cli():
    app = typer.Typer()
    app.command("generate")(generate)
    app.command("other")(lambda: None)  # keep "generate" a subcommand
    runner = CliRunner()

    def invoke(*args):
        return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)

    return invoke


def test_cli_refuses_notes_and_its_own_input_as_output(run_cli, tmp_path, tiny_target):
    inp = tmp_path / "in.jsonl"
    inp.write_bytes(b'{"id": 1, "prompt": "hello world"}\n')
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"my notes, no trailing newline")
    common = ("generate", "--target", tiny_target, "--draft", "none", "--max-tokens", "4", "--raw")

    r = run_cli(*common, "--input", inp, "--output", notes)
    assert r.exit_code == 2, r.output
    assert "not a result line" in r.stderr
    assert notes.read_bytes() == b"my notes, no trailing newline"

    one = tmp_path / "one.jsonl"
    one.write_bytes(b'{"id": 1, "prompt": "hello world"}')
    r = run_cli(*common, "-i", one, "-o", one)
    assert r.exit_code == 2, r.output
    assert "is the input file" in r.stderr
    assert one.read_bytes() == b'{"id": 1, "prompt": "hello world"}'


# -- 2. vocabularies of different sizes ------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_328(tiny_models_dir) -> Path:
    """tiny_target's weights and vocabulary plus 8 more ids (328 tokens)."""
    return make_tiny_model(tiny_models_dir / "target_328.gguf", seed=0, n_vocab=328,
                           name="edgespec-tiny-328")


def plain_greedy(target: Path, prompt, max_tokens: int) -> list[int]:
    with Engine(target, exact=True, n_threads=1) as engine:
        return engine.generate(prompt, max_tokens=max_tokens).token_ids


def test_tiny_328_is_tiny_target_plus_eight_ids(tiny_target, tiny_328):
    from edgespec.llama import Model, check_vocab_compatible

    a, b = Model(tiny_target), Model(tiny_328)
    try:
        assert (a.n_vocab, b.n_vocab) == (320, 328)
        check_vocab_compatible(a, b)  # the check accepts this pair, both ways round
        check_vocab_compatible(b, a)
    finally:
        a.close()
        b.close()


def prompt_reaching_extra_ids(model: Path, n_vocab_small: int, max_tokens: int) -> list[int]:
    """A token-id prompt whose plain greedy continuation on ``model`` emits an id
    >= ``n_vocab_small`` (deterministic search over seeded random prompts)."""
    rng = np.random.default_rng(0)
    with Engine(model, exact=True, n_threads=1) as engine:
        for _ in range(200):
            prompt = [1, *map(int, rng.integers(5, n_vocab_small, size=6))]
            out = engine.generate(prompt, max_tokens=max_tokens).token_ids
            if any(t >= n_vocab_small for t in out):
                return prompt
    pytest.fail("no prompt makes the 328-token model emit one of its extra ids")


def test_draft_with_a_larger_vocabulary_has_its_proposal_cut(tiny_target, tiny_328):
    # The 328-token draft shares every weight of the 320-token target, so it drafts the
    # target's own tokens until one of its 8 extra ids wins: that id reaches the verify
    # batch, which crashed llama_decode.
    prompt = prompt_reaching_extra_ids(tiny_328, 320, max_tokens=24)
    expected = plain_greedy(tiny_target, prompt, 24)
    with Engine(tiny_target, tiny_328, k=6, adaptive_k=False, exact=True, n_threads=1) as engine:
        got = engine.generate(prompt, max_tokens=24)
        assert got.token_ids == expected
        assert got.stats.accepted > 0
        for seed in range(3):  # sampling: the rejection path of the cut draft
            r = engine.generate(prompt, max_tokens=24, temperature=1.0, seed=seed)
            assert all(0 <= t < 320 for t in r.token_ids)


def test_draft_with_a_smaller_vocabulary_never_sees_the_ids_it_lacks(tiny_target, tiny_328):
    # The 328-token target gets a prompt holding two of its extra ids, and may emit more:
    # the 320-token draft model crashed decoding them.
    prompt = [1, 40, 50, 60, 325, 70, 80, 321, 90, 100, 110]
    for p in (prompt, prompt[:-3], prompt_reaching_extra_ids(tiny_328, 320, max_tokens=24)):
        expected = plain_greedy(tiny_328, p, 24)
        with Engine(tiny_328, tiny_target, k=4, adaptive_k=False, exact=True, n_threads=1) as engine:
            got = engine.generate(p, max_tokens=24)
            assert got.token_ids == expected
            assert all(t < 320 for t in engine.draft_ctx.tokens)
            r = engine.generate(p, max_tokens=24, temperature=0.8, seed=1)
            assert all(0 <= t < 328 for t in r.token_ids)
    # after the last extra id the draft still drafts, from the text that follows it
    with Engine(tiny_328, tiny_target, k=4, adaptive_k=False, exact=True, n_threads=1) as engine:
        r = engine.generate(prompt, max_tokens=24)
        assert r.stats.drafted > 0 and r.stats.accepted > 0


class _FixedTarget:
    """A stand-in target context: the same next-token distribution ``p`` everywhere."""

    n_ctx = 1 << 20
    n_batch = 512

    def __init__(self, p: np.ndarray):
        self.logits = np.log(p)

    def decode(self, tokens, rows):
        return np.stack([self.logits for _ in rows])

    def rollback(self, n):
        pass


class _OneDraft:
    """Draws one draft from ``q`` (a vocabulary one id larger than the target's)."""

    name = "model"

    def __init__(self, q: np.ndarray, seed: int):
        self.q, self.rng = q, np.random.default_rng(seed)

    def propose(self, tokens, k, keep_drafting=None, guide=None):
        return Proposal([int(self.rng.choice(len(self.q), p=self.q))], self.q[None, :])

    def accepted(self, n):
        pass


def test_a_cut_sampled_draft_is_rejected_so_the_target_distribution_is_kept():
    # Target ids 0..2, the draft also has id 3. A draft of 3 is cut before the verify
    # batch; the next token must still follow p exactly: the draft counts as rejected
    # and the token comes from max(0, p - q). Sampling it from p instead would give
    # (0.4, 0.28, 0.32), which the check below tells apart from p = (0.5, 0.3, 0.2).
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.1, 0.1, 0.2, 0.6])
    loop = SpeculativeLoop(
        target=_FixedTarget(p), drafter=_OneDraft(q, 1), committed=[0],
        params=SamplingParams(temperature=1.0), rng=np.random.default_rng(2),
        policy=FixedPolicy(1), stats=Stats(drafter="model"), n_vocab=3,
    )
    n = 8000
    counts = np.zeros(3)
    for _ in range(n):
        counts[loop.round(2).tokens[0]] += 1
    freq = counts / n
    assert np.all(np.abs(freq - p) < 4 * np.sqrt(p * (1 - p) / n)), freq


# -- 3. n_batch smaller than a verify batch -----------------------------------------------------


@pytest.mark.parametrize("n_batch", [2, 3, 5])
def test_small_n_batch_bounds_k(tiny_target, tiny_same, n_batch):
    prompt = "the quick brown fox jumps over the lazy dog. the quick brown fox"
    with Engine(tiny_target, exact=True, n_threads=1) as plain:
        expected = plain.generate(prompt, max_tokens=30, raw=True).token_ids
    for draft in ("ngram", tiny_same):
        with Engine(tiny_target, draft, k=8, k_max=16, n_batch=n_batch, exact=True,
                    n_threads=1) as engine:
            got = engine.generate(prompt, max_tokens=30, raw=True)  # crashed in Context.decode
            assert got.token_ids == expected
            assert engine.k_max == n_batch - 1
            assert len(engine.last_stats.drafted_by_position) <= n_batch - 1  # longest draft


def test_n_batch_below_two_is_refused_up_front(tiny_target):
    with pytest.raises(InputError, match="n_batch must be at least 2"):
        Engine(tiny_target, "ngram", n_batch=1)


# -- 4. one validation of the sampling settings ----------------------------------------------------


@pytest.mark.parametrize(
    "key, value, needle",
    [
        ("top_p", 0, "'top_p' must be in (0, 1]"),
        ("seed", -1, "'seed' must be a non-negative integer"),
        ("top_k", -3, "'top_k' must be >= 0"),
        ("temperature", "hot", "'temperature' must be a number, not \"hot\""),
    ],
)
def test_read_jobs_refuses_what_the_engine_refuses(tmp_path, key, value, needle):
    path = tmp_path / "in.jsonl"
    path.write_text(
        json.dumps({"id": "ok", "prompt": "fine"}) + "\n"
        + json.dumps({"id": "bad", "prompt": "x", key: value}) + "\n"
    )
    inp = read_jobs(path)
    assert [j.id for j in inp.jobs] == ["ok"]
    assert [e.line for e in inp.errors] == [2]
    assert needle in str(inp.errors[0])
    # and the engine's own check says the same value is bad
    with pytest.raises(InputError, match=key):
        SamplingParams(**{key: value}).validate()


def test_on_error_stop_does_not_halt_halfway_over_a_sampling_value(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(obj) + "\n" for obj in [
        {"id": 1, "prompt": "one"}, {"id": 2, "prompt": "two", "top_p": 0}, {"id": 3, "prompt": "three"},
    ]))
    inp = read_jobs(path)
    assert [j.id for j in inp.jobs] == [1, 3]  # the bad line is known before any work

    class Checking:
        def generate(self, prompt, **options):
            SamplingParams(**{k: v for k, v in options.items()
                              if k in ("temperature", "top_k", "top_p", "min_p", "seed")}).validate()
            return SimpleNamespace(text=prompt, finish_reason="stop", stats=Stats(drafter="none"))

    with ResultWriter(tmp_path / "out.jsonl") as w:
        summary = run_batch(Checking(), inp.jobs, w, on_error="stop")
    assert summary.done == 2


# -- 5. penalty_last_n = -1 -------------------------------------------------------------------------


def test_penalty_window_minus_one_is_the_whole_history():
    row = np.zeros(10, dtype=np.float32)
    params = SamplingParams(presence_penalty=1.0, penalty_last_n=-1)
    history = [7, 8, 9]
    assert np.array_equal(_penalized(row, history, [], params),
                          sampling.apply_penalties(row, history, params))
    assert _penalized(row, history, [3], params)[7] == -1.0  # the first token counts too


def test_penalty_window_counts_this_rounds_tokens_within_its_n():
    # (A guard next to the fix, not a regression: this held before.) At a draft
    # position plain decoding sees the last n tokens of committed + the drafts accepted
    # so far, not n committed tokens plus the drafts.
    row = np.zeros(10, dtype=np.float32)
    params = SamplingParams(presence_penalty=1.0, penalty_last_n=3)
    got = _penalized(row, [1, 2, 3], [4], params)
    assert np.array_equal(got, sampling.apply_penalties(row, [2, 3, 4], params))
    assert got[1] == 0.0


# -- issue 12: a JSONL line that is not UTF-8 is one bad line -------------------------------------


def test_a_line_that_is_not_utf8_is_skipped_with_its_line_number(tmp_path):
    path = tmp_path / "in.jsonl"
    path.write_bytes(
        b'{"id": 1, "prompt": "one"}\n'
        b'{"id": 2, "prompt": "caf\xe9 latin-1"}\n'
        b'\xff\xfe{"id": 3}\n'
        b'{"id": 4, "prompt": "four \xe2\x82\xac"}\n'
    )
    inp = read_jobs(path)
    assert [(j.id, j.prompt) for j in inp.jobs] == [(1, "one"), (4, "four €")]
    assert [e.line for e in inp.errors] == [2, 3]
    assert str(inp.errors[0]).startswith(f"{path}:2: not valid UTF-8 (byte 0xe9 at byte 25)")
    assert "not valid UTF-8" in str(inp.errors[1])


def test_a_non_utf8_line_on_stdin_is_skipped_too(monkeypatch):
    import io
    import sys

    raw = io.BytesIO(b'\xff\n{"id": "s", "prompt": "from stdin"}\n')
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(raw, encoding="utf-8"))
    inp = read_jobs("-")
    assert [j.id for j in inp.jobs] == ["s"]
    assert [str(e) for e in inp.errors] == ["<stdin>:1: not valid UTF-8 (byte 0xff at byte 1)"]


@pytest.mark.parametrize(
    "line, needle",
    [
        ('{"id": "a", "prompt": "\\ud800 half a pair"}', "lone surrogate"),
        ('{"id": "\\udfff", "prompt": "x"}', "lone surrogate"),
        ('{"id": "a", "prompt": "x", "stop": ["ok", "\\ud800"]}', "stop[1]"),
        ('{"id": "a", "messages": [{"role": "user", "content": "\\udc80"}]}', "messages[0].content"),
        ('{"id": ' + "1" * 5000 + ', "prompt": "x"}', "not valid JSON"),
        ("[" * 100000 + "]" * 100000, "not valid JSON"),
        ('{"id": "a", "prompt": "x", "temperature": NaN}', "'temperature' must be a finite number"),
    ],
)
def test_other_bad_lines_are_bad_lines_not_crashes(line, needle):
    with pytest.raises(InputError) as info:
        parse_line(line, 3, "in.jsonl")
    assert str(info.value).startswith("in.jsonl:3: ")
    assert needle in str(info.value)


# -- found by the property tests: extreme settings the check accepts ------------------------------


@pytest.mark.parametrize("temperature", [1e-39, 5e-324])
def test_a_temperature_too_small_for_float32_still_samples(temperature):
    # 1/T overflowed to inf and inf * 0 at the maximum made the row NaN
    row = np.array([0.5, 2.0, -1.0], dtype=np.float32)
    params = SamplingParams(temperature=temperature)
    params.validate()
    p = sampling.probs_from_logits(row, params)
    assert p.tolist() == [0.0, 1.0, 0.0]


def test_an_extreme_repeat_penalty_leaves_a_usable_row():
    # 2.0 / 1e-40 overflowed float32 to inf, and probs_from_logits called the row broken
    row = np.array([2.0, 1.0, -1.0], dtype=np.float32)
    params = SamplingParams(temperature=1.0, repeat_penalty=1e-40)
    params.validate()
    p = sampling.probs_from_logits(sampling.apply_penalties(row, [0], params), params)
    assert np.all(np.isfinite(p)) and p.argmax() == 0
