"""RPC without llama.cpp: endpoint parsing, the HELLO check against fake servers, the
latency proxy, the network cost model and the planner and profile figure built on it."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from edgespec import adaptive
from edgespec.errors import InputError, RpcError
from edgespec.llama import rpc
from edgespec.netproxy import LatencyProxy


def test_parse_endpoints_keeps_order_and_refuses_bad_ones():
    eps = rpc.parse_endpoints(" 192.168.1.20:50052, box:7 ")
    assert [str(e) for e in eps] == ["192.168.1.20:50052", "box:7"]
    for bad in ("nohost", "h:", ":5", "h:70000", "h:x", "[::1]:5", "::1:5", "a:1,a:1", ","):
        with pytest.raises(InputError, match="--rpc"):
            rpc.parse_endpoints(bad)


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


@pytest.mark.parametrize("handler, message", [
    (_hello_reply(rpc.RPC_PROTO_MAJOR - 1), "speaks protocol 6.0.0"),
    (lambda c: c.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n"), "not a llama.cpp RPC server: it answered"),
    (lambda c: None, "hung up at the RPC hello"),
    (lambda c: time.sleep(3), "did not answer the RPC hello within 0.5 s"),
])
def test_probe_names_the_endpoint_and_what_it_found(handler, message):
    srv, ep = _server(handler)
    with srv:
        with pytest.raises(RpcError, match=message) as e:
            rpc.probe(ep, timeout=0.5)
    assert str(ep) in str(e.value)


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
    s = [adaptive.best_k(0.8, *adaptive.over_network(c, 0.5, step_ms=30, round_trip_ms=r), k_min=1, k_max=8)[1]
         for r in (0, 5, 30, 100)]
    assert s == sorted(s) and s[0] < 1.0 < s[-1]


def test_planner_counts_the_network_and_passes_the_servers_on(tmp_path, monkeypatch):
    from edgespec.planner import plan
    from edgespec.profiles import load_profile, record_measurements

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    local = plan("cpu-laptop", draft="model", k=None)
    far = plan("cpu-laptop", draft="model", rpc=["10.0.0.2:50052", "10.0.0.3:50052"], tensor_split=[3, 1])
    assert far.rpc == ("10.0.0.2:50052", "10.0.0.3:50052") and far.tensor_split == (3.0, 1.0)
    assert far.verify_cost(8) < local.verify_cost(8) and far.draft_gamma < local.draft_gamma
    assert any("estimated for a wired LAN" in n for n in far.notes)
    record_measurements("cpu-laptop", rpc_round_trip_ms=40.0)
    assert load_profile("cpu-laptop").rpc_round_trip_ms.value == 40.0
    slow = plan("cpu-laptop", draft="model", rpc=["10.0.0.2:50052"])
    assert slow.verify_cost(8) < far.verify_cost(8) and slow.predicted_speedup > far.predicted_speedup
    assert any("40.00 ms of network per target decode (measured" in n for n in slow.notes)
