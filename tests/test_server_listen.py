"""``serve --host`` with several addresses (issue 28, item 7): ``127.0.0.1,::1`` and IPv6
loopback alone, one socket each on one port, the Host check right on every address,
and ``--alias`` for the model id."""

from __future__ import annotations

import socket

import httpx
import pytest

from edgespec.errors import InputError
from edgespec.server import create_app
from edgespec.server.listen import ListenError, bind, parse_hosts, url_host
from serve_support import LiveServer, serve_process


def _ipv6_loopback() -> bool:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _ipv6_loopback(), reason="this machine cannot bind IPv6 loopback (::1)")


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    return engines(tiny_target, n_ctx=256)


def test_parse_hosts():
    assert parse_hosts("127.0.0.1") == ["127.0.0.1"]
    assert parse_hosts("127.0.0.1, ::1") == ["127.0.0.1", "::1"]
    assert parse_hosts("[::1],localhost,::1") == ["::1", "localhost"]
    with pytest.raises(InputError, match="empty address"):
        parse_hosts("127.0.0.1,")
    assert url_host("::1") == "[::1]" and url_host("127.0.0.1") == "127.0.0.1" and url_host("localhost") == "localhost"


def test_bind_names_the_address_that_fails():
    (sock,) = bind(["127.0.0.1"], 0)
    try:
        taken = sock.getsockname()[1]
        sock.listen()
        with pytest.raises(ListenError, match=rf"cannot listen on 127\.0\.0\.1:{taken}"):
            bind(["127.0.0.1"], taken)
    finally:
        sock.close()
    with pytest.raises(ListenError, match="cannot listen on 192.0.2.1"):  # not this machine's address
        bind(["192.0.2.1"], 0)


@needs_ipv6
def test_bind_puts_every_address_on_one_port():
    socks = bind(["127.0.0.1", "::1"], 0)
    try:
        assert [s.family for s in socks] == [socket.AF_INET, socket.AF_INET6]
        assert len({s.getsockname()[1] for s in socks}) == 1
    finally:
        for s in socks:
            s.close()


def models_id(url: str, **headers: str) -> httpx.Response:
    return httpx.get(f"{url}/v1/models", headers=headers, timeout=10)


@needs_ipv6
def test_ipv6_loopback_alone_with_the_host_check(engine):
    with LiveServer(create_app(engine, max_tokens=4), hosts=["::1"]) as srv:
        assert srv.url == f"http://[::1]:{srv.port}"
        assert models_id(srv.url).status_code == 200  # httpx sends Host: [::1]:PORT
        assert models_id(srv.url, host=f"localhost:{srv.port}").status_code == 200
        assert models_id(srv.url, host=f"[::1]:{srv.port + 1}").status_code == 403  # not this port
        assert models_id(srv.url, host=f"evil.example:{srv.port}").status_code == 403


@needs_ipv6
def test_serve_on_ipv4_and_ipv6_loopback_with_an_alias(tiny_target):
    args = [
        "--target",
        str(tiny_target),
        "--draft",
        "none",
        "--n-ctx",
        "256",
        "--max-tokens",
        "4",
        "--host",
        "127.0.0.1,::1",
        "--alias",
        "my-model",
    ]
    with serve_process(args, start_timeout=120) as url:
        port = url.rsplit(":", 1)[1]
        for base in (url, f"http://[::1]:{port}"):
            resp = models_id(base)
            assert resp.status_code == 200, (base, resp.text)
            assert [m["id"] for m in resp.json()["data"]] == ["my-model"]
            body = httpx.post(
                f"{base}/v1/chat/completions", timeout=30, json={"messages": [{"role": "user", "content": "hi"}]}
            ).json()
            assert body["model"] == "my-model"
        assert models_id(f"http://[::1]:{port}", host="evil.example").status_code == 403
