"""A bounded load test on loopback (issue 9): 16 concurrent clients x 2 streamed chat
requests against real uvicorn on the tiny models, 4 clients hanging up mid-stream on their
first request. Every other request must be answered completely (finish reason, usage,
timings, ``[DONE]``), with no 5xx and nothing lost; ``/health`` must be fine afterwards and
the metrics must account for every request. The queue wait and the throughput are printed
(``pytest -s`` shows them). Takes a few seconds.
"""

from __future__ import annotations

import re

import httpx
import pytest

from edgespec import DraftingOptions, Engine
from edgespec.server import create_app
from serve_support import LiveServer, run_load

pytestmark = pytest.mark.slow

CLIENTS, REQUESTS, HANG_UPS, MAX_TOKENS = 16, 2, 4, 24


def test_sixteen_clients_two_requests_four_hang_ups(tiny_target, tiny_noisy):
    with Engine(tiny_target, draft=tiny_noisy, n_ctx=1024, drafting=DraftingOptions(k=4), n_threads=1) as engine:
        app = create_app(engine, max_queue=32)
        with LiveServer(app) as srv:
            report = run_load(
                srv.url, clients=CLIENTS, requests=REQUESTS, hang_ups=HANG_UPS, max_tokens=MAX_TOKENS, timeout=60
            )
            print(
                f"\nload test (tiny models, {CLIENTS} clients x {REQUESTS} streamed requests, "
                f"{HANG_UPS} hang-ups): {report.summary()}"
            )
            assert report.errors == []
            assert report.statuses == [200] * (CLIENTS * REQUESTS)
            assert report.hung_up == HANG_UPS
            assert report.completed == CLIENTS * REQUESTS - HANG_UPS
            assert report.tokens == report.completed * MAX_TOKENS  # the tiny model never stops early
            assert all(report.texts)
            # someone waited: the requests really were serialised through the queue
            assert max(report.queue_ms) > 0
            with httpx.Client(base_url=srv.url, timeout=10) as http:
                health = http.get("/health")
                assert health.status_code == 200
                assert health.json()["status"] == "ok"
                assert health.json()["busy"] is False and health.json()["queue"] == 0
                metrics = http.get("/metrics").text
                ok = int(re.search(r'endpoint="/v1/chat/completions",status="200"\} (\d+)', metrics).group(1))
                gone = int(re.search(r'endpoint="/v1/chat/completions",status="499"\} (\d+)', metrics).group(1))
                assert ok == CLIENTS * REQUESTS - HANG_UPS and gone == HANG_UPS  # a hang-up is a 499
                assert not re.search(r'status="5\d\d"', metrics)
                done = int(re.search(r"^edgespec_generations_total (\d+)$", metrics, re.M).group(1))
                running = int(re.search(r'stage="running"\} (\d+)', metrics).group(1))
                queued = int(re.search(r'stage="queued"\} (\d+)', metrics).group(1))
                # every hang-up was stopped (while generating, or before it started)
                assert done == report.completed and running + queued == HANG_UPS
                # and the server still answers
                r = http.post(
                    "/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
                )
                assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 4
