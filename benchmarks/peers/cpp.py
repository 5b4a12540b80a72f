"""llama.cpp's own C++ tools as the peer: plain decoding (``llama-completion``) and its
prompt lookup (``llama-speculative-simple --spec-type ngram-simple | ngram-mod``), built
from the llama.cpp vendored in the pinned llama-cpp-python by ``build_peer_tools.sh``
(beside this file). Each run's generation speed is read from the tool's own timing line
(prompt processing excluded, like edgespec's figures). Its server is ``llama_server.py``."""

from __future__ import annotations

import re
import subprocess
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


def run_cpp(bin_dir: Path, model: Path, prompt_file: Path, n: int, threads: int, spec: str | None) -> float:
    """Generation tokens/s of one C++ run on the prompt text in ``prompt_file`` (the
    chat template already applied), greedy, ``n`` tokens; ``spec`` None = plain.
    Prompt lookup runs with llama.cpp's defaults for that type, as its users get it."""
    common = [
        "-m",
        str(model),
        "-f",
        str(prompt_file),
        "-n",
        str(n),
        "-t",
        str(threads),
        "--temp",
        "0",
        "-c",
        "4096",
        "-b",
        "2048",
    ]
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
