"""Where ``serve`` listens: one or more addresses on one port, a socket for each.

``--host`` takes one address or several, comma-separated (``127.0.0.1,::1``: IPv4 and
IPv6 loopback), as llama-server does. uvicorn binds one host per server, but
``uvicorn.Server.run(sockets=...)`` serves any number of sockets bound beforehand:
``bind`` makes them, all on the same port (with port 0, the port the first one got).
An IPv6 socket is IPv6-only, so that ``0.0.0.0,::`` binds both families instead of the
second failing on the first's port.

Each connection's ``scope["server"]`` is the local address of the socket it reached,
so the Host check (``guard``) holds per address: ``[::1]:PORT`` on the IPv6 socket.
"""

from __future__ import annotations

import ipaddress
import socket

from edgespec.errors import EdgespecError, InputError


class ListenError(EdgespecError):
    """An address to listen on cannot be bound (taken, not this machine's, ...); exit 1."""


def parse_hosts(value: str) -> list[str]:
    """``--host``'s value -> the addresses, brackets of IPv6 ones removed, in order and
    each once; an ``InputError`` for an empty entry."""
    hosts: list[str] = []
    for raw in value.split(","):
        host = raw.strip()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        if not host:
            raise InputError(
                f"--host {value!r}: an empty address (give one, or several separated by commas, like 127.0.0.1,::1)"
            )
        if host not in hosts:
            hosts.append(host)
    return hosts


def url_host(host: str) -> str:
    """``host`` as a URL writes it: an IPv6 address in brackets."""
    try:
        return f"[{host}]" if ipaddress.ip_address(host).version == 6 else host
    except ValueError:
        return host


def bind(hosts: list[str], port: int) -> list[socket.socket]:
    """One listening-ready socket per host, all on ``port`` (0: the first one's free
    port for all); a ``ListenError`` naming the address that failed (none left open)."""
    sockets: list[socket.socket] = []
    host = hosts[0] if hosts else ""
    try:
        for host in hosts:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET  # uvicorn's rule
            addr = socket.getaddrinfo(host, port, family, socket.SOCK_STREAM, 0, socket.AI_PASSIVE)[0][4]
            sock = socket.socket(family, socket.SOCK_STREAM)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(addr)
            if port == 0:
                port = sock.getsockname()[1]
    except OSError as e:
        for s in sockets:
            s.close()
        why = e.strerror or str(e)
        raise ListenError(f"cannot listen on {url_host(host)}:{port}: {why}") from None
    return sockets
