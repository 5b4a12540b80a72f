"""RPC endpoints before llama.cpp sees them: ``--rpc`` parsed, resolved the way llama.cpp
resolves it, and each server checked with the first message of the wire protocol.

Why the checks come first: llama.cpp treats an unreachable server, a protocol mismatch
or a connection that drops as fatal (``GGML_ABORT`` -> ``abort()``), and its sockets have
no timeout, so a server that never answers hangs it forever. Here every connection has a
timeout and every failure names the endpoint:

    request : cmd u8 = 14 (RPC_CMD_HELLO) | size u64 = 24 | 24 bytes of transport caps (0)
    response: size u64 = 28 | major u8 | minor u8 | patch u8 | pad u8 | 24 bytes of caps

(ggml/src/ggml-rpc/ggml-rpc.cpp and ggml-rpc.h of the pinned llama-cpp-python 0.3.36:
protocol 7.0.0; zero caps ask for plain TCP). Our hello ends with ``\\r\\n\\r\\n``: an
RPC server has read its 33 bytes and answered before it reads those (it takes them for
the start of a next command and drops the connection when we close it), while an HTTP
or other line-based server, which would wait for the end of a line, answers at once
with something that is not the RPC protocol.

An RPC server serves one client at a time: a server busy with another client accepts
the connection but does not answer. So two endpoints that reach the same server
(``localhost:50121,127.0.0.1:50121``) would leave llama.cpp waiting forever for the
second's answer. ``check_servers`` refuses them: first by address (llama.cpp connects to
the first IPv4 address of the name, as ``gethostbyname`` gives it), then by holding
each server's connection open while the next is asked, which catches the spellings an
address does not (a LAN address and 127.0.0.1 of the same machine).
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import time
from dataclasses import dataclass
from typing import Sequence

from ..errors import InputError, RpcError

RPC_PROTO_MAJOR = 7  # ggml-rpc.h: RPC_PROTO_MAJOR_VERSION of the pinned llama.cpp
RPC_PROTO_MINOR = 0
DEFAULT_PORT = 50052
MAX_SERVERS = 16  # GGML_RPC_MAX_SERVERS
_RPC_CMD_HELLO = 14
_CONN_CAPS_SIZE = 24
_HELLO = struct.pack("<BQ", _RPC_CMD_HELLO, _CONN_CAPS_SIZE) + bytes(_CONN_CAPS_SIZE) + b"\r\n\r\n"
_REPLY_SIZE = 4 + _CONN_CAPS_SIZE
_EXAMPLE = f"for example 192.168.1.20:{DEFAULT_PORT}"
_RELEASE_WAIT = 1.0  # seconds a server gets to answer once a held connection to it is closed


@dataclass(frozen=True)
class Endpoint:
    """One RPC server, as llama.cpp names it: ``host:port``."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def _is_ipv6(text: str) -> bool:
    try:
        return ipaddress.ip_address(text.strip("[]")).version == 6
    except ValueError:
        return False


def _parse_one(part: str) -> Endpoint:
    colons = part.count(":")
    if part.startswith("[") or (colons > 1 and (_is_ipv6(part) or _is_ipv6(part.rpartition(":")[0]))):
        raise InputError(
            f"--rpc: {part!r} is an IPv6 address; llama.cpp's RPC client takes IPv4 addresses "
            f"or host names ({_EXAMPLE})"
        )
    if colons > 1:
        raise InputError(
            f"--rpc: {part!r} has {colons} colons where HOST:PORT has one ({_EXAMPLE}; "
            "an IPv6 address would need [brackets], and llama.cpp's RPC client takes none)"
        )
    host, sep, port = part.partition(":")
    if not sep or not host or not port:
        raise InputError(f"--rpc: {part!r} is not HOST:PORT ({_EXAMPLE})")
    # str.isdigit alone accepts "²" and other digits int() refuses
    if not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise InputError(f"--rpc: {part!r}: the port must be a number from 1 to 65535 ({_EXAMPLE})")
    return Endpoint(host, int(port))


def parse_endpoints(text: str) -> tuple[Endpoint, ...]:
    """``HOST:PORT[,HOST:PORT...]`` -> endpoints, in order (the order of the layers)."""
    out: list[Endpoint] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        ep = _parse_one(part)
        if ep in out:
            raise InputError(f"--rpc: {ep} is listed twice")
        out.append(ep)
    if not out:
        raise InputError("--rpc: no endpoint given (HOST:PORT[,HOST:PORT...])")
    if len(out) > MAX_SERVERS:
        raise InputError(f"--rpc: llama.cpp takes at most {MAX_SERVERS} RPC servers ({len(out)} given)")
    return tuple(out)


def endpoints(rpc: str | Sequence[str | Endpoint] | None) -> tuple[Endpoint, ...]:
    """Endpoints from text, a list of texts or ``Endpoint``s; ``()`` for None or empty."""
    if not rpc:
        return ()
    if isinstance(rpc, str):
        return parse_endpoints(rpc)
    return parse_endpoints(",".join(str(e) for e in rpc))


def _address(ep: Endpoint) -> tuple[str, int]:
    return socket.getaddrinfo(ep.host, ep.port, socket.AF_INET, socket.SOCK_STREAM)[0][4][0], ep.port


def resolve(ep: Endpoint) -> tuple[str, int]:
    """The address llama.cpp connects to for ``ep``: the first IPv4 address of its host
    (llama.cpp asks ``gethostbyname``; IPv4 only)."""
    try:
        return _address(ep)
    except (socket.gaierror, UnicodeError) as e:
        raise RpcError(f"RPC server {ep}: cannot resolve {ep.host!r} ({getattr(e, 'strerror', None) or e})") from None


# -- the hello -------------------------------------------------------------------------


def _open(ep: Endpoint, timeout: float) -> socket.socket | tuple[str, str]:
    """A connection to ``ep`` with the hello sent, or (found, detail) when there is none."""
    try:
        sock = socket.create_connection(_address(ep), timeout=timeout)
    except (socket.gaierror, UnicodeError) as e:
        return "unreachable", f"cannot resolve {ep.host!r}: {getattr(e, 'strerror', None) or e}"
    except ConnectionRefusedError:
        return "refused", ""
    except OSError as e:
        return "unreachable", str(e.strerror or e) if not isinstance(e, TimeoutError) else "timed out"
    try:
        sock.sendall(_HELLO)
    except OSError as e:
        sock.close()
        return "closed", str(e.strerror or e)
    return sock


def _shown(data: bytes) -> str:
    """The start of a foreign answer, as a user can read it."""
    line = data.decode("latin-1").strip().splitlines()[0] if data.strip() else ""
    line = "".join(c if c.isprintable() else "?" for c in line)
    return line[:40] + ("…" if len(line) > 40 else "")


def _answer(sock: socket.socket, wait: float) -> tuple[str, str]:
    """Read the hello's answer for at most ``wait`` seconds: see ``_hello``."""
    deadline = time.monotonic() + wait
    data = b""
    try:
        while len(data) < 8 + 3:  # size, then major, minor, patch
            sock.settimeout(max(deadline - time.monotonic(), 0.001))
            chunk = sock.recv(8 + _REPLY_SIZE - len(data))
            if not chunk:
                return ("foreign", _shown(data)) if 0 < len(data) < 8 else ("closed", "connection closed")
            data += chunk
            if len(data) >= 8 and struct.unpack("<Q", data[:8])[0] != _REPLY_SIZE:
                sock.settimeout(0.2)  # the rest of its first line, to show
                try:
                    data += sock.recv(64)
                except OSError:
                    pass
                return "foreign", _shown(data)
    except (socket.timeout, TimeoutError):
        return ("foreign", _shown(data)) if data else ("silent", "")
    except OSError as e:
        return ("foreign", _shown(data)) if data else ("closed", str(e.strerror or e))
    major, minor, patch = data[8:11]
    version = f"{major}.{minor}.{patch}"
    return ("ok" if major == RPC_PROTO_MAJOR and minor <= RPC_PROTO_MINOR else "version"), version


def _hello(ep: Endpoint, timeout: float) -> tuple[str, str]:
    """(what was found, detail): "ok" (detail: the version), "refused", "unreachable",
    "silent" (connected, no answer), "closed" (hung up at the hello), "foreign" (answered
    something else; detail: the start of it) or "version" (another protocol version)."""
    sock = _open(ep, timeout)
    if isinstance(sock, tuple):
        return sock
    with sock:
        return _answer(sock, timeout)


def _failure(ep: Endpoint, found: str, detail: str, timeout: float) -> RpcError:
    return RpcError(
        {
            "refused": f"RPC server {ep}: nothing listens there (connection refused); start one on that machine "
            f"with `edgespec rpc-server --host ADDRESS --port {ep.port}`",
            "unreachable": f"RPC server {ep}: cannot connect ({detail}; machine down, wrong address, or a firewall)",
            "silent": f"{ep} accepted the connection but did not answer the RPC hello within {timeout:g} s: it is not "
            "an RPC server, or another client is using it (an RPC server serves one client at a time)",
            "closed": f"{ep} hung up at the RPC hello ({detail}): not a llama.cpp RPC server, or one of another "
            f"protocol than {RPC_PROTO_MAJOR}.x",
            "foreign": f"{ep} is not a llama.cpp RPC server: it answered {detail!r}"
            + (" (an HTTP server)" if detail.startswith(("HTTP/", "<!DOCTYPE", "<html")) else ""),
            "version": f"RPC server {ep} speaks protocol {detail}; this llama.cpp speaks {RPC_PROTO_MAJOR}."
            f"{RPC_PROTO_MINOR}: run the same llama.cpp version on both ends",
        }[found]
    )


def probe(ep: Endpoint, timeout: float = 5.0) -> str:
    """Connect to ``ep`` and run the RPC HELLO; the server's protocol version, or an
    ``RpcError`` that names the endpoint and says what it found there."""
    found, detail = _hello(ep, timeout)
    if found != "ok":
        raise _failure(ep, found, detail, timeout)
    return detail


def check_distinct(eps: Sequence[Endpoint]) -> None:
    """Refuse two endpoints that resolve to one address (an ``InputError`` naming both)."""
    seen: dict[tuple[str, int], Endpoint] = {}
    for ep in eps:
        addr = resolve(ep)
        if addr in seen:
            raise InputError(
                f"--rpc: {seen[addr]} and {ep} are the same server ({addr[0]}:{addr[1]}); name each server once "
                "(a server serves one client at a time, so llama.cpp would wait forever for the second)"
            )
        seen[addr] = ep


def check_servers(eps: Sequence[Endpoint], timeout: float = 5.0) -> list[str]:
    """Check that the endpoints are distinct RPC servers of this protocol; their versions.

    Each server is asked while the connections to the ones before it stay open: one that
    an earlier endpoint reached too is then busy with us and stays silent. When one is
    silent, the held connections are closed one at a time, latest first; the server that
    answers as soon as one of them closes is the same as that endpoint.
    """
    check_distinct(eps)
    held: list[tuple[Endpoint, socket.socket]] = []
    versions = []
    try:
        for ep in eps:
            start = time.monotonic()
            sock = _open(ep, timeout)
            if isinstance(sock, tuple):
                raise _failure(ep, *sock, timeout)
            held.append((ep, sock))
            # long enough for an answer over this link: a few round trips (connect took one)
            wait = max(_RELEASE_WAIT, 4 * (time.monotonic() - start))
            found, detail = _answer(sock, min(timeout, wait) if len(held) > 1 else timeout)
            while found == "silent" and len(held) > 1:
                prev, prev_sock = held.pop(-2)
                prev_sock.close()
                found, detail = _answer(sock, wait)
                if found == "ok":
                    raise InputError(
                        f"--rpc: {prev} and {ep} are the same server ({ep} answered only once {prev} let go); "
                        "name each server once (a server serves one client at a time, so llama.cpp would "
                        "wait forever for the second)"
                    )
            if found == "silent":
                found, detail = _answer(sock, max(timeout - (time.monotonic() - start), 0.001))
            if found != "ok":
                raise _failure(ep, found, detail, timeout)
            versions.append(detail)
    finally:
        for _, sock in held:
            sock.close()
    return versions
