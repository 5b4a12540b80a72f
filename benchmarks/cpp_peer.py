"""llama.cpp's own C++ tools as the peer: plain decoding (``llama-completion``), its
prompt lookup (``llama-speculative-simple --spec-type ngram-simple | ngram-mod``) and
its server (``llama-server``, for structured output with ``json_schema``), built from
the llama.cpp vendored in the pinned llama-cpp-python by ``build_peer_tools.sh``. Each
run's generation speed is read from the tool's own timing line or the server's
``timings`` (prompt processing excluded, like edgespec's figures)."""

from __future__ import annotations

import json
import re
import socket
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
SPEC_TYPES = ("ngram-simple", "ngram-mod")
_PLAIN = re.compile(r"eval time =\s*[\d.]+ ms /\s*\d+ runs\s*\(\s*[\d.]+ ms per token,\s*([\d.]+) tokens per second")
_SPEC = re.compile(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s")


def tools_dir(given: str | None = None) -> Path:
    """The bin directory of the C++ tools, building them on first use (~10 min)."""
    if given:
        return Path(given)
    out = subprocess.run(["bash", str(HERE / "build_peer_tools.sh")], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"building llama.cpp's tools failed:\n{out.stderr[-3000:]}")
    return Path(out.stdout.strip().splitlines()[-1])


def run_cpp(bin_dir: Path, model: Path, prompt_file: Path, n: int, threads: int,
            spec: str | None) -> float:
    """Generation tokens/s of one C++ run on the prompt text in ``prompt_file`` (the
    chat template already applied), greedy, ``n`` tokens; ``spec`` None = plain.
    Prompt lookup runs with llama.cpp's defaults for that type, as its users get it."""
    common = ["-m", str(model), "-f", str(prompt_file), "-n", str(n), "-t", str(threads),
              "--temp", "0", "-c", "4096", "-b", "2048"]
    if spec is None:
        cmd = [str(bin_dir / "llama-completion"), *common, "-no-cnv", "--no-warmup"]
        pattern = _PLAIN
    else:
        cmd = [str(bin_dir / "llama-speculative-simple"), *common, "--spec-type", spec]
        pattern = _SPEC
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, stdin=subprocess.DEVNULL)
    log = out.stdout + out.stderr
    m = pattern.search(log)
    if not m:
        raise RuntimeError(f"could not read the speed from {Path(cmd[0]).name} (exit {out.returncode}):\n{log[-2500:]}")
    return float(m.group(1))


class LlamaServer:
    """llama.cpp's own ``llama-server`` (from ``build_peer_tools.sh``) as a peer: started
    once on a free loopback port with one slot, asked through ``/completion`` with the
    chat template already applied (so it sees the same prompt tokens as edgespec) and,
    for structured output, ``json_schema`` (llama.cpp's json-schema-to-grammar, GBNF).
    ``spec`` is a ``--spec-type`` (e.g. ``ngram-simple``) or None for plain decoding;
    prompt lookup runs with llama.cpp's defaults for that type, as its users get it.
    The speed is the server's own ``timings.predicted_per_second`` (prompt excluded)."""

    def __init__(self, bin_dir: Path, model: Path, threads: int, spec: str | None = "ngram-simple",
                 n_ctx: int = 4096) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        cmd = [str(bin_dir / "llama-server"), "-m", str(model), "-t", str(threads), "-tb", str(threads),
               "-c", str(n_ctx), "-np", "1", "--host", "127.0.0.1", "--port", str(self.port)]
        if spec:
            cmd += ["--spec-type", spec]
        self.log = open(Path(tempfile.gettempdir()) / f"llama-server-{self.port}.log", "w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self._wait_ready()

    def _wait_ready(self, timeout: float = 300.0) -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited ({self.proc.returncode}):\n{self._tail()}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.5)
        self.close()
        raise RuntimeError(f"llama-server did not become ready in {timeout:.0f} s:\n{self._tail()}")

    def _tail(self) -> str:
        self.log.flush()
        self.log.seek(0)
        return self.log.read()[-2500:]

    def complete(self, prompt: str, n: int, json_schema: dict | None = None) -> dict:
        """One greedy completion of the (templated) ``prompt``, at most ``n`` tokens:
        {"text", "tokens_per_second", "tokens", "drafted", "accepted", "finish_reason"}."""
        body = {"prompt": prompt, "n_predict": n, "temperature": 0.0, "cache_prompt": True,
                "stream": False}
        if json_schema is not None:
            body["json_schema"] = json_schema
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/completion",
                                     data=json.dumps(body).encode(), method="POST",
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=900) as r:
            out = json.loads(r.read())
        t = out.get("timings", {})
        return {"text": out.get("content", ""), "tokens_per_second": float(t.get("predicted_per_second", 0.0)),
                "tokens": int(t.get("predicted_n", 0)), "seconds": float(t.get("predicted_ms", 0.0)) / 1000,
                "drafted": int(t.get("draft_n", 0)), "accepted": int(t.get("draft_n_accepted", 0)),
                "finish_reason": "stop" if out.get("stop_type") in ("eos", "word") else "length"}

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()

    def __enter__(self) -> "LlamaServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

