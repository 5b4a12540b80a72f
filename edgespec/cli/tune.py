"""``edgespec tune``: measure this machine's cost-model figures and choose drafter and k.

Thin: parse options, build one engine from the profile's plan, call ``edgespec.measuring.tune``,
render a table and a terminal chart of predicted vs measured speedup for people or one
JSON object for scripts, and save the figures into a user profile when asked. What it
shares with ``bench`` is in ``measure``.
"""

from __future__ import annotations

import json
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from edgespec.cli.common import (
    JsonOpt,
    VerboseOpt,
    cli_errors,
    err_console,
    out_console,
)
from edgespec.cli.measure import (
    InputOpt,
    KGridOpt,
    LimitOpt,
    PromptFileOpt,
    QuietOpt,
    close_engines,
    drafter_candidates,
    fmt_x,
    open_engines,
    progress_bar,
    setup,
    show_plan,
)
from edgespec.cli.plan_options import (
    ExactOpt,
    NCtxOpt,
    OptimizedOpt,
    PlanOptions,
    ProfileOpt,
    RpcOpt,
    TargetOpt,
    TensorSplitOpt,
    ThreadsOpt,
)
from edgespec.costmodel.adaptive import is_no_draft


def tune(
    profile: ProfileOpt = "auto",
    target: TargetOpt = None,
    draft: Annotated[
        Optional[str],
        typer.Option(
            "--draft",
            "-d",
            help="Draft model to measure besides ngram: a GGUF path or catalog name; 'mtp' for the "
            "target's own MTP head; 'ngram' for the n-gram drafter only, 'none' for c(n) only. Default: "
            "the pair's draft if available, and mtp for a target whose file keeps nextn layers.",
        ),
    ] = None,
    save: Annotated[
        bool, typer.Option("--save", help="Write the measured figures into the profile (user copy).")
    ] = False,
    save_as: Annotated[
        Optional[str], typer.Option("--save-as", help="Write them into a new user profile NAME extending this one.")
    ] = None,
    k_grid: KGridOpt = "1,2,4,8",
    exact: ExactOpt = False,
    optimized: OptimizedOpt = True,
    input_file: InputOpt = None,
    prompt_file: PromptFileOpt = None,
    limit: LimitOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Tokens per calibration run.")] = 64,
    repeat: Annotated[int, typer.Option("--repeat", "--repeats", "-r", min=1, help="Timed sweeps over n = 1..16.")] = 5,
    n_ctx: NCtxOpt = None,
    threads: ThreadsOpt = None,
    rpc: RpcOpt = None,
    tensor_split: TensorSplitOpt = None,
    json_output: JsonOpt = False,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Measure step time, verify cost c(n), draft cost γ and acceptance α; choose drafter and k."""
    from edgespec import profiles as prof_lib
    from edgespec.measuring import tune as lib

    with cli_errors():
        plan_opts = PlanOptions(
            profile=profile,
            target=target,
            exact=exact,
            optimized=optimized,
            n_ctx=n_ctx,
            threads=threads,
            rpc=rpc,
            tensor_split=tensor_split,
        )  # --draft here: the draft model to measure
        ks, prompts, base = setup(k_grid, (input_file, prompt_file), limit, "calibration", plan_opts)
        show_plan(base, verbose and not quiet)
        mode = (draft or "auto").strip().lower()
        if is_no_draft(mode):
            drafters, draft_model = [], None
        else:
            spec = None if mode == "auto" else "ngram" if mode == "ngram" else f"{draft},ngram"
            drafters, draft_model = drafter_candidates(spec, plan_opts, base, quiet)
            draft_model = draft_model if "model" in drafters else None
        engine, fast_engine = open_engines(base, draft_model, plan_opts.threads, quiet, mtp="mtp" in drafters)
        prof = prof_lib.load_profile(base.profile)
        err = err_console()
        err.quiet = quiet
        try:
            with progress_bar(quiet, "tune") as progress:
                result = lib.tune(
                    engine,
                    drafters=drafters,
                    ks=ks,
                    prompts=prompts,
                    max_tokens=max_tokens,
                    repeats=repeat,
                    k_min=prof.k_min,
                    k_max=prof.k_max,
                    min_gain=prof.min_gain,
                    progress=progress,
                    phase=lambda m: err.print(Text(m, style="dim")),
                    fast_engine=fast_engine,
                )
        finally:
            close_engines(engine, fast_engine)
        data = result.to_dict()
        data["profile"] = base.profile
        pair = lib.pair_of(base.target, str(draft_model) if draft_model else None)
        if base.rpc:  # the network's share of a step: what the planner adds to the local figures
            from edgespec.planning.costs import local_step_ms

            local = local_step_ms(prof, pair, base.target)
            data["rpc"] = {
                "servers": list(base.rpc),
                "step_ms": result.times.step_ms,
                "local_step_ms": local,
                "round_trip_ms": max(0.0, result.times.step_ms - local),
            }
        if save or save_as:
            name = save_as or base.profile
            extends = base.profile if save_as and save_as != base.profile else None
            if base.rpc:
                path, _, skipped = lib.save_network(
                    result, name, local_step_ms=data["rpc"]["local_step_ms"], extends=extends
                )
            else:
                path, skipped = lib.save(result, name, pair=pair, extends=extends)
            data["saved"] = {"profile": name, "path": str(path), "pair": pair, "skipped": skipped}
        if json_output:
            typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            _render_tune(data)


def _bar(value: float, scale: float, width: int, one: int, style: str, glyph: str = "█") -> Text:
    """A bar of ``value`` on a line where column ``one`` marks 1.0×; solid bars end in
    eighths of a cell."""
    eighths = max(0, round(value / scale * width * 8))
    full, part = divmod(eighths, 8)
    if glyph != "█":
        full, part = round(eighths / 8), 0
    body = glyph * min(full, width) + ("" if full >= width or not part else " ▏▎▍▌▋▊▉"[part])
    line = Text(body, style=style)
    if len(body) <= one:
        line.append(" " * (one - len(body)) + "┊", style="dim")
        line.append(" " * (width - one - 1))
    else:
        line.append(" " * (width - len(body)))
    return line


def _render_tune(data: dict) -> None:
    out = out_console()
    c = data["verify_cost"]
    t = Table(title=f"edgespec tune ({data['profile']})", title_justify="left", show_header=False, box=None)
    t.add_column(style="bold")
    t.add_column(overflow="fold")
    t.add_row(
        "target step",
        f"{data['target_step_ms']:.1f} ms ({1000 / data['target_step_ms']:.1f} tok/s upper bound of plain decoding)",
    )
    if data["draft_step_ms"] is not None:
        t.add_row("draft step", f"{data['draft_step_ms']:.1f} ms: γ = {data['draft_cost_ratio']:.2f} target steps")
    if data.get("exact_plain_tokens_per_second"):
        t.add_row(
            "exact kernels",
            f"plain decoding {data['exact_plain_tokens_per_second']:.1f} tok/s on the batch-"
            f"invariant kernels speculation needs, {data['plain_tokens_per_second']:.1f} tok/s on llama.cpp's: "
            f"{data['exact_slowdown']:.2f}× slower, counted in every speedup below",
        )
    if data.get("rpc"):
        r = data["rpc"]
        t.add_row(
            "over RPC",
            f"{', '.join(r['servers'])}: {r['step_ms']:.1f} ms per step against "
            f"{r['local_step_ms']:.1f} ms computed here (the profile's step): {r['round_trip_ms']:.1f} ms "
            "of network per target decode",
        )
    t.add_row(
        "verify cost", "  ".join(f"c({n})={float(v):.2f}" for n, v in c.items() if int(n) in (2, 3, 4, 5, 6, 8, 12, 16))
    )
    if data.get("batch"):
        step = data["target_step_ms"]
        t.add_row(
            "batch throughput",
            "  ".join(
                f"{n}×: {b['throughput'] * 1000 / step:.0f} tok/s ({b['throughput']:.2f}×)"
                for n, b in data["batch"].items()
            )
            + "  (sequences per decode, one token each; "
            "--parallel auto picks from these)",
        )
    for name, d in data["drafters"].items():
        extra = f", proposes in {d['hit']:.0%} of rounds" if name == "ngram" else ""
        pmin = f", p_min {d['p_min']:.2f}" if d["p_min"] is not None else ""
        t.add_row(
            f"{name} drafter",
            f"α = {d['alpha']:.2f} (accepted {d['acceptance_rate']:.0%} of drafts{extra}); "
            f"best k = {d['k']}, predicted {fmt_x(d['predicted_speedup'])}{pmin}",
        )
    out.print(t)

    points = data["points"]
    if points:
        vals = [p["predicted_speedup"] for p in points] + [p["measured_speedup"] for p in points]
        scale = max(1.25, max(vals)) * 1.05
        width = 40
        one = min(width - 1, round(1.0 / scale * width))
        out.print(Text("\npredicted (▒ cost model) vs measured (█) speedup per k; ┊ = plain decoding", style="bold"))
        for name in data["drafters"]:
            out.print(Text(f"{name} drafter", style="bold"))
            for p in (p for p in points if p["drafter"] == name):
                pred = _bar(p["predicted_speedup"], scale, width, one, "blue", glyph="▒")
                meas = _bar(
                    p["measured_speedup"], scale, width, one, "green" if p["measured_speedup"] >= 1.0 else "red"
                )
                out.print(Text.assemble(f"  k={p['k']:<4d}predicted ", pred, f" {fmt_x(p['predicted_speedup'])}"))
                out.print(Text.assemble("        measured  ", meas, f" {fmt_x(p['measured_speedup'])}"))

    ch = data["choice"]
    if ch["drafter"] == "none":
        verdict = "plain decoding: no drafter is predicted to gain enough on this machine"
    else:
        verdict = f"{ch['drafter']} drafter, k={ch['k']}: predicted {fmt_x(ch['predicted_speedup'])}"
        if ch["measured_speedup"] is not None:
            verdict += f", measured {fmt_x(ch['measured_speedup'])}"
        if ch["p_min"] is not None:
            verdict += f", p_min {ch['p_min']:.2f}"
    out.print(Text.assemble(("\nchoice: ", "bold"), verdict))
    s = data["settings"]
    out.print(
        Text(
            f"{len(s['prompts'])} calibration prompts × {s['max_tokens']} tokens, {s['n_threads']} threads, "
            f"{s['repeats']} timing sweeps, load average {s['load_average']}",
            style="dim",
        )
    )
    saved = data.get("saved")
    if saved:
        out.print(
            Text(
                f"saved the measured figures to {saved['path']}; `--profile {saved['profile']}` uses them from now on",
                style="green",
            )
        )
        for note in saved["skipped"]:
            out.print(Text(f"not saved: {note}", style="yellow"))
    else:
        out.print(Text(f"run again with --save to use these figures with --profile {data['profile']}", style="dim"))
