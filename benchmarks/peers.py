"""Peers: what most Python users run today, on edgespec's benchmark prompts.

llama-cpp-python's high-level ``Llama`` decoding plainly, and the same ``Llama`` with its
own prompt-lookup speculation, ``Llama(draft_model=LlamaPromptLookupDecoding(...))``,
with the ``num_pred_tokens`` its README suggests for CPUs (2) and GPUs (10). Every
configuration runs on every prompt, interleaved per prompt with a rotating order, after
one warm-up run each (discarded), like ``edgespec bench``. Greedy decoding (temperature
0); ``identical`` says whether speculation reproduced plain decoding's tokens.

Timing: the wall time from the first generated token to the last, over the tokens after
the first (prompt processing is excluded, as in ``edgespec bench``).

With ``--cpp``, llama.cpp's own C++ tools run on the same prompt tokens (the same
chat-templated text), model and threads, in the same rotation: plain ``llama-completion``
and ``llama-speculative-simple`` with ``--spec-type ngram-simple`` and ``ngram-mod``
(built from the llama.cpp vendored in llama-cpp-python 0.3.36 by
``build_peer_tools.sh``; see ``cpp_peer.py``). Their speed is read from their own timing
lines; their speedups are against C++ plain decoding, and they report no token ids.

This script uses llama-cpp-python's defaults (its fast CPU kernels included). It loads
edgespec's prompt list by file path so that importing edgespec does not switch those
kernels off in this process (``edgespec.llama`` does that for batch-invariant numerics).

    python benchmarks/peers.py --target /tmp/models/qwen-1.5b.gguf --max-tokens 128 --threads 2
    python benchmarks/peers.py --target ... --limit 3 --max-tokens 32 --json
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path

import llama_cpp
from llama_cpp import Llama

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpp_peer import SPEC_TYPES, run_cpp, tools_dir  # noqa: E402
from llama_cpp.llama_chat_format import Jinja2ChatFormatter
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding


def load_prompts(set_name: str):
    """edgespec's built-in prompts, without importing the edgespec package."""
    path = Path(__file__).resolve().parent.parent / "edgespec" / "measuring" / "prompts.py"
    spec = importlib.util.spec_from_file_location("_edgespec_bench_prompts", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look the module up while the class is built
    spec.loader.exec_module(mod)
    return mod.prompt_set(set_name)


def prompt_tokens(llm: Llama, prompt) -> list[int]:
    """The prompt as ``create_chat_completion`` would feed it: the GGUF's own template."""
    m = llm._model
    eos, bos = llm.token_eos(), llm.token_bos()
    fmt = Jinja2ChatFormatter(
        template=llm.metadata["tokenizer.chat_template"],
        eos_token=m.token_get_text(eos) if eos != -1 else "",
        bos_token=m.token_get_text(bos) if bos != -1 else "",
    )
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
    text = fmt(messages=messages).prompt
    return llm.tokenize(text.encode("utf-8"), add_bos=not text.startswith(fmt.bos_token or "\0"), special=True)


def cpp_rows(args, prompts, plain: Llama) -> list[dict]:
    """llama.cpp's C++ tools on the same prompts, alternating, ``args.repeat`` passes."""
    import tempfile

    bin_dir = tools_dir(args.cpp_bin)
    labels = ["plain", *SPEC_TYPES]
    rates: dict[str, list[float]] = {x: [] for x in labels}
    with tempfile.TemporaryDirectory() as tmp:
        for i, p in enumerate(prompts):
            pf = Path(tmp) / f"{i}.txt"
            pf.write_text(plain.detokenize(prompt_tokens(plain, p.prompt), special=True).decode("utf-8", "replace"))
            for rep in range(args.repeat):
                for label in (labels if (i + rep) % 2 == 0 else labels[::-1]):
                    r = run_cpp(bin_dir, Path(args.target), pf, args.max_tokens, args.threads,
                                None if label == "plain" else label)
                    rates[label].append(r)
                    print(f"  C++ {label:<44} {p.id:<18} {r:7.2f} tok/s", file=sys.stderr)
    base = statistics.mean(rates["plain"])
    return [{"config": f"llama.cpp C++ {label}", "tokens_per_second": round(statistics.mean(v), 3),
             "speedup_vs_cpp_plain": round(statistics.mean(v) / base, 4)} for label, v in rates.items()]


def run_once(llm: Llama, tokens: list[int], max_tokens: int) -> tuple[list[int], float]:
    """Greedy generation; (token ids, seconds from the first token to the last)."""
    vocab = llm._model.vocab
    out: list[int] = []
    t_first = t_last = 0.0
    for tok in llm.generate(tokens, temp=0.0, top_k=1, top_p=1.0, min_p=0.0, repeat_penalty=1.0, reset=True):
        now = time.perf_counter()
        if llama_cpp.llama_vocab_is_eog(vocab, tok):
            break
        out.append(int(tok))
        if len(out) == 1:
            t_first = now
        t_last = now
        if len(out) >= max_tokens:
            break
    return out, t_last - t_first


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", required=True, help="target GGUF")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--n-ctx", type=int, default=1024,
                    help="context (speculation makes Llama keep n_ctx × n_vocab logits: keep it small)")
    ap.add_argument("--num-pred", default="2,10", help="LlamaPromptLookupDecoding num_pred_tokens values")
    ap.add_argument("--prompts", default="held-out", choices=["held-out", "calibration"])
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--cpp", action="store_true", help="also run llama.cpp's C++ tools (see cpp_peer.py)")
    ap.add_argument("--cpp-bin", default=None, help="bin dir of build_peer_tools.sh (default: build/find it)")
    args = ap.parse_args()

    prompts = list(load_prompts(args.prompts))[: args.limit]
    common = dict(model_path=args.target, n_ctx=args.n_ctx, n_threads=args.threads,
                  n_threads_batch=args.threads, verbose=False, seed=0)
    plain = Llama(**common)
    nums = [int(x) for x in args.num_pred.split(",") if x]
    lookups = {n: LlamaPromptLookupDecoding(num_pred_tokens=n) for n in nums}
    # logits_all=True by hand: with a draft model Llama keeps logits of every position,
    # but (0.3.36, llama.py:485) sizes that buffer from the logits_all argument, so a
    # prompt + reply past n_batch (512) tokens crashes with "could not broadcast".
    spec = Llama(**common, logits_all=True, draft_model=lookups[nums[0]]) if nums else None

    configs = [("llama-cpp-python plain", plain, None)] + [
        (f"llama-cpp-python prompt lookup, num_pred_tokens={n}", spec, lookups[n]) for n in nums
    ]
    toks = {p.id: prompt_tokens(plain, p.prompt) for p in prompts}
    longest = max(len(t) for t in toks.values())
    if longest + args.max_tokens > args.n_ctx:
        ap.error(f"the longest prompt is {longest} tokens: --n-ctx must be at least {longest + args.max_tokens}")
    runs: dict[str, list[tuple[str, str, list[int], float]]] = {name: [] for name, _, _ in configs}
    load_before = os.getloadavg()[0]

    def one(cfg, p):
        name, llm, draft = cfg
        if draft is not None:
            llm.draft_model = draft  # switch the lookup length without reloading the model
        ids, secs = run_once(llm, toks[p.id], args.max_tokens)
        print(f"  {name:<48} {p.id:<18} {len(ids):4d} tokens {secs:7.2f} s", file=sys.stderr)
        return ids, secs

    for cfg in configs:  # warm-up, discarded
        one(cfg, prompts[0])
    slot = 0
    for _ in range(args.repeat):
        for p in prompts:
            r = slot % len(configs)
            for cfg in configs[r:] + configs[:r]:
                ids, secs = one(cfg, p)
                runs[cfg[0]].append((p.id, p.kind, ids, secs))
            slot += 1

    def rate(rs):
        secs = sum(r[3] for r in rs)
        return sum(max(0, len(r[2]) - 1) for r in rs) / secs if secs > 0 else 0.0

    base_runs = runs[configs[0][0]]
    base = rate(base_runs)
    ref = {r[0]: r[2] for r in base_runs}
    results = []
    for name, _, _ in configs:
        rs = runs[name]
        kinds = sorted({r[1] for r in rs})
        results.append({
            "config": name,
            "tokens_per_second": round(rate(rs), 3),
            "speedup": round(rate(rs) / base, 4) if base else None,
            "identical": all(ref[r[0]] == r[2] for r in rs),
            "identical_prompts": sum(ref[r[0]] == r[2] for r in rs),
            "by_kind": {k: round(rate([r for r in rs if r[1] == k]) / rate([b for b in base_runs if b[1] == k]), 4)
                        for k in kinds},
            "median_seconds": round(statistics.median(r[3] for r in rs), 3),
        })
    cpp = cpp_rows(args, prompts, plain) if args.cpp else []
    report = {
        "results": results,
        "cpp": cpp,
        "settings": {
            "target": args.target, "max_tokens": args.max_tokens, "threads": args.threads,
            "prompts": [p.id for p in prompts], "repeat": args.repeat,
            "llama_cpp_python": llama_cpp.__version__,
            "load_average": {"before": round(load_before, 2), "after": round(os.getloadavg()[0], 2)},
        },
    }
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        kinds = list(results[0]["by_kind"])
        print(f"{'config':<50} {'tok/s':>7} {'speedup':>8} {'=plain':>7}  " + " ".join(f"{k:>9}" for k in kinds))
        for r in results:
            same = f"{r['identical_prompts']}/{len(runs[r['config']])}"
            print(f"{r['config']:<50} {r['tokens_per_second']:7.2f} {r['speedup']:7.2f}× {same:>7}  "
                  + " ".join(f"{r['by_kind'][k]:8.2f}×" for k in kinds))
        for r in cpp:
            print(f"{r['config']:<50} {r['tokens_per_second']:7.2f} {r['speedup_vs_cpp_plain']:7.2f}× (vs C++ plain)")
        s = report["settings"]
        print(f"{len(prompts)} prompts × {args.max_tokens} tokens, {args.threads} threads, "
              f"load average {s['load_average']['before']} → {s['load_average']['after']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
