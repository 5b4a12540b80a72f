"""Speculation with the target over llama.cpp's RPC backend, through a slow link.

Two ``edgespec rpc-server`` processes on loopback hold the target's layers (split
evenly); each sits behind a ``LatencyProxy`` that adds a one-way delay to every message
(0, 0.5, 3 and 10 ms by default: loopback, a wired LAN, Wi-Fi, a far link). The draft
model and the sampling stay in this process. In ONE process, over one engine whose
links are re-timed between latencies, it measures at each latency with
``edgespec.tune``:

* the target's step time and c(n), n = 1..16, over RPC, and γ (local draft step over
  the RPC target step);
* plain decoding, the model drafter and prompt lookup (ngram) at fixed k, interleaved
  per prompt; their speedups over plain decoding over the same link, and the cost
  model's prediction for each (α and the n-gram hit rate from the same generations);

and, against a local run of the target in the same process: whether the greedy output
over RPC is the local output token for token, and the network model of
``adaptive.over_network`` (c(n) at each latency predicted from the 0 ms curve and the
step-time difference) against the measured c(n).

    flock /tmp/edgespec-bench.lock python benchmarks/rpc.py \\
        --out benchmarks/results/rpc-2core.json

Everything runs on this machine's cores: the servers compute one after the other (the
layers are split, not replicated) and the drafter runs while they wait, so the numbers
are a 2-core laptop lending itself its own layers. What changes with the link is real.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # rpc_support: the tests' server helper

from edgespec import Engine, adaptive, bench, tune  # noqa: E402
from edgespec.bench_prompts import CALIBRATION  # noqa: E402
from edgespec.netproxy import LatencyProxy  # noqa: E402
from rpc_support import RpcServer  # noqa: E402

MODELS = Path("~/.cache/edgespec/models").expanduser()


def parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default=str(MODELS / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--draft", default=str(MODELS / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"))
    ap.add_argument("--latencies", default="0,0.5,3,10", help="one-way delay per message, ms")
    ap.add_argument("--ks", default="2,4,8")
    ap.add_argument("--prompts", type=int, default=3, help="calibration prompts to use")
    ap.add_argument("--max-tokens", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3, help="timing sweeps for c(n)")
    ap.add_argument("--threads", type=int, default=2, help="threads here (draft) and in each server")
    ap.add_argument("--out", type=Path)
    return ap.parse_args()


def local_reference(args, prompts) -> dict:
    """The target on this machine: greedy tokens per prompt, step time and c(n)."""
    with Engine(args.target, n_ctx=2048, n_threads=args.threads, exact=True) as e:
        tokens = {p.id: list(e.generate(p.prompt, max_tokens=args.max_tokens).token_ids) for p in prompts}
        times = tune.time_decodes(e.ctx, e.prompt_tokens(prompts[0].prompt), repeats=args.repeats)
    return {"tokens": tokens, "step_ms": times.step_ms, "c": times.relative}


def main() -> None:
    args = parse()
    prompts = CALIBRATION[: args.prompts]
    ks = [int(k) for k in args.ks.split(",")]
    latencies = [float(x) for x in args.latencies.split(",")]
    say = lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True)  # noqa: E731

    say("local reference run")
    ref = local_reference(args, prompts)
    out: dict = {"settings": {**{k: str(v) for k, v in vars(args).items()}, "prompts": [p.id for p in prompts],
                              "load_average_start": bench.load_average()},
                 "local": {"step_ms": round(ref["step_ms"], 3),
                           "c": {str(n): round(c, 4) for n, c in ref["c"].items()}},
                 "latencies": []}
    with RpcServer(threads=args.threads) as s1, RpcServer(threads=args.threads) as s2, \
            LatencyProxy(("127.0.0.1", s1.port)) as p1, LatencyProxy(("127.0.0.1", s2.port)) as p2:
        eps = f"{p1.endpoint},{p2.endpoint}"
        with Engine(args.target, draft=args.draft, n_ctx=2048, n_threads=args.threads, exact=True,
                    rpc=eps) as engine:
            for lat in latencies:
                p1.delay_ms = p2.delay_ms = lat
                say(f"{lat} ms each way: identity check, then tune")
                same = {p.id: list(engine.generate(p.prompt, max_tokens=args.max_tokens).token_ids)
                        == ref["tokens"][p.id] for p in prompts}
                res = tune.tune(engine, drafters=("model", "ngram"), ks=ks, prompts=prompts,
                                max_tokens=args.max_tokens, repeats=args.repeats)
                d = res.to_dict()
                entry = {"latency_ms": lat, "same_tokens_as_local": same, **{
                    k: d[k] for k in ("target_step_ms", "draft_step_ms", "draft_cost_ratio", "verify_cost_measured",
                                      "verify_ms", "drafters", "points", "plain_tokens_per_second", "choice")}}
                out["latencies"].append(entry)
                say(f"  step {d['target_step_ms']:.1f} ms, c(8) {d['verify_cost_measured']['8']:.2f}, "
                    + ", ".join(f"{p['drafter']} k={p['k']}: {p['measured_speedup']:.2f}x "
                                f"(predicted {p['predicted_speedup']:.2f}x)" for p in d["points"]))
    analyse(out)
    out["settings"]["load_average_end"] = bench.load_average()
    text = json.dumps(out, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    report(out)


def analyse(out: dict) -> None:
    """The network model against the measured c(n); prediction errors; where drafting pays."""
    base = out["latencies"][0]
    t0 = base["target_step_ms"]
    c0 = adaptive.VerifyCost(tuple(int(n) for n in base["verify_cost_measured"]),
                             tuple(base["verify_cost_measured"].values()))
    for e in out["latencies"]:
        r = e["target_step_ms"] - t0  # what the link added to a step
        pred, _ = adaptive.over_network(c0, None, step_ms=t0, round_trip_ms=r)
        errs = [abs(pred(int(n)) / c - 1) for n, c in e["verify_cost_measured"].items() if int(n) > 1]
        e["network_model"] = {"added_ms_per_decode": round(r, 3), "c_predicted": {
            str(n): round(pred(n), 4) for n in (2, 4, 8, 16)}, "c_max_rel_error": round(max(errs), 4)}
        for p in e["points"]:
            p["prediction_error"] = round(p["predicted_speedup"] / p["measured_speedup"] - 1, 4)
    best = lambda e, d: max((p for p in e["points"] if p["drafter"] == d), key=lambda p: p["measured_speedup"])  # noqa: E731
    pays = [e["latency_ms"] for e in out["latencies"] if best(e, "model")["measured_speedup"] > 1.0]
    errors = [abs(p["prediction_error"]) for e in out["latencies"] for p in e["points"]]
    out["summary"] = {
        "model_drafter_pays_from_ms": pays[0] if pays else None,
        "best": {str(e["latency_ms"]): {d: {"k": best(e, d)["k"], "speedup": best(e, d)["measured_speedup"]}
                                        for d in ("model", "ngram")} for e in out["latencies"]},
        "prediction_within_10pct": sum(x <= 0.10 for x in errors), "predictions": len(errors),
        "max_prediction_error": round(max(errors), 4),
        "same_tokens_as_local": all(all(e["same_tokens_as_local"].values()) for e in out["latencies"]),
    }


def report(out: dict) -> None:
    print(f"local: step {out['local']['step_ms']:.1f} ms, c(8) {out['local']['c']['8']:.2f}")
    print("| link (one way) | step over RPC | c(2) | c(4) | c(8) | c(16) | γ | plain tok/s | model k: speedup "
          "(predicted) | ngram k: speedup (predicted) | c(n) model error |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for e in out["latencies"]:
        c = e["verify_cost_measured"]
        cells = {d: ", ".join(f"{p['k']}: {p['measured_speedup']:.2f}× ({p['predicted_speedup']:.2f}×)"
                              for p in e["points"] if p["drafter"] == d) for d in ("model", "ngram")}
        print(f"| {e['latency_ms']:g} ms | {e['target_step_ms']:.1f} ms | {c['2']:.2f} | {c['4']:.2f} | {c['8']:.2f} "
              f"| {c['16']:.2f} | {e['draft_cost_ratio']:.2f} | {e['plain_tokens_per_second']:.2f} | {cells['model']} "
              f"| {cells['ngram']} | {e['network_model']['c_max_rel_error']:.1%} |")
    print(json.dumps(out["summary"], indent=2))


if __name__ == "__main__":
    main()
