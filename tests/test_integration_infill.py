"""Integration: ``/infill`` on the real Qwen2.5-Coder-0.5B-Instruct (from the test extra).

The port of llama.cpp's ``test_with_qwen_model`` (tools/server/tests/unit/test_infill.py,
in the llama.cpp that llama-cpp-python 0.3.36 vendors): the same request, with an extra
file, gets the same middle llama-server writes with Qwen2.5-Coder-1.5B, greedy. The model
reads its FIM tokens and repository-level format from its GGUF. Then the next request in
the same file, one character further, reprocesses only the tokens after the first change.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient

from edgespec import Engine
from edgespec.catalog import resolve_model
from edgespec.llama import common_prefix_len
from edgespec.server import create_app
from edgespec.server.fim_prompt import infill_ids
from edgespec.server.infill import InfillRequest

pytestmark = pytest.mark.integration

BODY = {
    "input_extra": [{"filename": "llama.h", "text": "LLAMA_API int32_t llama_n_threads();\n"}],
    "input_prefix": '#include <cstdio>\n#include "llama.h"\n\nint main() {\n',
    "prompt": "    int n_threads = llama_",
    "input_suffix": "}\n",
}
# llama.cpp's expectation, which it checks with Qwen2.5-Coder-1.5B (IQ3_XXS)
WANT = 'n_threads();\n    printf("Number of threads: %d\\n", n_threads);\n    return 0;\n'


@pytest.fixture(scope="module")
def client():
    with Engine(resolve_model("qwen2.5-coder-0.5b"), draft="ngram", n_ctx=2048, exact=True) as engine:
        with TestClient(create_app(engine, max_tokens=48, defaults={"temperature": 0.0})) as c:
            yield c, engine


def test_qwen_fills_in_the_middle_as_llama_server_does(client):
    c, engine = client
    resp = c.post("/infill", json=BODY)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    # the middle stops where it reaches the suffix ("}" at the start of a line)
    assert body["content"] == WANT and body["stop_type"] == "word" and body["stopping_word"] == "\n}"
    assert body["truncated"] is False and body["timings"]["predicted_n"] == body["tokens_predicted"]
    # the next keystroke: the prompt up to the first change is not processed again
    first = infill_ids(engine, InfillRequest.model_validate(BODY), 48)
    nxt = {**BODY, "prompt": BODY["prompt"] + "n"}
    second = infill_ids(engine, InfillRequest.model_validate(nxt), 48)
    body = c.post("/infill", json=nxt).json()
    assert body["timings"]["prompt_n"] <= len(second) - common_prefix_len(first, second) + 1
    assert body["content"].startswith("_threads();")
