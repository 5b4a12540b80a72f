"""Speculation with the target over llama.cpp's RPC backend, through a slow link.

Two ``edgespec rpc-server`` processes on loopback hold the target's layers (split
evenly); each sits behind a ``LatencyProxy`` that adds a one-way delay to every message
(0, 0.5, 3 and 10 ms by default: loopback, a wired LAN, Wi-Fi, a far link). The draft
model and the sampling stay in this process. In ONE process, over one engine whose
links are re-timed between latencies, it measures at each latency with
``edgespec.measuring.tune``:

* the target's step time and c(n), n = 1..16, over RPC, and γ (local draft step over
  the RPC target step);
* plain decoding, the model drafter and prompt lookup (ngram) at fixed k, interleaved
  per prompt; their speedups over plain decoding over the same link, and the cost
  model's prediction for each (α and the n-gram hit rate from the same generations);

and, against a local run of the target in the same process: whether the greedy output
over RPC is the local output token for token, and the network model of
``costmodel.adaptive.over_network`` (c(n) at each latency predicted from the 0 ms curve and the
step-time difference) against the measured c(n).

    flock /tmp/edgespec-bench.lock python -m benchmarks.rpc \\
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

from benchmarks.rpc_servers import RpcServer
from edgespec import Engine
from edgespec.costmodel import adaptive
from edgespec.llama.netproxy import LatencyProxy
from edgespec.measuring import bench, tune
from edgespec.measuring.prompts import CALIBRATION

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


def run_latency(engine, prompts, ks, args, ref) -> dict:
    """Everything measured at one link latency."""
    same = {
        p.id: list(engine.generate(p.prompt, max_tokens=args.max_tokens).token_ids) == ref["tokens"][p.id]
        for p in prompts
    }
    times = tune.time_decodes(
        engine.ctx, engine.prompt_tokens(prompts[0].prompt), repeats=args.repeats, draft=engine.draft_ctx
    )
    c = tune.fit_verify_cost(times.relative)
    configs = [bench.PLAIN, *bench.grid(("model", "ngram"), ks)]
    runs = bench.measure(engine, configs, prompts, max_tokens=args.max_tokens, warmup=False)
    plain = runs[bench.PLAIN.name]
    per_token = lambda rs: sum(r.seconds for r in rs) / sum(r.tokens for r in rs)  # noqa: E731
    points = []
    for cfg in configs[1:]:
        rs = runs[cfg.name]
        alpha, hit = bench.pooled_alpha(rs)
        alpha, hit = alpha or 0.0, hit or 0.0
        drafted = sum(r.drafted for r in rs)
        gamma = (
            times.gamma
            if cfg.drafter == "model"
            else (sum(r.t_draft for r in rs) / drafted / (times.step_ms * 1e-3) if drafted else 0.0)
        )
        points.append(
            {
                "drafter": cfg.drafter,
                "k": cfg.k,
                "alpha": round(alpha, 4),
                "hit": round(hit, 4),
                "acceptance_rate": round(sum(r.accepted for r in rs) / drafted, 4) if drafted else None,
                "rounds_per_token": round(sum(r.rounds for r in rs) / sum(r.tokens for r in rs), 4),
                "ms_per_token": round(per_token(rs) * 1e3, 3),
                "speedup": round(per_token(plain) / per_token(rs), 4),
                "predicted_speedup": round(adaptive.speedup(alpha, cfg.k, c, gamma, hit), 4),
                "same_tokens_as_plain": all(r.token_ids == p.token_ids for r, p in zip(rs, plain)),
            }
        )
    return {
        "same_tokens_as_local": same,
        "target_step_ms": round(times.step_ms, 3),
        "draft_step_ms": round(times.draft_ms, 3),
        "draft_cost_ratio": round(times.gamma, 4),
        "verify_ms": {str(n): round(t, 3) for n, t in times.target_ms.items()},
        "verify_cost_measured": {str(n): round(v, 4) for n, v in times.relative.items()},
        "plain_ms_per_token": round(per_token(plain) * 1e3, 3),
        "plain_tokens_per_second": round(1 / per_token(plain), 3),
        "points": points,
    }


def main() -> None:
    args = parse()
    prompts = CALIBRATION[: args.prompts]
    ks = [int(k) for k in args.ks.split(",")]
    latencies = [float(x) for x in args.latencies.split(",")]
    say = lambda m: print(f"[{time.strftime('%H:%M:%S')}] {m}", file=sys.stderr, flush=True)  # noqa: E731

    say("local reference run")
    ref = local_reference(args, prompts)
    out: dict = {
        "settings": {
            **{k: str(v) for k, v in vars(args).items()},
            "prompts": [p.id for p in prompts],
            "load_average_start": bench.load_average(),
        },
        "local": {"step_ms": round(ref["step_ms"], 3), "c": {str(n): round(c, 4) for n, c in ref["c"].items()}},
        "latencies": [],
    }
    with (
        RpcServer(threads=args.threads) as s1,
        RpcServer(threads=args.threads) as s2,
        LatencyProxy(("127.0.0.1", s1.port)) as p1,
        LatencyProxy(("127.0.0.1", s2.port)) as p2,
    ):
        eps = f"{p1.endpoint},{p2.endpoint}"
        with Engine(args.target, draft=args.draft, n_ctx=2048, n_threads=args.threads, exact=True, rpc=eps) as engine:
            for lat in latencies:
                p1.delay_ms = p2.delay_ms = lat
                say(f"{lat} ms each way")
                entry = {"latency_ms": lat, **run_latency(engine, prompts, ks, args, ref)}
                out["latencies"].append(entry)
                say(
                    f"  step {entry['target_step_ms']:.1f} ms, plain {entry['plain_ms_per_token']:.1f} ms/token, "
                    + ", ".join(
                        f"{p['drafter']} k={p['k']}: {p['speedup']:.2f}x (predicted {p['predicted_speedup']:.2f}x)"
                        for p in entry["points"]
                    )
                )
    analyse(out)
    out["settings"]["load_average_end"] = bench.load_average()
    text = json.dumps(out, indent=2)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    report(out)


def analyse(out: dict) -> None:
    """The network model against the measurements: c(n) at each latency from the 0 ms
    curve and the added step time; each configuration's speedup from its 0 ms time per
    token plus the added time per target decode (plain decoding's added time per token)
    times its target decodes per token. And where the model drafter starts to pay."""
    base = out["latencies"][0]
    t0 = base["target_step_ms"]
    c0 = adaptive.VerifyCost(
        tuple(int(n) for n in base["verify_cost_measured"]), tuple(base["verify_cost_measured"].values())
    )
    for e in out["latencies"]:
        r = e["target_step_ms"] - t0  # what the link added to a decode
        pred, _ = adaptive.over_network(c0, None, step_ms=t0, round_trip_ms=max(r, 0.0))
        errs = [abs(pred(int(n)) / c - 1) for n, c in e["verify_cost_measured"].items() if int(n) > 1]
        added = e["plain_ms_per_token"] - base["plain_ms_per_token"]
        e["network_model"] = {
            "added_ms_per_step": round(r, 3),
            "added_ms_per_plain_token": round(added, 3),
            "c_predicted": {str(n): round(pred(n), 4) for n in (2, 4, 8, 16)},
            "c_max_rel_error": round(max(errs), 4),
        }
        for p, p0 in zip(e["points"], base["points"]):
            tau = p0["ms_per_token"] + added * p["rounds_per_token"]
            p["network_predicted_speedup"] = round(e["plain_ms_per_token"] / tau, 4)
            p["network_prediction_error"] = round(p["network_predicted_speedup"] / p["speedup"] - 1, 4)
            p["prediction_error"] = round(p["predicted_speedup"] / p["speedup"] - 1, 4)
    best = lambda e, d: max((p for p in e["points"] if p["drafter"] == d), key=lambda p: p["speedup"])  # noqa: E731
    pays = [e["latency_ms"] for e in out["latencies"] if best(e, "model")["speedup"] > 1.0]
    # break-even of the best model configuration at 0 ms: added time per decode ΔR with
    # plain0 + ΔR = tau0 + ΔR·rounds_per_token; ΔR per ms of one-way latency from a fit
    m0 = best(base, "model")
    dr = (m0["ms_per_token"] - base["plain_ms_per_token"]) / max(1e-9, 1 - m0["rounds_per_token"])
    lat = [(e["latency_ms"], e["network_model"]["added_ms_per_plain_token"]) for e in out["latencies"]]
    slope = sum(x * y for x, y in lat) / max(1e-9, sum(x * x for x, _ in lat))
    errs = lambda key: [abs(p[key]) for e in out["latencies"][1:] for p in e["points"]]  # noqa: E731
    out["summary"] = {
        "model_drafter_pays_from_ms_measured": pays[0] if pays else None,
        "model_drafter_break_even": {
            "config": f"model k={m0['k']}",
            "added_ms_per_decode": round(dr, 2),
            "added_ms_per_decode_per_ms_one_way": round(slope, 3),
            "one_way_latency_ms": round(dr / slope, 2) if slope > 0 else None,
        },
        "best": {
            str(e["latency_ms"]): {
                d: {"k": best(e, d)["k"], "speedup": best(e, d)["speedup"]} for d in ("model", "ngram")
            }
            for e in out["latencies"]
        },
        "network_model_within_10pct": f"{sum(x <= 0.10 for x in errs('network_prediction_error'))}"
        f"/{len(errs('network_prediction_error'))}",
        "network_model_max_error": round(max(errs("network_prediction_error")), 4),
        "formula_within_10pct": f"{sum(x <= 0.10 for x in errs('prediction_error'))}/{len(errs('prediction_error'))}",
        "same_tokens_as_local": all(all(e["same_tokens_as_local"].values()) for e in out["latencies"]),
        "drafts_same_tokens_as_plain": all(p["same_tokens_as_plain"] for e in out["latencies"] for p in e["points"]),
    }


def report(out: dict) -> None:
    print(f"local: step {out['local']['step_ms']:.1f} ms, c(8) {out['local']['c']['8']:.2f}")
    print(
        "| link (one way) | step over RPC | c(2) | c(4) | c(8) | c(16) | γ | plain tok/s | model k: speedup "
        "(network model) | ngram k: speedup (network model) | c(n) model error |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---:|")
    for e in out["latencies"]:
        c = e["verify_cost_measured"]
        cells = {
            d: ", ".join(
                f"{p['k']}: {p['speedup']:.2f}× ({p['network_predicted_speedup']:.2f}×)"
                for p in e["points"]
                if p["drafter"] == d
            )
            for d in ("model", "ngram")
        }
        print(
            f"| {e['latency_ms']:g} ms | {e['target_step_ms']:.1f} ms | {c['2']:.2f} | {c['4']:.2f} | {c['8']:.2f} "
            f"| {c['16']:.2f} | {e['draft_cost_ratio']:.2f} | {e['plain_tokens_per_second']:.2f} | {cells['model']} "
            f"| {cells['ngram']} | {e['network_model']['c_max_rel_error']:.1%} |"
        )
    print(json.dumps(out["summary"], indent=2))


if __name__ == "__main__":
    main()
