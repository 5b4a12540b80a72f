"""``logprobs`` / ``top_logprobs`` and ``n`` through the server (issue 28, item 7), on
one stream and on ``--parallel`` slots: OpenAI's chat ``logprobs.content``, the legacy
completions object, streamed per chunk; several choices from one prompt, each with its
index and finish_reason, usage summing them, the prompt computed once."""

from __future__ import annotations

import math
import time

import httpx
import pytest
from fastapi.testclient import TestClient

from edgespec.server import create_app
from serve_support import LiveServer, sse_events

MESSAGES = [{"role": "user", "content": "hello world, tell me about the dog and the quick brown fox"}]
PROMPT = "the quick brown fox jumps over the lazy dog and the quick brown fox"


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    # runs of one request are compared, logprobs too: no memory of the last run (its
    # drafts change the verify batch's size, and the tiny F32 model's kernels round by ~1e-6)
    return engines(tiny_target, "ngram", n_ctx=1024, memory=False)


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(engine, max_tokens=16, defaults={"temperature": 0.0})) as c:
        yield c


def ok(resp) -> dict:
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_chat_logprobs_are_plain_decodings(client, reference):
    body = ok(
        client.post(
            "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 12, "logprobs": True, "top_logprobs": 3}
        )
    )
    choice = body["choices"][0]
    content = choice["logprobs"]["content"]
    want = reference.generate(MESSAGES, max_tokens=12, logprobs=3)
    assert len(content) == body["usage"]["completion_tokens"] == len(want.token_ids)
    # the tokens' bytes are the answer's (a token's string shows a split character as U+FFFD)
    assert b"".join(bytes(e["bytes"]) for e in content).decode(errors="replace") == choice["message"]["content"]
    assert choice["message"]["content"] == want.text
    for entry, lp in zip(content, want.logprobs):
        assert entry["logprob"] == pytest.approx(lp.logprob, abs=1e-4) and entry["logprob"] <= 0
        assert bytes(entry["bytes"]).decode(errors="replace") == entry["token"]
        assert len(entry["top_logprobs"]) == 3
        assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx([v for _, v in lp.top], abs=1e-4)
        assert entry["top_logprobs"][0]["token"] == entry["token"]  # greedy: the likeliest
    # logprobs alone: no alternatives; not asked: null
    plain = ok(client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4, "logprobs": True}))
    assert all(e["top_logprobs"] == [] for e in plain["choices"][0]["logprobs"]["content"])
    off = ok(client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4}))
    assert off["choices"][0]["logprobs"] is None


def test_streamed_logprobs_are_the_whole_bodys_split_by_chunk(client):
    req = {"messages": MESSAGES, "max_tokens": 14, "logprobs": True, "top_logprobs": 2, "stop": ["zz"]}
    whole = ok(client.post("/v1/chat/completions", json=req))["choices"][0]["logprobs"]["content"]
    with client.stream("POST", "/v1/chat/completions", json={**req, "stream": True}) as resp:
        chunks = [c for c in sse_events(resp.iter_lines()) if c != "[DONE]"]
    streamed = [e for c in chunks for ch in c["choices"] if ch["logprobs"] for e in ch["logprobs"]["content"]]
    assert streamed == whole


def test_completions_legacy_logprobs(client, reference):
    body = ok(client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 10, "logprobs": 2}))
    choice = body["choices"][0]
    lp = choice["logprobs"]
    want = reference.generate(PROMPT, max_tokens=10, raw=True, logprobs=2)
    assert choice["text"] == want.text and len(lp["tokens"]) == len(want.token_ids)
    assert lp["token_logprobs"] == pytest.approx([x.logprob for x in want.logprobs], abs=1e-4)
    assert all(
        len(alt) <= 2 and max(alt.values()) == pytest.approx(v)
        for alt, v in zip(lp["top_logprobs"], lp["token_logprobs"])
    )
    assert lp["text_offset"] == sorted(lp["text_offset"]) and lp["text_offset"][0] == 0
    for tok, offset in zip(lp["tokens"], lp["text_offset"]):
        if "\ufffd" not in tok:  # (a token that splits a character has no text of its own)
            assert choice["text"][offset:].startswith(tok)
    # the chat name counts the same on completions
    again = ok(client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 10, "top_logprobs": 2}))
    # the same tokens, offsets and alternatives; the values within rounding: the first run
    # decodes the prompt and its first verify rows in one batch, the second finds the
    # prompt cached and decodes those rows alone (the tiny F32 model rounds by ~1e-6)
    lp2 = again["choices"][0]["logprobs"]
    assert lp2["tokens"] == lp["tokens"] and lp2["text_offset"] == lp["text_offset"]
    assert lp2["token_logprobs"] == pytest.approx(lp["token_logprobs"], abs=1e-4)
    assert [sorted(a) for a in lp2["top_logprobs"]] == [sorted(a) for a in lp["top_logprobs"]]
    for alt2, alt in zip(lp2["top_logprobs"], lp["top_logprobs"]):
        assert alt2 == pytest.approx(alt, abs=1e-4)
    with client.stream(
        "POST", "/v1/completions", json={"prompt": PROMPT, "max_tokens": 10, "logprobs": 2, "stream": True}
    ) as resp:
        chunks = [c for c in sse_events(resp.iter_lines()) if c != "[DONE]"]
    offsets = [o for c in chunks for ch in c["choices"] if ch["logprobs"] for o in ch["logprobs"]["text_offset"]]
    assert offsets == lp["text_offset"]


@pytest.mark.parametrize(
    "endpoint, body, param",
    [
        ("chat", {"top_logprobs": 2}, "top_logprobs"),
        ("chat", {"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ("chat", {"logprobs": 3}, "logprobs"),
        ("completions", {"logprobs": 21}, "logprobs"),
        ("completions", {"logprobs": 2, "top_logprobs": 3}, "top_logprobs"),
        ("chat", {"n": 0}, "n"),
        ("chat", {"n": 17}, "n"),
    ],
)
def test_bad_logprobs_and_n_are_400s_naming_the_field(client, endpoint, body, param):
    if endpoint == "chat":
        resp = client.post("/v1/chat/completions", json={"messages": MESSAGES, **body})
    else:
        resp = client.post("/v1/completions", json={"prompt": PROMPT, **body})
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param


def sampled(n: int, seed: int, **extra) -> dict:
    return {"messages": MESSAGES, "max_tokens": 10, "temperature": 1.0, "seed": seed, "n": n, **extra}


def check_choices(body: dict, singles: list[dict]) -> None:
    assert [c["index"] for c in body["choices"]] == list(range(len(singles)))
    for choice, single in zip(body["choices"], singles):
        assert choice["message"] == single["choices"][0]["message"]
        assert choice["finish_reason"] == single["choices"][0]["finish_reason"]
    assert body["usage"]["completion_tokens"] == sum(s["usage"]["completion_tokens"] for s in singles)
    assert body["usage"]["prompt_tokens"] == singles[0]["usage"]["prompt_tokens"]


def test_n_choices_on_one_stream_are_the_single_runs_with_seed_plus_i(client):
    singles = [ok(client.post("/v1/chat/completions", json=sampled(1, 7 + i))) for i in range(3)]
    assert len({s["choices"][0]["message"]["content"] for s in singles}) > 1  # the seeds make them differ
    body = ok(client.post("/v1/chat/completions", json=sampled(3, 7)))
    check_choices(body, singles)
    # one after another on the engine's own context: the later ones find the prompt in the
    # KV cache, so the request computes it once at most
    fresh = ok(
        client.post(
            "/v1/chat/completions",
            json={
                **sampled(3, 7),
                "messages": [{"role": "user", "content": "seven wizards quietly hex the lazy dog " * 3}],
            },
        )
    )
    usage = fresh["usage"]
    assert 0 < fresh["timings"]["prompt_n"] <= usage["prompt_tokens"]
    assert usage["prompt_tokens_details"]["cached_tokens"] == usage["prompt_tokens"] - fresh["timings"]["prompt_n"]
    # with logprobs, every choice has its own
    lp = ok(client.post("/v1/chat/completions", json=sampled(2, 7, logprobs=True)))
    for choice, single in zip(lp["choices"], singles):
        assert len(choice["logprobs"]["content"]) == single["usage"]["completion_tokens"]


def test_n_streamed_chunks_carry_their_choice_index(client):
    singles = [ok(client.post("/v1/chat/completions", json=sampled(1, 3 + i))) for i in range(2)]
    req = sampled(2, 3, stream=True, stream_options={"include_usage": True}, logprobs=True)
    with client.stream("POST", "/v1/chat/completions", json=req) as resp:
        chunks = list(sse_events(resp.iter_lines()))
    assert chunks[-1] == "[DONE]"
    usage = chunks[-2]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == sum(
        s["usage"]["completion_tokens"] for s in singles
    )
    for i, single in enumerate(singles):
        mine = [ch for c in chunks[:-2] for ch in c["choices"] if ch["index"] == i]
        assert mine[0]["delta"]["role"] == "assistant"
        assert "".join(ch["delta"].get("content") or "" for ch in mine) == single["choices"][0]["message"]["content"]
        assert [ch["finish_reason"] for ch in mine if ch["finish_reason"]] == [single["choices"][0]["finish_reason"]]
        n_lp = sum(len(ch["logprobs"]["content"]) for ch in mine if ch["logprobs"])
        assert n_lp == single["usage"]["completion_tokens"]
    assert len({c["id"] for c in chunks[:-1]}) == 1  # one response


def test_n_on_completions_and_greedy_choices_agree(client):
    body = ok(
        client.post(
            "/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, "n": 2, "return_tokens": True, "best_of": 2}
        )
    )  # best_of equal to n asks for nothing more
    a, b = body["choices"]
    assert (a["index"], b["index"]) == (0, 1) and a["text"] == b["text"] and a["token_ids"] == b["token_ids"]
    assert "token_ids" not in body  # each choice has its own
    resp = client.post("/v1/completions", json={"prompt": PROMPT, "n": 2, "best_of": 3})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "best_of"


def test_n_more_than_the_queue_holds_is_a_400(engine):
    with TestClient(create_app(engine, max_tokens=4, max_queue=2)) as c:
        resp = c.post("/v1/chat/completions", json={"messages": MESSAGES, "n": 3})
        assert resp.status_code == 400 and resp.json()["error"]["param"] == "n"
        assert ok(c.post("/v1/chat/completions", json={"messages": MESSAGES, "n": 2}))["choices"][1]["index"] == 1


def test_n_choices_on_parallel_slots_share_the_prompt_and_equal_the_single_stream(engine, client):
    singles = [ok(client.post("/v1/chat/completions", json=sampled(1, 11 + i, logprobs=True))) for i in range(3)]
    app = create_app(engine, max_tokens=16, parallel=4, defaults={"temperature": 0.0})
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        body = ok(http.post("/v1/chat/completions", json=sampled(3, 11, logprobs=True)))
        check_choices(body, singles)
        for choice, single in zip(body["choices"], singles):  # exact kernels: the same numbers
            got = [e["logprob"] for e in choice["logprobs"]["content"]]
            want = [e["logprob"] for e in single["choices"][0]["logprobs"]["content"]]
            assert got == pytest.approx(want, abs=1e-4) and all(math.isfinite(v) for v in got)
        # the prompt was computed once (a fresh server: all of it): the other choices took its cells
        assert body["timings"]["prompt_n"] == body["usage"]["prompt_tokens"]
        assert body["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
        assert app.state.worker._runner.stats.prompt_shared == 2 * (body["usage"]["prompt_tokens"] - 1)


def test_the_openai_client_reads_logprobs_and_choices(engine):
    openai = pytest.importorskip("openai")
    with LiveServer(create_app(engine, max_tokens=8)) as srv:
        client = openai.OpenAI(base_url=srv.url + "/v1", api_key="none")
        chat = client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=6, temperature=1.0, seed=1, n=2, logprobs=True, top_logprobs=2
        )
        assert [c.index for c in chat.choices] == [0, 1]
        for c in chat.choices:
            assert b"".join(bytes(t.bytes) for t in c.logprobs.content).decode(errors="replace") == c.message.content
            assert all(len(t.top_logprobs) == 2 and t.logprob <= 0 for t in c.logprobs.content)
        text = client.completions.create(model="m", prompt=PROMPT, max_tokens=6, logprobs=2)
        lp = text.choices[0].logprobs
        assert len(lp.tokens) == len(lp.text_offset) == len(lp.token_logprobs) == text.usage.completion_tokens
        stream = client.chat.completions.create(
            model="m", messages=MESSAGES, max_tokens=6, n=2, stream=True, logprobs=True
        )
        seen = {ch.index for chunk in stream for ch in chunk.choices}
        assert seen == {0, 1}


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_hang_up_stops_every_choice(engine, parallel):
    app = create_app(engine, max_tokens=400, parallel=parallel)
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        req = {"messages": MESSAGES, "n": 3, "stream": True, "ignore_eos": True}
        with http.stream("POST", "/v1/chat/completions", json=req) as resp:
            assert resp.status_code == 200
            seen = 0
            for line in resp.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 6:
                    break
        # the choices still queued are skipped, the running ones stopped: the next request is served
        after = ok(http.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4}))
        assert after["usage"]["completion_tokens"] == 4
        deadline = time.monotonic() + 10  # (the worker clears its slot just after the reply)
        while (app.state.worker.busy or app.state.worker.waiting) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not app.state.worker.busy and app.state.worker.waiting == 0
