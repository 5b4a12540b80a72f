"""Tool calls through the server, on a tiny model that carries Qwen2.5's chat template:
``tool_choice`` required and named calls validate against their tools (streamed and not),
``auto`` and ``none`` leave free text alone (and ``none`` keeps the tools in the prompt while the
mask forbids a call), stop strings and ``max_tokens`` inside a call, tool parameters that do not
compile are a 400 naming ``tools``, and the ``--parallel`` server answers structured requests and
tool calls beside free ones as one stream does."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient

import structured_support
from edgespec import Engine
from edgespec.llama.chat_template import render, tokenize_rendered
from edgespec.server import create_app
from edgespec.server.schema import ChatRequest
from serve_support import LiveServer
from structured_support import FORMAT, MESSAGES, SCHEMA, streamed
from tiny_models import make_tiny_model

pytest.importorskip("llguidance")

engine = structured_support.engine


QWEN_TEMPLATE = (Path(__file__).parent / "data" / "qwen2.5_chat_template.jinja").read_text()


PARAMS = {
    "type": "object",
    "properties": {"unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1, "maximum": 7}},
    "required": ["unit", "days"],
    "additionalProperties": False,
}


TOOLS = [
    {"type": "function", "function": {"name": "forecast", "description": "The forecast", "parameters": PARAMS}},
    {
        "type": "function",
        "function": {
            "name": "clock",
            "parameters": {
                "type": "object",
                "properties": {"utc": {"type": "boolean"}},
                "required": ["utc"],
                "additionalProperties": False,
            },
        },
    },
]


@pytest.fixture(scope="module")
def tool_engine(tmp_path_factory):
    path = make_tiny_model(
        tmp_path_factory.mktemp("tools") / "qwen_template.gguf",
        seed=0,
        chat_template=QWEN_TEMPLATE,
        name="edgespec-tiny-tools",
    )
    with Engine(path, draft="ngram", n_ctx=1024, exact=True, n_threads=1) as e:
        yield e


@pytest.fixture(scope="module")
def tool_client(tool_engine):
    with TestClient(create_app(tool_engine, max_tokens=96, defaults={"temperature": 0.0})) as c:
        yield c


def test_tool_parameters_that_do_not_compile_are_400_naming_tools(tool_client):
    bad = [
        {
            "type": "function",
            "function": {
                "name": "f",
                "parameters": {"type": "object", "properties": {"tags": {"type": "array", "uniqueItems": True}}},
            },
        }
    ]
    body = {"messages": MESSAGES, "tools": bad, "tool_choice": "required", "max_tokens": 40}
    err = tool_client.post("/v1/chat/completions", json=body).json()["error"]
    assert err["param"] == "tools" and "'uniqueItems'" in err["message"], err
    assert '"lenient_schema": true' in err["message"]
    resp = tool_client.post("/v1/chat/completions", json={**body, "lenient_schema": True})
    assert resp.status_code == 200, resp.text
    bad[0]["function"]["parameters"] = {"type": "objekt"}
    err = tool_client.post("/v1/chat/completions", json=body).json()["error"]
    assert err["param"] == "tools", err


def test_the_parallel_server_serves_structures_beside_free_requests(engine, tool_engine):
    """--parallel: constrained and free requests share the batch's decodes; each answer is
    the one the single-stream server gives (exact kernels: batch-invariant)."""
    body = {"messages": MESSAGES, "response_format": FORMAT}
    tools = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", "parallel_tool_calls": False}
    with TestClient(create_app(engine, max_tokens=96, defaults={"temperature": 0.0})) as c:
        solo = c.post("/v1/chat/completions", json=body).json()["choices"][0]
    with TestClient(create_app(tool_engine, max_tokens=96, defaults={"temperature": 0.0})) as c:
        solo_tools = c.post("/v1/chat/completions", json=tools).json()["choices"][0]
    for eng, req, want in ((engine, body, solo), (tool_engine, tools, solo_tools)):
        with LiveServer(create_app(eng, parallel=3, max_tokens=96, defaults={"temperature": 0.0})) as srv:
            bodies = [req, {"messages": MESSAGES, "max_tokens": 40}, req]
            with ThreadPoolExecutor(3) as pool:
                answers = list(
                    pool.map(lambda b: httpx.post(f"{srv.url}/v1/chat/completions", json=b, timeout=120), bodies)
                )
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        for a in (answers[0], answers[2]):
            got = a.json()["choices"][0]
            assert got["finish_reason"] == want["finish_reason"] and got["structure"] == want["structure"]
            if "tool_calls" in want["message"]:
                assert calls_of(got["message"]) == calls_of(want["message"])
            else:
                assert got["message"]["content"] == want["message"]["content"]
                jsonschema.validate(json.loads(got["message"]["content"]), SCHEMA)


def calls_of(message: dict, cut: bool = False) -> list[tuple[str, dict]]:
    """(name, arguments) of each call; ``cut``: the last one may have been cut short
    (``finish_reason`` length), and is left out if its arguments are not complete."""
    calls = []
    for i, c in enumerate(message.get("tool_calls") or ()):
        assert c["type"] == "function" and c["id"].startswith("call_")
        try:
            calls.append((c["function"]["name"], json.loads(c["function"]["arguments"])))
        except json.JSONDecodeError:
            assert cut and i == len(message["tool_calls"]) - 1
    return calls


def check_against_tools(calls: list[tuple[str, dict]]) -> None:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    for name, args in calls:
        jsonschema.validate(args, schemas[name])


def assemble(events: list) -> tuple[str, dict[int, dict], str]:
    """A streamed chat answer put back together: content, calls by index, finish."""
    content, calls, finish = "", {}, None
    for ev in events[:-1]:
        for ch in ev["choices"]:
            d = ch["delta"]
            content += d.get("content") or ""
            for tc in d.get("tool_calls") or ():
                c = calls.setdefault(tc["index"], {"id": None, "name": None, "arguments": ""})
                if "id" in tc:
                    assert c["id"] is None and tc["type"] == "function"
                    c.update(id=tc["id"], name=tc["function"]["name"])
                c["arguments"] += tc["function"].get("arguments", "")
            finish = ch.get("finish_reason") or finish
    return content, calls, finish


@pytest.mark.parametrize(
    "choice, parallel",
    [("required", True), ("required", False), ({"type": "function", "function": {"name": "clock"}}, True)],
)
def test_required_and_named_tool_calls_validate_streamed_and_not(tool_client, choice, parallel):
    body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": choice, "parallel_tool_calls": parallel}
    resp = tool_client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    out = resp.json()["choices"][0]
    calls = calls_of(out["message"], cut=out["finish_reason"] == "length")
    check_against_tools(calls)
    if parallel:
        # random weights: this model goes on calling until the context is full; every
        # call that completed validates, and the answer says it was cut
        assert len(calls) >= 1 and out["finish_reason"] in ("tool_calls", "length")
    else:
        assert len(calls) == 1 and out["finish_reason"] == "tool_calls", out
    complete = out["finish_reason"] == "tool_calls"
    assert out["structure"] == {
        "type": "tool_calls",
        "complete": complete,
        **({} if complete else {"error": "max_tokens (96) ran out before the structure was complete"}),
    }
    if isinstance(choice, dict):
        assert [n for n, _ in calls] == ["clock"] * len(calls)
    content, streamed_calls, finish = assemble(streamed(tool_client, "/v1/chat/completions", body))
    assert finish == out["finish_reason"] and content == (out["message"]["content"] or "")
    assert [(c["name"], c["arguments"]) for c in streamed_calls.values()] == [
        (c["function"]["name"], c["function"]["arguments"]) for c in out["message"]["tool_calls"]
    ]


def test_auto_and_none_leave_free_text_alone_and_none_keeps_the_tools(tool_client, tool_engine):
    """Under tool_choice auto, free text is only kept from starting a call without its
    tags, from special tokens and from bytes that are not UTF-8 (random weights write
    those; ``logit_bias`` bans them here in both requests): the answer is the same
    prompt's unconstrained answer, token for token."""
    model = tool_engine.target_model
    ascii_only = {
        str(t): -100
        for t in range(model.n_vocab)
        if t != model.eos and (max(model.token_to_bytes(t) or b"\x80") > 0x7F)
    }
    body = {"messages": MESSAGES, "tools": TOOLS, "max_tokens": 24, "return_tokens": True, "logit_bias": ascii_only}
    resp = tool_client.post("/v1/chat/completions", json=body).json()
    auto = resp["choices"][0]
    assert auto["finish_reason"] in ("stop", "length") and "tool_calls" not in auto["message"]
    assert "structure" not in auto  # free text: no structure began
    ids = tokenize_rendered(model, render(model, MESSAGES, tools=TOOLS))
    free = tool_client.post(
        "/v1/completions", json={"prompt": ids, "max_tokens": 24, "return_tokens": True, "logit_bias": ascii_only}
    ).json()
    assert free["choices"][0]["text"].strip() and "<tool_call>" not in free["choices"][0]["text"]
    assert resp["token_ids"] == free["token_ids"] and auto["message"]["content"] == free["choices"][0]["text"]
    # none (issue 34): "do not call", not "forget the tools": the same prompt, tools
    # described, and the same free text, held only from opening a call
    none = tool_client.post("/v1/chat/completions", json={**body, "tool_choice": "none"}).json()
    assert none["usage"]["prompt_tokens"] == len(ids)
    assert none["token_ids"] == free["token_ids"] and "structure" not in none["choices"][0]
    assert "tool_calls" not in none["choices"][0]["message"]


def test_none_keeps_the_tools_in_the_prompt_and_the_mask_forbids_a_call(tool_engine):
    """After a call and its result, ``tool_choice`` none renders the tools as auto does
    (the 1.5B refused to answer from the result when they were dropped), and the answer's
    mask refuses a call: tagged, bare, or the tag anywhere in the text."""
    from edgespec.server.structured import plan_chat

    model = tool_engine.target_model
    history = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "forecast", "arguments": '{"unit": "c", "days": 2}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    req = ChatRequest.model_validate({"messages": history, "tools": TOOLS, "tool_choice": "none"})
    structure = plan_chat(tool_engine, req)
    assert structure.prompt == tokenize_rendered(model, render(model, history, tools=TOOLS))
    assert '"name": "forecast"' in model.detokenize(structure.prompt) and structure.tools is False
    ids = lambda text: model.tokenize(text, add_special=False, parse_special=False)  # noqa: E731
    call = '{"name": "forecast", "arguments": {"unit": "c", "days": 2}}'
    # tagged, bare, and the near misses Qwen2.5-Coder-1.5B wrote when only the exact ones were refused
    for text in (
        f"<tool_call>\n{call}\n</tool_call>",
        call,
        f"Here: <tool_call>\n{call}",
        "{" + call + "}",
        '{{"name ": "forecast"}}',
        "{\"name': 1",
        "```json\n" + call,
        " { 'name': 1",
    ):
        tokens = ids(text)
        assert structure.constraint.matcher().validate(tokens) < len(tokens), text
    for text in (
        'It is sunny, {"a": 1} <tool> and <tool_call without its end.',
        '{"city": "Paris"} is sunny',
        "```python\nx = {'name': 1}\n```",
        'The "name" is forecast',
    ):
        answer = ids(text)
        assert structure.constraint.matcher().validate(answer) == len(answer), text


def test_a_stop_string_inside_a_call_is_not_a_finished_call(tool_client):
    body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", "stop": ['"arguments"']}
    out = tool_client.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert out["finish_reason"] == "stop" and out["structure"]["complete"] is False


def test_max_tokens_inside_a_call(tool_client):
    body = {"messages": MESSAGES, "tools": TOOLS, "tool_choice": "required", "max_tokens": 14}
    out = tool_client.post("/v1/chat/completions", json=body).json()["choices"][0]
    assert out["finish_reason"] == "length" and out["structure"]["complete"] is False
