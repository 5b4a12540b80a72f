"""Prefix-suffix-middle (PSM) against suffix-prefix-middle (SPM) prompts for code completion.

llama-server has ``--spm-infill`` for models that prefer the suffix first. With the suffix
first, the text after the cursor would stay in the KV cache while the user types forward
(only the typed lines would be decoded again: issue 35's goal needs that), so whether the
model completes as well from it decides whether edgespec may use it. This checks it on
the target (the embedded Qwen2.5-Coder-1.5B by default), greedy, plain decoding: at cursor
lines of a few of edgespec's own source files (not the held-out replay sessions), the
line's text is removed, the prefix is the file above it and the suffix the next 30 lines;
the score is how often the middle's first line equals the file's real line (stripped).
Each format runs on its own engine, the files typed forward, one request after another.

    python -m benchmarks.infill_order      # ~14 min on 2 cores
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from edgespec import Engine
from edgespec.catalog import resolve_model
from edgespec.events import Done
from edgespec.llama.fim import FimTokens, fim_tokens

ROOT = Path(__file__).resolve().parent.parent
FILES = (
    "edgespec/decoding/text.py",
    "edgespec/server/infill_reply.py",
    "edgespec/catalog/verify_cache.py",
    "benchmarks/common.py",
)
SUFFIX_LINES = 30


def prompts(fim: FimTokens, prefix: list[int], suffix: list[int]) -> dict[str, list[int]]:
    """The two orders of the same prefix and suffix ids, in the model's FIM tokens."""
    return {
        "psm": [fim.pre, *prefix, fim.suf, *suffix, fim.mid],
        "spm": [fim.suf, *suffix, fim.pre, *prefix, fim.mid],
    }


def cursor_lines(lines: list[str], most: int = 18) -> list[int]:
    """Lines with some text (over 12 characters), spread over the file, after its first 20."""
    cands = [i for i in range(20, len(lines) - 5) if len(lines[i].strip()) > 12]
    return cands[:: max(1, len(lines) // 25)][:most]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    args = ap.parse_args(argv)
    target = resolve_model(args.target)
    engines = {"psm": Engine(target), "spm": Engine(target)}
    model = engines["psm"].target_model
    fim = fim_tokens(model)  # NoFimTokens (a clear error) for a model without them
    score = {f: [0, 0] for f in engines}
    for name in FILES:
        lines = (ROOT / name).read_text(encoding="utf-8").split("\n")
        for eng in engines.values():
            eng.reset()
        for i in cursor_lines(lines):
            prefix = model.tokenize("\n".join(lines[:i]) + "\n", add_special=False, parse_special=False)
            suffix_text = "\n" + "\n".join(lines[i + 1 : i + 1 + SUFFIX_LINES]) + "\n"
            suffix = model.tokenize(suffix_text, add_special=False, parse_special=False)
            for fmt, ids in prompts(fim, prefix, suffix).items():
                done = None
                for ev in engines[fmt].stream(ids, max_tokens=40, temperature=0.0, stop=["\n"]):
                    if isinstance(ev, Done):
                        done = ev
                assert done is not None
                score[fmt][0] += done.text.split("\n")[0].strip() == lines[i].strip()
                score[fmt][1] += 1
        print(name, {f: f"{a}/{n}" for f, (a, n) in score.items()}, file=sys.stderr, flush=True)
    for fmt, (a, n) in score.items():
        print(f"{fmt}: the real line written {a} of {n} times ({a / n:.0%})")
    for eng in engines.values():
        eng.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
