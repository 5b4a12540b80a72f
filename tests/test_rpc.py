"""The target over llama.cpp's RPC backend: two ``edgespec rpc-server`` processes on
loopback hold the tiny target's layers, the drafter stays local, and the faults a user
meets (nothing listening, not an RPC server, a server killed mid-batch) end in one line
that names the endpoint, within a timeout, with every finished JSONL result kept.

These need a llama.cpp built with ``-DGGML_RPC=on`` (docs/scale-out.md says how; CI
builds it); on another build they skip and say so.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

from benchmarks.rpc_servers import RpcServer, free_port
from edgespec import DraftingOptions, Engine
from edgespec.llama import rpc
from edgespec.llama.netproxy import LatencyProxy

pytestmark = pytest.mark.skipif(not rpc.rpc_available(), reason="llama.cpp built without RPC (-DGGML_RPC=on)")

PROMPT = "def add(a, b):\n    return"


@pytest.fixture(scope="module")
def servers():
    with RpcServer() as a, RpcServer() as b:
        yield a, b


def _cli(*args, timeout=120, env=None):
    return subprocess.run(
        [sys.executable, "-m", "edgespec", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, **(env or {})),
    )


def test_target_split_over_two_servers_matches_the_local_run(servers, tiny_target, tiny_noisy):
    eps = ",".join(s.endpoint for s in servers)
    with Engine(tiny_target, draft=None, n_ctx=256, n_threads=1, exact=True) as local:
        want = local.generate(PROMPT, max_tokens=40, raw=True).token_ids
    with Engine(
        tiny_target, draft=tiny_noisy, n_ctx=256, n_threads=1, exact=True, rpc=eps, drafting=DraftingOptions(k=3)
    ) as remote:
        assert remote.target_model.rpc == rpc.parse_endpoints(eps)
        assert remote.draft_model.rpc == ()
        got = remote.generate(PROMPT, max_tokens=40, raw=True)
        assert got.stats.drafted > 0
        remote.set_drafter(None)
        plain = remote.generate(PROMPT, max_tokens=40, raw=True)
    assert list(got.token_ids) == list(want)
    assert list(plain.token_ids) == list(want)


def test_tensor_split_must_name_one_share_per_server(servers, tiny_target):
    from edgespec.errors import InputError

    with pytest.raises(InputError, match="one non-negative share per RPC device"):
        Engine(tiny_target, n_ctx=64, n_threads=1, rpc=servers[0].endpoint, tensor_split=(1, 1))


def test_cli_generate_over_rpc_answers(servers, tiny_target):
    eps = ",".join(s.endpoint for s in servers)
    r = _cli(
        "generate",
        "--target",
        str(tiny_target),
        "--draft",
        "ngram",
        "--rpc",
        eps,
        "--tensor-split",
        "1,3",
        "--raw",
        "--max-tokens",
        "16",
        "--threads",
        "1",
        "--json",
        "-q",
        PROMPT,
    )
    assert r.returncode == 0, r.stderr
    assert len(json.loads(r.stdout)["token_ids"]) > 0


def _assert_one_line_naming(r, endpoint, code=9):
    assert r.returncode == code, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and endpoint in errors[0], r.stderr


def test_nothing_listening_is_a_clear_error(tiny_target):
    ep = f"127.0.0.1:{free_port()}"
    t = time.monotonic()
    r = _cli("generate", "--target", str(tiny_target), "--rpc", ep, "--raw", "-n", "4", "-q", "hi", timeout=60)
    _assert_one_line_naming(r, ep)
    assert "nothing listens there" in r.stderr and time.monotonic() - t < 60


def test_an_endpoint_that_is_not_an_rpc_server(tiny_target):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def http():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conn.recv(100)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            conn.close()

    threading.Thread(target=http, daemon=True).start()
    ep = f"127.0.0.1:{srv.getsockname()[1]}"
    with srv:
        r = _cli("generate", "--target", str(tiny_target), "--rpc", ep, "--raw", "-n", "4", "-q", "hi", timeout=60)
    _assert_one_line_naming(r, ep)
    assert "not a llama.cpp RPC server" in r.stderr


def test_one_server_named_twice_is_refused_at_once(servers, tiny_target):
    """Before: llama.cpp connected twice to the one-client server and waited forever for
    the second connection's hello."""
    port = servers[0].port
    r = _cli(
        "generate",
        "--target",
        str(tiny_target),
        "--rpc",
        f"localhost:{port},127.0.0.1:{port}",
        "--raw",
        "-n",
        "4",
        "-q",
        "hi",
        timeout=60,
    )
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"localhost:{port} and 127.0.0.1:{port} are the same server" in r.stderr
    assert rpc.probe(rpc.Endpoint("127.0.0.1", port), timeout=5)  # and the server is free again


def test_server_killed_mid_batch_names_it_and_keeps_the_results(tmp_path, tiny_target):
    jobs = tmp_path / "in.jsonl"
    out = tmp_path / "out.jsonl"
    jobs.write_text(
        "".join(json.dumps({"id": f"p{i}", "prompt": f"{PROMPT} {i}", "max_tokens": 48}) + "\n" for i in range(40))
    )
    args = [
        "generate",
        "--target",
        str(tiny_target),
        "--draft",
        "none",
        "--raw",
        "--threads",
        "1",
        "--input",
        str(jobs),
        "--output",
        str(out),
        "-q",
    ]
    first = RpcServer()
    # a 2 ms link slows the tiny model down enough to kill its server mid-batch
    with LatencyProxy(("127.0.0.1", first.port), delay_ms=2) as proxy:
        cmd = [sys.executable, "-m", "edgespec", *args, "--rpc", proxy.endpoint]
        child = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while (not out.exists() or out.read_text().count("\n") < 2) and time.monotonic() < deadline:
                time.sleep(0.02)
            first.kill()
            stdout, stderr = child.communicate(timeout=60)
        finally:
            if child.poll() is None:
                child.kill()
        r = subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)
        _assert_one_line_naming(r, proxy.endpoint)
        assert "mid-generation" in r.stderr, r.stderr
    lines = out.read_text().splitlines()
    assert 2 <= len(lines) < 40
    done = [json.loads(line)["id"] for line in lines]  # every line whole
    with RpcServer() as second:
        r = _cli(*args, "--rpc", second.endpoint, timeout=300)
    assert r.returncode == 0, r.stderr
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == sorted(f"p{i}" for i in range(40)) and ids[: len(done)] == done


def test_a_frozen_server_ends_the_run_with_an_error_naming_it(tmp_path, tiny_target):
    """llama.cpp's sockets have no timeout: before the watchdog, a server stopped with
    SIGSTOP (frozen, its connection still open) hung generation forever."""
    jobs = tmp_path / "in.jsonl"
    out = tmp_path / "out.jsonl"
    jobs.write_text(
        "".join(json.dumps({"id": f"p{i}", "prompt": f"{PROMPT} {i}", "max_tokens": 48}) + "\n" for i in range(40))
    )
    with RpcServer() as server:
        cmd = [
            sys.executable,
            "-m",
            "edgespec",
            "generate",
            "--target",
            str(tiny_target),
            "--draft",
            "none",
            "--raw",
            "--threads",
            "1",
            "--input",
            str(jobs),
            "--output",
            str(out),
            "-q",
            "--rpc",
            server.endpoint,
        ]
        child = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ, EDGESPEC_RPC_TIMEOUT="3"),
        )
        try:
            deadline = time.monotonic() + 60
            while (not out.exists() or out.read_text().count("\n") < 2) and time.monotonic() < deadline:
                time.sleep(0.02)
            server.proc.send_signal(signal.SIGSTOP)
            try:
                stdout, stderr = child.communicate(timeout=60)
            finally:
                server.proc.send_signal(signal.SIGCONT)
        finally:
            if child.poll() is None:
                child.kill()
        r = subprocess.CompletedProcess(cmd, child.returncode, stdout, stderr)
        _assert_one_line_naming(r, server.endpoint)
        assert "no answer for 3 s" in r.stderr and "EDGESPEC_RPC_TIMEOUT" in r.stderr, r.stderr
    lines = out.read_text().splitlines()
    assert 2 <= len(lines) < 40 and all(json.loads(line)["id"] for line in lines)  # every line whole


def test_a_server_taken_after_the_check_ends_llama_cpps_handshake_with_an_error(tiny_target):
    """The check's hello is answered, then the server is busy (another client took it):
    llama.cpp's own handshake, which has no timeout, waited forever before the watchdog."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    conns = []

    def first_hello_only():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            conns.append(conn)  # kept open, never answered again
            if len(conns) == 1:
                conn.recv(33, socket.MSG_WAITALL)
                conn.sendall(struct.pack("<Q", 28) + bytes([rpc.RPC_PROTO_MAJOR, 0, 0, 0]) + bytes(24))
                conn.close()

    threading.Thread(target=first_hello_only, daemon=True).start()
    ep = f"127.0.0.1:{srv.getsockname()[1]}"
    with srv:
        r = _cli(
            "generate",
            "--target",
            str(tiny_target),
            "--rpc",
            ep,
            "--raw",
            "-n",
            "4",
            "-q",
            "hi",
            timeout=60,
            env={"EDGESPEC_RPC_TIMEOUT": "2"},
        )
    _assert_one_line_naming(r, ep)
    assert f"lost the RPC server {ep} while connecting to it (no answer for 2 s" in r.stderr, r.stderr


def test_rpc_server_refuses_a_busy_port_and_warns_off_loopback():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = _cli("rpc-server", "--port", str(s.getsockname()[1]), timeout=30)
    assert r.returncode == 2 and "cannot listen on 127.0.0.1" in r.stderr and "Traceback" not in r.stderr
    port = free_port()
    child = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "rpc-server", "--host", "0.0.0.0", "--port", str(port), "--threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while rpc._hello(rpc.Endpoint("127.0.0.1", port), 1.0)[0] != "ok" and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        child.terminate()
        _, stderr = child.communicate(timeout=10)
    assert child.returncode == 0
    assert "WARNING" in stderr and "no authentication" in stderr and "0.0.0.0:" + str(port) in stderr


def test_tune_over_rpc_measures_and_saves_the_network_cost(servers, tiny_target, tmp_path):
    r = _cli(
        "tune",
        "--target",
        str(tiny_target),
        "--draft",
        "ngram",
        "--rpc",
        servers[0].endpoint,
        "--k-grid",
        "2",
        "--max-tokens",
        "8",
        "--repeat",
        "1",
        "--limit",
        "1",
        "--threads",
        "1",
        "--json",
        "-q",
        "--save",
        env={"XDG_CONFIG_HOME": str(tmp_path)},
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    net = data["rpc"]
    assert net["servers"] == [servers[0].endpoint] and net["step_ms"] == pytest.approx(data["target_step_ms"], abs=1e-3)
    assert net["round_trip_ms"] == pytest.approx(max(0.0, net["step_ms"] - net["local_step_ms"]))
    saved = (tmp_path / "edgespec" / "profiles" / f"{data['profile']}.toml").read_text()
    assert "rpc_round_trip_ms" in saved and "[cost.pair" not in saved  # c(n) over RPC is not the machine's


def test_profiles_detect_says_the_build_has_rpc():
    r = _cli("profiles", "detect", "--json", timeout=60)
    assert r.returncode == 0, r.stderr
    assert '"rpc": true' in r.stdout
