"""``edgespec serve`` as a user runs it: the options, the warning for an open host without a
key, and a real process on the tiny models that answers and stops cleanly on SIGTERM and
on Ctrl-C (SIGINT)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest
from typer.testing import CliRunner

from edgespec import Engine
from edgespec.cli import app
from edgespec.cli.serve import is_loopback
from serve_support import free_port


def test_help_lists_the_options():
    r = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for opt in (
        "--profile",
        "--target",
        "--draft",
        "--k",
        "--temperature",
        "--top-p",
        "--seed",
        "--max-tokens",
        "--n-ctx",
        "--threads",
        "--exact",
        "--host",
        "--port",
        "--api-key",
        "--max-queue",
        "--allow-origin",
        "--parallel",
        "--alias",
        "--no-memory",
    ):
        assert opt in r.stdout, opt


@pytest.mark.parametrize(
    "host, loop",
    [
        ("127.0.0.1", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("127.0.0.2", True),
        ("0.0.0.0", False),
        ("192.168.1.5", False),
        ("::", False),
        ("myhost.lan", False),
    ],
)
def test_is_loopback(host, loop):
    assert is_loopback(host) is loop


def test_an_open_host_without_a_key_warns(tmp_path):
    r = CliRunner().invoke(
        app, ["serve", "--host", "0.0.0.0", "--target", str(tmp_path / "missing.gguf"), "--draft", "none"]
    )
    assert "warning: listening on 0.0.0.0 without --api-key" in r.stderr
    assert r.exit_code == 3 and "missing.gguf" in r.stderr  # then the usual one-line error
    r = CliRunner().invoke(
        app,
        ["serve", "--host", "0.0.0.0", "--api-key", "k", "--target", str(tmp_path / "missing.gguf"), "--draft", "none"],
    )
    assert "warning" not in r.stderr


def start(tiny_target, tiny_same, *extra: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    env = {**os.environ, "EDGESPEC_LOG_LEVEL": "warning"}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "edgespec",
            "serve",
            "--target",
            str(tiny_target),
            "--draft",
            str(tiny_same),
            "--port",
            str(port),
            "--temperature",
            "0",
            "--max-tokens",
            "8",
            "--n-ctx",
            "512",
            *extra,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            out, err = proc.communicate()
            raise AssertionError(f"edgespec serve did not come up:\n{err}")
        time.sleep(0.1)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_serve_answers_and_stops_cleanly(tiny_target, tiny_same, sig):
    proc, url = start(tiny_target, tiny_same, "--exact", "--api-key", "k1")
    try:
        headers = {"Authorization": "Bearer k1"}
        msgs = [{"role": "user", "content": "hello"}]
        body = httpx.post(f"{url}/v1/chat/completions", json={"messages": msgs}, headers=headers, timeout=30).json()
        with Engine(tiny_target, draft=None, n_ctx=512, exact=True) as ref:
            want = ref.generate(msgs, max_tokens=8)  # --max-tokens and --temperature are the defaults
        assert body["choices"][0]["message"]["content"] == want.text
        assert httpx.get(f"{url}/health", headers=headers, timeout=5).json()["exact"] is True
        assert httpx.get(f"{url}/health", timeout=5).json() == {"status": "ok"}  # liveness only without the key
        assert httpx.get(f"{url}/v1/models", timeout=5).status_code == 401
        t0 = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert time.monotonic() - t0 < 10
        assert "Traceback" not in err and "edgespec serve: stopped" in err
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
