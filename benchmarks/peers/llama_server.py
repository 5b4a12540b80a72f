"""llama.cpp's own ``llama-server`` (built by ``build_peer_tools.sh``, beside this file) as a
peer, started on a free loopback port with one slot.

Asked through ``/completion`` with the chat template already applied (so it sees the same
prompt tokens as edgespec) and, for structured output, ``json_schema`` (llama.cpp's
json-schema-to-grammar, GBNF); or, started with ``--jinja`` in ``extra``, through its
OpenAI-style ``/v1/chat/completions`` at ``url``. ``spec`` is a ``--spec-type`` (e.g.
``ngram-simple``) or None for plain decoding; prompt lookup runs with llama.cpp's
defaults for that type, as its users get it. The speed is the server's own
``timings.predicted_per_second`` (prompt excluded)."""

from __future__ import annotations

import json
import tempfile
import time
import urllib.request
from pathlib import Path

from benchmarks.common import free_port, http_ok, start_server, stop


class LlamaServer:
    """One ``llama-server`` process for the life of the object (a context manager)."""

    def __init__(
        self,
        bin_dir: Path,
        model: Path,
        threads: int,
        spec: str | None = "ngram-simple",
        n_ctx: int = 4096,
        extra: tuple[str, ...] = (),
    ) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            str(Path(bin_dir) / "llama-server"),
            "-m",
            str(model),
            "-t",
            str(threads),
            "-tb",
            str(threads),
            "-c",
            str(n_ctx),
            "-np",
            "1",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            *extra,
        ]
        if spec:
            cmd += ["--spec-type", spec]
        self.log = open(Path(tempfile.gettempdir()) / f"llama-server-{self.port}.log", "w+")
        try:
            self.proc = start_server(cmd, lambda: http_ok(f"{self.url}/health"), log=self.log, name="llama-server")
        except RuntimeError as e:
            raise RuntimeError(f"{e}\n{self._tail()}") from None

    def _tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-2500:]

    def complete(self, prompt: str, n: int, json_schema: dict | None = None) -> dict:
        """One greedy completion of the (templated) ``prompt``, at most ``n`` tokens:
        {"text", "finish_reason", "tokens", "seconds", "tokens_per_second", "prompt_seconds",
        "wall", "drafted", "accepted", "prompt_tokens", "prompt_processed"}, from the
        server's ``timings`` (``wall``: the request's own wall time)."""
        body: dict = {"prompt": prompt, "n_predict": n, "temperature": 0.0, "cache_prompt": True, "stream": False}
        if json_schema is not None:
            body["json_schema"] = json_schema
        req = urllib.request.Request(
            f"{self.url}/completion",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        t0 = time.perf_counter()
        with urllib.request.urlopen(req, timeout=900) as r:
            out = json.loads(r.read())
        wall = time.perf_counter() - t0
        t = out.get("timings", {})
        return {
            "text": out.get("content", ""),
            "finish_reason": "stop" if out.get("stop_type") in ("eos", "word") else "length",
            "tokens": int(t.get("predicted_n", 0)),
            "seconds": float(t.get("predicted_ms", 0.0)) / 1000,
            "prompt_seconds": float(t.get("prompt_ms", 0.0)) / 1000,
            "tokens_per_second": float(t.get("predicted_per_second", 0.0)),
            "wall": wall,
            "drafted": int(t.get("draft_n", 0)),
            "accepted": int(t.get("draft_n_accepted", 0)),
            "prompt_tokens": int(out.get("tokens_evaluated", 0)),
            "prompt_processed": int(t.get("prompt_n", 0)),
        }

    def close(self) -> None:
        stop(self.proc)
        self.log.close()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
