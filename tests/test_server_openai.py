"""Integration: the official ``openai`` client against ``edgespec serve`` on the real
Qwen2.5-Coder-0.5B-Instruct (test extra), with prompt lookup drafting and ``--exact``.

A chat completion, a streamed chat completion and a completion, each at temperature 0
and each token-identical to ``edgespec generate --exact`` on the same prompt (or, while
``generate`` has no ``--exact`` yet, to ``Engine(exact=True).generate``: the same engine
call that command makes). The token ids come back through ``return_tokens``, an extra
request field passed with the client's ``extra_body``.
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys

import pytest

from edgespec import Engine
from edgespec.catalog import resolve_model
from serve_support import serve_process

openai = pytest.importorskip("openai")

pytestmark = pytest.mark.integration

N_CTX = 2048
MAX_TOKENS = 48
CHAT_PROMPT = (
    "Rename the variable `x` to `total` in this code and return the whole code:\n\n"
    "def f(items):\n    x = 0\n    for i in items:\n        x += i\n    return x\n"
)
RAW_PROMPT = 'def fibonacci(n):\n    """Return the n-th Fibonacci number."""\n'


@pytest.fixture(scope="module")
def qwen05():
    return resolve_model("qwen2.5-coder-0.5b")


def generate_has_exact() -> bool:
    from edgespec.cli.generate import generate

    return "exact" in inspect.signature(generate).parameters


@pytest.fixture(scope="module")
def reference(qwen05):
    """(token ids, text) of ``edgespec generate --exact`` (plain decoding) for a prompt."""
    cache: dict = {}
    engines: list = []

    def ids(prompt: str, raw: bool) -> tuple[list[int], str]:
        if (prompt, raw) not in cache:
            if generate_has_exact():
                cmd = [
                    sys.executable,
                    "-m",
                    "edgespec",
                    "generate",
                    "--exact",
                    "--json",
                    "--target",
                    str(qwen05),
                    "--draft",
                    "none",
                    "--temperature",
                    "0",
                    "--max-tokens",
                    str(MAX_TOKENS),
                    "--n-ctx",
                    str(N_CTX),
                    *(["--raw"] if raw else []),
                    prompt,
                ]
                out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=300)
                obj = json.loads(out.stdout)
                cache[(prompt, raw)] = obj["token_ids"], obj["text"]
            else:
                if not engines:
                    engines.append(Engine(qwen05, draft=None, n_ctx=N_CTX, exact=True))
                r = engines[0].generate(prompt, raw=raw, max_tokens=MAX_TOKENS)
                cache[(prompt, raw)] = r.token_ids, r.text
        return cache[(prompt, raw)]

    yield ids
    for e in engines:
        e.close()


@pytest.fixture(scope="module")
def server(qwen05):
    with serve_process(
        [
            "--target",
            str(qwen05),
            "--draft",
            "ngram",
            "--exact",
            "--k",
            "4",
            "--n-ctx",
            str(N_CTX),
            "--api-key",
            "test-key",
        ]
    ) as url:
        yield url


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server}/v1", api_key="test-key", max_retries=0, timeout=300)


def test_models(client, qwen05):
    models = client.models.list()
    assert [m.id for m in models.data] == [qwen05.stem]


def test_chat_completion_equals_generate_exact(client, reference):
    resp = client.chat.completions.create(
        model="edgespec",
        messages=[{"role": "user", "content": CHAT_PROMPT}],
        temperature=0,
        max_tokens=MAX_TOKENS,
        extra_body={"return_tokens": True},
    )
    want, want_text = reference(CHAT_PROMPT, raw=False)
    assert resp.token_ids == want
    assert resp.choices[0].message.role == "assistant" and resp.choices[0].message.content == want_text
    assert "total" in want_text
    assert resp.usage.completion_tokens == len(want)
    timings = resp.timings
    assert timings["predicted_n"] == len(want)
    # the answer copies the code it was given: prompt lookup drafts, and most drafts hold
    assert timings["draft_n"] > 0 and timings["draft_n_accepted"] > 0


def test_streamed_chat_completion_equals_generate_exact(client, reference):
    stream = client.chat.completions.create(
        model="edgespec",
        messages=[{"role": "user", "content": CHAT_PROMPT}],
        temperature=0,
        max_tokens=MAX_TOKENS,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"return_tokens": True},
    )
    text, finish, usage, token_ids, drafts = "", None, None, None, 0
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        extra = chunk.model_extra or {}
        if "token_ids" in extra:
            token_ids = extra["token_ids"]
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
            drafts += bool((choice.model_extra or {}).get("from_draft"))
    want, want_text = reference(CHAT_PROMPT, raw=False)
    assert token_ids == want
    assert finish in ("stop", "length") and usage.completion_tokens == len(want)
    assert drafts > 0  # pieces from accepted drafts were marked
    assert text == want_text


def test_completion_equals_generate_exact(client, reference):
    resp = client.completions.create(
        model="edgespec", prompt=RAW_PROMPT, temperature=0, max_tokens=MAX_TOKENS, extra_body={"return_tokens": True}
    )
    want, want_text = reference(RAW_PROMPT, raw=True)
    assert resp.token_ids == want
    assert resp.choices[0].text == want_text
    assert resp.usage.completion_tokens == len(want)
