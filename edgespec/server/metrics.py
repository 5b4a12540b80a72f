"""The server's counters, and their Prometheus text rendering for ``GET /metrics``.

Counted here: requests by endpoint and HTTP status, prompt tokens (all of them, and the
ones actually decoded after prefix reuse), generated tokens, drafted and accepted draft
tokens (so acceptance = accepted / drafted over the server's life; and both by where
the drafts came from: prompt, memory, grammar, model), generation and
queue-wait time, requests stopped because the client hung up, and — read live from the
worker — the queue length, whether a generation is running, and the API keys' memories
of earlier answers (how many, and the tokens they hold).

The exposition format (text 0.0.4: ``# HELP``, ``# TYPE``, ``name{label="v"} value``)
is written by hand: a dozen process-local series need no registry, and the
``prometheus_client`` package's global registry would be shared by every app built in
one process (the tests build many). Updates come from the worker thread and the event
loop, so they take a lock.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any, Callable

from edgespec.events import Stats


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class Metrics:
    """Running totals of one server. ``queue_length`` and ``busy`` are read on demand."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()
        self.prompt_tokens = 0
        self.prompt_tokens_processed = 0
        self.generated_tokens = 0
        self.drafted = 0
        self.accepted = 0
        self.drafted_by_source: Counter[str] = Counter()
        self.accepted_by_source: Counter[str] = Counter()
        self.generations = 0
        self.generation_seconds = 0.0
        self.queue_wait_seconds = 0.0
        self.queue_waits = 0
        self.cancelled_running = 0
        self.cancelled_queued = 0
        self.queue_length: Callable[[], int] = lambda: 0
        self.busy: Callable[[], bool] = lambda: False
        self.memories: Callable[[], tuple[int, int]] = lambda: (0, 0)  # (keys, tokens held)

    def count_request(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.requests[(endpoint, status)] += 1

    def observe_queue_wait(self, seconds: float) -> None:
        with self._lock:
            self.queue_wait_seconds += seconds
            self.queue_waits += 1

    def observe_generation(self, stats: Stats) -> None:
        with self._lock:
            self.generations += 1
            self.prompt_tokens += stats.prompt_tokens
            self.prompt_tokens_processed += stats.prompt_tokens_processed
            self.generated_tokens += stats.generated_tokens
            self.drafted += stats.drafted
            self.accepted += stats.accepted
            self.drafted_by_source.update(stats.drafted_by_source)
            self.accepted_by_source.update(stats.accepted_by_source)
            self.generation_seconds += stats.t_total

    def count_cancelled(self, *, started: bool) -> None:
        with self._lock:
            if started:
                self.cancelled_running += 1
            else:
                self.cancelled_queued += 1

    def render(self) -> str:
        """The Prometheus text exposition of every series."""
        with self._lock:
            lines: list[str] = []

            def series(name: str, kind: str, help_: str, samples: list[tuple[dict, float]]) -> None:
                lines.append(f"# HELP {name} {help_}")
                lines.append(f"# TYPE {name} {kind}")
                for labels, value in samples:
                    lab = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
                    num = repr(float(value)) if isinstance(value, float) else str(value)
                    lines.append(f"{name}{{{lab}}} {num}" if lab else f"{name} {num}")

            series(
                "edgespec_requests_total",
                "counter",
                "HTTP requests answered, by endpoint and status.",
                [({"endpoint": e, "status": s}, n) for (e, s), n in sorted(self.requests.items())],
            )
            series(
                "edgespec_generations_total", "counter", "Generations that ran to the end.", [({}, self.generations)]
            )
            series(
                "edgespec_prompt_tokens_total",
                "counter",
                "Prompt tokens of finished generations.",
                [({}, self.prompt_tokens)],
            )
            series(
                "edgespec_prompt_tokens_processed_total",
                "counter",
                "Prompt tokens actually decoded (the rest came from the reused KV prefix).",
                [({}, self.prompt_tokens_processed)],
            )
            series("edgespec_generated_tokens_total", "counter", "Tokens generated.", [({}, self.generated_tokens)])
            series("edgespec_draft_tokens_total", "counter", "Tokens the drafter proposed.", [({}, self.drafted)])
            series(
                "edgespec_draft_tokens_accepted_total",
                "counter",
                "Drafted tokens the target accepted.",
                [({}, self.accepted)],
            )
            sources = sorted({"prompt", "memory", "grammar", "model", *self.drafted_by_source})
            series(
                "edgespec_draft_tokens_by_source_total",
                "counter",
                "Tokens drafted, by where they came from (prompt lookup, earlier answers, grammar, draft model).",
                [({"source": name}, self.drafted_by_source[name]) for name in sources],
            )
            series(
                "edgespec_draft_tokens_accepted_by_source_total",
                "counter",
                "Drafted tokens the target accepted, by where they came from.",
                [({"source": name}, self.accepted_by_source[name]) for name in sources],
            )
            series(
                "edgespec_draft_acceptance_ratio",
                "gauge",
                "Accepted / drafted tokens over the server's life (0 before any draft).",
                [({}, self.accepted / self.drafted if self.drafted else 0.0)],
            )
            series(
                "edgespec_generation_seconds_total",
                "counter",
                "Wall time of finished generations.",
                [({}, self.generation_seconds)],
            )
            series("edgespec_queue_wait_seconds", "summary", "Time requests waited in the queue.", [])
            lines.append(f"edgespec_queue_wait_seconds_sum {float(self.queue_wait_seconds)!r}")
            lines.append(f"edgespec_queue_wait_seconds_count {self.queue_waits}")
            series(
                "edgespec_requests_cancelled_total",
                "counter",
                "Requests stopped because the client went away, by where they were.",
                [({"stage": "running"}, self.cancelled_running), ({"stage": "queued"}, self.cancelled_queued)],
            )
            series("edgespec_queue_length", "gauge", "Requests waiting for the model.", [({}, self.queue_length())])
            series("edgespec_busy", "gauge", "1 while a generation is running.", [({}, int(self.busy()))])
            keys, held = self.memories()
            series(
                "edgespec_memory_keys",
                "gauge",
                "API keys with a memory of earlier answers (one without a key).",
                [({}, keys)],
            )
            series("edgespec_memory_tokens", "gauge", "Tokens held in those memories.", [({}, held)])
            return "\n".join(lines) + "\n"


class CountRequests:
    """ASGI middleware: counts every HTTP response by route and status for /metrics.

    A request whose client hung up before its response was complete counts as 499
    (nginx's and llama-server's "client closed request"), whether or not a status line
    had gone out: a stream cut midway is a hang-up, not a 200, however the request was
    served (one at a time or in parallel slots). Seen here, on the way in: an
    ``http.disconnect`` that arrives before the last body message was sent."""

    def __init__(self, app: Any, metrics: "Metrics", routes: tuple[str, ...]) -> None:
        self.app = app
        self.metrics = metrics
        self.routes = routes

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 0
        complete = hung_up = False

        async def receive_watched() -> dict:
            nonlocal hung_up
            message = await receive()
            if message["type"] == "http.disconnect" and not complete:
                hung_up = True
            return message

        async def send_counted(message: dict) -> None:
            nonlocal status, complete
            if message["type"] == "http.response.start":
                status = message["status"]
            elif message["type"] == "http.response.body" and not message.get("more_body", False):
                complete = True
            await send(message)

        try:
            await self.app(scope, receive_watched, send_counted)
        except Exception:
            status = status or 500  # (Starlette's outer error middleware answers it)
            raise
        finally:
            path = scope.get("path", "")
            # status 0: the client went away before any answer (a request stopped in the queue)
            self.metrics.count_request(
                path if path in self.routes else "other", 499 if hung_up or not status else status
            )
