"""``edgespec bench`` and ``edgespec tune``: measure this machine, side by side.

Thin: parse options, build ONE engine from the profile's plan (with the draft model
loaded when a candidate needs it), call ``edgespec.bench`` / ``edgespec.tune``, render a
Rich table and a terminal chart for people or one JSON object for scripts. Progress and
diagnostics go to stderr, results to stdout.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from edgespec.cli.common import cli_errors, err_console, load_engine, make_plan, out_console
from edgespec.errors import InputError, ProfileError

# -- shared options ----------------------------------------------------------------------
ProfileOpt = Annotated[str, typer.Option("--profile", "-p", help="Device profile name, or 'auto'.")]
TargetOpt = Annotated[
    Optional[str], typer.Option("--target", "-m", help="Target model: a GGUF path or catalog name (overrides the profile).")
]
KGridOpt = Annotated[str, typer.Option("--k-grid", help="Draft lengths to measure, comma-separated.")]
PromptFileOpt = Annotated[
    Optional[Path],
    typer.Option("--prompt-file", "-f", help="JSONL prompts (id + prompt or messages, as `generate --input`) "
                 "instead of the built-in set."),
]
LimitOpt = Annotated[Optional[int], typer.Option("--limit", min=1, help="Use only the first N prompts.")]
ThreadsOpt = Annotated[
    Optional[int], typer.Option("--threads", min=1, help="CPU threads (default: the profile's, one per physical core).")
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object for scripts.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress or diagnostics on stderr.")]


def bench(
    profile: ProfileOpt = "auto",
    target: TargetOpt = None,
    draft_candidates: Annotated[
        Optional[str],
        typer.Option("--draft-candidates", "-d",
                     help="Drafters to compare, comma-separated: a draft GGUF path or catalog name, 'model' "
                          "(the pair's draft), 'ngram'. Default: the pair's draft model if it is available "
                          "locally, and ngram."),
    ] = None,
    k_grid: KGridOpt = "1,2,4,8",
    prompt_file: PromptFileOpt = None,
    limit: LimitOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Tokens per generation.")] = 128,
    repeat: Annotated[int, typer.Option("--repeat", "-r", min=1, help="Measured passes over the prompts.")] = 1,
    temperature: Annotated[float, typer.Option("--temperature", "-t", min=0.0, help="0 = greedy.")] = 0.0,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Seed for sampling (temperature > 0).")] = 0,
    threads: ThreadsOpt = None,
    json_output: JsonOpt = False,
    csv_file: Annotated[Optional[Path], typer.Option("--csv", help="Also write one row per configuration here.")] = None,
    quiet: QuietOpt = False,
) -> None:
    """Plain decoding vs every drafter × k and the automatic choice, on the same prompts."""
    from edgespec import bench as lib

    with cli_errors():
        ks, prompts, auto_plan = _setup(k_grid, prompt_file, limit, "held-out", profile, target)
        drafters, draft_model = _candidates(draft_candidates, profile, target, auto_plan, quiet)
        needs_model = "model" in drafters or auto_plan.drafter == "model"
        engine, fast_engine = _engines(auto_plan, draft_model if needs_model else None, threads, quiet)
        try:
            candidates = lib.grid(drafters, ks, p_min=auto_plan.p_min)
            auto = lib.Config(auto_plan.drafter, max(1, auto_plan.k), adaptive_k=True,
                              k_max=auto_plan.k_max, p_min=auto_plan.p_min)
            plan_info = {"drafter": auto_plan.drafter, "k": auto_plan.k, "profile": auto_plan.profile,
                         "predicted_speedup": round(auto_plan.predicted_speedup, 4), "reason": auto_plan.reason}
            with _progress(quiet, "bench") as progress:
                report = lib.bench_report(
                    engine, candidates, auto, prompts, auto_plan=plan_info, max_tokens=max_tokens,
                    repeat=repeat, temperature=temperature, seed=seed if temperature > 0 else None,
                    progress=progress, fast_engine=fast_engine,
                )
        finally:
            _close(engine, fast_engine)
        data = report.to_dict()
        if csv_file is not None:
            _write_csv(csv_file, data)
        if json_output:
            typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            _render_bench(data)


def tune(
    profile: ProfileOpt = "auto",
    target: TargetOpt = None,
    draft: Annotated[
        Optional[str],
        typer.Option("--draft", "-d",
                     help="Draft model to measure besides ngram: a GGUF path or catalog name; 'ngram' for the "
                          "n-gram drafter only, 'none' for c(n) only. Default: the pair's draft if available."),
    ] = None,
    save: Annotated[bool, typer.Option("--save", help="Write the measured figures into the profile (user copy).")] = False,
    save_as: Annotated[
        Optional[str], typer.Option("--save-as", help="Write them into a new user profile NAME extending this one.")
    ] = None,
    k_grid: KGridOpt = "1,2,4,8",
    prompt_file: PromptFileOpt = None,
    limit: LimitOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1, help="Tokens per calibration run.")] = 64,
    repeats: Annotated[int, typer.Option("--repeats", min=1, help="Timed sweeps over n = 1..16.")] = 5,
    threads: ThreadsOpt = None,
    json_output: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Measure step time, verify cost c(n), draft cost γ and acceptance α; choose drafter and k."""
    from edgespec import profiles as prof_lib
    from edgespec import tune as lib

    with cli_errors():
        ks, prompts, base = _setup(k_grid, prompt_file, limit, "calibration", profile, target)
        mode = (draft or "auto").strip().lower()
        if mode in ("none", "off", "plain"):
            drafters, draft_model = [], None
        else:
            spec = None if mode == "auto" else "ngram" if mode == "ngram" else f"{draft},ngram"
            drafters, draft_model = _candidates(spec, profile, target, base, quiet)
            draft_model = draft_model if "model" in drafters else None
        engine, fast_engine = _engines(base, draft_model, threads, quiet)
        prof = prof_lib.load_profile(base.profile)
        err = err_console()
        err.quiet = quiet
        try:
            with _progress(quiet, "tune") as progress:
                result = lib.tune(
                    engine, drafters=drafters, ks=ks, prompts=prompts, max_tokens=max_tokens,
                    repeats=repeats, k_min=prof.k_min, k_max=prof.k_max, min_gain=prof.min_gain,
                    progress=progress, phase=lambda m: err.print(Text(m, style="dim")),
                    fast_engine=fast_engine,
                )
        finally:
            _close(engine, fast_engine)
        data = result.to_dict()
        data["profile"] = base.profile
        if save or save_as:
            pair = lib.pair_of(base.target, str(draft_model) if draft_model else None)
            name = save_as or base.profile
            path, skipped = lib.save(result, name, pair=pair,
                                     extends=base.profile if save_as and save_as != base.profile else None)
            data["saved"] = {"profile": name, "path": str(path), "pair": pair, "skipped": skipped}
        if json_output:
            typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
        else:
            _render_tune(data)


# --------------------------------------------------------------------------------------
# Options to engine
# --------------------------------------------------------------------------------------


def _setup(k_grid: str, prompt_file: Path | None, limit: int | None, prompt_set: str, profile: str,
           target: str | None) -> tuple[list[int], list, Any]:
    """The k grid, the prompts and the profile's plan (its automatic choice), checked
    before any model is loaded."""
    return _parse_k_grid(k_grid), _prompts(prompt_file, limit, prompt_set), make_plan(profile, target=target)


def _parse_k_grid(text: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.replace(" ", "").split(",") if x})
    except ValueError:
        raise InputError(f"--k-grid: expected integers like 1,2,4,8 (got {text!r})") from None
    if not ks or ks[0] < 1 or ks[-1] > 64:
        raise InputError(f"--k-grid: draft lengths must be between 1 and 64 (got {text!r})")
    return ks


def _prompts(prompt_file: Path | None, limit: int | None, default_set: str) -> list:
    from edgespec.batch import read_jobs
    from edgespec.bench_prompts import BenchPrompt, prompt_set

    if prompt_file is None:
        prompts = list(prompt_set(default_set))
    else:
        inp = read_jobs(prompt_file)
        if inp.errors:
            raise InputError(f"{inp.errors[0]} ({len(inp.errors)} bad line(s) in all)")
        if not inp.jobs:
            raise InputError(f"no prompts in {inp.source}")
        prompts = [BenchPrompt(str(j.id), "custom", j.prompt if isinstance(j.prompt, str) else tuple(j.prompt))
                   for j in inp.jobs]
    return prompts[:limit] if limit else prompts


def _candidates(spec: str | None, profile: str, target: str | None, auto_plan: Any,
                quiet: bool = False) -> tuple[list[str], str | None]:
    """Drafter names for the grid, and the draft model (catalog name or path) to load.

    Without ``spec``: the pair's draft model if it is on this machine, and ngram."""
    from edgespec import catalog

    explicit = spec is not None
    items = [s.strip() for s in (spec or "model,ngram").split(",") if s.strip()]
    drafters: list[str] = []
    draft_model: str | None = None
    for item in items:
        low = item.lower()
        if low in ("none", "plain", "off"):
            continue  # plain decoding is always measured
        if low == "ngram":
            drafters.append("ngram")
            continue
        if low == "model":
            try:
                name = make_plan(profile, target=target, draft="model").draft
            except ProfileError:
                if explicit:
                    raise
                continue
            if not explicit and not (Path(str(name)).is_file() or catalog.is_available(str(name))):
                if not quiet:
                    err_console().print(Text(f"note: draft model {name} is not on this machine; measuring ngram "
                                             f"only (get it with `edgespec models pull {name}`)", style="dim"))
                continue
        else:
            name = item
        if draft_model is not None and str(name) != str(draft_model):
            raise InputError("compare one draft model per run (loading several would dominate the timing): "
                             f"got {draft_model} and {name}")
        draft_model = str(name)
        drafters.append("model")
    if auto_plan.drafter == "model" and draft_model is None:
        draft_model = auto_plan.draft
    return list(dict.fromkeys(drafters)), draft_model


def _engines(plan: Any, draft_model: str | None, threads: int | None, quiet: bool) -> tuple[Any, Any]:
    """The engine every configuration runs on — the plan's target on batch-invariant
    kernels, with the draft model loaded when a configuration needs it — and, on a CPU,
    a second plain engine on llama.cpp's own kernels: the plain decoding users get."""
    p = replace(plan, drafter="model", draft=draft_model) if draft_model else replace(plan, drafter="none", draft=None)
    if threads is not None:
        p = replace(p, n_threads=threads)
    # no plan line on stderr: the plan's reason is about the automatic choice, and every
    # configuration runs on this engine
    p = replace(p, reason="")
    engine = load_engine(p, quiet=quiet, exact=True)
    fast = None
    if engine.exact_kernels and p.n_gpu_layers == 0:
        try:
            fast = load_engine(replace(p, drafter="none", draft=None), quiet=True, exact=False)
        except BaseException:
            engine.close()
            raise
    return engine, fast


def _close(*engines: Any) -> None:
    for e in engines:
        if e is not None:
            e.close()


class _progress:
    """A progress bar on stderr while runs go by (nothing when quiet or not a terminal)."""

    def __init__(self, quiet: bool, what: str) -> None:
        self.console = err_console()
        self.bar: Progress | None = None
        if not quiet and self.console.is_terminal:
            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TextColumn("{task.fields[now]}", style="dim"), TimeElapsedColumn(),
                                console=self.console, transient=True)
            self.task = self.bar.add_task(what, total=None, now="")

    def __enter__(self) -> Any:
        if self.bar is None:
            return None
        self.bar.start()
        return self.update

    def update(self, done: int, total: int, config: str, prompt_id: str) -> None:
        assert self.bar is not None
        self.bar.update(self.task, completed=done, total=total, now=f"{config} · {prompt_id}")

    def __exit__(self, *exc: Any) -> None:
        if self.bar is not None:
            self.bar.stop()


# --------------------------------------------------------------------------------------
# Rendering
# --------------------------------------------------------------------------------------

_CSV_FIELDS = ("config", "drafter", "k", "adaptive_k", "tokens_per_second", "speedup", "acceptance_rate",
               "mean_accepted_length", "alpha", "hit", "identical", "tokens", "seconds")


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
                w.writerow([r.get(c) for c in _CSV_FIELDS] + [r["by_kind"].get(k) for k in kinds])
    except OSError as e:
        raise InputError(f"cannot write {path}: {e.strerror or e}") from None


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}×"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v:.0%}"


def _speed_text(v: float | None) -> Text:
    style = "" if v is None else "green" if v >= 1.03 else "red" if v < 0.97 else ""
    return Text(_x(v), style=style)


def _render_bench(data: dict) -> None:
    out = out_console()
    kinds = list(data["plain"]["by_kind"])
    t = Table(title="edgespec bench", title_justify="left")
    t.add_column("config", no_wrap=True)
    t.add_column("tok/s", justify="right")
    t.add_column("speedup", justify="right")
    t.add_column("accept", justify="right")
    t.add_column("acc/rnd", justify="right")
    t.add_column("=plain", justify="center")
    for k in kinds:
        t.add_column(k, justify="right", style="dim")
    rows = _rows(data)
    for r in rows:
        same = {True: Text("yes", style="green"), False: Text("NO", style="bold red"), None: Text("-")}[r["identical"]]
        name = Text(r["config"], style="bold" if r["config"].startswith("auto") else "")
        t.add_row(name, f"{r['tokens_per_second']:.2f}", _speed_text(r["speedup"]), _pct(r["acceptance_rate"]),
                  "-" if r["mean_accepted_length"] is None else f"{r['mean_accepted_length']:.2f}", same,
                  *(_x(r["by_kind"].get(k)) for k in kinds))
    out.print(t)
    a, best, s = data["auto"], data["best"], data["settings"]
    chosen = "plain decoding" if a["planned_drafter"] == "none" else a["config"].removeprefix("auto: ")
    out.print(Text.assemble(
        ("automatic choice ", "bold"), f"({a['planned_profile']}): {chosen} → ", _speed_text(a["speedup"]),
        f" measured, {_x(a['planned_predicted_speedup'])} predicted; best here: {best['config']} ",
        _speed_text(best["speedup"]), f" (auto reaches {_pct(data['auto_vs_best'])} of it)",
    ))
    load = s["load_average"]
    if s.get("plain_kernels") == "llama.cpp" and len(data["results"]) and \
            data["results"][0]["config"] == "plain, exact kernels":
        out.print(Text(
            "plain runs on llama.cpp's own kernels (what edgespec uses when it does not speculate); "
            "speculation needs the batch-invariant ones, and =plain compares its tokens with plain decoding there",
            style="dim",
        ))
    out.print(Text(
        f"{len(s['prompts'])} prompts × {s['max_tokens']} tokens × {s['repeat']} pass(es) after a warm-up, "
        f"temperature {s['temperature']:g}, {s['n_threads']} threads, load average {load['before']} → "
        f"{load['after']}; speedup = tokens/s over plain decoding's, prompt processing excluded",
        style="dim",
    ))


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
    t.add_row("target step", f"{data['target_step_ms']:.1f} ms ({1000 / data['target_step_ms']:.1f} tok/s "
              "upper bound of plain decoding)")
    if data["draft_step_ms"] is not None:
        t.add_row("draft step", f"{data['draft_step_ms']:.1f} ms: γ = {data['draft_cost_ratio']:.2f} target steps")
    if data.get("exact_plain_tokens_per_second"):
        t.add_row("exact kernels", f"plain decoding {data['exact_plain_tokens_per_second']:.1f} tok/s on the batch-"
                  f"invariant kernels speculation needs, {data['plain_tokens_per_second']:.1f} tok/s on llama.cpp's: "
                  f"{data['exact_slowdown']:.2f}× slower, counted in every speedup below")
    t.add_row("verify cost", "  ".join(f"c({n})={float(v):.2f}" for n, v in c.items() if int(n) in (2, 3, 4, 5, 6, 8, 12, 16)))
    for name, d in data["drafters"].items():
        extra = f", proposes in {d['hit']:.0%} of rounds" if name == "ngram" else ""
        pmin = f", p_min {d['p_min']:.2f}" if d["p_min"] is not None else ""
        t.add_row(f"{name} drafter", f"α = {d['alpha']:.2f} (accepted {d['acceptance_rate']:.0%} of drafts{extra}); "
                  f"best k = {d['k']}, predicted {_x(d['predicted_speedup'])}{pmin}")
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
                meas = _bar(p["measured_speedup"], scale, width, one,
                            "green" if p["measured_speedup"] >= 1.0 else "red")
                out.print(Text.assemble(f"  k={p['k']:<4d}predicted ", pred, f" {_x(p['predicted_speedup'])}"))
                out.print(Text.assemble("        measured  ", meas, f" {_x(p['measured_speedup'])}"))

    ch = data["choice"]
    if ch["drafter"] == "none":
        verdict = "plain decoding: no drafter is predicted to gain enough on this machine"
    else:
        verdict = f"{ch['drafter']} drafter, k={ch['k']}: predicted {_x(ch['predicted_speedup'])}"
        if ch["measured_speedup"] is not None:
            verdict += f", measured {_x(ch['measured_speedup'])}"
        if ch["p_min"] is not None:
            verdict += f", p_min {ch['p_min']:.2f}"
    out.print(Text.assemble(("\nchoice: ", "bold"), verdict))
    s = data["settings"]
    out.print(Text(f"{len(s['prompts'])} calibration prompts × {s['max_tokens']} tokens, {s['n_threads']} threads, "
                   f"{s['repeats']} timing sweeps, load average {s['load_average']}", style="dim"))
    saved = data.get("saved")
    if saved:
        out.print(Text(f"saved the measured figures to {saved['path']}; `--profile {saved['profile']}` uses them "
                       "from now on", style="green"))
        for note in saved["skipped"]:
            out.print(Text(f"not saved: {note}", style="yellow"))
    else:
        out.print(Text(f"run again with --save to use these figures with --profile {data['profile']}", style="dim"))

