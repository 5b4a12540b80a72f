"""Prompt-lookup (n-gram) speculation vs plain decoding on input-grounded prompts.

Both configurations run in ONE process on ONE Engine (same model, context, threads,
batch-invariant kernels), alternating per repeat with a rotating order so drift on a
shared machine hits all alike. The first pass is a warm-up and is not counted. Every
timed pair must produce identical token ids (temperature 0), or the run fails.

A third configuration, plain decoding on a second Engine with llama.cpp's own kernels
(``exact=False``: what plain decoding runs on when edgespec's automatic choice is not to
speculate), runs in the same rotation: on CPUs those kernels are faster per token, and
that is the speed a user would otherwise get.

    python benchmarks/ngram_speedup.py --target /path/to/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf
    python benchmarks/ngram_speedup.py --target qwen2.5-coder-1.5b --repeat 3 --json out.json

Speedup is the ratio of generation throughput (tokens/s after the prompt is processed);
prompt processing is the same work in both and is reported separately.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from edgespec import Engine  # noqa: E402
from edgespec.catalog import resolve_model  # noqa: E402

INVENTORY = '''import json
from dataclasses import dataclass, field


@dataclass
class Item:
    sku: str
    name: str
    quantity: int = 0
    price_cents: int = 0


@dataclass
class Inventory:
    items: dict[str, Item] = field(default_factory=dict)

    def add(self, item: Item) -> None:
        if item.sku in self.items:
            raise ValueError(f"duplicate sku {item.sku}")
        self.items[item.sku] = item

    def remove(self, sku: str) -> Item:
        return self.items.pop(sku)

    def restock(self, sku: str, amount: int) -> None:
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.items[sku].quantity += amount

    def total_value_cents(self) -> int:
        return sum(i.quantity * i.price_cents for i in self.items.values())

    def to_json(self) -> str:
        return json.dumps({sku: vars(item) for sku, item in self.items.items()})
'''

SERVER = '''const express = require("express");
const app = express();
app.use(express.json());

const users = new Map();
let nextId = 1;

app.get("/users", (req, res) => {
  res.json([...users.values()]);
});

app.get("/users/:id", (req, res) => {
  const user = users.get(Number(req.params.id));
  if (!user) return res.status(404).json({ error: "not found" });
  res.json(user);
});

app.post("/users", (req, res) => {
  const { name, email } = req.body;
  if (!name || !email) return res.status(400).json({ error: "name and email required" });
  const user = { id: nextId++, name, email };
  users.set(user.id, user);
  res.status(201).json(user);
});

app.delete("/users/:id", (req, res) => {
  users.delete(Number(req.params.id));
  res.status(204).end();
});

app.listen(3000, () => console.log("listening on 3000"));
'''

PARSER = '''def parse_config(lines):
    config = {}
    section = None
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            config.setdefault(section, {})
            continue
        if "=" not in line:
            raise SyntaxError(f"line {number}: expected key = value")
        key, value = (part.strip() for part in line.split("=", 1))
        if section is None:
            raise SyntaxError(f"line {number}: key outside a section")
        config[section][key] = value
    return config
'''

PROMPTS = {
    "rename-method": "Here is a Python module:\n\n```python\n" + INVENTORY + "```\n\n"
    "Rename the method `total_value_cents` to `stock_value_cents` everywhere. "
    "Return the whole file and nothing else.",
    "add-endpoint-check": "Here is an Express server:\n\n```javascript\n" + SERVER + "```\n\n"
    "Make the DELETE route return 404 with {\"error\": \"not found\"} when the user does not "
    "exist. Return the whole file with that change.",
    "add-docstrings": "Add a one-line docstring to this function and keep everything else "
    "exactly the same. Return the whole function.\n\n```python\n" + PARSER + "```",
}


def run(engine: Engine, drafter: str, prompt: str, max_tokens: int):
    engine.set_drafter(drafter)
    engine.reset()  # both configurations pay the same prompt processing
    return engine.generate(prompt, max_tokens=max_tokens, temperature=0.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--target", default="qwen2.5-coder-1.5b", help="GGUF path or catalog name")
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--repeat", type=int, default=2, help="timed repeats after one warm-up")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--k", type=int, default=16)
    ap.add_argument("--min-match", type=int, default=None,
                    help="n-gram match length needed to draft (default: from the detected profile)")
    ap.add_argument("--json", dest="json_out", default=None, help="write the results here")
    ap.add_argument("--only", default=None, help="comma-separated prompt names")
    args = ap.parse_args()

    names = args.only.split(",") if args.only else list(PROMPTS)
    target = resolve_model(args.target)
    results = []
    if args.min_match is None:
        args.min_match = 2  # the learned policy judges matches by their length itself
    print(f"ngram drafting from matches of >= {args.min_match} tokens, k <= {args.k}", flush=True)
    common = dict(n_ctx=4096, n_threads=args.threads)
    # one engine on the batch-invariant kernels (--exact), so every pair must be identical
    with Engine(target, draft="ngram", k=args.k, k_max=args.k, ngram_min_match=args.min_match, exact=True,
                **common) as engine, \
            Engine(target, exact=False, **common) as fast:
        for name in names:
            prompt = PROMPTS[name]
            tps = {"none": [], "ngram": [], "fast": []}
            last = {}
            for rep in range(args.repeat + 1):
                order = ["none", "ngram", "fast"]
                order = order[rep % 3:] + order[:rep % 3]  # rotate: no configuration always first
                for which in order:
                    r = run(fast, "none", prompt, args.max_tokens) if which == "fast" else \
                        run(engine, which, prompt, args.max_tokens)
                    last[which] = r
                    if rep > 0:  # rep 0 is the warm-up
                        tps[which].append(r.stats.tokens_per_second)
                if last["none"].token_ids != last["ngram"].token_ids:
                    print(f"{name}: OUTPUT DIFFERS between plain and ngram", file=sys.stderr)
                    return 1
            s = last["ngram"].stats
            med = {w: statistics.median(v) for w, v in tps.items()}
            row = {
                "prompt": name,
                "tokens": len(last["none"].token_ids),
                "plain_tps": med["none"],
                "ngram_tps": med["ngram"],
                "speedup": med["ngram"] / med["none"],
                "identical": True,
                "plain_llama_kernels_tps": med["fast"],
                "speedup_vs_llama_kernels": med["ngram"] / med["fast"],
                "llama_kernels_identical": last["fast"].token_ids == last["none"].token_ids,
                "acceptance_rate": s.acceptance_rate,
                "tokens_per_round": s.tokens_per_round,
                "overhead_fraction": s.overhead_fraction,
                "prompt_tokens": s.prompt_tokens,
            }
            results.append(row)
            print(f"{name:20s} {row['tokens']:4d} tok  plain {row['plain_tps']:6.2f} tok/s  "
                  f"ngram {row['ngram_tps']:6.2f} tok/s  x{row['speedup']:.2f}  "
                  f"accept {row['acceptance_rate']:.0%}  {row['tokens_per_round']:.2f} tok/round  "
                  f"python overhead {row['overhead_fraction']:.1%}  |  plain on llama.cpp kernels "
                  f"{row['plain_llama_kernels_tps']:6.2f} tok/s: ngram x{row['speedup_vs_llama_kernels']:.2f}",
                  flush=True)
    geo = statistics.geometric_mean(r["speedup"] for r in results)
    geo_fast = statistics.geometric_mean(r["speedup_vs_llama_kernels"] for r in results)
    print(f"geometric mean speedup: x{geo:.2f} over plain decoding on the same (batch-invariant) kernels, "
          f"x{geo_fast:.2f} over plain decoding on llama.cpp's kernels")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(
            {"results": results, "geomean_speedup": geo, "geomean_speedup_vs_llama_kernels": geo_fast}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
