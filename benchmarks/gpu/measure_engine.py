"""The phases of ``measure.py`` (benchmarks/gpu/) that generate through edgespec's ``Engine``
with a self-draft: exactness (phase 4: greedy plain decoding against greedy speculation, per
kernel kind) and speculation (phase 5: fixed k against plain decoding, measured speedup
against ``costmodel.adaptive.speedup``'s prediction). Knows nothing of the results file.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path
from typing import Any

from measure_report import late, rnd, say
from measure_steps import prompt_ids, times_dict

from edgespec.costmodel import adaptive
from edgespec.costmodel.drafting import DraftingOptions
from edgespec.engine import Engine
from edgespec.events import Done, Round
from edgespec.measuring import tune


def _generate(engine: Engine, prompt: list[int], max_tokens: int) -> dict:
    """One greedy generation through ``Engine.stream``; tokens, stats and the rounds
    that saw a rejection (for the maximum-likelihood α)."""
    rounds_rejected = 0
    done = None
    for ev in engine.stream(prompt, max_tokens=max_tokens, temperature=0.0):
        if isinstance(ev, Round) and ev.rejected > 0:
            rounds_rejected += 1
        elif isinstance(ev, Done):
            done = ev
    assert done is not None
    s = done.stats
    return {"ids": list(done.token_ids), "stats": s, "rounds_rejected": rounds_rejected}


def _first_diff(a: list[int], b: list[int]) -> int | None:
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return i
    return None if len(a) == len(b) else min(len(a), len(b))


def _engine(path: Path, exact: bool, k: int, args: argparse.Namespace) -> Engine:
    return Engine(
        path,
        draft=path,
        drafting=DraftingOptions(k=k, k_max=max(k, 1), p_min=0.0),
        n_ctx=args.n_ctx,
        n_threads=args.threads,
        n_gpu_layers=args.n_gpu_layers,
        exact=exact,
    )


def exactness(path: Path, *, args: argparse.Namespace) -> dict:
    out: dict[str, Any] = {
        "model": str(path),
        "draft": "self (the same file)",
        "max_tokens": args.max_tokens,
        "ks": args.ks,
        "kernels": {},
    }
    for exact in (False, True):
        eng = _engine(path, exact, args.ks[0], args)
        try:
            n_vocab = eng.target_model.n_vocab
            cases = []
            for p in range(args.prompts):
                if late(args) and cases:
                    out["cut_short"] = True
                    break
                prompt = prompt_ids(n_vocab, args.prompt_len, seed=100 + p)
                eng.set_drafter(None)
                plain = _generate(eng, prompt, args.max_tokens)["ids"]
                eng.set_drafter("model")
                for k in args.ks:
                    eng.set_k(k)
                    eng.set_k_max(k)
                    spec = _generate(eng, prompt, args.max_tokens)
                    fd = _first_diff(plain, spec["ids"])
                    cases.append(
                        {
                            "prompt": p,
                            "k": k,
                            "identical": fd is None,
                            "first_difference": fd,
                            "tokens": len(plain),
                            "acceptance_rate": rnd(spec["stats"].acceptance_rate),
                        }
                    )
            out["kernels"][f"exact={exact}"] = {
                "exact_kernels": eng.exact_kernels,
                "cases": cases,
                "all_identical": all(c["identical"] for c in cases),
            }
            say(f"  exact={exact}: speculation = plain in {sum(c['identical'] for c in cases)}/{len(cases)} cases")
        finally:
            eng.close()
    return out


def speculation(path: Path, *, exact: bool, args: argparse.Namespace) -> dict:
    """Self-draft speculation at fixed k against plain decoding on one engine."""
    eng = _engine(path, exact, args.ks[0], args)
    try:
        n_vocab = eng.target_model.n_vocab
        prefix = prompt_ids(n_vocab, args.position, seed=1)
        t = tune.time_decodes(eng.ctx, prefix, n_max=args.n_max, repeats=args.repeats, draft=eng.draft_ctx)
        c = tune.fit_verify_cost(t.relative)
        gamma = t.gamma or 1.0
        configs = [0, *args.ks]  # 0 = plain
        runs: dict[int, list[dict]] = {k: [] for k in configs}
        cut_short = False
        for rep in range(args.spec_repeats + 1):  # the first pass warms up and is dropped
            if rep > 1 and late(args):
                cut_short = True
                break
            for p in range(args.prompts):
                prompt = prompt_ids(n_vocab, args.prompt_len, seed=200 + p)
                order = configs if (rep + p) % 2 == 0 else configs[::-1]
                for k in order:
                    if k == 0:
                        eng.set_drafter(None)
                    else:
                        eng.set_drafter("model")
                        eng.set_k(k)
                        eng.set_k_max(k)
                    eng.reset()  # every configuration decodes the prompt from scratch
                    g = _generate(eng, prompt, args.max_tokens)
                    if rep:
                        runs[k].append(g)

        def rate(rs: list[dict]) -> float:
            toks = sum(r["stats"].generated_tokens for r in rs)
            secs = sum(r["stats"].t_generate for r in rs)
            return toks / secs if secs > 0 else 0.0

        plain_rate = rate(runs[0])
        points = []
        for k in args.ks:
            rs = runs[k]
            st = [r["stats"] for r in rs]
            drafted = sum(s.drafted for s in st)
            accepted = sum(s.accepted for s in st)
            alpha = adaptive.estimate_alpha(accepted, drafted, sum(r["rounds_rejected"] for r in rs))
            alpha = 1.0 if alpha is None else alpha
            rounds = sum(s.rounds for s in st)
            t_gen = sum(s.t_generate for s in st)
            points.append(
                {
                    "k": k,
                    "tokens_per_second": rnd(rate(rs), 3),
                    "measured_speedup": rnd(rate(rs) / plain_rate if plain_rate else None),
                    "predicted_speedup": rnd(adaptive.speedup(alpha, k, c, gamma)),
                    "predicted_speedup_alpha_1": rnd(adaptive.speedup(1.0, k, c, gamma)),
                    "alpha": rnd(alpha),
                    "acceptance_rate": rnd(accepted / drafted if drafted else None),
                    "tokens_per_round": rnd(sum(s.generated_tokens for s in st) / rounds if rounds else None),
                    "round_ms": rnd(t_gen / rounds * 1e3 if rounds else None),
                    "verify_ms_per_round": rnd(sum(s.t_verify for s in st) / rounds * 1e3 if rounds else None),
                    "draft_ms_per_round": rnd(sum(s.t_decode_draft for s in st) / rounds * 1e3 if rounds else None),
                    "overhead_fraction": rnd(statistics.mean(s.overhead_fraction for s in st) if st else None),
                }
            )
            say(
                f"  k={k}: measured {points[-1]['measured_speedup']}x, predicted {points[-1]['predicted_speedup']}x "
                f"(α {points[-1]['alpha']})"
            )
        plain_st = [r["stats"] for r in runs[0]]
        plain_ms = (
            sum(s.t_generate for s in plain_st) / sum(s.generated_tokens for s in plain_st) * 1e3
            if plain_st and sum(s.generated_tokens for s in plain_st)
            else None
        )
        return {
            "model": str(path),
            "draft": "self (the same file)",
            "exact": exact,
            "exact_kernels": eng.exact_kernels,
            "max_tokens": args.max_tokens,
            "prompts": args.prompts,
            "repeats": args.spec_repeats,
            "cut_short": cut_short,
            "timing": times_dict(t),
            "plain_tokens_per_second": rnd(plain_rate, 3),
            "plain_ms_per_token": rnd(plain_ms),
            "plain_overhead_fraction": rnd(
                statistics.mean(s.overhead_fraction for s in plain_st) if plain_st else None
            ),
            "points": points,
        }
    finally:
        eng.close()
