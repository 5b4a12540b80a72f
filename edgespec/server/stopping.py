"""Shutting down while requests are open: each ends with an error its client can read.

uvicorn stops on SIGINT/SIGTERM (or ``should_exit``): it stops accepting, waits up to
``timeout_graceful_shutdown`` seconds for the open requests, then cancels their tasks,
which logs a ``CancelledError`` traceback per request and cuts a stream off with no
error event and no ``data: [DONE]``. ``Server`` is uvicorn's server that tells the app
when its shutdown begins (``app.state.begin_shutdown(grace_s)``, set by ``create_app``):
the requests still open ``STOP_MARGIN_S`` before the grace runs out are ended by the app
(``worker.Worker.drain``), a stream with an error event (``shutting_down``) and
``[DONE]``, a waiting request with a 503, and the server logs one line saying how many.
Requests that finish within the grace are answered as usual.

It knows nothing of the routes; an app without ``begin_shutdown`` is served as by uvicorn.
"""

from __future__ import annotations

import socket

import uvicorn

STOP_MARGIN_S = 0.5
"""How long before uvicorn's grace runs out the app ends the requests still open: time
for an error event and ``[DONE]`` to be written and the tasks to finish on their own."""


class Server(uvicorn.Server):
    """uvicorn's server, telling the app when a shutdown begins."""

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        begin = getattr(getattr(self.config.app, "state", None), "begin_shutdown", None)
        if begin is not None:
            grace = self.config.timeout_graceful_shutdown
            begin(None if grace is None else max(0.0, grace - STOP_MARGIN_S))
        await super().shutdown(sockets=sockets)
