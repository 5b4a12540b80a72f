"""``edgespec bench``: plain decoding against every drafter × k, side by side.

Thin: parse options, build ONE engine from the profile's plan (with the draft model
loaded when a candidate needs it), call ``edgespec.measuring.bench``, render a Rich table for
people, one JSON object for scripts, or a CSV file. Progress and diagnostics go to
stderr, results to stdout. What it shares with ``tune`` is in ``measure``.

Every speedup is the median over passes of a configuration's tokens/s over plain
decoding's in the same pass, with the spread beside it, and a difference inside the
spread is called noise, not a gain or a loss (``measuring.bench_stats``).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from edgespec.cli.common import (
    JsonOpt,
    SeedOpt,
    TemperatureOpt,
    VerboseOpt,
    cli_errors,
    out_console,
    parse_parallel,
)
from edgespec.cli.measure import (
    InputOpt,
    LimitOpt,
    PromptFileOpt,
    QuietOpt,
    close_engines,
    drafter_candidates,
    fmt_x,
    open_engines,
    progress_bar,
    replan,
    setup,
    show_plan,
)
from edgespec.cli.memory_options import MemoryCapOpt, MemoryOpt, MemoryOptions
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
from edgespec.errors import InputError
from edgespec.measuring.bench_stats import DEFAULT_REPEAT


def bench(
    profile: ProfileOpt = "auto",
    target: TargetOpt = None,
    draft: Annotated[
        Optional[str],
        typer.Option(
            "--draft",
            "--draft-candidates",
            "-d",
            help="Drafters to compare, comma-separated: a draft GGUF path or catalog name, 'model' "
            "(the pair's draft), 'ngram', 'mtp' (the target's own MTP head). Default: the pair's draft "
            "model if it is available locally, ngram, and mtp for a target whose file keeps nextn layers.",
        ),
    ] = None,
    k_grid: Annotated[
        str,
        typer.Option(
            "--k-grid",
            help="What to measure for each drafter, comma-separated: 'policy' (its learned draft "
            "length, as a user runs it) and/or fixed draft lengths, e.g. policy,1,2,4,8.",
        ),
    ] = "policy",
    exact: ExactOpt = False,
    optimized: OptimizedOpt = True,
    input_file: InputOpt = None,
    prompt_file: PromptFileOpt = None,
    limit: LimitOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Tokens per generation.")] = 128,
    repeat: Annotated[
        int,
        typer.Option(
            "--repeat",
            "-r",
            min=1,
            help="Measured passes over the prompts, every configuration interleaved within each; "
            "speedups are medians of per-pass ratios, and fewer than 5 passes cannot tell a small "
            "difference from noise.",
        ),
    ] = DEFAULT_REPEAT,
    temperature: TemperatureOpt = 0.0,
    seed: SeedOpt = 0,
    n_ctx: NCtxOpt = None,
    threads: ThreadsOpt = None,
    rpc: RpcOpt = None,
    tensor_split: TensorSplitOpt = None,
    json_output: JsonOpt = False,
    csv_file: Annotated[
        Optional[Path], typer.Option("--csv", help="Also write one row per configuration here.")
    ] = None,
    parallel: Annotated[
        Optional[str],
        typer.Option(
            "--parallel",
            "-P",
            help="Also measure batch throughput: the prompts one at a time against all of them "
            "N per decode (a number or 'auto'), plain decoding on llama.cpp's kernels.",
        ),
    ] = None,
    memory: MemoryOpt = True,
    memory_cap: MemoryCapOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    """Plain decoding vs every drafter × k and the automatic choice, on the same prompts."""
    from edgespec.measuring import batches
    from edgespec.measuring import bench as lib

    with cli_errors():
        n_parallel = parse_parallel(parallel) if parallel is not None else None
        # --draft here: the drafters to compare; the memory each configuration's own, cold (measuring.bench)
        plan_opts = MemoryOptions(memory, memory_cap).apply(
            PlanOptions(
                profile=profile,
                target=target,
                exact=exact,
                optimized=optimized,
                n_ctx=n_ctx,
                threads=threads,
                rpc=rpc,
                tensor_split=tensor_split,
            )
        )
        parts = [p for p in k_grid.replace(" ", "").split(",") if p]
        numbers = ",".join(p for p in parts if p != "policy")
        ks, prompts, auto_plan = setup(numbers or "1", (input_file, prompt_file), limit, "held-out", plan_opts)
        show_plan(auto_plan, verbose and not quiet)
        drafters, draft_model = drafter_candidates(draft, plan_opts, auto_plan, quiet)
        needs_model = "model" in drafters or auto_plan.drafter == "model"
        needs_mtp = "mtp" in drafters or auto_plan.drafter == "mtp"
        engine, fast_engine = open_engines(
            auto_plan, draft_model if needs_model else None, plan_opts.threads, quiet, mtp=needs_mtp
        )
        try:
            auto_plan = replan(auto_plan, plan_opts, engine)  # after a first use's c(n)
            candidates = lib.grid(drafters, ks, p_min=auto_plan.p_min) if numbers else []
            if "policy" in parts:  # each drafter as a user runs it: the learned draft length
                candidates = [lib.Config(d, 1, adaptive_k=True, label=f"{d}, learned k") for d in drafters] + candidates
            # the automatic choice as a user runs it: the learned policy, the plan's bound
            auto = lib.Config(
                auto_plan.drafter,
                max(1, auto_plan.k),
                adaptive_k=auto_plan.adaptive,
                k_max=auto_plan.drafting.k_max,
                p_min=0.0 if auto_plan.adaptive else auto_plan.p_min,
            )
            if auto.adaptive_k:  # the automatic choice is that drafter's learned-k row: measured once
                candidates = [c for c in candidates if not (c.adaptive_k and c.drafter == auto.drafter)]
            plan_info = {
                "drafter": auto_plan.drafter,
                "k": auto_plan.k,
                "profile": auto_plan.profile,
                "predicted_speedup": round(auto_plan.predicted_speedup, 4),
                "reason": auto_plan.reason,
            }
            with progress_bar(quiet, "bench") as progress:
                report = lib.bench_report(
                    engine,
                    candidates,
                    auto,
                    prompts,
                    auto_plan=plan_info,
                    max_tokens=max_tokens,
                    repeat=repeat,
                    temperature=temperature,
                    seed=seed if temperature > 0 else None,
                    progress=progress,
                    fast_engine=fast_engine,
                )
            batch = None
            if n_parallel is not None:
                plain = fast_engine or engine
                plain.set_drafter(None)
                batch = batches.batch_throughput(plain, prompts, n_parallel, max_tokens=max_tokens)
        finally:
            close_engines(engine, fast_engine)
        data = report.to_dict()
        if batch is not None:
            data["batch"] = batch
        if csv_file is not None:
            _write_csv(csv_file, data)
        if json_output:
            typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            _render_bench(data)


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------

_CSV_FIELDS = (
    "config",
    "drafter",
    "k",
    "adaptive_k",
    "tokens_per_second",
    "speedup",
    "acceptance_rate",
    "mean_accepted_length",
    "alpha",
    "hit",
    "identical",
    "tokens",
    "seconds",
    "speedup_min",
    "speedup_max",
    "verdict",
)
# columns from a row's per-pass spread (empty for plain decoding itself)
_CSV_PER_PASS = {"speedup_min": "min", "speedup_max": "max", "verdict": "verdict"}


def _cell(r: dict, column: str) -> object:
    if column in _CSV_PER_PASS:
        return None if r.get("per_pass") is None else r["per_pass"][_CSV_PER_PASS[column]]
    return r.get(column)


def _rows(data: dict) -> list[dict]:
    """One row per configuration measured: plain, the grid, and the automatic choice
    unless it is plain decoding (then its figures are plain's)."""
    rows = [data["plain"], *data["results"]]
    if data["auto"]["config"] != data["plain"]["config"]:
        rows.append(data["auto"])
    return rows


def _write_csv(path: Path, data: dict) -> None:
    rows = _rows(data)
    kinds = list(data["plain"]["by_kind"])
    try:
        with open(path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow([*_CSV_FIELDS, *(f"speedup_{k}" for k in kinds)])
            for r in rows:
                w.writerow([_cell(r, c) for c in _CSV_FIELDS] + [r["by_kind"].get(k) for k in kinds])
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


_VERDICT_STYLE = {"faster": "green", "slower": "red", "within noise": "yellow", "one pass": "yellow"}


def _speed_text(v: float | None, spread: dict | None = None) -> Text:
    """A speedup, green only when every pass says faster and red only when every pass
    says slower (``bench_stats.Spread.verdict``)."""
    style = "" if spread is None else {"faster": "green", "slower": "red"}.get(spread["verdict"], "")
    return Text(fmt_x(v), style=style)


def _spread_cells(spread: dict | None) -> tuple[Text, Text]:
    """The per-pass range and the verdict, for the table."""
    if spread is None:
        return Text("-"), Text("-")
    style = _VERDICT_STYLE.get(spread["verdict"], "")
    return Text(f"{spread['min']:.2f}-{spread['max']:.2f}"), Text(spread["verdict"], style=style)


def _render_bench(data: dict) -> None:
    out = out_console()
    kinds = list(data["plain"]["by_kind"])
    t = Table(title="edgespec bench", title_justify="left")
    t.add_column("config", no_wrap=True)
    t.add_column("tok/s", justify="right")
    t.add_column("speedup", justify="right")
    t.add_column("per pass", justify="right")
    t.add_column("verdict")
    t.add_column("accept", justify="right")
    t.add_column("acc/rnd", justify="right")
    t.add_column("=plain", justify="center")
    for k in kinds:
        t.add_column(k, justify="right", style="dim")
    rows = _rows(data)
    for r in rows:
        same = {True: Text("yes", style="green"), False: Text("NO", style="bold red"), None: Text("-")}[r["identical"]]
        name = Text(r["config"], style="bold" if r["config"].startswith("auto") else "")
        t.add_row(
            name,
            f"{r['tokens_per_second']:.2f}",
            _speed_text(r["speedup"], r["per_pass"]),
            *_spread_cells(r["per_pass"]),
            _pct(r["acceptance_rate"]),
            "-" if r["mean_accepted_length"] is None else f"{r['mean_accepted_length']:.2f}",
            same,
            *(fmt_x(r["by_kind"].get(k)) for k in kinds),
        )
    out.print(t)
    a, best, s = data["auto"], data["best"], data["settings"]
    chosen = "plain decoding" if a["planned_drafter"] == "none" else a["config"].removeprefix("auto: ")
    best_noise = "" if best.get("verdict") in (None, "faster", "slower") else f", {best['verdict']}"
    out.print(
        Text.assemble(
            ("automatic choice ", "bold"),
            f"({a['planned_profile']}): {chosen} → ",
            _speed_text(a["speedup"], a["per_pass"]),
            f" measured, {fmt_x(a['planned_predicted_speedup'])} predicted; best here: {best['config']} ",
            _speed_text(best["speedup"]),
            f"{best_noise} (auto reaches {_pct(data['auto_vs_best'])} of it)",
        )
    )
    if a["per_pass"] is not None:
        out.print(
            Text.assemble(
                ("automatic choice against plain: ", "bold"),
                (a["per_pass"]["words"], _VERDICT_STYLE.get(a["per_pass"]["verdict"], "")),
            )
        )
    if data.get("batch"):
        b = data["batch"]
        out.print(
            Text.assemble(
                ("batch throughput ", "bold"),
                f"({b['reason']}): {b['parallel_tokens_per_second']:.1f} tok/s against "
                f"{b['sequential_tokens_per_second']:.1f} tok/s one prompt at a time → ",
                _speed_text(b["speedup"]),
                " (plain decoding, prompt processing included)",
            )
        )
    load = s["load_average"]
    if (
        s.get("plain_kernels") == "llama.cpp"
        and len(data["results"])
        and data["results"][0]["config"] == "plain, exact kernels"
    ):
        out.print(
            Text(
                "plain runs on llama.cpp's own kernels (what edgespec uses when it does not speculate); "
                "speculation needs the batch-invariant ones, and =plain compares its tokens with plain decoding there",
                style="dim",
            )
        )
    out.print(
        Text(
            f"{len(s['prompts'])} prompts × {s['max_tokens']} tokens × {s['repeat']} pass(es) after a warm-up, "
            f"configurations interleaved, temperature {s['temperature']:g}, {s['n_threads']} threads, load "
            f"average {load['before']} → {load['after']}; speedup = the median over passes of tokens/s over "
            "plain decoding's in the same pass (per pass: its lowest and highest), prompt processing excluded",
            style="dim",
        )
    )
