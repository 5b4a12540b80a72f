"""One failure never leaves callers waiting (issue 22, item 1).

What can fail is built before the server is ready (``--parallel`` beyond llama.cpp's
256 sequences, a batch that cannot be built); an exception in one step reaches the
requests it concerns as an error (a 500 object, or an error event on a stream) and the
next request is served; a worker thread that dies answers every waiting and later
request at once (503) instead of letting them hang, and ends ``serve`` with exit 1.
Every request here has a timeout: before the fix these tests hung and then failed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import httpx
import pytest

from edgespec import DraftingOptions, Engine
from edgespec.errors import InputError, ModelLoadError
from edgespec.server import create_app
from serve_support import LiveServer, free_port, sse_events

MESSAGES = [{"role": "user", "content": "hello world, tell me about the dog"}]
TIMEOUT = 30


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    return engines(tiny_target, "ngram")


def ask(http: httpx.Client, *, stream: bool = False, max_tokens: int = 8):
    body = {"messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0, "stream": stream}
    if not stream:
        return http.post("/v1/chat/completions", json=body)
    with http.stream("POST", "/v1/chat/completions", json=body) as resp:
        return resp.status_code, list(sse_events(resp.iter_lines()))


def test_parallel_beyond_llama_cpp_limit_refuses_to_start(engine):
    with pytest.raises(InputError, match=r"--parallel 300 is more sequences than llama.cpp holds .*\(256\)"):
        create_app(engine, parallel=300)


def test_a_batch_that_cannot_be_built_refuses_to_start(engine, monkeypatch):
    from edgespec.batching import runner

    def broken(*a, **kw):
        raise ModelLoadError("could not create a context of 153600 tokens")

    monkeypatch.setattr(runner, "BatchRunner", broken)
    with pytest.raises(ModelLoadError, match="153600"):
        create_app(engine, parallel=4)


def test_serve_parallel_300_exits_2_before_listening(tiny_target):
    port = free_port()
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "edgespec",
            "serve",
            "--target",
            str(tiny_target),
            "--draft",
            "none",
            "--port",
            str(port),
            "--n-ctx",
            "64",
            "--parallel",
            "300",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "EDGESPEC_LOG_LEVEL": "warning"},
    )
    assert r.returncode == 2, r.stderr
    assert "holds in one context (256)" in r.stderr and "Traceback" not in r.stderr
    assert "chat page http" not in r.stderr  # it never said it was ready


@pytest.mark.parametrize("stream", [False, True])
def test_an_exception_in_a_batch_step_reaches_its_callers_and_the_next_request_runs(engine, reference, stream):
    app = create_app(engine, max_tokens=16, parallel=2)
    runner = app.state.worker._runner
    real_step, calls = runner._step, []

    def step_once_broken(running):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("injected: 776 tokens do not fit one batch of 512")
        return real_step(running)

    runner._step = step_once_broken
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=TIMEOUT) as http:
        if stream:
            status, events = ask(http, stream=True)
            assert status == 200 and events[-1] == "[DONE]"
            err = events[-2]["error"]
        else:
            resp = ask(http)
            assert resp.status_code == 500
            err = resp.json()["error"]
        assert err["type"] == "server_error" and "ValueError" in err["message"] and "Traceback" not in str(err)
        again = ask(http)
        assert again.status_code == 200
        want = reference.generate(MESSAGES, max_tokens=8).text
        assert again.json()["choices"][0]["message"]["content"] == want
        assert http.get("/health").json()["status"] == "ok"


def test_an_exception_in_a_single_stream_reaches_its_caller_and_the_next_request_runs(engine, reference, monkeypatch):
    app = create_app(engine, max_tokens=16)
    real, calls = engine.ctx.decode, []

    def decode_once_broken(*a, **kw):
        calls.append(1)
        out = real(*a, **kw)  # the cache holds the batch, the round never settles
        if len(calls) == 3:
            raise RuntimeError("injected")
        return out

    monkeypatch.setattr(engine.ctx, "decode", decode_once_broken)
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=TIMEOUT) as http:
        status, events = ask(http, stream=True)
        assert status == 200 and "RuntimeError" in events[-2]["error"]["message"]
        for _ in range(2):
            again = ask(http)
            assert again.status_code == 200
            assert again.json()["choices"][0]["message"]["content"] == reference.generate(MESSAGES, max_tokens=8).text


@pytest.mark.parametrize("parallel", [1, 2])
def test_a_dead_worker_answers_every_caller_and_ends_the_server(engine, parallel):
    fatal: list[BaseException] = []
    app = create_app(engine, max_tokens=8, parallel=parallel, on_fatal=fatal.append)
    worker = app.state.worker
    real_get, calls = worker._jobs.get, []

    def get_then_die(*a, **kw):
        job = real_get(*a, **kw)
        calls.append(job)
        if len(calls) == 1:
            worker._jobs.put_nowait(job)  # the job stays queued, and the thread dies
            raise SystemError("injected: the worker thread dies")
        return job

    worker._jobs.get = get_then_die
    with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=TIMEOUT) as http:
        first = ask(http)
        assert first.status_code == 503, first.text
        err = first.json()["error"]
        assert err["code"] == "worker_stopped" and "SystemError" in err["message"]
        body = {"messages": MESSAGES, "stream": True}
        with http.stream("POST", "/v1/chat/completions", json=body) as later:
            assert later.status_code == 503  # refused at once: nothing waits on a dead worker
            assert b"worker_stopped" in later.read()
        assert http.get("/health").status_code == 503
        assert len(fatal) == 1 and isinstance(fatal[0], SystemError)


def test_many_draft_tokens_with_parallel_never_kill_the_worker(tiny_target):
    """Issue 22 case B: ``--draft ngram --k 600 --parallel 2 --n-ctx 2048``, two concurrent
    completions of a 400-character text written twice, max_tokens 400. Each request gets
    an answer (its text, or an error if the batch cannot take the drafts) and the server
    goes on."""
    text = ("The fox jumps over the lazy dog while seven wizards quickly box the jolly cat. " * 6)[:400]
    with Engine(tiny_target, draft="ngram", drafting=DraftingOptions(k=600), n_ctx=2048, exact=True, n_threads=1) as e:
        app = create_app(e, max_tokens=400, parallel=2, defaults={"temperature": 0.0})
        with LiveServer(app) as srv, httpx.Client(base_url=srv.url, timeout=120) as http:
            out: dict = {}

            def complete(i: int) -> None:
                out[i] = http.post("/v1/completions", json={"prompt": text + text, "max_tokens": 400})

            threads = [threading.Thread(target=complete, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(150)
            assert set(out) == {0, 1}, "a request was left waiting"
            for r in out.values():
                assert r.status_code in (200, 500), r.text
                assert "Traceback" not in r.text
            after = http.post("/v1/completions", json={"prompt": "the quick brown fox", "max_tokens": 4})
            assert after.status_code == 200
            assert http.get("/health").json()["status"] == "ok"
