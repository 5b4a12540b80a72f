"""``edgespec serve --parallel N``: concurrent requests share decodes as slots of one
multi-sequence batch. On exact kernels each answer equals plain greedy decoding alone;
a client that hangs up frees its slot; /metrics counts every generation."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from edgespec.server import create_app
from serve_support import LiveServer, sse_events

QUESTIONS = ["the quick brown fox", "hello world, tell me about the dog", "seven wizards", "lazy dog jumps"]


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    return engines(tiny_target, "ngram")


def ask(http: httpx.Client, content: str, max_tokens: int, out: dict, key) -> None:
    r = http.post(
        "/v1/chat/completions",
        json={"messages": [{"role": "user", "content": content}], "max_tokens": max_tokens, "temperature": 0},
    )
    out[key] = r


def test_concurrent_requests_share_decodes_and_equal_plain_greedy(engine, reference):
    app = create_app(engine, max_tokens=64, parallel=3)
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        out: dict = {}
        threads = [threading.Thread(target=ask, args=(http, q, 12 + 6 * i, out, i)) for i, q in enumerate(QUESTIONS)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        for i, q in enumerate(QUESTIONS):
            assert out[i].status_code == 200, out[i].text
            body = out[i].json()
            want = reference.generate([{"role": "user", "content": q}], max_tokens=12 + 6 * i)
            assert body["choices"][0]["message"]["content"] == want.text
            assert body["usage"]["completion_tokens"] == len(want.token_ids)
        metrics = http.get("/metrics").text
        assert "edgespec_generations_total 4" in metrics  # every slot's generation counted
        health = http.get("/health").json()
        assert health["status"] == "ok"


def test_streaming_from_a_slot_and_a_hang_up_frees_it(engine, reference):
    app = create_app(engine, max_tokens=400, parallel=2)
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        msgs = [{"role": "user", "content": QUESTIONS[0]}]
        with http.stream("POST", "/v1/chat/completions", json={"messages": msgs, "stream": True}) as resp:
            assert resp.status_code == 200
            seen = 0
            for line in resp.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 3:
                    break
        # the slot the hung-up client held is freed: two more requests still run together
        out: dict = {}
        t0 = time.monotonic()
        threads = [threading.Thread(target=ask, args=(http, q, 10, out, q)) for q in QUESTIONS[1:3]]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert time.monotonic() - t0 < 60
        for q in QUESTIONS[1:3]:
            want = reference.generate([{"role": "user", "content": q}], max_tokens=10).text
            assert out[q].json()["choices"][0]["message"]["content"] == want
        deadline = time.monotonic() + 5
        while 'edgespec_requests_cancelled_total{stage="running"} 1' not in http.get("/metrics").text:
            assert time.monotonic() < deadline, "the hung-up generation was not counted as cancelled"
            time.sleep(0.05)
        # a streamed answer from a slot ends like a solo one
        with http.stream(
            "POST", "/v1/chat/completions", json={"messages": msgs, "stream": True, "max_tokens": 8, "temperature": 0}
        ) as resp:
            chunks = list(sse_events(resp.iter_lines()))
        text = "".join(
            c["choices"][0]["delta"].get("content", "") for c in chunks if isinstance(c, dict) and c.get("choices")
        )
        assert text == reference.generate(msgs, max_tokens=8).text


def test_timings_split_prompt_and_prediction_in_slots(engine):
    """Issue 22, item 8: with --parallel, ``timings.prompt_ms`` is the wall time to the end
    of the sequence's prefill (as llama-server reports a slot's), not 0, and
    ``predicted_ms`` no longer counts the prefill."""
    long = " ".join(QUESTIONS * 6)  # about 290 tokens: three prefill chunks
    app = create_app(engine, max_tokens=6, parallel=2)
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=60) as http:
        t0 = time.perf_counter()
        body = http.post("/v1/completions", json={"prompt": long, "temperature": 0}).json()
        elapsed_ms = (time.perf_counter() - t0) * 1000
    t = body["timings"]
    assert t["prompt_n"] > 128 and t["prompt_ms"] > 0 and t["prompt_per_second"] > 0
    assert t["predicted_n"] == 6 and t["predicted_ms"] > 0
    assert t["prompt_ms"] + t["predicted_ms"] <= elapsed_ms
