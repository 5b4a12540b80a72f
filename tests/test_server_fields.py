"""The one table of request fields (issue 22, item 6): every field of OpenAI's and
llama-server's completion requests is honoured, refused with a 400 naming it, or ignored
because it cannot change the answer; the honoured ones really change the generation.

The two field lists below were written from OpenAI's API reference (chat completions and
the legacy completions) and from llama-server's request schema
(``tools/server/server-schema.cpp`` and ``oaicompat_*_params_parse`` in
``server-common.cpp`` of the llama.cpp that llama-cpp-python 0.3.36 vendors).
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from edgespec import Engine
from edgespec.server import create_app
from edgespec.server.fields import BY_NAME, FIELDS, HONOURED, IGNORED, REFUSED, fields
from edgespec.server.schema import ChatRequest, CompletionRequest
from tiny_models import make_tiny_model

OPENAI_CHAT = """messages model audio frequency_penalty function_call functions logit_bias logprobs
max_completion_tokens max_tokens metadata modalities n parallel_tool_calls prediction presence_penalty
prompt_cache_key prompt_cache_retention reasoning_effort response_format safety_identifier seed service_tier
stop store stream stream_options temperature tool_choice tools top_logprobs top_p user verbosity
web_search_options""".split()
OPENAI_COMPLETIONS = """model prompt best_of echo frequency_penalty logit_bias logprobs max_tokens n
presence_penalty seed stop stream stream_options suffix temperature top_p user""".split()
LLAMA_SERVER = """verbose timings_per_token stream stream_options cache_prompt return_tokens return_progress
sse_ping_interval n_predict max_completion_tokens max_tokens n_indent n_keep n_discard n_cmpl n n_cache_reuse
t_max_prompt_ms t_max_predict_ms response_fields top_k top_p min_p top_n_sigma xtc_probability xtc_threshold
typical_p temperature dynatemp_range dynatemp_exponent repeat_last_n repeat_penalty frequency_penalty
presence_penalty dry_multiplier dry_base dry_allowed_length dry_penalty_last_n mirostat mirostat_tau
mirostat_eta adaptive_target adaptive_decay seed n_probs logprobs min_keep backend_sampling post_sampling_probs
speculative.n_max speculative.n_min speculative.p_min speculative.type speculative.ngram_size_n
speculative.ngram_size_m speculative.ngram_min_hits lora dry_sequence_breakers json_schema grammar grammar_lazy
reasoning_format continue_final_message echo preserved_tokens grammar_triggers logit_bias ignore_eos stop
samplers prompt id_slot messages tools tool_choice parallel_tool_calls response_format chat_template_kwargs
add_generation_prompt reasoning_budget_tokens thinking_budget_tokens reasoning_effort best_of suffix
top_logprobs""".split()
# vLLM's, named in the issue
OTHERS = ["min_tokens"]

# a value that asks for something, per refused field
ASKING = {
    "best_of": 2,
    "n_probs": 5,
    "post_sampling_probs": True,
    "echo": True,
    "suffix": "x",
    "functions": [{"name": "f"}],
    "function_call": "auto",
    "grammar_lazy": True,
    "grammar_triggers": [{"type": "word", "value": "<tool_call>"}],
    "typical_p": 0.5,
    "dynatemp_range": 0.5,
    "mirostat": 2,
    "dry_multiplier": 0.8,
    "xtc_probability": 0.5,
    "top_n_sigma": 1.0,
    "adaptive_target": 0.5,
    "min_keep": 5,
    "samplers": ["top_k"],
    "n_indent": 4,
    "t_max_predict_ms": 100,
    "t_max_prompt_ms": 100,
    "n_cmpl": 2,
    "lora": [{"id": 0, "scale": 1.0}],
    "response_fields": ["content"],
    "chat_template_kwargs": {"enable_thinking": False},
    "add_generation_prompt": False,
    "audio": {"voice": "alloy", "format": "wav"},
    "modalities": ["text", "audio"],
    "web_search_options": {"search_context_size": "low"},
    "reasoning_budget_tokens": 100,
    "thinking_budget_tokens": 100,
}
# values clients send as defaults: accepted
INERT = {
    "best_of": 1,
    "grammar_lazy": False,
    "typical_p": 1.0,
    "mirostat": 0,
    "top_n_sigma": -1,
    "add_generation_prompt": True,
    "modalities": ["text"],
    "function_call": "none",
    "dry_multiplier": 0.0,
}
MESSAGES = [{"role": "user", "content": "hello world, tell me about the dog"}]
PROMPT = "the quick brown fox"


def test_every_openai_and_llama_server_field_is_in_the_table():
    names = {f.name for f in FIELDS}
    assert len(names) == len(FIELDS), "a field is in the table twice"
    missing = sorted(set(OPENAI_CHAT + OPENAI_COMPLETIONS + LLAMA_SERVER + OTHERS) - names)
    assert not missing, f"fields with no status: {missing}"
    for name in OPENAI_CHAT:
        assert "chat" in BY_NAME[name].where or BY_NAME[name].status == IGNORED, name
    for name in OPENAI_COMPLETIONS:
        assert "completions" in BY_NAME[name].where or BY_NAME[name].status == IGNORED, name
    # the fields: none of them is quietly ignored any more
    for name in (
        "logit_bias",
        "response_format",
        "tool_choice",
        "top_logprobs",
        "n_predict",
        "grammar",
        "json_schema",
        "ignore_eos",
        "min_tokens",
        "seed",
        "top_k",
    ):
        assert BY_NAME[name].status in (HONOURED, REFUSED), name


@pytest.mark.parametrize("model, endpoint", [(ChatRequest, "chat"), (CompletionRequest, "completions")])
def test_the_request_models_declare_exactly_the_honoured_fields(model, endpoint):
    assert set(model.model_fields) == set(fields(HONOURED, endpoint))


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    return engines(tiny_target, "ngram")


@pytest.fixture(scope="module")
def client(engine):
    with TestClient(create_app(engine, max_tokens=16, defaults={"temperature": 0.0})) as c:
        yield c


def post(client, endpoint: str, extra: dict):
    if endpoint == "chat":
        return client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 8, **extra})
    return client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 8, **extra})


@pytest.mark.parametrize("f", [f for f in FIELDS if f.status == REFUSED], ids=lambda f: f.name)
def test_refused_fields_are_400_naming_the_field_and_their_defaults_pass(client, f):
    assert f.name in ASKING, f"no test value for the refused field {f.name}"
    for endpoint in sorted(f.where):
        extra = {f.name: ASKING[f.name]}
        resp = post(client, endpoint, extra)
        assert resp.status_code == 400, (f.name, resp.text)
        err = resp.json()["error"]
        assert err["param"] == f.name and err["code"] == "unsupported_parameter"
        assert err["message"].startswith(f"{f.name}=") and "not supported" in err["message"]
        if f.name in INERT:
            assert post(client, endpoint, {f.name: INERT[f.name]}).status_code == 200, f.name


def test_ignored_and_unknown_fields_do_not_change_the_answer(client):
    base = post(client, "chat", {}).json()["choices"][0]["message"]["content"]
    extra = {f.name: "x" for f in FIELDS if f.status == IGNORED and "chat" in f.where}
    extra["some_vendor_extra"] = {"a": 1}
    resp = post(client, "chat", extra)
    assert resp.status_code == 200 and resp.json()["choices"][0]["message"]["content"] == base


def text_of(resp) -> str:
    assert resp.status_code == 200, resp.text
    choice = resp.json()["choices"][0]
    return choice["message"]["content"] if "message" in choice else choice["text"]


def test_logit_bias_in_openai_and_llama_server_forms(client, engine):
    plain = client.post("/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "return_tokens": True}).json()
    first = plain["token_ids"][0]
    for bias in ({str(first): -100}, [[first, False]], {str(first): False}):
        got = client.post(
            "/v1/completions", json={"prompt": PROMPT, "max_tokens": 6, "return_tokens": True, "logit_bias": bias}
        ).json()
        assert got["token_ids"][0] != first, bias
    forced = client.post(
        "/v1/completions", json={"prompt": PROMPT, "max_tokens": 4, "return_tokens": True, "logit_bias": [["e", 80.0]]}
    ).json()
    e_ids = engine.tokenize("e", add_special=False, parse_special=False)
    assert forced["token_ids"] == e_ids * (4 // len(e_ids))  # text keys: each of its tokens
    bad = client.post("/v1/completions", json={"prompt": PROMPT, "logit_bias": {"99999": 5}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "logit_bias"
    assert "vocabulary size 320" in bad.json()["error"]["message"]
    bad = client.post("/v1/completions", json={"prompt": PROMPT, "logit_bias": {"5": True}})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "logit_bias"


def test_n_predict_wins_and_minus_one_fills_the_context(client):
    body = {"prompt": PROMPT, "max_tokens": 12, "n_predict": 3}
    assert client.post("/v1/completions", json=body).json()["usage"]["completion_tokens"] == 3
    long = client.post("/v1/completions", json={"prompt": PROMPT, "n_predict": -1, "ignore_eos": True}).json()
    assert long["usage"]["completion_tokens"] + long["usage"]["prompt_tokens"] == 512  # the whole context
    assert client.post("/v1/completions", json={"prompt": PROMPT, "n_predict": 0}).status_code == 400


def test_seed_minus_one_is_random_and_top_k_minus_one_is_off(engine):
    app = create_app(engine, max_tokens=12, defaults={"temperature": 1.0, "seed": 5})
    with TestClient(app) as c:
        body = {"messages": MESSAGES, "max_tokens": 12}
        fixed = {text_of(c.post("/v1/chat/completions", json=body)) for _ in range(2)}
        assert len(fixed) == 1  # the server's default seed
        free = {text_of(c.post("/v1/chat/completions", json={**body, "seed": -1})) for _ in range(4)}
        assert len(free) > 1
        off = text_of(c.post("/v1/chat/completions", json={**body, "seed": 3, "top_k": -1}))
        assert off == text_of(c.post("/v1/chat/completions", json={**body, "seed": 3, "top_k": 0}))


def test_ignore_eos_and_min_tokens_through_the_api(tmp_path):
    model = make_tiny_model(tmp_path / "eos.gguf", eos_bias=30.0)  # stops at once when free
    with (
        Engine(model, draft="ngram", n_ctx=256, exact=True, n_threads=1) as e,
        TestClient(create_app(e, max_tokens=10, defaults={"temperature": 0.0})) as c,
    ):

        def usage(extra):
            body = c.post("/v1/completions", json={"prompt": PROMPT, **extra}).json()
            return body["usage"]["completion_tokens"], body["choices"][0]["finish_reason"]

        n, why = usage({})
        assert why == "stop" and n <= 1
        assert usage({"ignore_eos": True}) == (10, "length")
        n, why = usage({"min_tokens": 4})
        assert n >= 4


def test_repeat_last_n_reaches_the_penalties(client):
    body = {"prompt": PROMPT + " " + PROMPT, "max_tokens": 16, "repeat_penalty": 1.5}
    narrow = text_of(client.post("/v1/completions", json={**body, "repeat_last_n": 0}))
    assert narrow == text_of(client.post("/v1/completions", json={**body, "repeat_penalty": 1.0}))
    assert client.post("/v1/completions", json={**body, "repeat_last_n": -2}).status_code == 400


def test_the_docs_table_is_this_table():
    from pathlib import Path

    doc = (Path(__file__).parent.parent / "docs" / "server-safety.md").read_text(encoding="utf-8")
    sections = {HONOURED: "### Honoured", REFUSED: "### Refused", IGNORED: "### Ignored"}
    for f in FIELDS:
        start = doc.index(sections[f.status])
        end = min([i for i in (doc.find("\n### ", start + 1), doc.find("\n## ", start + 1)) if i > 0])
        assert f"| `{f.name}` |" in doc[start:end], f"{f.name} is not listed as {f.status} in docs/server-safety.md"
