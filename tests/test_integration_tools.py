"""Integration: tool conversations on the real models (issue 28, item 4).

A tool conversation reaches the models as their own GGUF template renders it.

The reference is written here, apart from edgespec's code: the GGUF's chat template run
by plain Jinja the way transformers' ``apply_chat_template`` and llama-server ``--jinja``
run it (trim_blocks, lstrip_blocks, loop controls, ``tojson`` as ``json.dumps``), with
the template's own variables: ``messages`` (role ``tool`` messages; an assistant's
``tool_calls`` whose ``function.arguments`` are the parsed object), ``tools`` and
``add_generation_prompt``. edgespec's path is the server's: the request body as the
openai client sends it, through ``ChatRequest`` and ``plan_chat``. Both must give the
same token ids. The conversation (a train search, its result, a second search and a
booking) was written for this test.

After a tool result, under ``tool_choice`` auto, the 1.5B calls again, in the doubled
braces of its template's example: the answer is that call, held to the tool, never
content that only looks like one.
"""

from __future__ import annotations

import copy
import datetime
import json
from pathlib import Path
from types import SimpleNamespace

import jinja2
import jinja2.ext
import pytest
from jinja2.sandbox import ImmutableSandboxedEnvironment

from fastapi.testclient import TestClient

from edgespec import Engine
from edgespec.catalog import resolve_model
from edgespec.llama.chat_template import render, tokenize_rendered
from edgespec.errors import CatalogError
from edgespec.llama import Model
from edgespec.server import create_app
from edgespec.server.schema import ChatRequest
from edgespec.server.structured import plan_chat
from edgespec.server.tools import tool_format

pytestmark = pytest.mark.integration

QWEN_TEMPLATE = (Path(__file__).parent / "data" / "qwen2.5_chat_template.jinja").read_text()

TOOLS = [
    {"type": "function", "function": {
        "name": "find_connections",
        "description": "Timetable search: trains from one station to another on a day, after a time",
        "parameters": {"type": "object", "properties": {
            "from_station": {"type": "string"}, "to_station": {"type": "string"},
            "day": {"type": "string", "description": "YYYY-MM-DD"},
            "not_before": {"type": "string", "description": "HH:MM, local time"},
            "bikes": {"type": "boolean"}},
            "required": ["from_station", "to_station", "day"]}}},
    {"type": "function", "function": {
        "name": "reserve",
        "description": "Hold seats on one connection for 20 minutes",
        "parameters": {"type": "object", "properties": {
            "connection": {"type": "string"}, "seats": {"type": "integer", "minimum": 1},
            "class": {"enum": ["first", "second"]}},
            "required": ["connection", "seats"]}}},
]


def _call(cid: str, name: str, arguments: dict) -> dict:
    # as the openai client sends a call back: arguments are the JSON text the server gave
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


OUTWARD = {"from_station": "Zürich HB", "to_station": "Milano Centrale", "day": "2027-03-06",
           "not_before": "06:00", "bikes": True}
CONVERSATION = [
    {"role": "user", "content": "Two of us with bikes, Zurich to Milan on Saturday 6 March, early. "
                                "And what comes back on the Sunday evening?"},
    {"role": "assistant", "content": None, "tool_calls": [
        _call("call_out", "find_connections", OUTWARD),
        _call("call_back", "find_connections", {**OUTWARD, "from_station": "Milano Centrale",
                                                "to_station": "Zürich HB", "day": "2027-03-07",
                                                "not_before": "17:00"})]},
    {"role": "tool", "tool_call_id": "call_out", "content": json.dumps(
        {"connections": [{"id": "EC 311", "dep": "07:33", "arr": "10:50", "bike_spaces": 4}]})},
    {"role": "tool", "tool_call_id": "call_back", "content": json.dumps(
        {"connections": [{"id": "EC 324", "dep": "17:10", "arr": "20:27", "bike_spaces": 0},
                         {"id": "EC 326", "dep": "19:10", "arr": "22:27", "bike_spaces": 2}]})},
    {"role": "assistant", "content": "EC 311 leaves at 07:33 with 4 bike spaces. Going back, EC 326 "
                                     "(19:10) is the one with room for bikes. Shall I hold seats?"},
    {"role": "user", "content": "Yes, second class, both trains."},
    {"role": "assistant", "content": "Holding them now.", "tool_calls": [
        _call("call_r1", "reserve", {"connection": "EC 311", "seats": 2, "class": "second"})]},
    {"role": "tool", "tool_call_id": "call_r1", "content": '{"held_until": "09:41", "ref": "Q7TX"}'},
]
SYSTEM = {"role": "system", "content": "You book European rail journeys. Prices in CHF."}


def reference_render(template: str, messages: list[dict], tools: list[dict] | None) -> str:
    """The template rendered as transformers does it, independently of edgespec."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals.update(raise_exception=raise_exception,
                       strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt))
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False, ensure_ascii=False: \
        json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)
    messages = copy.deepcopy(messages)
    for m in messages:
        for c in m.get("tool_calls") or ():
            c["function"]["arguments"] = json.loads(c["function"]["arguments"])
    extra = {"tools": tools} if tools else {}
    return env.from_string(template).render(messages=messages, add_generation_prompt=True, **extra)


def _model(name: str, monkeypatch) -> Model:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        path = resolve_model(name)
    except CatalogError as e:
        pytest.skip(f"{name} is not available here: {e}")
    return Model(path, vocab_only=True)


def _edgespec_prompt(model: Model, body: dict) -> list[int]:
    """The token ids the server feeds the model for ``body`` (structured.plan_chat; a
    request without tools leaves the rendering to the engine's chat path)."""
    plan = plan_chat(SimpleNamespace(target_model=model), ChatRequest.model_validate(body))
    if plan.prompt and isinstance(plan.prompt[0], dict):
        return tokenize_rendered(model, render(model, plan.prompt))
    return plan.prompt


@pytest.mark.parametrize("name", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
@pytest.mark.parametrize("system", [False, True], ids=["default-system", "own-system"])
@pytest.mark.parametrize("tool_choice", ["auto", "required", {"type": "function", "function": {"name": "reserve"}},
                                         "no tools"], ids=["auto", "required", "named", "no-tools"])
def test_a_tool_conversation_is_rendered_as_the_gguf_template_renders_it(name, system, tool_choice, monkeypatch):
    model = _model(name, monkeypatch)
    try:
        template = model.chat_template
        assert tool_format(template) == "hermes"
        messages = ([SYSTEM] if system else []) + CONVERSATION
        body = {"model": name, "messages": messages}
        if tool_choice != "no tools":
            body.update(tools=TOOLS, tool_choice=tool_choice)
        tools = TOOLS if tool_choice not in ("no tools",) else None
        text = reference_render(template, messages, tools)
        expected = model.tokenize(text, add_special=True, parse_special=True)
        ours = _edgespec_prompt(model, body)
        assert model.detokenize(ours, special=True) == text
        assert ours == expected
        # the calls as the model writes them: the tag one token, the arguments an object
        tag = model.tokenize("<tool_call>", add_special=False, parse_special=True)
        assert len(tag) == 1 and ours.count(tag[0]) >= 3
        assert '{"name": "reserve", "arguments": {"connection": "EC 311", "seats": 2, "class": "second"}}' in text
        assert text.count("<tool_response>") == 3 and text.endswith("<|im_start|>assistant\n")
    finally:
        model.close()


def test_the_two_models_share_the_qwen25_template(monkeypatch):
    """The 0.5B's template is tests/data's; the 1.5B's differs only in the call example
    of its tool instructions, written in doubled braces (``{{"name": ...}}``), which both
    renderers copy as it is (a Jinja string literal)."""
    small = _model("qwen2.5-coder-0.5b", monkeypatch)
    try:
        assert small.chat_template == QWEN_TEMPLATE
    finally:
        small.close()
    big = _model("qwen2.5-coder-1.5b", monkeypatch)
    try:
        example = '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}'
        assert big.chat_template == QWEN_TEMPLATE.replace(example, "{" + example + "}")
        text = reference_render(big.chat_template, CONVERSATION[:1], TOOLS)
        assert '<tool_call>\n{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>' in text
    finally:
        big.close()


def test_after_a_tool_result_auto_never_answers_with_a_call_as_text(monkeypatch):
    """The 1.5B, after its search's result, writes the same search again in the doubled
    braces of its template's example, ``{{"name": "find_connections", ...}}``, then a
    fenced call to ``reserve`` (greedy, measured). Before issue 28 such an answer came
    back as content (``finish_reason`` stop or length); now it is read as calls whose
    arguments follow the tools."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    try:
        path = resolve_model("qwen2.5-coder-1.5b")
    except CatalogError as e:
        pytest.skip(f"the 1.5B is not available here: {e}")
    messages = [{"role": "user", "content": "Find me an early train from Zurich to Milan on 2027-03-06, two "
                                            "people with bikes."},
                {"role": "assistant", "content": None, "tool_calls": [_call("call_out", "find_connections", OUTWARD)]},
                CONVERSATION[2]]
    with Engine(path, draft=None, n_ctx=2048) as engine, \
            TestClient(create_app(engine, max_tokens=160, defaults={"temperature": 0.0})) as client:
        resp = client.post("/v1/chat/completions", json={"messages": messages, "tools": TOOLS, "tool_choice": "auto"})
    assert resp.status_code == 200, resp.text
    out = resp.json()["choices"][0]
    content = (out["message"].get("content") or "").lstrip("`json \n{")
    assert not content.startswith('"name"'), out  # a call is never content
    assert out["finish_reason"] in ("stop", "tool_calls"), out
    if out["finish_reason"] == "tool_calls":
        for call in out["message"]["tool_calls"]:
            schema = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}[call["function"]["name"]]
            args = json.loads(call["function"]["arguments"])
            assert set(schema["required"]) <= set(args) <= set(schema["properties"]), call
