"""The Responses API (issue 28, item 7), on the tiny models through the official ``openai``
client: ``create`` answers as the chat path does, streamed events, a JSON schema through the
structured path, unsupported fields named in a 400, tools called as the chat path calls them (on
a tiny model with Qwen2.5's template), and a stream that hangs up stops its generation; also the
client with a base URL that lacks ``/v1``."""

from __future__ import annotations

import json
import time

import httpx
import pytest

import serve_support
from edgespec import Engine
from edgespec.server import create_app
from serve_support import LiveServer, SlowEngine
from test_server_api import MESSAGES

engine = serve_support.engine


@pytest.fixture(scope="module")
def live(engine):
    with LiveServer(create_app(engine, max_tokens=8, defaults={"temperature": 0.0})) as srv:
        yield srv


@pytest.fixture(scope="module")
def oai(live):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=f"{live.url}/v1", api_key="none", max_retries=0) as c:
        yield c


def test_openai_client_whose_base_url_lacks_v1(live):
    openai = pytest.importorskip("openai")
    with openai.OpenAI(base_url=live.url, api_key="none", max_retries=0) as c:
        assert [m.id for m in c.models.list().data] == [m.id for m in c.models.list().data] != []
        reply = c.chat.completions.create(model="x", messages=MESSAGES, max_tokens=4)
        assert reply.choices[0].message.content is not None and reply.system_fingerprint


def test_responses_create_equals_the_chat_answer(oai, reference):
    want = reference.generate([{"role": "system", "content": "be brief"}, *MESSAGES], max_tokens=6)
    r = oai.responses.create(
        model="x", input=MESSAGES[0]["content"], instructions="be brief", max_output_tokens=6, temperature=0
    )
    assert r.object == "response" and r.id.startswith("resp_")
    assert r.output_text == want.text
    assert r.status == "incomplete" and r.incomplete_details.reason == "max_output_tokens"  # cut at 6
    assert r.usage.input_tokens == want.stats.prompt_tokens and r.usage.output_tokens == 6
    assert r.usage.total_tokens == r.usage.input_tokens + 6
    # a list of messages, text parts included
    r2 = oai.responses.create(
        model="x",
        max_output_tokens=6,
        instructions="be brief",
        input=[{"role": "user", "content": [{"type": "input_text", "text": MESSAGES[0]["content"]}]}],
    )
    assert r2.output_text == want.text


def test_responses_stream_events(oai, reference):
    want = reference.generate(MESSAGES, max_tokens=7)
    with oai.responses.create(model="x", input=MESSAGES, max_output_tokens=7, stream=True) as stream:
        events = list(stream)
    kinds = [e.type for e in events]
    assert kinds[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert kinds[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.incomplete",
    ]
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == want.text
    assert [e.sequence_number for e in events] == list(range(len(events)))
    final = events[-1].response
    assert final.output_text == want.text and final.usage.output_tokens == 7
    # ended by a stop string (passed through to the chat path): completed
    full = reference.generate(MESSAGES, max_tokens=20).text
    stop = full[6:9]
    with oai.responses.create(
        model="x", input=MESSAGES, max_output_tokens=20, stream=True, extra_body={"stop": [stop]}
    ) as stream:
        last = list(stream)[-1]
    assert last.type == "response.completed" and last.response.status == "completed"
    assert last.response.output_text == full[: full.index(stop)]


def test_responses_json_schema_through_the_structured_path(oai):
    schema = {
        "type": "object",
        "properties": {"pick": {"enum": ["left", "right"]}},
        "required": ["pick"],
        "additionalProperties": False,
    }
    r = oai.responses.create(
        model="x",
        input="left or right?",
        max_output_tokens=40,
        text={"format": {"type": "json_schema", "name": "choice", "schema": schema}},
    )
    assert r.status == "completed" and json.loads(r.output_text)["pick"] in ("left", "right")
    assert r.text.format.type == "json_schema"
    bad = {"type": "object", "properties": {"a": {"type": "strng"}}}
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as e:  # compiled before any model work, named as sent
        oai.responses.create(
            model="x", input="hi", text={"format": {"type": "json_schema", "name": "x", "schema": bad}}
        )
    assert e.value.body["param"].startswith("text.format"), e.value.body


@pytest.mark.parametrize(
    "extra, param",
    [
        ({"previous_response_id": "resp_123"}, "previous_response_id"),
        ({"store": True}, "store"),
        ({"background": True}, "background"),
        ({"include": ["reasoning.encrypted_content"]}, "include"),
        ({"tools": [{"type": "web_search"}]}, "tools.0.type"),
        ({"tools": [{"type": "function", "name": "f"}], "tool_choice": "required"}, "tools"),  # ChatML: no call format
        ({"input": [{"type": "reasoning", "summary": []}]}, "input.0.type"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input.0.call_id"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]},
            "input.0.content.0.type",
        ),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"text": {"format": {"type": "json_schema", "name": "x"}}}, "text.format.schema"),
    ],
)
def test_responses_unsupported_fields_are_400_naming_them(live, extra, param):
    body = {"model": "x", "input": "hi", **extra}
    resp = httpx.post(f"{live.url}/v1/responses", json=body, timeout=30)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param, resp.json()
    # the defaults clients send are fine
    ok = httpx.post(
        f"{live.url}/responses",
        json={
            "input": "hi",
            "max_output_tokens": 2,
            "store": False,
            "tools": [],
            "include": [],
            "truncation": "disabled",
        },
        timeout=30,
    )
    assert ok.status_code == 200 and ok.json()["status"] in ("completed", "incomplete")


def test_responses_openai_client_error_names_the_field(oai):
    openai = pytest.importorskip("openai")
    with pytest.raises(openai.BadRequestError) as e:
        oai.responses.create(model="x", input="hi", previous_response_id="resp_1")
    assert "previous_response_id" in str(e.value)


WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"enum": ["Paris", "Rome"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


@pytest.fixture(scope="module")
def tool_live(tmp_path_factory):
    from pathlib import Path

    from tiny_models import make_tiny_model

    template = (Path(__file__).parent / "data" / "qwen2.5_chat_template.jinja").read_text()
    path = make_tiny_model(
        tmp_path_factory.mktemp("tools") / "qwen_template.gguf",
        seed=0,
        chat_template=template,
        name="edgespec-tiny-tools",
    )
    with (
        Engine(path, draft="ngram", n_ctx=1024, exact=True, n_threads=1) as e,
        LiveServer(create_app(e, max_tokens=64, defaults={"temperature": 0.0})) as srv,
    ):
        yield srv


def test_responses_tools_as_the_chat_path_calls_them(tool_live):
    openai = pytest.importorskip("openai")
    chat_tool = {"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}
    want = httpx.post(
        f"{tool_live.url}/v1/chat/completions",
        timeout=60,
        json={
            "messages": MESSAGES,
            "tools": [chat_tool],
            "tool_choice": "required",
            "max_tokens": 64,
            "parallel_tool_calls": False,
        },
    ).json()
    (want_call,) = want["choices"][0]["message"]["tool_calls"]
    with openai.OpenAI(base_url=f"{tool_live.url}/v1", api_key="none", max_retries=0) as c:
        r = c.responses.create(
            model="x",
            input=MESSAGES,
            tools=[WEATHER],
            tool_choice="required",
            max_output_tokens=64,
            parallel_tool_calls=False,
        )
        calls = [o for o in r.output if o.type == "function_call"]
        assert [(o.name, o.arguments) for o in calls] == [("get_weather", want_call["function"]["arguments"])]
        # (the tiny model may go on after its call until max_tokens: then it is incomplete, as on chat)
        status = "incomplete" if want["choices"][0]["finish_reason"] == "length" else "completed"
        assert r.status == status and r.usage.input_tokens == want["usage"]["prompt_tokens"]
        json.loads(calls[0].arguments)  # held to the parameters' schema
        # streamed: the call's item, its arguments piece by piece, then done
        with c.responses.create(
            model="x",
            input=MESSAGES,
            tools=[WEATHER],
            stream=True,
            max_output_tokens=64,
            tool_choice={"type": "function", "name": "get_weather"},
            parallel_tool_calls=False,
        ) as stream:
            events = list(stream)
        added = [e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
        assert len(added) == 1 and added[0].item.name == "get_weather"
        args = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
        done = [e for e in events if e.type == "response.function_call_arguments.done"]
        assert done[0].arguments == args == want_call["function"]["arguments"]
        assert events[-1].type == f"response.{status}"
        assert [o.type for o in events[-1].response.output][-1] == "function_call"
        # the round trip: the call and its result go back as input items, as the chat path renders them
        back = [
            *MESSAGES,
            {
                "type": "function_call",
                "call_id": calls[0].call_id,
                "name": "get_weather",
                "arguments": calls[0].arguments,
            },
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 21 C"},
        ]
        r2 = c.responses.create(model="x", input=back, tools=[WEATHER], tool_choice="none", max_output_tokens=8)
    chat_back = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": calls[0].call_id,
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": calls[0].arguments},
                }
            ],
        },
        {"role": "tool", "tool_call_id": calls[0].call_id, "content": "sunny, 21 C"},
    ]
    want2 = httpx.post(
        f"{tool_live.url}/v1/chat/completions",
        timeout=60,
        json={"messages": chat_back, "tools": [chat_tool], "tool_choice": "none", "max_tokens": 8},
    ).json()
    assert r2.usage.input_tokens == want2["usage"]["prompt_tokens"]
    assert r2.output_text == want2["choices"][0]["message"]["content"]


def test_a_responses_stream_that_hangs_up_stops_its_generation(engine):
    slow = SlowEngine(engine, delay=0.02)
    with LiveServer(create_app(slow, max_tokens=400)) as srv, httpx.Client(base_url=srv.url, timeout=30) as http:
        with http.stream("POST", "/v1/responses", json={"input": "hi", "stream": True}) as resp:
            deltas = 0
            for line in resp.iter_lines():
                deltas += line == "event: response.output_text.delta"
                if deltas >= 3:
                    break
        deadline = time.monotonic() + 5
        while slow.closed < 1:
            assert time.monotonic() < deadline, "the generation went on after the client left"
            time.sleep(0.01)
        assert slow.events_yielded < 100
        deadline = time.monotonic() + 5
        while 'edgespec_requests_total{endpoint="/v1/responses",status="499"} 1' not in http.get("/metrics").text:
            assert time.monotonic() < deadline
            time.sleep(0.05)
