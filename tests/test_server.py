"""The OpenAI-compatible server on the tiny generated models: endpoints, streaming, the
extra fields, prefix reuse, metrics, and one test per bad input named in issue 9.

The tests go through FastAPI's TestClient (in-process ASGI); the ones that need a real
connection (a client that hangs up, concurrent requests filling the queue) are
tests/test_server_queue.py. The drafter is ``tiny_same`` (``serve_support.engine``), the
target's own weights, so every drafted token is accepted at temperature 0 and the
``from_draft`` highlighting has something to show.
"""

from __future__ import annotations

import json
import re
import time

import httpx
import pytest
from fastapi.testclient import TestClient

import serve_support
from edgespec.server import create_app
from serve_support import sse_events

PROMPT = "the quick brown fox"
MESSAGES = [{"role": "user", "content": "hello world, tell me about the dog"}]


engine = serve_support.engine


@pytest.fixture()
def client(engine):
    with TestClient(create_app(engine, max_tokens=16, defaults={"temperature": 0.0})) as c:
        yield c


def error_of(resp: httpx.Response) -> dict:
    body = resp.json()
    assert set(body) == {"error"}, body
    err = body["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], err
    assert "Traceback" not in resp.text
    return err


def stream_chunks(client, path: str, body: dict, **kw) -> list:
    with client.stream("POST", path, json={**body, "stream": True}, **kw) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["content-type"].startswith("text/event-stream")
        return list(sse_events(resp.iter_lines()))


# -- the endpoints ----------------------------------------------------------------------------


def test_models_lists_the_one_model(client, tiny_target):
    body = client.get("/v1/models").json()
    assert body["object"] == "list" and len(body["data"]) == 1
    model = body["data"][0]
    assert model["id"] == tiny_target.stem and model["object"] == "model"
    assert model["meta"]["drafter"] == "model" and model["meta"]["n_ctx"] == 512


def test_chat_completion_equals_plain_greedy_with_usage_and_timings(client, reference):
    start = time.perf_counter()
    resp = client.post(
        "/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 20, "temperature": 0, "return_tokens": True}
    )
    wall_ms = (time.perf_counter() - start) * 1000
    assert resp.status_code == 200
    body = resp.json()
    want = reference.generate(MESSAGES, max_tokens=20)
    assert body["object"] == "chat.completion" and body["id"].startswith("chatcmpl-")
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": want.text}
    assert body["token_ids"] == want.token_ids
    assert choice["finish_reason"] == want.finish_reason == "length"
    usage = body["usage"]
    assert usage["prompt_tokens"] == want.stats.prompt_tokens
    assert usage["completion_tokens"] == 20 == len(want.token_ids)
    assert usage["total_tokens"] == usage["prompt_tokens"] + 20
    t = body["timings"]
    assert t["predicted_n"] == 20 and t["predicted_ms"] > 0 and t["predicted_per_second"] > 0
    assert t["prompt_n"] + t["cache_n"] == usage["prompt_tokens"] and t["prompt_ms"] >= 0
    # the drafter is the target itself: everything it drafts is accepted
    assert t["draft_n"] > 0 and t["draft_n_accepted"] == t["draft_n"]
    # the queue wait is the wait /metrics counted for this one request (in seconds there),
    # and a part of the request's own time, before its prompt and its reply
    metrics = client.get("/metrics").text
    assert "edgespec_queue_wait_seconds_count 1\n" in metrics
    waited = float(re.search(r"^edgespec_queue_wait_seconds_sum (\S+)$", metrics, re.M).group(1))
    assert t["queue_ms"] == pytest.approx(waited * 1000, abs=1e-3)
    assert 0 <= t["queue_ms"] and t["queue_ms"] + t["prompt_ms"] + t["predicted_ms"] <= wall_ms


def test_streamed_chat_completion(client, reference):
    events = stream_chunks(
        client,
        "/v1/chat/completions",
        {"messages": MESSAGES, "max_tokens": 20, "temperature": 0, "stream_options": {"include_usage": True}},
    )
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    pieces = [c["choices"][0] for c in chunks if c["choices"] and c["choices"][0]["delta"].get("content")]
    want = reference.generate(MESSAGES, max_tokens=20)
    assert "".join(p["delta"]["content"] for p in pieces) == want.text
    # each piece says where it came from; with the target drafting for itself, most are drafts
    assert all(isinstance(p["from_draft"], bool) for p in pieces)
    assert any(p["from_draft"] for p in pieces) and not all(p["from_draft"] for p in pieces)
    finish = chunks[-2]
    assert finish["choices"][0]["finish_reason"] == "length" and finish["choices"][0]["delta"] == {}
    assert finish["timings"]["predicted_n"] == 20
    assert finish["timings"]["draft_n_accepted"] == finish["x_edgespec"]["accepted"] > 0
    usage_chunk = chunks[-1]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 20
    # the running counts grow along the stream
    counts = [c["x_edgespec"]["drafted"] for c in chunks if "x_edgespec" in c]
    assert counts == sorted(counts) and counts[-1] > 0


def test_streamed_chat_without_usage_ends_with_the_finish_chunk(client):
    events = stream_chunks(client, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 5})
    assert events[-1] == "[DONE]"
    assert events[-2]["choices"][0]["finish_reason"] == "length" and "usage" not in events[-2]
    assert "timings" in events[-2]


def test_completion_raw_prompt_streamed_and_not(client, reference):
    want = reference.generate(PROMPT, raw=True, max_tokens=12)
    body = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 12, "temperature": 0}).json()
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"] == want.text and body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["prompt_tokens"] == want.stats.prompt_tokens
    events = stream_chunks(client, "/v1/completions", {"prompt": [PROMPT], "max_tokens": 12, "temperature": 0})
    assert events[-1] == "[DONE]"
    assert "".join(c["choices"][0]["text"] for c in events[:-1]) == want.text
    assert events[-2]["choices"][0]["finish_reason"] == "length" and "timings" in events[-2]


def test_completion_from_token_ids(client, reference, engine):
    ids = engine.tokenize(PROMPT)
    body = client.post(
        "/v1/completions", json={"prompt": ids, "max_tokens": 8, "temperature": 0, "return_tokens": True}
    ).json()
    assert body["token_ids"] == reference.generate(ids, max_tokens=8).token_ids


def test_stop_strings_and_max_completion_tokens(client, reference):
    full = reference.generate(PROMPT, raw=True, max_tokens=30).text
    stop = full[8:11]
    assert stop
    body = client.post(
        "/v1/completions", json={"prompt": PROMPT, "max_tokens": 30, "temperature": 0, "stop": [stop]}
    ).json()
    assert body["choices"][0]["text"] == full[: full.index(stop)]
    assert body["choices"][0]["finish_reason"] == "stop"
    body = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_completion_tokens": 3}).json()
    assert body["usage"]["completion_tokens"] == 3
    # without max_tokens the server's default (16 here) applies
    body = client.post("/v1/chat/completions", json={"messages": MESSAGES}).json()
    assert body["usage"]["completion_tokens"] == 16


def test_seeded_sampling_is_reproducible(client):
    req = {"messages": MESSAGES, "max_tokens": 16, "temperature": 1.0, "top_p": 0.9, "seed": 7}
    a = client.post("/v1/chat/completions", json=req).json()["choices"][0]["message"]["content"]
    b = client.post("/v1/chat/completions", json=req).json()["choices"][0]["message"]["content"]
    assert a == b


def test_chat_continuation_reuses_the_kv_prefix(client):
    first = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 8}).json()
    reply = first["choices"][0]["message"]["content"]
    more = MESSAGES + [{"role": "assistant", "content": reply}, {"role": "user", "content": "and the fox?"}]
    second = client.post("/v1/chat/completions", json={"messages": more, "max_tokens": 8}).json()
    t = second["timings"]
    assert second["usage"]["prompt_tokens"] > first["usage"]["prompt_tokens"]
    # most of the prompt came from the cache: only the new turn (and a re-rendered edge) was decoded
    assert t["cache_n"] >= first["usage"]["prompt_tokens"] - 2
    assert t["prompt_n"] < second["usage"]["prompt_tokens"] - first["usage"]["prompt_tokens"] + 8
    assert second["usage"]["prompt_tokens_details"]["cached_tokens"] == t["cache_n"]


def test_content_parts_and_developer_role(client, reference):
    msgs = [
        {"role": "developer", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello "}, {"type": "text", "text": "world"}]},
    ]
    body = client.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 6, "temperature": 0}).json()
    want = reference.generate(
        [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello world"}], max_tokens=6
    )
    assert body["choices"][0]["message"]["content"] == want.text


def test_health_metrics_and_page(client):
    client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4})
    h = client.get("/health")
    assert h.status_code == 200
    assert h.json()["status"] == "ok" and h.json()["busy"] is False and h.json()["queue"] == 0
    m = client.get("/metrics")
    assert m.headers["content-type"].startswith("text/plain")
    text = m.text
    assert re.search(r'^edgespec_requests_total\{endpoint="/v1/chat/completions",status="200"\} [1-9]', text, re.M)
    gen = int(re.search(r"^edgespec_generated_tokens_total (\d+)$", text, re.M).group(1))
    assert gen >= 4
    drafted = int(re.search(r"^edgespec_draft_tokens_total (\d+)$", text, re.M).group(1))
    accepted = int(re.search(r"^edgespec_draft_tokens_accepted_total (\d+)$", text, re.M).group(1))
    assert 0 < accepted <= drafted
    assert re.search(r"^edgespec_queue_length 0$", text, re.M)
    assert re.search(r"^edgespec_draft_acceptance_ratio [0-9.]+$", text, re.M)
    for line in text.splitlines():  # the exposition format, line by line
        assert (
            line.startswith("# HELP ")
            or line.startswith("# TYPE ")
            or re.match(r"^[a-z_]+(\{[a-z_]+=\"[^\"]*\"(,[a-z_]+=\"[^\"]*\")*\})? -?[0-9.e+-]+$", line)
        ), line
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    # one file, nothing fetched from elsewhere: it works offline
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page.text)
    assert "@import" not in page.text and "from_draft" in page.text


# -- one test per bad input (issue 9) -------------------------------------------------------------


def test_malformed_json_is_400(client):
    resp = client.post("/v1/chat/completions", content=b'{"messages": [', headers={"content-type": "application/json"})
    assert resp.status_code == 400
    err = error_of(resp)
    assert err["type"] == "invalid_request_error" and "not valid JSON" in err["message"]


def test_missing_messages_is_400(client):
    resp = client.post("/v1/chat/completions", json={"max_tokens": 4})
    assert resp.status_code == 400
    err = error_of(resp)
    assert err["param"] == "messages" and "required" in err["message"]


def test_n_over_16_is_400(client):
    resp = client.post("/v1/chat/completions", json={"messages": MESSAGES, "n": 17})
    assert resp.status_code == 400
    err = error_of(resp)
    assert err["param"] == "n" and "less than or equal to 16" in err["message"]


def test_negative_max_tokens_is_400(client):
    resp = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": -5})
    assert resp.status_code == 400
    err = error_of(resp)
    assert err["param"] == "max_tokens" and "greater than or equal to 1" in err["message"]


def test_wrong_api_key_is_401(engine):
    with TestClient(create_app(engine, api_key="s3cret", max_tokens=4)) as c:
        wrong = c.post("/v1/chat/completions", json={"messages": MESSAGES}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.headers["www-authenticate"] == "Bearer"
        assert error_of(wrong)["code"] == "invalid_api_key"
        missing = c.get("/v1/models")
        assert missing.status_code == 401 and "Authorization: Bearer" in error_of(missing)["message"]
        ok = c.post("/v1/chat/completions", json={"messages": MESSAGES}, headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 4
        assert c.get("/health").status_code == 200  # health and the page stay open


def test_oversized_body_is_413(engine):
    with TestClient(create_app(engine, max_body_bytes=4096)) as c:
        big = {"messages": [{"role": "user", "content": "x" * 5000}]}
        resp = c.post("/v1/chat/completions", json=big)
        assert resp.status_code == 413
        assert "larger than 4096 bytes" in error_of(resp)["message"]

        def chunked():  # no Content-Length: the limit holds while reading
            yield json.dumps(big).encode()

        resp = c.post("/v1/chat/completions", content=chunked())
        assert resp.status_code == 413


@pytest.mark.parametrize("stream", [False, True])
def test_prompt_longer_than_the_context_is_400(client, stream):
    long = [{"role": "user", "content": "the dog and the fox " * 200}]
    resp = client.post("/v1/chat/completions", json={"messages": long, "stream": stream})
    assert resp.status_code == 400  # also streamed: checked before the first byte
    err = error_of(resp)
    assert err["code"] == "context_length_exceeded" and err["param"] == "messages"
    assert "context holds 512" in err["message"]
    assert client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2}).status_code == 200


@pytest.mark.parametrize(
    "body, param, words",
    [
        ({"messages": MESSAGES, "temperature": "hot"}, "temperature", "valid number"),
        ({"messages": MESSAGES, "temperature": 3}, "temperature", "less than or equal to 2"),
        ({"messages": MESSAGES, "top_p": 0}, "top_p", "greater than 0"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role", "'system'"),
        ({"messages": []}, "messages", "at least 1"),
        ({"messages": "hello"}, "messages", "Input should be a valid"),
        ({"messages": MESSAGES, "stream": "yes"}, "stream", "valid boolean"),
        ({"messages": MESSAGES, "logprobs": "yes"}, "logprobs", "valid boolean"),
        ({"messages": MESSAGES, "tools": [{"type": "function"}]}, "tools.0.function", "required"),
        ({"messages": MESSAGES, "seed": -2}, "seed", "greater than or equal to -1"),
    ],
)
def test_wrong_fields_are_400_naming_the_field(client, body, param, words):
    resp = client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400, resp.text
    err = error_of(resp)
    assert err["param"] == param and words in err["message"], err


@pytest.mark.parametrize(
    "body, words",
    [
        ({"prompt": ["a", "b"]}, "one prompt per request"),
        ({"prompt": PROMPT, "echo": True}, "echo=true is not supported"),
        ({"max_tokens": 3}, "required"),
        ([1, 2, 3], "must be a JSON object"),
    ],
)
def test_bad_completion_requests_are_400(client, body, words):
    resp = client.post("/v1/completions", json=body)
    assert resp.status_code == 400 and words in error_of(resp)["message"]


def test_unknown_route_and_wrong_method_are_openai_errors(client):
    resp = client.get("/v1/nothing")
    assert resp.status_code == 404 and error_of(resp)["code"] == "not_found"
    resp = client.get("/v1/chat/completions")
    assert resp.status_code == 405 and "GET is not allowed" in error_of(resp)["message"]


def test_an_unexpected_failure_is_a_500_object_without_traceback(engine):
    class Broken:
        def __getattr__(self, name):
            return getattr(engine, name)

        def stream(self, *a, **kw):
            raise RuntimeError("boom")

    with TestClient(create_app(Broken()), raise_server_exceptions=False) as c:
        resp = c.post("/v1/chat/completions", json={"messages": MESSAGES})
        assert resp.status_code == 500
        err = error_of(resp)
        assert err["type"] == "server_error" and "RuntimeError" in err["message"]
        # and the worker is still there for the next request
        assert c.get("/health").json()["status"] == "ok"
