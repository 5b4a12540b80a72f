"""RPC without llama.cpp: endpoint parsing, the HELLO check against fake servers, the
latency proxy, the network cost model and the planner and profile figure built on it."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from edgespec.costmodel import adaptive
from edgespec.errors import InputError, RpcError
from edgespec.llama import rpc
from edgespec.llama.netproxy import LatencyProxy


def test_parse_endpoints_keeps_order_and_refuses_bad_ones():
    eps = rpc.parse_endpoints(" 192.168.1.20:50052, box:7 ")
    assert [str(e) for e in eps] == ["192.168.1.20:50052", "box:7"]
    for bad in ("nohost", "h:", ":5", "h:70000", "h:x", "[::1]:5", "::1:5", "a:1,a:1", ","):
        with pytest.raises(InputError, match="--rpc"):
            rpc.parse_endpoints(bad)


@pytest.mark.parametrize(
    "text, message",
    [
        ("127.0.0.1:\u00b2", "the port must be a number from 1 to 65535"),  # "²".isdigit() is True
        ("127.0.0.1:\u0665", "the port must be a number"),  # an Arabic-Indic five
        ("127.0.0.1:50052:1", "has 2 colons where HOST:PORT has one"),
        ("box:1:2:3", "has 3 colons"),
        ("::1:50052", "is an IPv6 address"),
        ("[::1]:50052", "is an IPv6 address"),
        ("fe80::1:50052", "is an IPv6 address"),
    ],
)
def test_parse_endpoints_says_what_is_wrong(text, message):
    with pytest.raises(InputError, match=message) as e:
        rpc.parse_endpoints(text)
    assert repr(text) in str(e.value)
    if "colons" in message:
        assert "IPv6 address" not in str(e.value).split(";")[0]


def test_two_spellings_of_one_address_are_refused_naming_both():
    with pytest.raises(InputError, match="localhost:50121 and 127.0.0.1:50121 are the same server") as e:
        rpc.check_distinct(rpc.parse_endpoints("localhost:50121,127.0.0.1:50121"))
    assert "127.0.0.1:50121)" in str(e.value)
    rpc.check_distinct(rpc.parse_endpoints("localhost:50121,127.0.0.1:50122"))  # another port: another server
    with pytest.raises(RpcError, match="no-such-host.invalid:5: cannot resolve"):
        rpc.check_distinct([rpc.Endpoint("no-such-host.invalid", 5)])


def _server(handler):
    """A TCP server on a free loopback port that runs ``handler(conn)`` per connection."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def loop():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                handler(conn)

    threading.Thread(target=loop, daemon=True).start()
    return srv, rpc.Endpoint("127.0.0.1", srv.getsockname()[1])


def _hello_reply(major: int, minor: int = 0):
    def handler(conn):
        req = conn.recv(33)
        assert req[0] == 14 and struct.unpack("<Q", req[1:9])[0] == 24
        conn.sendall(struct.pack("<Q", 28) + bytes([major, minor, 0, 0]) + bytes(24))

    return handler


def test_probe_accepts_a_server_of_this_protocol():
    srv, ep = _server(_hello_reply(rpc.RPC_PROTO_MAJOR))
    with srv:
        assert rpc.probe(ep, timeout=2) == f"{rpc.RPC_PROTO_MAJOR}.0.0"


@pytest.mark.parametrize(
    "handler, message",
    [
        (_hello_reply(rpc.RPC_PROTO_MAJOR - 1), "speaks protocol 6.0.0"),
        (
            lambda c: c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n"),
            "not a llama.cpp RPC server: it answered 'HTTP/1.1 400 Bad Request' \\(an HTTP server\\)",
        ),
        (
            lambda c: c.sendall(b"SSH-2.0-OpenSSH_9.6\r\n"),
            "not a llama.cpp RPC server: it answered 'SSH-2.0-OpenSSH_9.6'",
        ),
        (lambda c: c.recv(100) and c.sendall(b"no\n"), "not a llama.cpp RPC server: it answered 'no'"),
        (lambda c: None, "hung up at the RPC hello"),
        (lambda c: time.sleep(3), "did not answer the RPC hello within 0.5 s"),
    ],
)
def test_probe_names_the_endpoint_and_what_it_found(handler, message):
    srv, ep = _server(handler)
    with srv:
        with pytest.raises(RpcError, match=message) as e:
            rpc.probe(ep, timeout=0.5)
    assert str(ep) in str(e.value)


def test_an_http_server_that_waits_for_a_line_is_named_at_once():
    """Python's http.server (like many) reads a request line and would wait for its end
    forever; the hello's trailing line end makes it answer now, and the answer is named."""
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    srv = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        with pytest.raises(RpcError, match="is not a llama.cpp RPC server: it answered") as e:
            rpc.probe(rpc.Endpoint("127.0.0.1", srv.server_address[1]), timeout=30)
    finally:
        srv.shutdown()
        srv.server_close()
    assert "did not answer" not in str(e.value)


def _one_client_server(host="127.0.0.1"):
    """Like llama.cpp's RPC server: answers the hello, then serves that client until it
    hangs up before it accepts the next one."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((host, 0))
    srv.listen(4)
    served = []

    def loop():
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return
            with conn:
                if len(conn.recv(33, socket.MSG_WAITALL)) == 33:
                    served.append(conn.getsockname()[0])
                    conn.sendall(struct.pack("<Q", 28) + bytes([rpc.RPC_PROTO_MAJOR, 0, 0, 0]) + bytes(24))
                    while conn.recv(100):
                        pass

    threading.Thread(target=loop, daemon=True).start()
    return srv, srv.getsockname()[1], served


def test_check_servers_finds_one_server_behind_two_addresses():
    srv, port, served = _one_client_server("0.0.0.0")
    other, other_port, _ = _one_client_server()
    with srv, other:
        eps = rpc.parse_endpoints(f"127.0.0.1:{port},127.0.0.1:{other_port},127.0.0.2:{port}")
        with pytest.raises(InputError, match=f"127.0.0.1:{port} and 127.0.0.2:{port} are the same server"):
            rpc.check_servers(eps, timeout=5)
        # distinct servers pass, each asked once, and the server is free again afterwards
        assert rpc.check_servers(eps[:2], timeout=5) == [f"{rpc.RPC_PROTO_MAJOR}.0.0"] * 2
        assert rpc.probe(eps[2], timeout=5)
    assert served.count("127.0.0.2") == 2


def test_check_servers_reports_a_busy_server_as_busy():
    srv, port, _ = _one_client_server()
    with srv:
        hog = socket.create_connection(("127.0.0.1", port))
        hog.sendall(struct.pack("<BQ", 14, 24) + bytes(24))
        hog.recv(36)
        with hog, pytest.raises(RpcError, match="did not answer the RPC hello within 0.5 s"):
            rpc.check_servers([rpc.Endpoint("127.0.0.1", port)], timeout=0.5)


def test_probe_where_nothing_listens():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with pytest.raises(RpcError, match=f"127.0.0.1:{port}: nothing listens there"):
        rpc.probe(rpc.Endpoint("127.0.0.1", port), timeout=1)


def test_lost_endpoint_tells_a_dead_server_from_a_busy_one():
    busy, busy_ep = _server(lambda c: time.sleep(2))  # serving someone else: silent
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead_ep = rpc.Endpoint("127.0.0.1", s.getsockname()[1])
    s.close()
    with busy:
        ep, how = rpc.lost_endpoint([busy_ep, dead_ep], timeout=0.3)
    assert ep == dead_ep and "no longer accepts connections" in how


def _echo(conn):
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    while data := conn.recv(1 << 16):
        conn.sendall(data)


def _round_trip_ms(sock, payload=b"x"):
    t = time.perf_counter()
    sock.sendall(payload)
    got = b""
    while len(got) < len(payload):
        got += sock.recv(1 << 16)
    return (time.perf_counter() - t) * 1e3, got


def test_latency_proxy_delays_each_way_and_relays_bytes_intact():
    srv, ep = _server(_echo)
    with srv, LatencyProxy((ep.host, ep.port), delay_ms=20) as proxy:
        sock = socket.create_connection(("127.0.0.1", proxy.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        ms, _ = _round_trip_ms(sock)
        assert 40 <= ms < 40 + 30  # 20 ms each way
        big = bytes(range(256)) * 4000
        ms, got = _round_trip_ms(sock, big)
        assert got == big
        proxy.delay_ms = 0
        ms, _ = _round_trip_ms(sock)
        assert ms < 15
        proxy.sever()
        assert sock.recv(10) == b""  # the client sees the link drop


def test_latency_proxy_hangs_up_when_the_target_is_gone():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    with LatencyProxy(("127.0.0.1", port)) as proxy:
        found, _ = rpc._hello(rpc.Endpoint("127.0.0.1", proxy.port), 1.0)
    assert found == "closed"


def test_network_cost_flattens_c_and_shrinks_gamma():
    c = adaptive.VerifyCost((2, 4, 8, 16), (1.7, 2.7, 4.6, 6.8))
    same, g = adaptive.over_network(c, 0.5, step_ms=30, round_trip_ms=0)
    assert same(8) == pytest.approx(4.6) and g == pytest.approx(0.5)
    net, g = adaptive.over_network(c, 0.5, step_ms=30, round_trip_ms=30)
    assert net(8) == pytest.approx((4.6 * 30 + 30) / 60) and g == pytest.approx(0.25)
    far, g_far = adaptive.over_network(c, 0.5, step_ms=30, round_trip_ms=3000)
    assert far(16) < 1.2 and g_far < 0.01
    # the model drafter's best speedup grows with the link's latency
    s = [
        adaptive.best_k(0.8, *adaptive.over_network(c, 0.5, step_ms=30, round_trip_ms=r), k_min=1, k_max=8)[1]
        for r in (0, 5, 30, 100)
    ]
    assert s == sorted(s) and s[0] < 1.0 < s[-1]


def test_planner_counts_the_network_and_passes_the_servers_on(tmp_path, monkeypatch):
    from edgespec.planning.planner import plan
    from edgespec.profiles import load_profile, record_measurements

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    local = plan("cpu-laptop", draft="model", k=None)
    far = plan("cpu-laptop", draft="model", rpc=["10.0.0.2:50052", "10.0.0.3:50052"], tensor_split=[3, 1])
    assert far.rpc == ("10.0.0.2:50052", "10.0.0.3:50052") and far.tensor_split == (3.0, 1.0)
    assert far.drafting.verify_cost(8) < local.drafting.verify_cost(8)
    assert far.drafting.draft_gamma < local.drafting.draft_gamma
    assert any("estimated for a wired LAN" in n for n in far.notes)
    record_measurements("cpu-laptop", rpc_round_trip_ms=40.0)
    assert load_profile("cpu-laptop").rpc_round_trip_ms.value == 40.0
    slow = plan("cpu-laptop", draft="model", rpc=["10.0.0.2:50052"])
    assert slow.drafting.verify_cost(8) < far.drafting.verify_cost(8)
    assert slow.predicted_speedup > far.predicted_speedup
    assert any("40.00 ms of network per target decode (measured" in n for n in slow.notes)


def test_the_watchdog_names_the_server_a_stuck_decode_waits_for(monkeypatch):
    """A decode over RPC that outlasts the limit hands the on_server_lost handler an
    error naming the endpoint: a dead one by what a fresh connection finds, a frozen one
    (accepts, never answers) by elimination."""
    monkeypatch.setenv(rpc.WATCHDOG_ENV, "0.5")
    got: list = []
    fired = threading.Event()
    monkeypatch.setattr(rpc, "_handler", [lambda err: (got.append(err), fired.set())])
    frozen, frozen_ep = _server(lambda c: time.sleep(5))
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    dead_ep = rpc.Endpoint("127.0.0.1", s.getsockname()[1])
    s.close()
    with frozen:
        dog = rpc._Watchdog()
        with rpc.watch((frozen_ep,)):
            pass  # the process's watchdog: a decode that ended in time
        dog.arm((frozen_ep,))
        dog.disarm()
        assert not fired.wait(1.5)  # ... sets nothing off
        dog.arm((frozen_ep, dead_ep))
        assert fired.wait(30)
        assert f"lost the RPC server {dead_ep} mid-generation (it no longer accepts connections" in str(got[0])
        fired.clear()
        rpc._Watchdog().arm((frozen_ep,))
        assert fired.wait(30)
    assert f"lost the RPC server {frozen_ep} mid-generation (no answer for 0.5 s: frozen" in str(got[1])
    assert got[1].endpoint == str(frozen_ep) and rpc.WATCHDOG_ENV in str(got[1])


def test_the_watchdog_waits_while_a_load_makes_progress(monkeypatch):
    monkeypatch.setenv(rpc.WATCHDOG_ENV, "0.5")
    fired = threading.Event()
    got: list = []
    monkeypatch.setattr(rpc, "_handler", [lambda err: (got.append(err), fired.set())])
    frozen, ep = _server(lambda c: time.sleep(5))
    with frozen:
        dog = rpc._Watchdog()
        dog.arm((ep,), during="while loading the model", learn=False)
        for _ in range(8):  # 2 s of load, a tensor every 0.25 s
            assert not fired.wait(0.25)
            dog.touch()
        dog.disarm()
        assert dog.limit() == 0.5  # a load does not raise the decode limit
        dog.arm((ep,), during="while loading the model", learn=False)
        assert fired.wait(30)  # no progress: the silence is the server's
    assert f"lost the RPC server {ep} while loading the model (no answer for 0.5 s" in str(got[0])
