"""What ``edgespec bench`` and ``edgespec tune`` share: their options, turning options
into a k grid, prompts, drafter candidates and engines (checked before any model loads),
and the progress bar on stderr."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from edgespec.cli.common import describe_plan, err_console, load_engine, read_prompt
from edgespec.cli.plan_options import PlanOptions, make_plan
from edgespec.costmodel.adaptive import is_no_draft
from edgespec.errors import InputError, ProfileError

# -- options (the ones generate and chat share come from cli.common and cli.plan_options) -
KGridOpt = Annotated[str, typer.Option("--k-grid", help="Draft lengths to measure, comma-separated.")]
InputOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--input",
        "-i",
        help="JSONL prompts (id + prompt or messages, as `generate --input`; '-' = stdin) instead of the built-in set.",
    ),
]
PromptFileOpt = Annotated[
    Optional[Path],
    typer.Option("--prompt-file", "-f", help="One text prompt from a file ('-' = stdin) instead of the built-in set."),
]
LimitOpt = Annotated[Optional[int], typer.Option("--limit", min=1, help="Use only the first N prompts.")]
RepeatOpt = Annotated[int, typer.Option("--repeat", "--repeats", "-r", min=1, help="Measured passes.")]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress or diagnostics on stderr.")]


def setup(
    k_grid: str, prompts: tuple[Path | None, Path | None], limit: int | None, prompt_set: str, options: PlanOptions
) -> tuple[list[int], list, Any]:
    """The k grid, the prompts (``--input`` JSONL, ``--prompt-file`` text, or the
    built-in ``prompt_set``) and the profile's plan (its automatic choice: the options'
    drafter and k are the ones measured, and the threads go to ``open_engines``),
    checked before any model is loaded."""
    auto = replace(options, draft=None, k=None, threads=None)
    return parse_k_grid(k_grid), load_prompts(*prompts, limit, prompt_set), make_plan(auto)


def replan(plan: Any, options: PlanOptions, engine: Any) -> Any:
    """The automatic choice planned again once ``engine`` is loaded: loading a model file
    for the first time here measures its c(n) (``measuring.first_use``), and the plan made
    before it weighed another machine's figures, so two runs of the same command could
    measure different automatic choices. Kept as it was when the new choice needs a draft
    model or an MTP head the engine has not loaded."""
    again = make_plan(replace(options, draft=None, k=None, threads=None))
    if (again.drafter == "model" and engine.draft_model is None) or (
        again.drafter == "mtp" and engine.drafting.mtp is None
    ):
        return plan
    return again


def show_plan(plan: Any, verbose: bool) -> None:
    """With -v: the profile's automatic choice and why, on stderr, before measuring."""
    if verbose:
        for line in describe_plan(plan, verbose=True):
            err_console().print(Text(line, style="dim"))


def parse_k_grid(text: str) -> list[int]:
    try:
        ks = sorted({int(x) for x in text.replace(" ", "").split(",") if x})
    except ValueError:
        raise InputError(f"--k-grid: expected integers like 1,2,4,8 (got {text!r})") from None
    if not ks or ks[0] < 1 or ks[-1] > 64:
        raise InputError(f"--k-grid: draft lengths must be between 1 and 64 (got {text!r})")
    return ks


def load_prompts(input_file: Path | None, prompt_file: Path | None, limit: int | None, default_set: str) -> list:
    from edgespec.batching.jobs import read_jobs
    from edgespec.measuring.prompts import BenchPrompt, prompt_set

    if input_file is not None and prompt_file is not None:
        raise InputError("give the prompts with --input FILE.jsonl or one with --prompt-file, not both")
    if prompt_file is not None:
        if prompt_file.suffix.lower() == ".jsonl":
            raise InputError(f"--prompt-file reads one text prompt; JSONL prompts go through --input {prompt_file}")
        prompts = [
            BenchPrompt(
                prompt_file.stem if str(prompt_file) != "-" else "stdin", "custom", read_prompt(None, prompt_file)
            )
        ]
    elif input_file is not None:
        inp = read_jobs(input_file)
        if inp.errors:
            raise InputError(f"{inp.errors[0]} ({len(inp.errors)} bad line(s) in all)")
        if not inp.jobs:
            raise InputError(f"no prompts in {inp.source}")
        prompts = [
            BenchPrompt(str(j.id), "custom", j.prompt if isinstance(j.prompt, str) else tuple(j.prompt))
            for j in inp.jobs
        ]
    else:
        prompts = list(prompt_set(default_set))
    return prompts[:limit] if limit else prompts


def has_mtp_head(options: PlanOptions) -> bool:
    """Whether the target keeps its own MTP head (a file with nextn layers): the plan
    for ``--draft mtp`` says so, and refuses it otherwise."""
    try:
        make_plan(replace(options, draft="mtp", k=None))
    except ProfileError:
        return False
    return True


def drafter_candidates(
    spec: str | None, options: PlanOptions, auto_plan: Any, quiet: bool = False
) -> tuple[list[str], str | None]:
    """Drafter names for the grid, and the draft model (catalog name or path) to load.

    Without ``spec``: the pair's draft model if it is on this machine, ngram, and the
    target's own MTP head ("mtp") where its file keeps nextn layers."""
    from edgespec import catalog

    explicit = spec is not None
    items = [s.strip() for s in (spec or "model,ngram,mtp").split(",") if s.strip()]
    drafters: list[str] = []
    draft_model: str | None = None
    for item in items:
        low = item.lower()
        if is_no_draft(low):
            continue  # plain decoding is always measured
        if low == "ngram":
            drafters.append("ngram")
            continue
        if low == "mtp":
            if explicit:  # a target without nextn layers: the plan's error says so
                make_plan(replace(options, draft="mtp", k=None))
            if explicit or has_mtp_head(options):
                drafters.append("mtp")
            continue
        if low == "model":
            try:
                name = make_plan(PlanOptions(profile=options.profile, target=options.target, draft="model")).draft
            except ProfileError:
                if explicit:
                    raise
                continue
            if not explicit and not (Path(str(name)).is_file() or catalog.is_available(str(name))):
                if not quiet:
                    err_console().print(
                        Text(
                            f"note: draft model {name} is not on this machine; measuring ngram "
                            f"only (get it with `edgespec models pull {name}`)",
                            style="dim",
                        )
                    )
                continue
        else:
            name = item
        if draft_model is not None and str(name) != str(draft_model):
            raise InputError(
                "compare one draft model per run (loading several would dominate the timing): "
                f"got {draft_model} and {name}"
            )
        draft_model = str(name)
        drafters.append("model")
    if auto_plan.drafter == "model" and draft_model is None:
        draft_model = auto_plan.draft
    return list(dict.fromkeys(drafters)), draft_model


def open_engines(
    plan: Any, draft_model: str | None, threads: int | None, quiet: bool, *, mtp: bool = False
) -> tuple[Any, Any]:
    """The engine every configuration runs on — the plan's target on the plan's kernels
    (llama.cpp's own, or batch-invariant with --exact), with the draft model loaded when
    a configuration needs it, and with ``mtp`` its own MTP head (its nextn layers loaded)
    — and, with --exact on a CPU, a second plain engine on llama.cpp's own kernels: the
    plain decoding users would otherwise get."""
    from edgespec.catalog import resolve_model
    from edgespec.planning.record import given_name

    # the plan's target and settings, with this draft model (or none) and these threads
    model = resolve_model(draft_model) if draft_model else None
    own = {
        "draft": "mtp" if mtp else model,
        "names": (given_name(plan.target), given_name(draft_model)),
        **({"n_threads": threads} if threads is not None else {}),
    }
    # no plan line on stderr: the plan's reason is about the automatic choice, and every
    # configuration runs on this engine (built with its MTP head, the draft model loaded after)
    engine = load_engine(plan, quiet=quiet, describe=False, **own)
    if mtp and model is not None:
        try:
            engine.set_drafter(model, name=given_name(draft_model))
        except BaseException:
            engine.close()
            raise
    fast = None
    if engine.exact_kernels and plan.n_gpu_layers == 0 and not plan.rpc:  # RPC servers never repack
        try:
            fast = load_engine(plan, quiet=True, **{**own, "draft": None}, exact=False)
        except BaseException:
            engine.close()
            raise
    return engine, fast


def close_engines(*engines: Any) -> None:
    for e in engines:
        if e is not None:
            e.close()


class progress_bar:
    """A progress bar on stderr while runs go by (nothing when quiet or not a terminal)."""

    def __init__(self, quiet: bool, what: str) -> None:
        self.console = err_console()
        self.bar: Progress | None = None
        if not quiet and self.console.is_terminal:
            self.bar = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[now]}", style="dim"),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
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


def fmt_x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}×"
