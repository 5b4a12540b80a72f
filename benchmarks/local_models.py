"""How long `edgespec models list` takes on a machine with many models (issue 21: under
2 s warm for 200).

Builds N header-only GGUFs (tests/tiny_models.make_header_model: a 320-token tokenizer
and a few hundred weights each; half of one vocabulary, half of another, so pairs are
computed) in EDGESPEC_MODEL_PATH under a temporary HOME, then times the real command in a
subprocess: once cold (every header read with gguf's reader, the cache written) and
``--runs`` times warm (the cache read, folders listed, files stat'ed). Run under the
benchmark lock:

    flock /tmp/edgespec-bench.lock python benchmarks/local_models.py --models 200
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from tiny_models import make_header_model  # noqa: E402


def run(cmd: list[str], env: dict[str, str]) -> float:
    t = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - t
    if out.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {out.stderr}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        folder = home / "models"
        for i in range(args.models):
            make_header_model(folder / f"m{i:03d}.gguf", vocab="base" if i % 2 else "other",
                              name=f"m{i}", n_floats=64 + 97 * i)
        env = {**os.environ, "HOME": str(home), "EDGESPEC_MODEL_PATH": str(folder),
               "EDGESPEC_CACHE": str(home / "cache"), "XDG_CONFIG_HOME": str(home / "config"),
               "HF_HUB_OFFLINE": "1", "COLUMNS": "160"}
        for var in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "LLAMA_CACHE", "XDG_CACHE_HOME"):
            env.pop(var, None)
        cmd = [sys.executable, "-m", "edgespec", "models", "list"]
        cold = run(cmd, env)
        base, warm, warm_json = [], [], []
        for _ in range(args.runs):  # alternating, so that the machine's load hits all alike
            base.append(run([sys.executable, "-c", "import edgespec.cli"], env))
            warm.append(run(cmd, env))
            warm_json.append(run(cmd + ["--json"], env))
        print(f"{args.models} models; load average {os.getloadavg()[0]:.2f}")
        print(f"python -c 'import edgespec.cli' (start-up alone): median {statistics.median(base):.2f} s")
        print(f"models list, cold (every header read): {cold:.2f} s")
        print(f"models list, warm: median {statistics.median(warm):.2f} s, max {max(warm):.2f} s ({args.runs} runs)")
        print(f"models list --json, warm: median {statistics.median(warm_json):.2f} s, "
              f"max {max(warm_json):.2f} s")


if __name__ == "__main__":
    main()
