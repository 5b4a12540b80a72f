"""The model catalog's Hugging Face downloads: the real ``huggingface_hub`` code against a fake
Hub on loopback (a tiny http.server answering the HEAD and GET requests ``hf_hub_download``
makes), then against the HF cache it leaves behind with ``HF_HUB_OFFLINE=1``: split GGUFs, a file
missing from the Hub, an unreachable Hub with and without a cache, offline never touching the
network."""

from __future__ import annotations

import hashlib
import http.server
import os
import threading

import pytest

import catalog_support
from edgespec import catalog
from edgespec.errors import CatalogError

isolated = catalog_support.isolated


COMMIT = "0123456789abcdef0123456789abcdef01234567"


class FakeHub:
    """Serves ``/{repo}/resolve/{revision}/{filename}`` like the Hub: HEAD answers with
    the commit, ETag and size headers huggingface_hub reads; GET sends the bytes."""

    def __init__(self, files: dict[tuple[str, str], bytes]) -> None:
        self.files = files
        self.requests: list[tuple[str, str]] = []
        hub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _find(self):
                hub.requests.append((self.command, self.path))
                path = self.path.split("?")[0]
                for (repo, name), data in hub.files.items():
                    for rev in ("main", COMMIT):
                        if path == f"/{repo}/resolve/{rev}/{name}":
                            return data
                return None

            def _headers(self, data):
                self.send_header("X-Repo-Commit", COMMIT)
                self.send_header("ETag", '"' + hashlib.sha256(data).hexdigest() + '"')
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Accept-Ranges", "bytes")
                self.end_headers()

            def do_HEAD(self):
                data = self._find()
                if data is None:
                    self.send_response(404)
                    self.send_header("X-Error-Code", "EntryNotFound")
                    self.send_header("X-Error-Message", "Entry not found")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self._headers(data)

            def do_GET(self):
                data = self._find()
                if data is None:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(200)
                self._headers(data)
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


def _hf_model(name: str, repo: str, files: tuple[str, ...]) -> catalog.CatalogModel:
    return catalog.CatalogModel(
        name=name,
        title=name,
        vocab="test",
        params_b=0.01,
        quant="F32",
        filename=files[0],
        size_bytes=1,
        shape=catalog.Shape(2, 1, 8, 8),
        hf=catalog.HFSource(repo, files),
    )


def test_hub_download_then_offline_from_the_hf_cache(monkeypatch, tmp_path):
    pytest.importorskip("huggingface_hub")
    data = b"GGUF" + os.urandom(20_000)
    model = _hf_model("hub-a", "edgespec-test/tiny-GGUF", ("tiny-q4.gguf",))
    with FakeHub({("edgespec-test/tiny-GGUF", "tiny-q4.gguf"): data}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        path = catalog.fetch(model)
        assert path.read_bytes() == data
        assert str(path).startswith(str(tmp_path / "hf-home" / "hub"))
        assert any(m == "GET" for m, _ in hub.requests)
    # The server is gone; offline, the file comes from the HF cache.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert catalog.fetch(model) == path
    assert catalog.hub._hf_cached(model.hf, "tiny-q4.gguf") == path


def test_hub_split_gguf_downloads_every_part_into_one_snapshot(monkeypatch):
    pytest.importorskip("huggingface_hub")
    repo = "edgespec-test/split-GGUF"
    files = ("m-q4-00001-of-00002.gguf", "m-q4-00002-of-00002.gguf")
    parts = {(repo, f): (b"GGUF" if i == 0 else b"") + os.urandom(5000) for i, f in enumerate(files)}
    model = _hf_model("hub-split", repo, files)
    with FakeHub(parts) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first = catalog.fetch(model)
    assert first.name == files[0]
    assert (first.parent / files[1]).read_bytes() == parts[(repo, files[1])]


def test_a_file_missing_from_the_hub_is_a_catalog_error(monkeypatch):
    pytest.importorskip("huggingface_hub")
    model = _hf_model("hub-missing", "edgespec-test/tiny-GGUF", ("absent.gguf",))
    with FakeHub({}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(CatalogError, match="absent.gguf"):
            catalog.fetch(model)


def _no_proxies(monkeypatch):
    for var in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"):
        monkeypatch.delenv(var, raising=False)


def test_an_unreachable_hub_with_nothing_cached_is_a_catalog_error(monkeypatch):
    """A Hub that refuses connections is noticed before huggingface_hub's own retries
    (five, with backoff): the error names the endpoint and the offline switch."""
    pytest.importorskip("huggingface_hub")
    model = _hf_model("hub-unreachable", "edgespec-test/tiny-GGUF", ("tiny.gguf",))
    _no_proxies(monkeypatch)
    with FakeHub({}) as hub:
        url = hub.url
    monkeypatch.setenv("HF_ENDPOINT", url)  # nothing listens there any more
    assert catalog.endpoint_reachable() is False
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.invalid:3128")  # a proxy: the client decides
    assert catalog.endpoint_reachable("https://huggingface.co") is True
    monkeypatch.delenv("HTTPS_PROXY")
    with pytest.raises(CatalogError, match=r"not in the cache .*unreachable.*HF_HUB_OFFLINE=1"):
        catalog.fetch(model)


def test_an_unreachable_hub_falls_back_to_the_cache(monkeypatch, tmp_path):
    """Downloaded once, then the network goes away: the cached file is used, without
    HF_HUB_OFFLINE."""
    pytest.importorskip("huggingface_hub")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    data = b"GGUF" + bytes(60)
    model = _hf_model("hub-then-offline", "edgespec-test/cached-GGUF", ("c.gguf",))
    _no_proxies(monkeypatch)
    with FakeHub({("edgespec-test/cached-GGUF", "c.gguf"): data}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        first = catalog.fetch(model)
    assert catalog.endpoint_reachable() is False
    again = catalog.fetch(model)
    assert again == first and again.read_bytes() == data


def test_offline_without_a_cached_file_never_touches_the_network(monkeypatch):
    pytest.importorskip("huggingface_hub")
    model = _hf_model("hub-offline", "edgespec-test/tiny-GGUF", ("tiny-q4.gguf",))
    with FakeHub({("edgespec-test/tiny-GGUF", "tiny-q4.gguf"): b"GGUF"}) as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.url)
        with pytest.raises(CatalogError, match="offline"):
            catalog.fetch(model, offline=True)
        assert hub.requests == []
