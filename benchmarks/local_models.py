"""How long `edgespec models list` takes on a machine with many models (issue 21: under
2 s warm for 200).

Builds N header-only GGUFs (``write_header``: a 320-token tokenizer and a few hundred
weights each, as tests/test_local_models.py's scale check builds them; half of one
vocabulary, half of another, so pairs are computed) in EDGESPEC_MODEL_PATH under a
temporary HOME, then times the real command in a subprocess: once cold (every header
read with gguf's reader, the cache written) and ``--runs`` times warm (the cache read,
folders listed, files stat'ed). Run under the benchmark lock:

    flock /tmp/edgespec-bench.lock python -m benchmarks.local_models --models 200 --out out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import commit

N_TOKENS = 320
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def write_header(path: Path, vocab: str, name: str, n_floats: int) -> None:
    """A GGUF that is only read, never run: a ``vocab``-named BPE tokenizer of N_TOKENS
    tokens (two files share a tokenizer when they share ``vocab``), a ChatML template and
    ``n_floats`` F32 weights (which set the file's size)."""
    import gguf
    import numpy as np

    tokens = [f"{vocab}{i}" for i in range(N_TOKENS - 3)] + ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    fields: dict[str, object] = {
        "general.name": name,
        "general.file_type": int(gguf.LlamaFileType.ALL_F32),
        "llama.context_length": 2048,
        "llama.block_count": 1,
        "llama.embedding_length": 64,
        "llama.attention.head_count": 2,
        "llama.attention.head_count_kv": 1,
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "qwen2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.bos_token_id": N_TOKENS - 3,
        "tokenizer.ggml.eos_token_id": N_TOKENS - 1,
        "tokenizer.ggml.add_bos_token": False,
        "tokenizer.chat_template": CHATML,
    }
    w = gguf.GGUFWriter(str(path), "llama")
    for key, value in fields.items():
        if isinstance(value, bool):
            w.add_bool(key, value)
        elif isinstance(value, int):
            w.add_uint32(key, value)
        elif isinstance(value, list):
            w.add_array(key, value)
        else:
            w.add_string(key, str(value))
    w.add_tensor("blk.0.weight", np.zeros(n_floats, dtype=np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


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
    ap.add_argument("--out", type=Path, default=None, help="also write the figures here (JSON)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp)
        folder = home / "models"
        folder.mkdir(parents=True)
        for i in range(args.models):
            write_header(
                folder / f"m{i:03d}.gguf", vocab="base" if i % 2 else "other", name=f"m{i}", n_floats=64 + 97 * i
            )
        env = {
            **os.environ,
            "HOME": str(home),
            "EDGESPEC_MODEL_PATH": str(folder),
            "EDGESPEC_CACHE": str(home / "cache"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "HF_HUB_OFFLINE": "1",
            "COLUMNS": "160",
        }
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
        print(f"models list --json, warm: median {statistics.median(warm_json):.2f} s, max {max(warm_json):.2f} s")
        if args.out:
            args.out.write_text(
                json.dumps(
                    {
                        "date": time.strftime("%Y-%m-%d"),
                        "commit": commit(),
                        "models": args.models,
                        "runs": args.runs,
                        "load_average": round(os.getloadavg()[0], 2),
                        "startup_s": base,
                        "cold_s": cold,
                        "warm_s": warm,
                        "warm_json_s": warm_json,
                    },
                    indent=2,
                )
                + "\n"
            )


if __name__ == "__main__":
    main()
