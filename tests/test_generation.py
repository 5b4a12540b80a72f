"""One decoding sequence for both paths (edgespec.decoding.sequence, decoding.generation,
batching.sequence) on the tiny models.

A ``DecodeSequence`` driven by hand on the engine's own context gives the events
``Engine.stream`` gives (``generation.run`` iterates one); its budget is ``max_tokens``
within the tokens it may hold, and it ends with the reply's tail. Under ``exact``
kernels the single stream and a one-sequence batch give the same ``Done`` for the same
greedy request: text, tokens, reason, logprobs and the structure's outcome. Batching
asks the engine only through ``BatchEngine``, which ``Engine`` is, and neither path
reaches the engine's private state.
"""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from edgespec import Engine
from edgespec.batching.protocol import BatchEngine
from edgespec.batching.runner import Request
from edgespec.decoding.drafters import NgramDrafter, NoDrafter
from edgespec.decoding.memory import MemoryDrafter
from edgespec.decoding.policy import FixedPolicy
from edgespec.decoding.sequence import DecodeSequence
from edgespec.events import Done, Round, Token

PACKAGE = Path(__file__).resolve().parent.parent / "edgespec"
PROMPT = "the quick brown fox jumps over the lazy dog the quick brown fox jumps over"
SCHEMA = {
    "type": "object",
    "properties": {"id": {"type": "integer", "minimum": 0, "maximum": 99}, "ok": {"type": "boolean"}},
    "required": ["id", "ok"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    # a fixed k: the single stream's draft lengths do not depend on timings
    # runs of one prompt compared: no memory of the last one
    return engines(tiny_target, "ngram", k=3, memory=False, n_ctx=256)


def by_hand(engine: Engine, n_ctx: int | None = None, **options) -> list:
    """The events of a DecodeSequence on the engine's context, its prompt prefilled here."""
    req = engine.prepare(PROMPT, raw=True, **options)
    drafter, policy = engine.drafting.for_request(req.memory)
    seq = DecodeSequence(
        engine.ctx, drafter, req, model=engine.target_model, policy=policy, n_ctx=n_ctx or engine.n_ctx
    )
    engine.ctx.rollback(0)
    engine.ctx.decode(req.ids[:-1], rows=())
    events = list(seq.events())
    seq.finish_stats()
    return [*events, seq.done()]


def without_stats(done: Done) -> dict:
    return {f.name: getattr(done, f.name) for f in fields(Done) if f.name != "stats"}


def test_a_sequence_by_hand_gives_the_events_of_the_single_stream(engine):
    for options in ({"max_tokens": 24}, {"max_tokens": 30, "logprobs": 2, "stop": [" r"]}):
        want = list(engine.stream(PROMPT, raw=True, **options))
        got = by_hand(engine, **options)
        assert got[:-1] == want[:-1]
        assert without_stats(got[-1]) == without_stats(want[-1])
        if "stop" not in options:  # (the stop string comes before any draft is accepted)
            assert any(isinstance(e, Token) and e.from_draft for e in want)  # prompt lookup drafted
        else:
            assert want[-1].finish_reason == "stop" and want[-1].logprobs
        assert sum(isinstance(e, Round) for e in want) == got[-1].stats.rounds


def test_a_sequence_generates_max_tokens_within_the_tokens_it_may_hold(engine):
    n_prompt = len(engine.prompt_tokens(PROMPT, raw=True))
    done = by_hand(engine, n_ctx=n_prompt + 5, max_tokens=40)[-1]
    assert len(done.token_ids) == 5 and done.finish_reason == "length"
    assert done.stats.generated_tokens == 5 and done.stats.prompt_tokens == n_prompt


def test_push_ends_the_sequence_with_the_replys_tail(engine):
    req = engine.prepare(PROMPT, raw=True, max_tokens=6)
    seq = DecodeSequence(
        engine.ctx, NoDrafter(), req, model=engine.target_model, policy=FixedPolicy(0), n_ctx=engine.n_ctx
    )
    engine.ctx.rollback(0)
    engine.ctx.decode(req.ids[:-1], rows=())
    events = []
    while not seq.ended:
        events += seq.push(seq.loop.round(seq.remaining))
    assert seq.produced == seq.budget == 6 and seq.remaining == 0
    text = "".join(e.text for e in events if isinstance(e, Token))
    assert text == seq.reply.text == engine.generate(PROMPT, raw=True, max_tokens=6).text


@pytest.mark.parametrize(
    "options",
    [
        {"max_tokens": 20},
        {"max_tokens": 16, "logprobs": 3},
        {"max_tokens": 40, "stop": [" r"]},  # the tiny model's text has it early
        {"max_tokens": 30, "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}},
        {"max_tokens": 5, "response_format": {"type": "json_schema", "json_schema": {"name": "t", "schema": SCHEMA}}},
    ],
    ids=["plain", "logprobs", "stop", "schema", "schema-cut"],
)
def test_the_single_stream_and_a_one_sequence_batch_give_the_same_done(engine, options):
    want = [e for e in engine.stream(PROMPT, raw=True, **options) if isinstance(e, Done)][0]
    seen = []
    req = Request("r", PROMPT, {"raw": True, **options}, on_event=seen.append)
    (outcome,) = list(engine.run_many([req], parallel=1))
    got = [e for e in seen if isinstance(e, Done)]
    assert outcome.error is None and len(got) == 1
    assert without_stats(got[0]) == without_stats(want)
    assert got[0].stats.generated_tokens == want.stats.generated_tokens == len(want.token_ids)
    assert want.finish_reason == ("stop" if "stop" in options or options["max_tokens"] == 30 else "length")
    if "response_format" in options:
        assert want.structured_complete is not None
        assert (want.structure_error is None) == (options["max_tokens"] > 5)


def test_the_engine_is_what_batching_asks_for(engine):
    assert isinstance(engine, BatchEngine)
    assert engine.n_batch == 512 and engine.k_max_for("ngram") <= engine.ctx.n_batch - 1
    fresh = engine.new_drafter("ngram")  # prompt lookup (with the memory, when the engine has one)
    own, _ = engine.drafting.for_request(None)
    assert isinstance(fresh, MemoryDrafter) and isinstance(fresh.lookup, NgramDrafter)
    assert fresh.lookup is not own.lookup  # a sequence of a batch has its own index
    assert isinstance(engine.new_drafter("none"), NoDrafter)
    assert engine.draft_policy().bound == 3  # adaptive_k=False: every round drafts k


def test_the_single_and_batch_paths_reach_no_private_part_of_the_engine():
    """Neither path reads ``engine._x``: what they need is the engine's public face (in
    batching typed as ``BatchEngine``)."""
    reached = []
    files = [PACKAGE / "decoding" / "generation.py", *sorted((PACKAGE / "batching").glob("*.py"))]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                owner = node.value
                name = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
                if name == "engine":
                    reached.append(f"{path.name}:{node.lineno} engine.{node.attr}")
    assert reached == []
