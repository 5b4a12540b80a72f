"""What the model answers after a tool result: edgespec serve beside llama-server --jinja.

Issue 28 item 4: after a tool call and its result, the 1.5B calls a tool again instead of
answering. The prompts were compared token for token with the GGUF template rendered as
transformers renders it (tests/test_integration_tools.py: identical); this script asks
the peer, llama-server with its own Jinja template engine, the same conversations, greedy,
and puts both answers side by side, so the behaviour can be told apart from ours.

    python benchmarks/tool_result_peer.py [--model qwen2.5-coder-1.5b] [--out FILE]

llama-server comes from benchmarks/build_peer_tools.sh. Both servers listen on loopback.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from test_integration_tools import CONVERSATION, OUTWARD, TOOLS, _call  # noqa: E402  (the held-out conversation)

from edgespec.catalog import resolve_model  # noqa: E402

CASES = {
    # the search's result came back: an answer (or a reservation) is expected, not the search again
    "after one search, tools auto": dict(messages=[
        {"role": "user", "content": "Find me an early train from Zurich to Milan on 2027-03-06, two people with bikes."},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_out", "find_connections", OUTWARD)]},
        CONVERSATION[2]], tools=TOOLS, tool_choice="auto"),
    "after one search, no tools": dict(messages=[
        {"role": "user", "content": "Find me an early train from Zurich to Milan on 2027-03-06, two people with bikes."},
        {"role": "assistant", "content": None, "tool_calls": [_call("call_out", "find_connections", OUTWARD)]},
        CONVERSATION[2]]),
    "after the reservation, tools auto": dict(messages=CONVERSATION, tools=TOOLS, tool_choice="auto"),
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 600) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"the server at {url} exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"the server at {url} did not come up in {timeout:.0f} s")


def ask(url: str, case: dict, max_tokens: int) -> dict:
    body = {"model": "m", "temperature": 0.0, "max_tokens": max_tokens, **case}
    r = httpx.post(url + "/v1/chat/completions", json=body, timeout=900)
    r.raise_for_status()
    choice = r.json()["choices"][0]
    msg = choice["message"]
    return {"finish_reason": choice["finish_reason"], "content": msg.get("content"),
            "tool_calls": [{"name": c["function"]["name"], "arguments": c["function"]["arguments"]}
                           for c in msg.get("tool_calls") or []]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--max-tokens", type=int, default=160)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    model = resolve_model(args.model)
    bin_dir = subprocess.run(["bash", str(ROOT / "benchmarks" / "build_peer_tools.sh")], check=True,
                             capture_output=True, text=True).stdout.strip().splitlines()[-1]
    servers = {
        "llama-server --jinja": lambda port: [f"{bin_dir}/llama-server", "-m", str(model), "--jinja", "--host",
                                              "127.0.0.1", "--port", str(port), "-c", "4096", "-t", str(args.threads),
                                              "--temp", "0", "-np", "1"],
        "edgespec serve": lambda port: [sys.executable, "-m", "edgespec", "serve", "--target", str(model), "--draft",
                                        "none", "--port", str(port), "--threads", str(args.threads)],
    }
    results: dict = {"model": str(model.name), "date": time.strftime("%Y-%m-%d"), "cases": {}}
    for name, cmd in servers.items():
        port = free_port()
        proc = subprocess.Popen(cmd(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                env={**os.environ, "HF_HUB_OFFLINE": "1"})
        try:
            url = f"http://127.0.0.1:{port}"
            wait_ready(url, proc)
            for case_name, case in CASES.items():
                answer = ask(url, case, args.max_tokens)
                results["cases"].setdefault(case_name, {})[name] = answer
                print(f"[{name}] {case_name}: {json.dumps(answer, ensure_ascii=False)}", flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
    text = json.dumps(results, indent=2, ensure_ascii=False)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    main()
