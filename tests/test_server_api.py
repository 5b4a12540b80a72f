"""What llama.cpp's server test suite found missing (issue 28, item 7), on the tiny models:
the routes without ``/v1``, ``system_fingerprint``, the ``X-Api-Key`` header, a final
assistant message continued, ``/tokenize`` and ``/detokenize``; and how ``/metrics`` and
``/health`` see a request end: a hang-up is a 499 however the server runs, and a
finished reply leaves the worker idle (items 6 and 7). The Responses API is
tests/test_server_api_responses.py."""

from __future__ import annotations

import json
import re
import socket
import time

import httpx
import pytest
from fastapi.testclient import TestClient

import serve_support
from edgespec import __version__
from edgespec.llama.chat_template import tokenize_rendered
from edgespec.server import create_app
from serve_support import LiveServer, SlowEngine, _Wrapped, sse_events

MESSAGES = [{"role": "user", "content": "hello world, tell me about the dog"}]
PROMPT = "the quick brown fox"


engine = serve_support.engine


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(engine, max_tokens=8, defaults={"temperature": 0.0})) as c:
        yield c


def chat(client, path="/v1/chat/completions", headers=None, **extra):
    return client.post(path, json={"messages": MESSAGES, "max_tokens": 6, **extra}, headers=headers)


# -- the routes without /v1 --------------------------------------------------------------------


def test_every_v1_route_is_also_served_without_v1(client):
    assert client.get("/models").json() == client.get("/v1/models").json()
    a, b = chat(client).json(), chat(client, "/chat/completions").json()
    assert a["choices"] == b["choices"] and b["object"] == "chat.completion"
    a = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 5}).json()
    b = client.post("/completions", json={"prompt": PROMPT, "max_tokens": 5}).json()
    assert a["choices"] == b["choices"]
    metrics = client.get("/metrics").text  # counted under the route the client used
    assert 'edgespec_requests_total{endpoint="/chat/completions",status="200"} 1' in metrics


def test_the_aliases_need_the_key_too(engine):
    with TestClient(create_app(engine, api_key="k", max_tokens=4)) as c:
        for method, path in (
            ("GET", "/models"),
            ("POST", "/chat/completions"),
            ("POST", "/completions"),
            ("POST", "/tokenize"),
            ("POST", "/detokenize"),
            ("POST", "/responses"),
        ):
            assert c.request(method, path, json={}).status_code == 401, path
        # and the Host guard: a rebound name is refused before the key is even looked at
        assert c.get("/models", headers={"host": "evil.example"}).status_code == 403


# -- system_fingerprint ------------------------------------------------------------------------


def test_system_fingerprint_in_every_response_and_chunk(client, engine):
    want = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 3}).json()
    fp = want["system_fingerprint"]
    assert re.fullmatch(rf"edgespec-{re.escape(__version__)}-[0-9a-f]{{10}}", fp), fp
    assert client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 3}).json()["system_fingerprint"] == fp
    with client.stream(
        "POST",
        "/v1/chat/completions",
        json={"messages": MESSAGES, "max_tokens": 3, "stream": True, "stream_options": {"include_usage": True}},
    ) as r:
        chunks = [c for c in sse_events(r.iter_lines()) if c != "[DONE]"]
    assert chunks and all(c["system_fingerprint"] == fp for c in chunks)
    with client.stream("POST", "/v1/completions", json={"prompt": PROMPT, "max_tokens": 3, "stream": True}) as r:
        assert all(c["system_fingerprint"] == fp for c in sse_events(r.iter_lines()) if c != "[DONE]")
    # stable: another app on the same configuration says the same; another drafter does not
    with TestClient(create_app(engine, max_tokens=3)) as again:
        assert chat(again).json()["system_fingerprint"] == fp


def test_system_fingerprint_changes_with_the_configuration(engine, reference):
    from edgespec.server.routes_extra import system_fingerprint

    assert system_fingerprint(engine) == system_fingerprint(engine)
    assert system_fingerprint(reference) != system_fingerprint(engine)  # no drafter


# -- X-Api-Key ------------------------------------------------------------------------------


def test_x_api_key_is_accepted_beside_bearer(engine):
    with TestClient(create_app(engine, api_key="s3cret", max_tokens=4)) as c:
        assert chat(c, headers={"X-Api-Key": "s3cret"}).status_code == 200
        assert chat(c, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        for headers in ({"X-Api-Key": "nope"}, {"Authorization": "Bearer nope"}):
            wrong = chat(c, headers=headers)
            assert wrong.status_code == 401 and wrong.json()["error"]["message"] == "the API key is wrong"
        missing = chat(c)
        assert missing.status_code == 401 and "X-Api-Key" in missing.json()["error"]["message"]
        assert c.get("/metrics", headers={"x-api-key": "s3cret"}).status_code == 200
        assert "model" in c.get("/health", headers={"x-api-key": "s3cret"}).json()  # the full body
        assert "model" not in c.get("/health", headers={"x-api-key": "nope"}).json()


def test_key_ok_unit():
    from edgespec.server.guard import key_ok

    assert key_ok({}, None)
    assert key_ok({"x-api-key": " k "}, "k") and key_ok({"authorization": "bearer k"}, "k")
    assert key_ok({"authorization": "Bearer wrong", "x-api-key": "k"}, "k")  # either one that matches
    assert not key_ok({"authorization": "k"}, "k")  # no scheme
    assert not key_ok({"x-api-key": ""}, "k") and not key_ok({}, "k")


# -- a final assistant message: continued ------------------------------------------------------


def test_a_final_assistant_message_is_continued(client, reference):
    prefill = "the dog"
    msgs = [*MESSAGES, {"role": "assistant", "content": prefill}]
    # llama-server's reading: the new turn's opening, then the prefill, left open
    text = reference.apply_chat_template(MESSAGES) + prefill
    ids = tokenize_rendered(reference.target_model, text)
    want = reference.generate(ids, max_tokens=8)
    for extra in (
        {},
        {"continue_final_message": True},
        {"continue_final_message": True, "add_generation_prompt": False},
    ):
        resp = client.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 8, **extra})
        assert resp.status_code == 200, (extra, resp.text)
        body = resp.json()
        assert body["usage"]["prompt_tokens"] == len(ids), extra
        assert body["choices"][0]["message"]["content"] == want.text  # the continuation only
    # false: the message is closed and a new turn opens after it (what it was before)
    closed = client.post(
        "/v1/chat/completions", json={"messages": msgs, "max_tokens": 8, "continue_final_message": False}
    ).json()
    assert closed["usage"]["prompt_tokens"] == len(reference.prompt_tokens(msgs))


def test_continuing_needs_an_assistant_message_last(client):
    resp = client.post("/v1/chat/completions", json={"messages": MESSAGES, "continue_final_message": True})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "continue_final_message"
    resp = client.post("/v1/chat/completions", json={"messages": MESSAGES, "add_generation_prompt": False})
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "add_generation_prompt"


def test_add_generation_prompt_with_continue_final_message_is_a_400_naming_them(client):
    """Issue 34: both true asked for two different prompts, and the server continued the
    final message quietly; llama-server and vLLM answer 400, and so does this server."""
    msgs = [*MESSAGES, {"role": "assistant", "content": "Hello"}]
    resp = client.post(
        "/v1/chat/completions",
        json={"messages": msgs, "max_tokens": 4, "add_generation_prompt": True, "continue_final_message": True},
    )
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == "add_generation_prompt" and "continue_final_message" in err["message"], err
    for extra in (
        {"add_generation_prompt": True},
        {"add_generation_prompt": False, "continue_final_message": True},
        {"add_generation_prompt": True, "continue_final_message": False},
    ):
        resp = client.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 4, **extra})
        assert resp.status_code == 200, (extra, resp.text)


def test_two_trailing_assistant_messages_need_continue_final_message_to_say_which(client, reference):
    """Issue 34: the server continued the last of two assistant messages, with an empty
    answer. llama-server refuses that list; here too, unless continue_final_message says
    what to do: true continues the last one, false answers in a new turn after both."""
    msgs = [*MESSAGES, {"role": "assistant", "content": "the dog"}, {"role": "assistant", "content": "the fox"}]
    resp = client.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 4})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == "messages" and "two assistant messages" in err["message"], err
    stream = client.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 4, "stream": True})
    assert stream.status_code == 400
    closed = client.post(
        "/v1/chat/completions", json={"messages": msgs, "max_tokens": 4, "continue_final_message": False}
    ).json()
    assert closed["usage"]["prompt_tokens"] == len(reference.prompt_tokens(msgs))
    continued = client.post(
        "/v1/chat/completions", json={"messages": msgs, "max_tokens": 4, "continue_final_message": True}
    ).json()
    assert continued["usage"]["prompt_tokens"] < closed["usage"]["prompt_tokens"]


def test_an_empty_final_assistant_message_is_the_new_turn(client, reference):
    msgs = [*MESSAGES, {"role": "assistant", "content": ""}]
    body = client.post("/v1/chat/completions", json={"messages": msgs, "max_tokens": 5}).json()
    assert body["usage"]["prompt_tokens"] == len(reference.prompt_tokens(MESSAGES))
    assert body["choices"][0]["message"]["content"] == reference.generate(MESSAGES, max_tokens=5).text


# -- /tokenize and /detokenize -----------------------------------------------------------------


def test_tokenize_and_detokenize(client, engine):
    ids = engine.tokenize(PROMPT, add_special=False)
    assert client.post("/tokenize", json={"content": PROMPT}).json() == {"tokens": ids}
    with_bos = client.post("/tokenize", json={"content": PROMPT, "add_special": True}).json()["tokens"]
    assert with_bos == engine.tokenize(PROMPT, add_special=True) and with_bos != ids
    pieces = client.post("/tokenize", json={"content": PROMPT, "with_pieces": True}).json()["tokens"]
    assert [p["id"] for p in pieces] == ids and "".join(p["piece"] for p in pieces) == PROMPT
    assert client.post("/detokenize", json={"tokens": ids}).json() == {"content": PROMPT}
    assert client.post("/detokenize", json={"tokens": []}).json() == {"content": ""}


def test_tokenize_splits_a_character_into_its_bytes(client, engine):
    text = "é"  # the tiny vocabulary is byte-level: no token holds this character whole
    pieces = client.post("/tokenize", json={"content": text, "with_pieces": True}).json()["tokens"]
    assert all(isinstance(p["piece"], list) for p in pieces)
    assert bytes(b for p in pieces for b in p["piece"]) == text.encode()


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/tokenize", {}, "content"),
        ("/tokenize", {"content": 5}, "content"),
        ("/detokenize", {"tokens": [1, 99999]}, "tokens"),
        ("/detokenize", {"tokens": "abc"}, "tokens"),
    ],
)
def test_tokenize_bad_input_is_400(client, path, body, param):
    resp = client.post(path, json=body)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == param, resp.text


# -- the Responses API through the openai client -----------------------------------------------


# -- how a request ends, as /metrics and /health see it ----------------------------------------


class SlowToClose(_Wrapped):
    """Its generations take a while to wind down after their last event (``Done``)."""

    def stream(self, prompt, **kwargs):
        events = super().stream(prompt, **kwargs)

        def gen():
            try:
                yield from events
            finally:
                time.sleep(0.5)

        return gen()


def test_health_after_a_reply_is_not_busy(engine):
    """The flaky test_health_metrics_and_page (issue 28, item 6): the reply went out when
    the worker posted ``Done``, but ``busy`` stayed true until the generator was closed,
    so a /health right after a reply sometimes said busy. Made wide here (0.5 s)."""
    with TestClient(create_app(SlowToClose(engine), max_tokens=4)) as c:
        for _ in range(2):
            assert chat(c).status_code == 200
            h = c.get("/health").json()
            assert h["busy"] is False and h["queue"] == 0


def hang_up_while_generating(url: str, http: httpx.Client, body: dict) -> None:
    """Send a non-streamed request on a raw socket and close it once the worker is busy
    with it: a hang-up before any byte of the answer, whatever the machine's speed (a
    client timeout raced the answer on a quiet machine)."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    data = json.dumps(body).encode()
    deadline = time.monotonic() + 10
    while http.get("/health").json()["busy"]:  # an earlier request still winding down
        assert time.monotonic() < deadline, "the worker stayed busy"
        time.sleep(0.005)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: "
            + f"{host}:{port}".encode()
            + b"\r\nContent-Type: application/json\r\nContent-Length: "
            + str(len(data)).encode()
            + b"\r\n\r\n"
            + data
        )
        while not http.get("/health").json()["busy"]:
            assert time.monotonic() < deadline, "the request never reached the worker"
            time.sleep(0.005)


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_hang_up_is_counted_as_499_whatever_the_parallelism(reference, parallel):
    # no drafter, so that 400 tokens take a while in slots too (one per decode)
    served = SlowEngine(reference, delay=0.02) if parallel == 1 else reference
    app = create_app(served, max_tokens=400, parallel=parallel)
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        with http.stream(
            "POST", "/v1/chat/completions", json={"messages": MESSAGES, "stream": True, "ignore_eos": True}
        ) as resp:
            assert resp.status_code == 200
            seen = 0
            for line in resp.iter_lines():
                seen += line.startswith("data: ")
                if seen >= 3:
                    break  # hang up mid-stream, after the 200 went out
        hang_up_while_generating(srv.url, http, {"messages": MESSAGES, "ignore_eos": True})  # on a whole answer
        # the worker counts a stop and the request's handler its status, each when it
        # gets there: wait for both (a slow CI machine read the one before the other)
        deadline = time.monotonic() + 10
        while True:
            text = http.get("/metrics").text
            stopped = re.findall(r'^edgespec_requests_cancelled_total\{stage="\w+"\} (\d+)$', text, re.M)
            counted = re.findall(
                r'^edgespec_requests_total\{endpoint="/v1/chat/completions",status="(\d+)"\} '
                r"(\d+)$",
                text,
                re.M,
            )
            if sum(map(int, stopped)) == 2 and counted == [("499", "2")]:
                break
            assert time.monotonic() < deadline, text
            time.sleep(0.05)


# -- the Responses API's tools, on a tiny model with Qwen2.5's template ---------------------------
