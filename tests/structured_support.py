"""What the server's structured-output tests share: the ``SCHEMA`` the tiny models can satisfy
(enums, small integers, booleans, short strings, no extra properties) and its ``FORMAT``, the
prompt ``MESSAGES``, the ``engine`` fixture (the tiny target with the n-gram drafter), and
``streamed`` (a streamed request's SSE events). Test modules take the fixture as
``engine = structured_support.engine``."""

from __future__ import annotations

import pytest

from serve_support import sse_events

SCHEMA = {
    "type": "object",
    "properties": {
        "ok": {"type": "boolean"},
        "n": {"type": "integer", "minimum": 0, "maximum": 99},
        "tag": {"enum": ["alpha", "beta"]},
        "note": {"type": "string", "maxLength": 3},
    },
    "required": ["ok", "n", "tag", "note"],
    "additionalProperties": False,
}
FORMAT = {"type": "json_schema", "json_schema": {"name": "record", "schema": SCHEMA, "strict": True}}
MESSAGES = [{"role": "user", "content": "hello world, tell me about the dog"}]


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    return engines(tiny_target, "ngram")


def streamed(client, path: str, body: dict) -> list:
    with client.stream("POST", path, json={**body, "stream": True}) as resp:
        assert resp.status_code == 200, resp.read()
        return list(sse_events(resp.iter_lines()))
