"""What the model answers after a tool result: edgespec serve beside llama-server --jinja.

Issue 28 item 4: after a tool call and its result, the 1.5B calls a tool again instead of
answering. The prompts were compared token for token with the GGUF template rendered as
transformers renders it (tests/test_integration_tools.py: identical); this script asks
the peer, llama-server with its own Jinja template engine, the same conversations, greedy,
and puts both answers side by side, so the behaviour can be told apart from ours.

    python -m benchmarks.tool_result_peer [--model qwen2.5-coder-1.5b] [--out FILE]

llama-server comes from benchmarks/peers/build_peer_tools.sh. Both servers listen on loopback. The
conversation is benchmarks/prompts/tools.py.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import httpx

from benchmarks.common import commit, free_port, http_ok, start_server, stop
from benchmarks.peers.cpp import tools_dir
from benchmarks.peers.llama_server import LlamaServer
from benchmarks.prompts.tools import CONVERSATION, OUTWARD, TOOLS
from benchmarks.prompts.tools import call as _call
from edgespec.catalog import resolve_model

ASK = {"role": "user", "content": "Find me an early train from Zurich to Milan on 2027-03-06, two people with bikes."}
CASES = {
    # the search's result came back: an answer (or a reservation) is expected, not the search again
    "after one search, tools auto": dict(
        messages=[
            ASK,
            {"role": "assistant", "content": None, "tool_calls": [_call("call_out", "find_connections", OUTWARD)]},
            CONVERSATION[2],
        ],
        tools=TOOLS,
        tool_choice="auto",
    ),
    "after one search, no tools": dict(
        messages=[
            ASK,
            {"role": "assistant", "content": None, "tool_calls": [_call("call_out", "find_connections", OUTWARD)]},
            CONVERSATION[2],
        ]
    ),
    "after the reservation, tools auto": dict(messages=CONVERSATION, tools=TOOLS, tool_choice="auto"),
}


def ask(url: str, case: dict, max_tokens: int) -> dict:
    body = {"model": "m", "temperature": 0.0, "max_tokens": max_tokens, **case}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=900)
    r.raise_for_status()
    choice = r.json()["choices"][0]
    msg = choice["message"]
    return {
        "finish_reason": choice["finish_reason"],
        "content": msg.get("content"),
        "tool_calls": [
            {"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
            for c in msg.get("tool_calls") or []
        ],
    }


def ask_all(results: dict, name: str, url: str, max_tokens: int) -> None:
    """Every case asked of the server at ``url``, the answers filed under ``name``."""
    for case_name, case in CASES.items():
        answer = ask(url, case, max_tokens)
        results["cases"].setdefault(case_name, {})[name] = answer
        print(f"[{name}] {case_name}: {json.dumps(answer, ensure_ascii=False)}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    model = resolve_model(args.model)
    bin_dir = tools_dir()
    results: dict = {"model": str(model.name), "date": time.strftime("%Y-%m-%d"), "commit": commit(), "cases": {}}
    with LlamaServer(bin_dir, model, args.threads, spec=None, extra=("--jinja", "--temp", "0")) as peer:
        ask_all(results, "llama-server --jinja", peer.url, args.max_tokens)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    ours = start_server(
        [
            sys.executable,
            "-m",
            "edgespec",
            "serve",
            "--target",
            str(model),
            "--draft",
            "none",
            "--port",
            str(port),
            "--threads",
            str(args.threads),
        ],
        lambda: http_ok(f"{url}/health"),
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        name="edgespec serve",
    )
    try:
        ask_all(results, "edgespec serve", url, args.max_tokens)
    finally:
        stop(ours)
    text = json.dumps(results, indent=2, ensure_ascii=False)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
