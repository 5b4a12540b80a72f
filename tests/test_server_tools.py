"""Tool calls in the server, without generating: the Hermes reader (whole and streamed,
cut anywhere), the grammar it builds, the chat template's tools / tool_calls / tool
messages (Qwen2.5's own template, tests/data), and the requests refused before any
model work (on the tiny models, whose ChatML template has no tool format).
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi.testclient import TestClient
from hypothesis import given, settings
from hypothesis import strategies as st

from edgespec import Engine
from edgespec.errors import InputError
from edgespec.llama.chat_template import render, validate_messages
from edgespec.server import create_app
from edgespec.server.schema import ChatRequest
from edgespec.server.tools import CallStream, NoToolFormat, argument_schema, call_grammar, read_calls, tool_format

QWEN_TEMPLATE = (Path(__file__).parent / "data" / "qwen2.5_chat_template.jinja").read_text()
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city <now>",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    },
}
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Pa}ris \\" {[", "n": [1, {"a": 2}]}}\n</tool_call>'
BARE = CALL[len("<tool_call>\n") : -len("\n</tool_call>")]  # the same call without its tags
FENCED = '```json\n{\n  "name": "get_weather",\n  "arguments": {\n    "city": "Paris"\n  }\n}\n```'
# in doubled braces, as the example in Qwen2.5-Coder-1.5B's template writes a call (issue 28)
DOUBLE = '{{"name": "get_weather", "arguments": {"city": "Pa}}ris", "n": [{"a": 2}]}}}'


def _pieces(text: str, cuts: list[int]) -> tuple[str, dict[int, dict]]:
    """Feed ``text`` cut at ``cuts``; the content and the calls as the deltas build them."""
    stream, out = CallStream(), []
    last = 0
    for c in sorted(set(cuts)) + [len(text)]:
        out += stream.push(text[last:c])
        last = c
    out += stream.finish()
    content, calls = "", {}
    for p in out:
        if p.index < 0:
            content += p.content
            continue
        call = calls.setdefault(p.index, {"id": None, "name": None, "arguments": ""})
        if p.id is not None:
            assert call["id"] is None  # the start of a call comes once, first
            call.update(id=p.id, name=p.name)
        call["arguments"] += p.arguments
    return content, calls


TEXTS = [
    CALL,
    CALL + "\n" + CALL.replace("get_weather", "f"),
    "Let me look that up.\n" + CALL,
    "No call here: < and <tool and a <tool_call without its end",
    "trailing space  \n",
    CALL[:60],  # cut inside the arguments
    CALL[:20],  # cut inside the head
    BARE,
    "\n" + BARE + "\n" + BARE.replace("get_weather", "f") + "\n",
    FENCED,
    FENCED[:30],
    DOUBLE,
    DOUBLE + "\n" + DOUBLE.replace("get_weather", "f"),
    DOUBLE[:9],
    '{"a": 1} is JSON, {"name": "get_weather", "arguments": {}} too',
    '{"nam',
]


@pytest.mark.parametrize("text", TEXTS)
@settings(max_examples=60, deadline=None)
@given(cuts=st.lists(st.integers(min_value=0, max_value=200), max_size=12))
def test_streamed_calls_equal_the_whole_answer_wherever_the_text_is_cut(text, cuts):
    content, calls = read_calls(text)
    got_content, got_calls = _pieces(text, [c for c in cuts if c <= len(text)])
    assert got_content == content
    assert [(c["name"], c["arguments"]) for c in got_calls.values()] == [(c.name, c.arguments) for c in calls]


def test_reading_whole_answers():
    content, calls = read_calls(CALL)
    assert content == "" and len(calls) == 1 and calls[0].complete and calls[0].id.startswith("call_")
    assert calls[0].name == "get_weather"
    assert json.loads(calls[0].arguments) == {"city": 'Pa}ris " {[', "n": [1, {"a": 2}]}
    content, calls = read_calls("Let me look that up.\n" + CALL + "\n" + CALL)
    assert content == "Let me look that up." and [c.complete for c in calls] == [True, True]
    assert calls[0].id != calls[1].id
    text = "No call here: < and <tool and a <tool_call without its end"
    assert read_calls(text) == (text, [])
    content, calls = read_calls(CALL[:60])
    assert content == "" and calls[0].name == "get_weather" and not calls[0].complete
    assert read_calls(CALL[:20]) == ("", [])
    content, calls = read_calls(BARE + "\n")  # without the tags, at the start of the answer
    assert content == "" and [(c.name, c.complete) for c in calls] == [("get_weather", True)]
    assert json.loads(calls[0].arguments)["n"] == [1, {"a": 2}]
    text = 'I would call {"name": "get_weather", "arguments": {}} here'
    assert read_calls(text) == (text, [])  # not at the start: text
    assert read_calls('{"a": 1}') == ('{"a": 1}', []) and read_calls('{"nam') == ('{"nam', [])
    content, calls = read_calls(FENCED)  # in a code fence, in the model's own layout
    assert content == "" and calls[0].complete and json.loads(calls[0].arguments) == {"city": "Paris"}
    assert read_calls("```python\nprint(1)\n```") == ("```python\nprint(1)\n```", [])
    content, calls = read_calls(DOUBLE)  # in doubled braces: both are the call's
    assert (
        content == "" and calls[0].complete and json.loads(calls[0].arguments) == {"city": "Pa}}ris", "n": [{"a": 2}]}
    )
    assert read_calls("{{ jinja }}") == ("{{ jinja }}", [])


def test_the_tool_format_of_a_template():
    assert tool_format(QWEN_TEMPLATE) == "hermes"
    with pytest.raises(NoToolFormat, match="no chat template"):
        tool_format(None)
    with pytest.raises(NoToolFormat, match="does not render tools"):
        tool_format("{% for m in messages %}{{ m.content }}{% endfor %}")


class _Vocab:
    """A model stand-in for the grammar: ``special`` texts are one token."""

    def __init__(self, special: set[str]) -> None:
        self.special = special

    def tokenize(self, text, add_special=False, parse_special=True):
        return [7] if text in self.special else [1] * len(text)

    def token_text(self, token):
        return next(iter(self.special)) if token == 7 else "x"


def _tools(*tools):
    return ChatRequest.model_validate({"messages": [{"role": "user", "content": "x"}], "tools": list(tools)}).tools


def test_the_call_grammar():
    tools = _tools(WEATHER, {"type": "function", "function": {"name": "now"}})
    g = call_grammar(tools, _Vocab(set()), parallel=True)
    assert g.startswith('start: calls\ncalls: call ("\\n" call)* "\\n"?\ncall: call_0 | call_1\n')
    assert (
        'call_0: "<tool_call>" "\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": " args_0 "}\\n" "</tool_call>"' in g
    )
    schema = json.loads(g.split("args_0: %json ")[1].split("\n")[0])
    assert schema["required"] == ["city"] and schema["x-guidance"]["item_separator"] == ", "
    assert json.loads(g.split("args_1: %json ")[1].split("\n")[0])["type"] == "object"  # no parameters: any object
    one = call_grammar(tools, _Vocab({"<tool_call>"}), only="now")
    assert one.startswith('start: calls\ncalls: call "\\n"?\ncall: call_1\n') and "call_1: <tool_call> " in one
    assert call_grammar(tools, _Vocab(set()), parallel=False).startswith('start: calls\ncalls: call "\\n"?\n')
    auto = call_grammar(tools, _Vocab({"<tool_call>"}), free=True)
    assert auto.startswith("start: bare_calls | FREE? calls?\nbare_calls: bare (")
    assert (
        "bare: bare_0 | fenced_0 | double_0 | bare_1 | fenced_1 | double_1" in auto
        and '"get_weather"[ \\t\\n]*,' in auto
    )
    assert "FREE: " in auto and "<tool_call>" in auto.split("FREE: ")[1]
    bad = _tools({"type": "function", "function": {"name": "f", "parameters": {"type": "array"}}})
    with pytest.raises(InputError, match=r"tools\[0\].function.parameters must describe an object"):
        argument_schema(0, bad[0].function)


def test_auto_holds_a_call_in_doubled_braces_to_the_tool(tiny_target):
    """After a tool result, Qwen2.5-Coder-1.5B under tool_choice auto writes its next call
    as its template's example shows one, ``{{"name": ..., "arguments": {...}}}``, and goes
    on with an invented ``"response"``. Such an answer is a call held to the tool (it ends
    with the arguments), not free text."""
    from edgespec.constraints import compile_lark
    from edgespec.llama import Model

    model = Model(tiny_target, vocab_only=True)
    try:
        c = compile_lark(call_grammar(_tools(WEATHER), model, free=True), model)
        ids = lambda text: model.tokenize(text, add_special=False, parse_special=False)  # noqa: E731
        call = ids('{{"name": "get_weather", "arguments": {"city": "Lyon"}}}')
        m = c.matcher()
        assert m.validate(call) == len(call)
        m.consume(call)
        assert m.complete() is True
        invented = ids('{{"name": "get_weather", "arguments": {"city": "Lyon"}, "response": {}}}')
        assert c.matcher().validate(invented) < len(invented)
        wrong = ids('{{"name": "get_weather", "arguments": {"town": 1}}}')
        assert c.matcher().validate(wrong) < len(wrong)
        text = ids("{{ is how Jinja opens an expression }}")
        assert c.matcher().validate(text) == len(text)  # free text still
    finally:
        model.close()


def test_a_grammar_with_the_tag_token_compiles_strictly():
    """Qwen's <tool_call> is a special token: checked without a tokenizer, llguidance can
    only warn that it cannot look it up, which must not count as a relaxed schema."""
    from edgespec.constraints import lark_grammar

    tools = _tools(WEATHER)
    grammar = call_grammar(tools, _Vocab({"<tool_call>"}), free=True)
    assert "<tool_call> " in grammar
    assert lark_grammar(grammar, lenient=False, param="tools").warnings == ()


def _model(template):
    return SimpleNamespace(chat_template=template, bos=-1, eos=-1, token_text=lambda t: "")


def test_the_template_renders_tools_calls_and_tool_results():
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21}'},
    ]
    text = render(_model(QWEN_TEMPLATE), messages, tools=[WEATHER])
    # the tools in the system prompt, as json.dumps writes them (no HTML escaping)
    assert '"description": "The weather in a city <now>"' in text and "# Tools" in text
    # the call as the model writes one: arguments an object, not a quoted string
    assert (
        '<|im_start|>assistant\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
        "</tool_call><|im_end|>"
    ) in text
    assert '<|im_start|>user\n<tool_response>\n{"temp": 21}\n</tool_response><|im_end|>' in text
    assert text.endswith("<|im_start|>assistant\n")
    assert "# Tools" not in render(_model(QWEN_TEMPLATE), messages)  # no tools: none described


def test_templates_may_use_loop_controls_as_in_transformers():
    """transformers renders templates with Jinja's loop controls; a template that stops
    at the last user message with ``{% break %}`` renders here too."""
    template = (
        "{% for m in messages | reverse %}{% if m.role == 'user' %}{{ m.content }}{% break %}{% endif %}{% endfor %}"
    )
    messages = [
        {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "last"},
        {"role": "assistant", "content": "ok"},
    ]
    assert render(_model(template), messages) == "last"


def test_messages_with_bad_tool_calls_are_input_errors():
    with pytest.raises(InputError, match="not JSON"):
        validate_messages(
            [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]}]
        )
    with pytest.raises(InputError, match="only an assistant message"):
        validate_messages([{"role": "user", "content": "x", "tool_calls": [{"function": {"name": "f"}}]}])
    with pytest.raises(InputError, match="content must be a string"):
        validate_messages([{"role": "user", "content": None}])


# -- requests refused before any model work ----------------------------------------------


@pytest.fixture(scope="module")
def engine(tiny_target):
    with Engine(tiny_target, draft=None, n_ctx=256, n_threads=1) as e:
        yield e


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(engine, max_tokens=8, defaults={"temperature": 0.0})) as c:
        yield c


MESSAGES = [{"role": "user", "content": "hello"}]


@pytest.mark.parametrize(
    "body, param, words",
    [
        ({"tools": [WEATHER]}, "tools", "this model cannot call tools: its chat template does not render tools"),
        ({"tool_choice": "required"}, "tool_choice", "tool_choice needs tools"),
        (
            {"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
            "'nope', which is not one of the tools",
        ),
        ({"tools": [WEATHER, WEATHER]}, "tools", "two tools are named 'get_weather'"),
        (
            {"tools": [{"type": "function", "function": {"name": "has space"}}]},
            "tools.0.function.name",
            "match pattern",
        ),
        ({"tool_choice": "sometimes", "tools": [WEATHER]}, "tool_choice", 'must be "none", "auto"'),
        ({"tool_choice": {"type": "function"}, "tools": [WEATHER]}, "tool_choice", "function: this field is required"),
        ({"functions": [{"name": "f"}]}, "functions", "use tools"),
        (
            {"tools": [WEATHER], "response_format": {"type": "json_object"}},
            "response_format",
            "cannot be combined with tools",
        ),
        ({"response_format": {"type": "xml"}}, "response_format", "type must be one of"),
        (
            {"response_format": {"type": "json_object"}, "grammar": 'root ::= "a"'},
            "grammar",
            "give one of response_format, json_schema and grammar",
        ),
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": "x",
                        "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{}"}}],
                    }
                ]
            },
            "messages.0",
            "only an assistant message can carry tool_calls",
        ),
    ],
)
def test_bad_tool_requests_are_400_naming_the_field(client, body, param, words):
    resp = client.post("/v1/chat/completions", json={"messages": MESSAGES, **body})
    assert resp.status_code == 400, resp.text
    err = resp.json()["error"]
    assert err["param"] == param and words in err["message"], err


def test_tool_choice_none_answers_without_tools_on_any_template(client):
    resp = client.post("/v1/chat/completions", json={"messages": MESSAGES, "tools": [WEATHER], "tool_choice": "none"})
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    assert "tool_calls" not in choice["message"] and choice["finish_reason"] in ("stop", "length")
    assert "structure" not in choice


def test_a_tool_round_trip_renders_through_the_template(client):
    """An assistant tool call and the tool's answer go back through the chat template."""
    messages = [
        *MESSAGES,
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    resp = client.post("/v1/chat/completions", json={"messages": messages, "max_tokens": 4})
    assert resp.status_code == 200, resp.text
    resp = client.post(
        "/v1/chat/completions",
        json={
            "messages": [
                *messages[:1],
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": "{not json"}}],
                },
            ]
        },
    )
    assert resp.status_code == 400 and "not JSON" in resp.json()["error"]["message"]
