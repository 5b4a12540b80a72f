"""Which hosts and which web pages may talk to the server: the Host check, the Origin
check and CORS (an ASGI middleware, ``Guard``).

A server on 127.0.0.1 without a key is still reachable from every web page the user
opens: a page may POST ``text/plain`` to it without a CORS preflight, and through DNS
rebinding (a name of the attacker's that later resolves to 127.0.0.1) it may even read
the answers. So, as Ollama does:

* **Host.** A request must name this server: its ``Host`` is the address the connection
  reached (uvicorn's ``scope["server"]``: the bound address, or on a wildcard bind the
  local address used), a loopback name (``localhost``, ``127.0.0.1``, ``[::1]``), a name
  no one can register on the internet (``local_name``: ``*.localhost``, ``*.local``,
  ``*.internal``, this machine's host name), with the bound port (no port: 80), or the
  host of an origin allowed explicitly (a reverse proxy's public name). Anything else is
  a 403: a rebound name never reaches the model.
* **Origin.** A request that carries ``Origin`` (browsers send it on every cross-origin
  request and on POSTs) is served only if that origin is allowed: the server's own origin
  (``http://`` + its Host), loopback origins on any port, and those given with
  ``--allow-origin`` / ``EDGESPEC_ORIGINS`` (exact origins, ``fnmatch`` patterns such as
  ``https://*.example.com``, or ``*`` for any). A refused origin gets a 403 and no
  generation runs. Requests without ``Origin`` (curl, SDKs) are not browsers' and pass.
* **CORS.** Allowed origins get ``Access-Control-Allow-Origin`` (their own origin, and
  ``Vary: Origin``); a preflight (``OPTIONS`` with ``Access-Control-Request-Method``) from
  one is answered 204 with the methods and headers it asked for (and Chrome's Private
  Network Access header); from any other origin it is a 403.

**The API key** (``key_ok``), when the server has one, may come as ``Authorization:
Bearer KEY`` (OpenAI's clients) or ``X-Api-Key: KEY`` (clients written for other APIs
send that instead, as llama-server accepts); either one that matches will do.

Hand-written rather than Starlette's ``CORSMiddleware``: that one only decides which
response headers to add, while a cross-site request it does not allow still runs
(a ``text/plain`` POST needs no preflight), and it cannot allow "the server's own
origin", which depends on the Host the request used.
"""

from __future__ import annotations

import fnmatch
import json
import re
import secrets
import socket
from typing import Any, Iterable, Mapping
from urllib.parse import urlsplit

from edgespec.errors import InputError

LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "[::1]"})
_ORIGIN = re.compile(r"^[a-z][a-z0-9+.\-]*://[^/\s?#]+$")
_DEFAULT_PORTS = {"http": 80, "https": 443}
PREFLIGHT_MAX_AGE = 600


def check_origins(values: Iterable[str]) -> tuple[str, ...]:
    """The allowed-origin values, normalised (lower case, no trailing slash); an
    ``InputError`` naming a value that is not ``*``, ``null`` or ``scheme://host[:port]``."""
    out = []
    for raw in values:
        value = raw.strip().lower().rstrip("/")
        if not value:
            continue
        if value not in ("*", "null") and not _ORIGIN.match(value):
            raise InputError(
                f"--allow-origin {raw!r}: an origin is scheme://host[:port] (like "
                "http://localhost:3000 or https://*.example.com), 'null' or '*'"
            )
        out.append(value)
    return tuple(out)


def given_keys(headers: Mapping[str, str]) -> list[str]:
    """The API keys a request presents (``headers``: lower-case names): the bearer token
    of ``Authorization`` and the value of ``X-Api-Key``, those that are there."""
    keys = []
    scheme, _, token = headers.get("authorization", "").strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        keys.append(token.strip())
    if headers.get("x-api-key", "").strip():
        keys.append(headers["x-api-key"].strip())
    return keys


def key_ok(headers: Mapping[str, str], api_key: str | None) -> bool:
    """Whether the request may use a server whose key is ``api_key`` (None: no key, anyone
    may): one of the keys it presents is that key (compared in constant time)."""
    if api_key is None:
        return True
    want = api_key.encode()
    return any(secrets.compare_digest(k.encode(), want) for k in given_keys(headers))


def local_name(name: str, hostname: str | None = None) -> bool:
    """A name no one can register on the internet, so no page can rebind it (Ollama's
    rule): ``*.localhost``, ``*.local`` (mDNS), ``*.internal`` (``host.docker.internal``)
    and this machine's own host name (``hostname``, default: asked now)."""
    own = (hostname if hostname is not None else socket.gethostname()).lower()
    return name.endswith((".localhost", ".local", ".internal")) or (bool(name) and name == own)


def split_host(host: str) -> tuple[str, int | None]:
    """``Host`` header -> (name in lower case, IPv6 in brackets; port, None if absent,
    -1 if it is not a number)."""
    host = host.strip().lower()
    if host.startswith("["):
        name, _, rest = host.partition("]")
        name += "]"
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, sep, port = host.rpartition(":")
        if not sep or ":" in name:  # no port, or a bare IPv6 address
            name, port = host, ""
    if not port:
        return name, None
    return name, int(port) if port.isdecimal() and port.isascii() else -1  # -1: not a port


def _origin_parts(origin: str) -> tuple[str, str, int | None]:
    parts = urlsplit(origin)
    name, port = split_host(parts.netloc)
    return parts.scheme, name, port if port is not None else _DEFAULT_PORTS.get(parts.scheme)


class Guard:
    """ASGI middleware applying the Host and Origin checks and answering CORS."""

    def __init__(self, app: Any, *, origins: Iterable[str] = ()) -> None:
        self.app = app
        self.origins = check_origins(origins)
        self.any_origin = "*" in self.origins
        self.hostname = socket.gethostname().lower()
        # the host names of explicitly allowed origins (a proxy's public name) are this server's too
        self.extra_names = {_origin_parts(o)[1] for o in self.origins if "*" not in o and o != "null"}

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
        host = headers.get("host", "")
        if not self.host_ok(host, scope.get("server")):
            await _refuse(
                send,
                f"host {host or '(none)'!r} is not this server's address: use "
                "http://127.0.0.1 or http://localhost with the server's port "
                "(a proxy's name: --allow-origin with its origin)",
                "host_not_allowed",
            )
            return
        origin = headers.get("origin")
        if origin is not None and not self.origin_ok(origin, host):
            await _refuse(
                send,
                f"origin {origin!r} is not allowed: pages from other sites may not use "
                f"this server; start it with --allow-origin {origin} to allow it",
                "origin_not_allowed",
            )
            return
        if origin is None:
            await self.app(scope, receive, send)
            return
        allow = "*" if self.any_origin else origin
        if scope["method"] == "OPTIONS" and "access-control-request-method" in headers:
            cors = [
                ("access-control-allow-origin", allow),
                ("vary", "Origin"),
                ("access-control-allow-methods", "GET, POST, OPTIONS"),
                (
                    "access-control-allow-headers",
                    headers.get("access-control-request-headers") or "Authorization, X-Api-Key, Content-Type",
                ),
                ("access-control-max-age", str(PREFLIGHT_MAX_AGE)),
            ]
            if headers.get("access-control-request-private-network") == "true":
                cors.append(("access-control-allow-private-network", "true"))
            await send(
                {
                    "type": "http.response.start",
                    "status": 204,
                    "headers": [(k.encode(), v.encode("latin-1")) for k, v in cors],
                }
            )
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_cors(message: dict) -> None:
            if message["type"] == "http.response.start":
                extra = [
                    (b"access-control-allow-origin", allow.encode("latin-1")),
                    (b"vary", b"Origin"),
                    (b"access-control-expose-headers", b"Retry-After"),
                ]
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, send_cors)

    def host_ok(self, host: str, server: tuple | None) -> bool:
        """Whether ``host`` (the Host header) names this server, reached at ``server``
        ((host, port) as uvicorn reports the connection's local address; None: unknown)."""
        if not host:
            return False
        name, port = split_host(host)
        if name in self.extra_names:
            return True
        bound_name, bound_port = (str(server[0]).lower(), server[1]) if server else (None, None)
        if bound_name is not None and ":" in bound_name and not bound_name.startswith("["):
            bound_name = f"[{bound_name}]"  # a bare IPv6 address, as a Host header writes it
        if bound_port is not None and (port if port is not None else 80) != bound_port:
            return False
        return name in LOOPBACK_HOSTS or name == bound_name or local_name(name, self.hostname)

    def origin_ok(self, origin: str, host: str) -> bool:
        """Whether a page from ``origin`` may use the server reached as ``host``."""
        o = origin.strip().lower().rstrip("/")
        if self.any_origin or o in self.origins:
            return True
        if any(fnmatch.fnmatchcase(o, pattern) for pattern in self.origins if "*" in pattern):
            return True
        if o == "null":
            return False
        scheme, name, port = _origin_parts(o)
        if scheme not in ("http", "https"):
            return False
        own_name, own_port = split_host(host)
        if name == own_name and port == (own_port if own_port is not None else _DEFAULT_PORTS[scheme]):
            return True  # the server's own page
        return name in LOOPBACK_HOSTS or name.endswith(".localhost")  # loopback pages, any port


async def _refuse(send: Any, message: str, code: str) -> None:
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": None, "code": code}}
    ).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 403,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
