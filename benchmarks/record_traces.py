"""Record plain greedy outputs of the TUNING prompts (``benchmarks/prompts/tuning.py`` and
``edgespec.measuring.prompts.CALIBRATION``) and this machine's c(n), for replaying drafting policies
offline (``benchmarks/replay_policy.py``). Never run it on held-out prompts.

    python -m benchmarks.record_traces --out /tmp/traces.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks.prompts.tuning import PROMPTS as SPEEDUP
from edgespec import Engine
from edgespec.catalog import resolve_model
from edgespec.measuring.prompts import CALIBRATION
from edgespec.measuring.tune import time_decodes


def tuning_prompts() -> list[tuple[str, str, object]]:
    out = [(name, "edit", text) for name, text in SPEEDUP.items()]
    out += [(p.id, p.kind, p.prompt) for p in CALIBRATION]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    eng = Engine(resolve_model(args.target))
    traces = []
    prompts = tuning_prompts()
    for name, kind, text in prompts:
        eng.reset()
        r = eng.generate(text, max_tokens=args.max_tokens, temperature=0.0)
        ctx = eng.prompt_tokens(text)
        tm = eng.target_model
        traces.append(
            {
                "name": name,
                "kind": kind,
                "prompt": ctx,
                "output": r.token_ids,
                "pieces": {
                    str(t): tm.token_to_bytes(t).decode("utf-8", "replace") for t in set(ctx) | set(r.token_ids)
                },
                "tps": r.stats.generated_tokens / r.stats.t_generate,
            }
        )
        print(name, len(ctx), len(r.token_ids), f"{traces[-1]['tps']:.1f} tok/s", file=sys.stderr)
    ids0 = eng.prompt_tokens(prompts[0][2])
    times = time_decodes(eng.ctx, ids0[:-1], n_max=16, repeats=3)
    c = {str(k): v for k, v in sorted(times.relative.items())}
    print("c(n)", c, file=sys.stderr)
    Path(args.out).write_text(json.dumps({"c": c, "traces": traces}))


if __name__ == "__main__":
    main()
