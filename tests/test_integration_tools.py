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
booking) was written for this test; it lives in benchmarks/prompts/tools.py, which
benchmarks/tool_result_peer.py asks llama-server too.

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
from fastapi.testclient import TestClient
from jinja2.sandbox import ImmutableSandboxedEnvironment

from benchmarks.prompts.tools import CONVERSATION, OUTWARD, TOOLS
from benchmarks.prompts.tools import call as _call
from edgespec import Engine
from edgespec.catalog import resolve_model
from edgespec.errors import CatalogError
from edgespec.llama import Model
from edgespec.llama.chat_template import render, tokenize_rendered
from edgespec.server import create_app
from edgespec.server.schema import ChatRequest
from edgespec.server.structured import plan_chat
from edgespec.server.tools import tool_format

pytestmark = pytest.mark.integration

QWEN_TEMPLATE = (Path(__file__).parent / "data" / "qwen2.5_chat_template.jinja").read_text()

SYSTEM = {"role": "system", "content": "You book European rail journeys. Prices in CHF."}


def reference_render(template: str, messages: list[dict], tools: list[dict] | None) -> str:
    """The template rendered as transformers does it, independently of edgespec."""
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    env.globals.update(raise_exception=raise_exception, strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt))
    env.filters["tojson"] = lambda x, indent=None, separators=None, sort_keys=False, ensure_ascii=False: json.dumps(
        x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )
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
@pytest.mark.parametrize(
    "tool_choice",
    ["auto", "required", {"type": "function", "function": {"name": "reserve"}}, "no tools"],
    ids=["auto", "required", "named", "no-tools"],
)
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
    messages = [
        {
            "role": "user",
            "content": "Find me an early train from Zurich to Milan on 2027-03-06, two people with bikes.",
        },
        {"role": "assistant", "content": None, "tool_calls": [_call("call_out", "find_connections", OUTWARD)]},
        CONVERSATION[2],
    ]
    with (
        Engine(path, draft=None, n_ctx=2048) as engine,
        TestClient(create_app(engine, max_tokens=160, defaults={"temperature": 0.0})) as client,
    ):
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
