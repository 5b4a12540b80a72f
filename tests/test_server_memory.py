"""The server's memories of earlier answers (issue 27, items 4 and 7): one per API key and
one for requests without a key, ``--no-memory``, the LRU bound on the keys, and where the
accepted drafts came from, in ``timings`` and ``/metrics``.

The engine drafts with prompt lookup and its memory (``draft="ngram"``) on the tiny
target; answers are greedy, so asking the same question twice under one key drafts the
second answer from the first (the memory's drafts are fixed ids, verified by match).
"""

from __future__ import annotations

import hashlib

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from edgespec import DraftingOptions, Engine
from edgespec.decoding.suffix import SuffixIndex
from edgespec.server import create_app
from edgespec.server.memories import KeyMemories, key_of
from serve_support import sse_events

QUESTION = [{"role": "user", "content": "tell me about the quick brown fox and the lazy dog"}]
OTHER = [{"role": "user", "content": "what is the capital of france, in one word"}]  # another answer
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    # a fixed k: every proposal is verified, so what is drafted does not depend on timings
    return engines(tiny_target, "ngram", k=4)


def sha(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def ask(client, messages=QUESTION, key: str | None = None, header: str = "authorization", **extra) -> dict:
    headers = {}
    if key is not None:
        headers = {"authorization": f"Bearer {key}"} if header == "authorization" else {"x-api-key": key}
    resp = client.post(
        "/v1/chat/completions",
        headers=headers,
        json={"messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0, "return_tokens": True, **extra},
    )
    assert resp.status_code == 200, resp.text
    return resp.json()


def holds(index: SuffixIndex, ids: list[int]) -> bool:
    """Whether ``ids`` were written into ``index``, in order, within one document."""
    n = len(ids)
    return any(ids == toks[i : i + n] for _, toks, _ in index.documents() for i in range(len(toks) - n + 1))


def memories(client) -> KeyMemories:
    return client.app.state.worker.memories


@pytest.mark.parametrize("parallel", [1, 2])
def test_each_key_drafts_from_and_writes_into_its_own_memory(engine, parallel):
    app = create_app(engine, api_key=None, parallel=parallel, max_tokens=MAX_TOKENS)
    with TestClient(app) as client:
        a1 = ask(client, key="key-a")
        b1 = ask(client, OTHER, key="key-b", header="x-api-key")
        mem = memories(client)
        ia, ib = mem.indexes[sha("key-a")], mem.indexes[sha("key-b")]
        assert ia is not ib and ia is not engine.memory and ib is not engine.memory
        ids_a = a1["token_ids"]
        ids_b = b1["token_ids"]
        assert ids_a[:8] != ids_b[:8]
        assert holds(ia, ids_a) and not holds(ib, ids_a[:8])
        assert holds(ib, ids_b) and not holds(ia, ids_b[:8])
        assert len(engine.memory) == 0  # the server never writes the engine's own memory
        # the same question again under key A drafts from A's first answer
        a2 = ask(client, key="key-a")
        assert a2["token_ids"] == ids_a
        by_source = a2["timings"]["draft_by_source"]
        assert by_source["memory"]["draft_n_accepted"] > 0, by_source
        # ... and under a new key from its own answer so far only (its repeats), not A's
        c1 = ask(client, key="key-c")
        assert c1["token_ids"] == ids_a
        kept_c = c1["timings"]["draft_by_source"]["memory"]["draft_n_accepted"]
        assert kept_c < by_source["memory"]["draft_n_accepted"]
        assert set(mem.indexes) == {sha("key-a"), sha("key-b"), sha("key-c")}


def test_requests_without_a_key_share_one_memory(engine):
    with TestClient(create_app(engine, max_tokens=MAX_TOKENS)) as client:
        first = ask(client)
        mem = memories(client)
        assert list(mem.indexes) == [""]
        shared = mem.indexes[""]
        assert holds(shared, first["token_ids"])
        second = ask(client)
        assert list(mem.indexes) == [""] and mem.indexes[""] is shared
        assert second["timings"]["draft_by_source"]["memory"]["draft_n_accepted"] > 0


def test_on_a_server_with_a_key_its_memory_is_the_keys():
    headers = {"authorization": "Bearer wrong", "x-api-key": "right"}
    assert key_of(headers, "right") == sha("right")  # the key that matched, not the first presented
    assert key_of(headers, None) == sha("wrong")  # without a server key: the first presented
    assert key_of({}, None) == key_of({}, "right") == ""


def test_no_memory_writes_into_no_index(engine):
    for parallel in (1, 2):
        with TestClient(create_app(engine, memory=False, parallel=parallel, max_tokens=MAX_TOKENS)) as client:
            ask(client, key="key-a")
            again = ask(client, key="key-a")
            ask(client)
            assert len(memories(client)) == 0 and not memories(client).enabled
            assert again["timings"]["draft_by_source"]["memory"] == {"draft_n": 0, "draft_n_accepted": 0}
    assert len(engine.memory) == 0


def test_an_engine_without_a_memory_has_no_cross_request_drafting(tiny_target):
    with Engine(
        tiny_target, draft="ngram", n_ctx=256, exact=True, n_threads=1, drafting=DraftingOptions(memory=False)
    ) as plain:
        with TestClient(create_app(plain, max_tokens=8)) as client:
            ask(client, key="a")
            assert not memories(client).enabled and len(memories(client)) == 0
            assert memories(client).option("") is False


def test_the_number_of_keys_memories_is_bounded_least_recently_used_dropped(engine):
    with TestClient(create_app(engine, memory_keys=2, max_tokens=4)) as client:
        mem = memories(client)
        assert mem.cap == engine.memory.cap
        ask(client, key="a")
        ask(client, key="b")
        kept_a = mem.indexes[sha("a")]
        ask(client, key="a")  # a is used again: b is now the least recent
        ask(client, key="c")
        assert list(mem.indexes) == [sha("a"), sha("c")]
        assert mem.indexes[sha("a")] is kept_a
        assert all(ix.cap == engine.memory.cap for ix in mem.indexes.values())


def test_timings_and_metrics_count_drafts_by_source(engine):
    with TestClient(create_app(engine, max_tokens=MAX_TOKENS)) as client:
        ask(client)
        body = {"messages": QUESTION, "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True}
        with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            events = list(sse_events(resp.iter_lines()))
        timings = next(e["timings"] for e in events if isinstance(e, dict) and "timings" in e)
        by_source = timings["draft_by_source"]
        assert set(by_source) >= {"prompt", "memory", "grammar", "model"}
        assert sum(s["draft_n"] for s in by_source.values()) == timings["draft_n"]
        assert sum(s["draft_n_accepted"] for s in by_source.values()) == timings["draft_n_accepted"]
        assert by_source["memory"]["draft_n_accepted"] > 0
        # n > 1: the choices' counts summed
        two = ask(client, n=2)["timings"]
        assert sum(s["draft_n_accepted"] for s in two["draft_by_source"].values()) == two["draft_n_accepted"]
        assert two["draft_by_source"]["memory"]["draft_n_accepted"] > 0
        metrics = client.get("/metrics").text
        line = next(
            ln
            for ln in metrics.splitlines()
            if ln.startswith('edgespec_draft_tokens_accepted_by_source_total{source="memory"}')
        )
        assert int(line.split()[-1]) > 0
        assert "edgespec_memory_keys 1" in metrics


@pytest.mark.parametrize("flag, memory", [((), True), (("--no-memory",), False)])
def test_serve_no_memory_reaches_the_app(monkeypatch, tiny_target, flag, memory):
    import importlib

    import edgespec.server
    from edgespec.cli import app

    serve_cli = importlib.import_module("edgespec.cli.serve")  # (edgespec.cli.serve is the command)

    seen = {}

    class Stop(Exception):
        pass

    def fake_app(engine, **kwargs):
        seen.update(kwargs)
        raise Stop

    monkeypatch.setattr(serve_cli, "load_engine", lambda plan: type("E", (), {"close": lambda self: None})())
    monkeypatch.setattr(edgespec.server, "create_app", fake_app)
    r = CliRunner().invoke(app, ["serve", "--target", str(tiny_target), *flag])
    assert isinstance(r.exception, Stop), r.output
    assert seen["memory"] is memory
