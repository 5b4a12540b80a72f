"""No web page can drive the server (issue 22, item 4), with raw headers on a real uvicorn:
the Host check (DNS rebinding), the Origin check (a cross-site ``text/plain`` POST needs
no preflight), CORS for allowed origins, ``--allow-origin`` / ``EDGESPEC_ORIGINS``, and
what ``/health``, ``/metrics`` and ``/`` show with ``--api-key``. The same in a real
browser: tests/test_server_browser.py."""

from __future__ import annotations

import json
import socket

import httpx
import pytest

from edgespec.cli.serve import allowed_origins
from edgespec.errors import InputError
from edgespec.server import create_app
from edgespec.server.guard import split_host
from serve_support import LiveServer

BODY = json.dumps({"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "temperature": 0})


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    return engines(tiny_target, n_ctx=256)


@pytest.fixture(scope="module")
def srv(engine):
    with LiveServer(create_app(engine, max_tokens=4)) as s:
        yield s


def post(url: str, **headers: str) -> httpx.Response:
    return httpx.post(
        f"{url}/v1/chat/completions", content=BODY, timeout=30, headers={"content-type": "text/plain", **headers}
    )


def generations(url: str) -> int:
    for line in httpx.get(f"{url}/metrics", timeout=10).text.splitlines():
        if line.startswith("edgespec_generations_total "):
            return int(line.split()[1])
    raise AssertionError("no generations counter")


def test_a_cross_site_text_plain_post_is_refused_and_runs_nothing(srv):
    before = generations(srv.url)
    resp = post(srv.url, origin="http://evil.example")
    assert resp.status_code == 403
    err = resp.json()["error"]
    assert err["code"] == "origin_not_allowed" and "--allow-origin http://evil.example" in err["message"]
    assert "access-control-allow-origin" not in resp.headers
    assert generations(srv.url) == before
    assert post(srv.url, origin="null").status_code == 403  # a sandboxed frame, a file:// page


def test_a_host_that_is_not_this_server_is_refused(srv):
    port = srv.port
    for host in ("attacker.example", f"attacker.example:{port}", f"127.0.0.1:{port + 1}", f"localhost:{port}x", ""):
        resp = post(srv.url, host=host)
        assert resp.status_code == 403, host
        assert resp.json()["error"]["code"] == "host_not_allowed"
    for host in (
        f"127.0.0.1:{port}",
        f"localhost:{port}",
        f"LOCALHOST:{port}",
        f"host.docker.internal:{port}",
        f"gpu-box.local:{port}",
        f"app.localhost:{port}",
        f"{socket.gethostname()}:{port}",
    ):
        assert post(srv.url, host=host).status_code == 200, host  # names no one can register (Ollama's rule)
    assert post(srv.url, host=f"host.docker.internal:{port + 1}").status_code == 403


def test_the_own_origin_and_loopback_pages_are_allowed_with_cors_headers(srv):
    for origin in (
        srv.url,
        f"http://localhost:{srv.port}",
        "http://localhost:5173",
        "http://127.0.0.1:3000",
        "http://[::1]:8000",
    ):
        resp = post(srv.url, origin=origin)
        assert resp.status_code == 200, origin
        assert resp.headers["access-control-allow-origin"] == origin and "Origin" in resp.headers["vary"]
    # the page's own fetches from http://localhost:PORT/ (Host and Origin both say localhost)
    resp = post(srv.url, origin=f"http://localhost:{srv.port}", host=f"localhost:{srv.port}")
    assert resp.status_code == 200


def test_preflights_are_answered_for_allowed_origins_only(srv):
    ask = {
        "access-control-request-method": "POST",
        "access-control-request-headers": "authorization, content-type",
        "access-control-request-private-network": "true",
    }
    ok = httpx.options(f"{srv.url}/v1/chat/completions", headers={"origin": "http://localhost:5173", **ask})
    assert ok.status_code == 204
    assert ok.headers["access-control-allow-origin"] == "http://localhost:5173"
    assert "POST" in ok.headers["access-control-allow-methods"]
    assert ok.headers["access-control-allow-headers"] == "authorization, content-type"
    assert ok.headers["access-control-allow-private-network"] == "true"
    bad = httpx.options(f"{srv.url}/v1/chat/completions", headers={"origin": "http://evil.example", **ask})
    assert bad.status_code == 403 and "access-control-allow-origin" not in bad.headers


def test_allow_origin_lets_a_named_site_in(engine):
    app = create_app(engine, max_tokens=4, allow_origins=["http://evil.example", "https://*.example.com/"])
    with LiveServer(app) as s:
        resp = post(s.url, origin="http://evil.example")
        assert resp.status_code == 200 and resp.headers["access-control-allow-origin"] == "http://evil.example"
        assert post(s.url, origin="https://app.example.com").status_code == 200
        assert post(s.url, origin="https://example.org").status_code == 403
        # an allowed origin's name is this server's name too (a reverse proxy's Host)
        assert post(s.url, host="evil.example").status_code == 200
        assert post(s.url, host="other.example").status_code == 403
    with LiveServer(create_app(engine, max_tokens=4, allow_origins=["*"])) as s:
        resp = post(s.url, origin="http://anything.example")
        assert resp.status_code == 200 and resp.headers["access-control-allow-origin"] == "*"
        assert post(s.url, host="anything.example").status_code == 403  # '*' opens origins, not hosts


def test_bad_origins_are_refused_when_the_server_starts(engine, monkeypatch):
    for bad in ("evil.example", "http://evil.example/path", "http://"):
        with pytest.raises(InputError, match="--allow-origin"):
            create_app(engine, allow_origins=[bad])
    monkeypatch.setenv("EDGESPEC_ORIGINS", "http://a.example, https://b.example  http://c.example")
    assert allowed_origins(["http://x.example"]) == [
        "http://x.example",
        "http://a.example",
        "https://b.example",
        "http://c.example",
    ]


def test_split_host():
    assert split_host("LocalHost:8080") == ("localhost", 8080)
    assert split_host("[::1]:81") == ("[::1]", 81)
    assert split_host("[::1]") == ("[::1]", None)
    assert split_host("example.com") == ("example.com", None)
    assert split_host("example.com:8o") == ("example.com", -1)


def test_with_an_api_key_health_is_liveness_metrics_need_the_key_and_the_page_is_open(engine):
    with LiveServer(create_app(engine, max_tokens=4, api_key="s3cret")) as s:
        key = {"authorization": "Bearer s3cret"}
        open_health = httpx.get(f"{s.url}/health")
        assert open_health.status_code == 200 and open_health.json() == {"status": "ok"}
        full = httpx.get(f"{s.url}/health", headers=key).json()
        assert full["status"] == "ok" and full["n_ctx"] == 256 and "model" in full
        assert httpx.get(f"{s.url}/metrics").status_code == 401
        assert "edgespec_generations_total" in httpx.get(f"{s.url}/metrics", headers=key).text
        page = httpx.get(f"{s.url}/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert "tiny" not in page.text  # the page names no model: it asks /v1/models, with the key
