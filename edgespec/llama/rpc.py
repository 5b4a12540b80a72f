"""llama.cpp's RPC backend (``ggml-rpc``): model layers on other machines.

It knows registering servers as devices, which devices a model gets, running an RPC
server in this process, and what to do when llama.cpp aborts because a server went
away or stops answering. The endpoints and the checks made before llama.cpp sees one
(parsing, resolving, the HELLO handshake with a timeout, two endpoints that are one
server) are in ``rpc_endpoints``, re-exported here. It knows nothing of speculation: a
model whose layers sit on RPC devices decodes through ``Context`` like any other.

A server lost mid-generation cannot be turned into a Python exception: the abort
happens on llama.cpp's dispatcher thread, with the main thread inside ``llama_decode``,
and the process state is not recoverable. ``on_server_lost`` installs ggml's abort
callback instead: it finds which endpoint is gone (a fresh connection is refused, where
a live server that is still serving us does not answer) and hands an ``RpcServerLost``
to the caller's handler, which reports it and ends the process; ``abort()`` follows if
the handler returns. Results written before that point (a JSONL batch flushes each
line) are kept. llama.cpp's sockets have no timeout, so a server that freezes without
closing its connection would hang the decode forever, and one that another client took
after our check would hang llama.cpp's own handshake; ``watch`` (the watchdog) hands the
same handler an ``RpcServerLost`` when a decode over RPC takes far longer than any
before it, or llama.cpp's handshake or a model load gets no answer or progress for as
long (``EDGESPEC_RPC_TIMEOUT``, 120 s by default).

Device choice: with ``llama_model_params.devices`` NULL llama.cpp puts a model on every
registered device, RPC ones included, so once a server is registered every model that
is not meant for it (the drafter) gets an explicit NULL-terminated list of local ones.
"""

from __future__ import annotations

import ctypes
import os
import threading
import time
from typing import Callable, Sequence

from ..errors import InputError, RpcError, RpcServerLost
from .backend import _ensure_backend, _ggml_library, _llama
from .rpc_endpoints import (  # noqa: F401 - re-exported: the endpoints are part of this module's API
    DEFAULT_PORT,
    RPC_PROTO_MAJOR,
    RPC_PROTO_MINOR,
    Endpoint,
    _hello,
    check_distinct,
    check_servers,
    parse_endpoints,
    probe,
    resolve,
)

_DEV_TYPE_CPU, _DEV_TYPE_GPU, _DEV_TYPE_IGPU = 0, 1, 2


def require_rpc() -> None:
    """Raise the ``RpcError`` that says how to rebuild, if this build has no RPC backend."""
    _proc(b"ggml_backend_rpc_start_server")


# -- the registry ---------------------------------------------------------------------

_lib_ready = False
_registered: dict[Endpoint, tuple[int, ...]] = {}  # endpoint -> its device handles
_reg_lock = threading.Lock()


def _ggml() -> ctypes.CDLL:
    global _lib_ready
    lib = _ggml_library()
    if not _lib_ready:
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        for name, res, args in (
            ("ggml_backend_reg_by_name", vp, [ctypes.c_char_p]),
            ("ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p]),
            ("ggml_backend_register", None, [vp]),
            ("ggml_backend_reg_dev_count", sz, [vp]),
            ("ggml_backend_reg_dev_get", vp, [vp, sz]),
            ("ggml_backend_dev_count", sz, []),
            ("ggml_backend_dev_get", vp, [sz]),
            ("ggml_backend_dev_type", ctypes.c_int, [vp]),
            ("ggml_backend_dev_backend_reg", vp, [vp]),
            ("ggml_backend_dev_name", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_description", ctypes.c_char_p, [vp]),
            ("ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]),
        ):
            fn = getattr(lib, name)
            fn.restype, fn.argtypes = res, args
        _lib_ready = True
    return lib


def _rpc_reg() -> int | None:
    _ensure_backend()
    return _ggml().ggml_backend_reg_by_name(b"RPC") or None


def rpc_available() -> bool:
    """Whether this llama.cpp build has the RPC backend (``-DGGML_RPC=on``)."""
    return _rpc_reg() is not None


def _proc(name: bytes) -> int:
    reg = _rpc_reg()
    if reg is None:
        raise RpcError(
            "this llama.cpp build has no RPC backend; reinstall llama-cpp-python with it: "
            'CMAKE_ARGS="-DGGML_RPC=on" pip install --no-cache-dir --force-reinstall --no-deps '
            "llama-cpp-python==0.3.36"
        )
    fn = _ggml().ggml_backend_reg_get_proc_address(reg, name)
    if not fn:
        raise RpcError(f"this llama.cpp's RPC backend has no {name.decode()}")
    return fn


def register(endpoints: Sequence[Endpoint], *, timeout: float = 5.0) -> list[int]:
    """Check the endpoints (distinct servers, each answering the HELLO in time), then
    register them with llama.cpp; the device handles of all of them, in order. An
    endpoint registered before is not asked again."""
    lib = _ggml()
    add = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(_proc(b"ggml_backend_rpc_add_server"))
    with _reg_lock:
        check_distinct(endpoints)
        check_servers([ep for ep in endpoints if ep not in _registered], timeout)
        for ep in endpoints:
            if ep in _registered:
                continue
            with watch((ep,), during="while connecting to it", learn=False):  # llama.cpp's own hello
                reg = add(str(ep).encode())
            n = lib.ggml_backend_reg_dev_count(reg) if reg else 0
            if not n:
                raise RpcError(f"RPC server {ep} offers no device")
            lib.ggml_backend_register(reg)
            _registered[ep] = tuple(lib.ggml_backend_reg_dev_get(reg, i) for i in range(n))
        return [d for ep in endpoints for d in _registered[ep]]


def registered() -> tuple[Endpoint, ...]:
    """The endpoints registered in this process so far."""
    return tuple(_registered)


def device_array(devices: Sequence[int]) -> ctypes.Array:
    """A NULL-terminated ``ggml_backend_dev_t`` array for ``llama_model_params.devices``."""
    return (ctypes.c_void_p * (len(devices) + 1))(*devices, None)


def local_devices() -> list[int]:
    """This machine's GPUs (none on a CPU-only build): the devices for a model that must
    not go over the network. The CPU is not listed: llama.cpp always has it."""
    lib = _ggml()
    rpc = _rpc_reg()
    out = []
    for i in range(lib.ggml_backend_dev_count()):
        dev = lib.ggml_backend_dev_get(i)
        if (
            lib.ggml_backend_dev_type(dev) in (_DEV_TYPE_GPU, _DEV_TYPE_IGPU)
            and lib.ggml_backend_dev_backend_reg(dev) != rpc
        ):
            out.append(dev)
    return out


def tensor_split_array(split: Sequence[float]) -> ctypes.Array:
    """``llama_model_params.tensor_split``: one share per device, llama_max_devices() long."""
    n = int(_llama.llama_max_devices())
    if len(split) > n:
        raise InputError(f"--tensor-split: at most {n} shares")
    return (ctypes.c_float * n)(*split)


def device_memory(dev: int) -> tuple[int, int]:
    """(free, total) bytes a device reports (for an RPC device: asked over the network)."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _ggml().ggml_backend_dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
    return free.value, total.value


# -- a server lost mid-generation ------------------------------------------------------

_ABORT_CALLBACK = ctypes.CFUNCTYPE(None, ctypes.c_char_p)
_installed: list = []  # keeps the ctypes callback alive
_handler: list[Callable[[RpcServerLost], None]] = []


def lost_endpoint(endpoints: Sequence[Endpoint], timeout: float = 1.0) -> tuple[Endpoint | None, str]:
    """Which endpoint is gone, and how we know. A live server still serving us accepts a
    second connection and stays silent (it serves one client at a time); a lost one
    refuses it, hangs up, or cannot be reached."""
    for ep in endpoints:
        found, detail = _hello(ep, timeout)
        if found == "refused":
            return ep, "it no longer accepts connections: it stopped or crashed"
        if found == "closed":
            return ep, "it hangs up on a new connection: it stopped, or what relays to it did"
        if found == "unreachable":
            return ep, f"it cannot be reached: {detail}"
    return None, "every server still answers"


_reported = threading.Lock()


def _report(err: RpcServerLost) -> None:
    """Hand ``err`` to the handler, once per process (the abort callback and the watchdog
    may both see the same loss); a second caller waits for the first to end the process."""
    with _reported:
        if _handler:
            _handler[0](err)


def _on_abort(message: bytes) -> None:
    text = (message or b"").decode("utf-8", errors="replace").strip()
    try:
        if _handler and _registered and ("RPC" in text or any(str(ep) in text for ep in _registered)):
            ep, how = lost_endpoint(tuple(_registered))
            where = (
                f"lost the RPC server {ep} mid-generation ({how})"
                if ep
                else f"an RPC server failed mid-generation ({how}; one of {', '.join(map(str, _registered))})"
            )
            _report(RpcServerLost(f"{where}; llama.cpp cannot go on without it", endpoint=str(ep or "")))
        else:
            os.write(2, text.encode() + b"\n")  # what ggml prints when no callback is set
    except BaseException:  # noqa: BLE001 - never raise into C; abort() follows
        pass


def on_server_lost(handler: Callable[[RpcServerLost], None]) -> None:
    """Call ``handler`` (once, from llama.cpp's failing thread) when llama.cpp is about to
    abort because an RPC server went away. The handler should report the error and end
    the process (``os._exit``); if it returns, ``abort()`` follows. ggml's other aborts
    keep their message."""
    _handler[:] = [handler]
    if not _installed:
        lib = _ggml()
        fn = lib.ggml_set_abort_callback
        fn.restype, fn.argtypes = ctypes.c_void_p, [_ABORT_CALLBACK]
        cb = _ABORT_CALLBACK(_on_abort)
        fn(cb)
        _installed.append(cb)


# -- a server that stops answering ------------------------------------------------------

WATCHDOG_ENV = "EDGESPEC_RPC_TIMEOUT"
WATCHDOG_FLOOR_S = 120.0  # the shortest silence taken for a frozen server (the first decodes too)
WATCHDOG_FACTOR = 20.0  # ... or this many times the longest decode over RPC so far


def _floor_s() -> float:
    try:
        return float(os.environ.get(WATCHDOG_ENV, WATCHDOG_FLOOR_S))
    except ValueError:
        return WATCHDOG_FLOOR_S


class _Watchdog:
    """One thread per process that ends a call into llama.cpp stuck on RPC servers far
    longer than it should be. llama.cpp's sockets have no timeout, so a server that
    freezes (or a link that goes silent without closing), or a handshake that a busy
    server never answers, would otherwise hang the process forever; the call cannot be
    interrupted, so the watchdog hands ``on_server_lost``'s handler (which reports and
    ends the process) an ``RpcServerLost`` naming the endpoint. Without a handler
    (library use) it does nothing. ``EDGESPEC_RPC_TIMEOUT`` (seconds) sets the floor; 0
    turns it off. Decodes set the limit too: 20 times the longest one so far."""

    def __init__(self) -> None:
        self._since: float | None = None
        self._endpoints: tuple[Endpoint, ...] = ()
        self._during = ""
        self._learn = True
        self._longest = 0.0
        self._thread: threading.Thread | None = None

    def limit(self) -> float:
        return max(_floor_s(), WATCHDOG_FACTOR * self._longest)

    def arm(self, eps: tuple[Endpoint, ...], during: str = "mid-generation", learn: bool = True) -> None:
        self._endpoints, self._during, self._learn = eps, during, learn
        self._since = time.monotonic()
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="edgespec-rpc-watchdog", daemon=True)
            self._thread.start()

    def touch(self) -> None:
        """Progress (a model load's callback): the silence starts again."""
        if self._since is not None:
            self._since = time.monotonic()

    def disarm(self) -> None:
        if self._since is not None and self._learn:
            self._longest = max(self._longest, time.monotonic() - self._since)
        self._since = None

    def _run(self) -> None:
        while True:
            time.sleep(0.25)
            since, limit = self._since, self.limit()
            if since is None or not _handler or _floor_s() <= 0 or time.monotonic() - since < limit:
                continue
            eps, during = self._endpoints, self._during
            ep, how = lost_endpoint(eps)
            if ep is None:
                how = (
                    f"no answer for {round(limit, 1):g} s: frozen, busy with another client, or its link went "
                    "silent without closing"
                )
                ep = eps[0] if len(eps) == 1 else None
            where = (
                f"lost the RPC server {ep} {during} ({how})"
                if ep
                else f"an RPC server stopped answering {during} ({how}; one of {', '.join(map(str, eps))})"
            )
            _report(
                RpcServerLost(
                    f"{where}; llama.cpp cannot go on without it (if the server is only slow, "
                    f"set {WATCHDOG_ENV} to more seconds)",
                    endpoint=str(ep or ""),
                )
            )
            return


_watchdog = _Watchdog()


class watch:
    """``with watch(endpoints):`` around a llama.cpp call that waits on those RPC servers.
    ``during`` says what it is, for the error; ``learn=False`` keeps a call that is long
    by nature (a model load) out of the decode limit."""

    __slots__ = ("endpoints", "during", "learn")

    def __init__(self, endpoints: tuple[Endpoint, ...], during: str = "mid-generation", learn: bool = True) -> None:
        self.endpoints, self.during, self.learn = endpoints, during, learn

    def __enter__(self) -> None:
        _watchdog.arm(self.endpoints, self.during, self.learn)

    def __exit__(self, *exc: object) -> None:
        _watchdog.disarm()


def load_progress() -> object:
    """A ``llama_model_params.progress_callback`` for a load under ``watch``: each tensor
    loaded restarts the silence (keep the object alive for the whole load)."""

    def progress(_fraction: float, _data: object) -> bool:
        _watchdog.touch()
        return True

    return _llama.llama_progress_callback(progress)


# -- running a server ----------------------------------------------------------------------


def server_devices() -> list[int]:
    """What an RPC server offers, as llama.cpp's rpc-server picks it: the local GPUs, or
    else the CPU."""
    lib = _ggml()
    _ensure_backend()
    devs = local_devices()
    if not devs:
        for i in range(lib.ggml_backend_dev_count()):
            dev = lib.ggml_backend_dev_get(i)
            if lib.ggml_backend_dev_type(dev) == _DEV_TYPE_CPU:
                devs.append(dev)
                break
    return devs


def describe_device(dev: int) -> str:
    lib = _ggml()
    free, total = device_memory(dev)
    name = (lib.ggml_backend_dev_name(dev) or b"?").decode()
    desc = (lib.ggml_backend_dev_description(dev) or b"").decode()
    return f"{name} ({desc}): {total / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free"


def serve(host: str, port: int, n_threads: int) -> None:
    """Run llama.cpp's RPC server on ``host:port`` (blocks; returns only if it fails)."""
    devs = server_devices()
    start = ctypes.CFUNCTYPE(None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.c_void_p)(
        _proc(b"ggml_backend_rpc_start_server")
    )
    arr = device_array(devs)
    start(f"{host}:{port}".encode(), None, n_threads, len(devs), ctypes.cast(arr, ctypes.c_void_p))
    raise RpcError(f"the RPC server on {host}:{port} stopped (llama.cpp printed why above)")
