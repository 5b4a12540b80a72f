"""Structured output through the server on the tiny models: ``response_format`` (and
llama-server's ``json_schema`` / ``grammar``) on both endpoints, streamed and not; answers cut by
``max_tokens``; every bad input a 400 naming the field before any model work; lenient schemas; and
a matcher error ending its request. Tool calls and the ``--parallel`` server are
tests/test_server_structured_tools.py.

The tiny models have random weights, so the schemas here leave them few choices (enums,
small integers, booleans, short strings, no extra properties): every answer ends within
a few dozen tokens, and each one that ends with ``stop`` must validate (``jsonschema``).
"""

from __future__ import annotations

import json

import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient

import structured_support
from edgespec.server import create_app
from serve_support import LiveServer, sse_events
from structured_support import FORMAT, MESSAGES, SCHEMA, streamed

engine = structured_support.engine

pytest.importorskip("llguidance")

PROMPT = "the quick brown fox"


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(engine, max_tokens=96, defaults={"temperature": 0.0})) as c:
        yield c


def chunks_text(events: list, chat: bool) -> tuple[str, str, dict]:
    text, finish, structure = "", None, None
    for ev in events[:-1]:
        for ch in ev["choices"]:
            text += (ch["delta"].get("content") or "") if chat else ch["text"]
            finish = ch.get("finish_reason") or finish
            structure = ch.get("structure") or structure
    assert events[-1] == "[DONE]"
    return text, finish, structure


@pytest.mark.parametrize(
    "path, body",
    [
        ("/v1/chat/completions", {"messages": MESSAGES, "response_format": FORMAT}),
        ("/v1/completions", {"prompt": PROMPT, "response_format": FORMAT}),
        ("/v1/chat/completions", {"messages": MESSAGES, "json_schema": SCHEMA}),  # llama-server's field
    ],
)
def test_json_schema_answers_validate_streamed_and_not(client, path, body):
    chat = "messages" in body
    resp = client.post(path, json=body)
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    text = choice["message"]["content"] if chat else choice["text"]
    assert choice["finish_reason"] == "stop" and choice["structure"]["complete"] is True
    assert choice["structure"]["type"] == "json_schema"
    jsonschema.validate(json.loads(text), SCHEMA)
    assert text == json.dumps(json.loads(text), ensure_ascii=False)  # the default layout: ", " and ": "
    s_text, s_finish, s_structure = chunks_text(streamed(client, path, body), chat)
    assert (s_text, s_finish, s_structure) == (text, "stop", choice["structure"])


def test_json_object_regex_and_grammar(client):
    resp = client.post(
        "/v1/chat/completions",
        json={"messages": MESSAGES, "max_tokens": 64, "response_format": {"type": "json_object"}},
    )
    choice = resp.json()["choices"][0]
    if choice["finish_reason"] == "stop":
        assert isinstance(json.loads(choice["message"]["content"]), dict)
    else:
        assert choice["structure"] == {
            "type": "json_object",
            "complete": False,
            "error": "max_tokens (64) ran out before the JSON was complete",
        }
    for fmt in (
        {"type": "regex", "regex": "(yes|no), [0-9]{2}"},
        {"type": "grammar", "grammar": 'root ::= ("yes" | "no") ", " [0-9] [0-9]'},
    ):
        resp = client.post("/v1/completions", json={"prompt": PROMPT, "response_format": fmt})
        choice = resp.json()["choices"][0]
        assert choice["finish_reason"] == "stop" and choice["structure"]["complete"], choice
        assert choice["text"].split(", ")[0] in ("yes", "no") and choice["text"][-2:].isdigit()
    resp = client.post("/v1/completions", json={"prompt": PROMPT, "grammar": 'root ::= "ab" [0-9]'})
    assert resp.json()["choices"][0]["text"][:2] == "ab"  # llama-server's GBNF field


def test_max_tokens_inside_the_structure_is_length_and_incomplete(client):
    body = {"messages": MESSAGES, "response_format": FORMAT, "max_tokens": 3}
    choice = client.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["structure"] == {
        "type": "json_schema",
        "complete": False,
        "error": "max_tokens (3) ran out before the JSON was complete",
    }
    with pytest.raises(json.JSONDecodeError):
        json.loads(choice["message"]["content"])
    _, finish, structure = chunks_text(streamed(client, "/v1/chat/completions", body), chat=True)
    assert finish == "length" and structure["complete"] is False and "max_tokens (3)" in structure["error"]


def test_the_openai_clients_parse_fails_on_a_cut_answer_as_against_openai(client):
    """issue 28 item 3: finish_reason "length" makes the official client's parse() raise
    LengthFinishReasonError, as it does against OpenAI, instead of parsing half a value."""
    openai = pytest.importorskip("openai")
    pydantic = pytest.importorskip("pydantic")

    class Record(pydantic.BaseModel):
        ok: bool
        tag: str

    api = openai.OpenAI(base_url="http://testserver/v1", api_key="unused", http_client=client, max_retries=0)
    with pytest.raises(openai.LengthFinishReasonError):
        api.chat.completions.parse(model="edgespec", messages=MESSAGES, response_format=Record, max_tokens=3)


def deep_schema(levels: int) -> dict:
    schema: dict = {"type": "integer"}
    for _ in range(levels - 1):
        schema = {"type": "array", "items": schema, "maxItems": 1}
    return schema


def test_json_nested_past_the_parsers_limit_is_a_400_naming_it(client):
    """issue 28 item 7: 200 nested arrays are valid JSON; the parser's depth limit is
    named, not called invalid JSON. One level less than the limit is read."""
    from edgespec.server.bodies import JSON_DEPTH_LIMIT

    ok = client.post(
        "/v1/chat/completions",
        json={"messages": MESSAGES, "max_tokens": 2, "json_schema": deep_schema(JSON_DEPTH_LIMIT - 1)},
    )
    assert "levels deep" not in ok.text and "not valid JSON" not in ok.text, ok.text
    resp = client.post(
        "/v1/chat/completions", json={"messages": MESSAGES, "json_schema": deep_schema(JSON_DEPTH_LIMIT)}
    )
    assert resp.status_code == 400
    message = resp.json()["error"]["message"]
    assert f"more than {JSON_DEPTH_LIMIT} levels deep" in message and "not valid JSON" not in message


@pytest.mark.parametrize(
    "body, param, words",
    [
        ({"json_schema": {"$ref": "#"}}, "json_schema", "no finite value"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "properties": {"a": {"$ref": "#"}}, "required": ["a"]},
                    },
                }
            },
            "response_format.json_schema.schema",
            "'#/properties/a' refers to '#'",
        ),
        (
            {"json_schema": {"oneOf": [{"type": "number"}, {"type": "integer"}]}},
            "json_schema",
            '"lenient_schema": true',
        ),
        (
            {"response_format": {"type": "grammar", "grammar": 'start: <tool_call> "x"'}},
            "response_format.grammar",
            "<tool_call>",
        ),
        ({"grammar": "root ::= x\nx ::= x"}, "grammar", "can never be satisfied"),
    ],
)
def test_structures_that_can_never_be_satisfied_are_400_before_any_model_work(client, body, param, words):
    """issue 28 items 6 and 7: these were 500s (a 200 and an error event when streamed)."""
    for stream in (False, True):
        resp = client.post("/v1/chat/completions", json={"messages": MESSAGES, **body, "stream": stream})
        assert resp.status_code == 400, resp.text
        err = resp.json()["error"]
        assert err["param"] == param and words in err["message"], err
        assert "\n" not in err["message"] and "NoExtensionBias" not in err["message"]


@pytest.mark.parametrize(
    "body, param, words",
    [
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "objekt"}}}},
            "response_format.json_schema.schema",
            "invalid JSON schema",
        ),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "array", "uniqueItems": True}},
                }
            },
            "response_format.json_schema.schema",
            "'uniqueItems'",
        ),
        ({"response_format": {"type": "regex", "regex": "(unclosed"}}, "response_format.regex", "regex"),
        ({"response_format": {"type": "grammar", "grammar": "root ::= (("}}, "response_format.grammar", "grammar"),
        ({"json_schema": {"type": "objekt"}}, "json_schema", "invalid JSON schema"),
        ({"grammar": "root ::= (("}, "grammar", "grammar"),
    ],
)
def test_structures_that_do_not_compile_are_400_naming_the_field(client, body, param, words):
    for path, base in (("/v1/chat/completions", {"messages": MESSAGES}), ("/v1/completions", {"prompt": PROMPT})):
        for stream in (False, True):
            resp = client.post(path, json={**base, **body, "stream": stream})
            assert resp.status_code == 400, resp.text
            err = resp.json()["error"]
            assert err["param"] == param and words in err["message"], err
            assert "\n" not in err["message"] and "--lenient" not in err["message"]


def test_lenient_schema_relaxes_what_it_must_and_says_nothing_silently(client):
    schema = {"type": "array", "items": {"enum": [1, 2]}, "uniqueItems": True, "maxItems": 2}
    body = {"messages": MESSAGES, "json_schema": schema, "lenient_schema": True}
    resp = client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    assert any("uniqueItems" in w for w in resp.json()["choices"][0]["structure"]["relaxed"])
    body.pop("lenient_schema")
    err = client.post("/v1/chat/completions", json=body).json()["error"]
    assert "'uniqueItems'" in err["message"] and '"lenient_schema": true' in err["message"]


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_matcher_error_ends_the_request_with_an_error(engine, monkeypatch, parallel):
    """A grammar matcher in its error state never lets the answer go on unconstrained:
    the request ends with an error (a 500 object, or an error event in a stream), and
    the server serves the next one."""
    from edgespec.constraints import matcher as matcher_module
    from edgespec.errors import ConstraintStateError

    real = matcher_module.Matcher.consume

    def consume(self, tokens):
        if self.consumed + len(tokens) > 4:
            raise ConstraintStateError("the grammar refused token 7 after 4 tokens (injected)")
        return real(self, tokens)

    monkeypatch.setattr(matcher_module.Matcher, "consume", consume)
    body = {"messages": MESSAGES, "response_format": FORMAT}
    with LiveServer(create_app(engine, parallel=parallel, max_tokens=64, defaults={"temperature": 0.0})) as srv:
        resp = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=60)
        assert resp.status_code == 500 and "grammar refused token 7" in resp.json()["error"]["message"]
        with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json={**body, "stream": True}, timeout=60) as r:
            events = list(sse_events(r.iter_lines()))
        assert "grammar refused token 7" in events[-2]["error"]["message"] and events[-1] == "[DONE]"
        assert not any(ch.get("finish_reason") for ev in events[:-2] for ch in ev.get("choices", []))
        free = httpx.post(f"{srv.url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4}, timeout=60)
        assert free.status_code == 200


# -- tool calls ------------------------------------------------------------------------------
