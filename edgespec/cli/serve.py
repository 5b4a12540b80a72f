"""``edgespec serve``: the OpenAI-compatible server (``edgespec.server``) on one model pair.

Thin: the same profile, model and sampling options as ``chat`` build one engine (the
sampling values become the defaults for requests that do not give their own), then
uvicorn serves ``edgespec.server.create_app(engine)`` until Ctrl-C or SIGTERM. uvicorn
stops accepting, gives running requests a few seconds, then cancels them (which stops
their generations); the engine is closed on the way out.

It binds 127.0.0.1 unless told otherwise (``--host`` takes several addresses, comma-separated:
``edgespec.server.listen`` binds a socket for each and uvicorn serves them all), and warns
when it listens beyond this machine without ``--api-key``. Web pages from other origins may not use it unless
``--allow-origin`` / ``EDGESPEC_ORIGINS`` allows them (``edgespec.server.guard``).
"""

from __future__ import annotations

import ipaddress
import os
import signal
from typing import Annotated, Optional

import typer
from rich.text import Text

from edgespec.cli.common import (
    MinPOpt,
    SeedOpt,
    TemperatureOpt,
    TopKOpt,
    TopPOpt,
    cli_errors,
    err_console,
    load_engine,
    store_name,
)
from edgespec.cli.memory_options import MemoryOpt
from edgespec.cli.plan_options import (
    DraftOpt,
    ExactOpt,
    KOpt,
    NCtxOpt,
    OptimizedOpt,
    PlanOptions,
    ProfileOpt,
    RpcOpt,
    TargetOpt,
    TensorSplitOpt,
    ThreadsOpt,
    make_plan,
)

GRACEFUL_SHUTDOWN_S = 3


def is_loopback(host: str) -> bool:
    """Whether ``host`` is reachable from this machine only."""
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to anything


def allowed_origins(given: list[str] | None) -> list[str]:
    """``--allow-origin`` values and ``EDGESPEC_ORIGINS`` (comma- or space-separated)."""
    from_env = os.environ.get("EDGESPEC_ORIGINS", "").replace(",", " ").split()
    return [*(given or []), *from_env]


def serve(
    profile: ProfileOpt = "auto",
    target: TargetOpt = None,
    draft: DraftOpt = None,
    k: KOpt = None,
    temperature: TemperatureOpt = 0.7,
    top_k: TopKOpt = 0,
    top_p: TopPOpt = 1.0,
    min_p: MinPOpt = 0.0,
    seed: SeedOpt = None,
    max_tokens: Annotated[
        int, typer.Option("--max-tokens", "-n", min=1, help="Reply length for requests that do not set max_tokens.")
    ] = 1024,
    n_ctx: NCtxOpt = None,
    threads: ThreadsOpt = None,
    rpc: RpcOpt = None,
    tensor_split: TensorSplitOpt = None,
    exact: ExactOpt = False,
    optimized: OptimizedOpt = True,
    host: Annotated[
        str,
        typer.Option(
            "--host",
            help="Address to listen on (127.0.0.1 = this machine only); several, comma-separated: 127.0.0.1,::1.",
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="TCP port.")] = 8080,
    api_key: Annotated[
        Optional[str],
        typer.Option(
            "--api-key",
            envvar="EDGESPEC_API_KEY",
            help="Require 'Authorization: Bearer KEY' on /v1 requests (or set EDGESPEC_API_KEY).",
        ),
    ] = None,
    max_queue: Annotated[
        int, typer.Option("--max-queue", min=1, help="Requests that may wait for the model; more get 503.")
    ] = 32,
    allow_origin: Annotated[
        Optional[list[str]],
        typer.Option(
            "--allow-origin",
            help="A web origin whose pages may use this server (repeatable; like http://localhost:3000, "
            "https://*.example.com or *). The server's own and loopback origins always may. "
            "Also EDGESPEC_ORIGINS, comma-separated.",
        ),
    ] = None,
    parallel: Annotated[
        int,
        typer.Option(
            "--parallel",
            "-P",
            min=1,
            help="Requests generated at once, sharing each decode (parallel slots; each slot "
            "holds --n-ctx tokens of KV). 1: one at a time, reusing the last prompt's cache.",
        ),
    ] = 1,
    alias: Annotated[
        Optional[str],
        typer.Option(
            "--alias", help="The model id that /v1/models shows and replies carry (default: the target's name)."
        ),
    ] = None,
    memory: MemoryOpt = True,
    cache_reuse: Annotated[
        int,
        typer.Option(
            "--cache-reuse",
            min=0,
            help="Also keep cached runs of at least this many tokens that a prompt holds further "
            "back, moved instead of decoded again (llama-server's --cache-reuse: an editor's window "
            "that scrolled; close to a fresh decode, not equal to it). 0: the common prefix alone.",
        ),
    ] = 0,
) -> None:
    """Serve the model pair over an OpenAI-compatible HTTP API, with a chat page at /."""
    import uvicorn

    from edgespec.server import create_app
    from edgespec.server.listen import bind, parse_hosts, url_host
    from edgespec.server.stopping import Server

    err = err_console()
    with cli_errors():
        hosts = parse_hosts(host)
    for h in hosts:
        if not api_key and not is_loopback(h):
            err.print(
                Text(
                    f"warning: listening on {h} without --api-key: anyone who can reach this machine can use the model",
                    style="yellow",
                )
            )
    with cli_errors():
        p = make_plan(
            PlanOptions(
                profile=profile,
                target=target,
                draft=draft,
                k=k,
                exact=exact,
                optimized=optimized,
                n_ctx=n_ctx,
                threads=threads,
                rpc=rpc,
                tensor_split=tensor_split,
            )
        )
        engine = load_engine(p)
    try:
        with cli_errors():
            fatal: list[BaseException] = []

            def on_fatal(error: BaseException) -> None:  # the worker died: stop serving, exit 1
                fatal.append(error)
                server.should_exit = True

            app = create_app(
                engine,
                api_key=api_key or None,
                max_queue=max_queue,
                parallel=parallel,
                max_tokens=max_tokens,
                model_name=alias or store_name(p.target),
                defaults=dict(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed),
                cache_reuse=cache_reuse,
                on_fatal=on_fatal,
                allow_origins=allowed_origins(allow_origin),
                memory=memory,
            )
            sockets = bind(hosts, port)
            port = sockets[0].getsockname()[1]
            shown = url_host(hosts[0])
            more = "".join(f" · also http://{url_host(h)}:{port}/" for h in hosts[1:])
            err.print(
                Text(
                    f"edgespec serve: chat page http://{shown}:{port}/ · OpenAI API http://{shown}:{port}/v1"
                    f"{more} · drafter {engine.drafter_name} · Ctrl-C to stop",
                    style="bold",
                )
            )
            config = uvicorn.Config(
                app,
                host=hosts[0],
                port=port,
                log_level=os.environ.get("EDGESPEC_LOG_LEVEL", "info"),
                timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S,
                access_log=True,
            )
            server = Server(config)  # uvicorn's, ending open streams with an error event at shutdown
            # uvicorn shuts down gracefully on SIGINT/SIGTERM, then re-raises the signal
            # at the handler it found: make that a no-op so that a stop is a clean exit.
            previous = {s: signal.signal(s, _ignore) for s in (signal.SIGINT, signal.SIGTERM)}
            try:
                server.run(sockets=sockets)
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)
                for sock in sockets:
                    sock.close()
            if not server.started:
                raise typer.Exit(1)  # uvicorn said why (the port is taken, ...)
            if fatal:
                err.print(
                    Text(
                        f"edgespec serve: stopped because the generation worker failed "
                        f"({type(fatal[0]).__name__}: {fatal[0]})",
                        style="red",
                    )
                )
                raise typer.Exit(1)
            err.print(Text("edgespec serve: stopped", style="dim"))
    finally:
        engine.close()


def _ignore(signum: int, frame: object) -> None:
    """A signal handler that does nothing (see ``serve``)."""
