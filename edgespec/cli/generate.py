"""``edgespec generate``: one prompt to stdout, or a resumable JSONL batch.

Thin: parse options, build the engine from the profile plan, hand the event stream to
the readout (one prompt) or to ``edgespec.batching.results`` (a batch), map errors to exit codes.
Text goes to stdout; diagnostics, progress and stats go to stderr.
"""

import json
import sys
import time
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    SpinnerColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.text import Text

from edgespec.cli.common import (
    EXIT_INTERRUPTED,
    DraftOpt, ExactOpt, KOpt, MinPOpt, NCtxOpt, ProfileOpt, SeedOpt, ShowRejectedOpt, TargetOpt, TemperatureOpt, ThreadsOpt, TopKOpt, TopPOpt, VerboseOpt,
    RpcOpt, TensorSplitOpt,
    cli_errors,
    err_console,
    load_engine,
    make_plan,
    parse_parallel,
    read_prompt,
)
from edgespec.batching.results import BatchObserver
from edgespec.cli.structured import (GrammarOpt, LenientOpt, RegexOpt, SchemaOpt, bind_option, check_complete,
                                     response_format_from_options)
from edgespec.errors import EdgespecError, IncompleteStructureError, InputError


class OnError(str, Enum):
    skip = "skip"
    stop = "stop"


MAX_REPORTED_BAD_LINES = 20


def generate(
    prompt: Annotated[
        Optional[str],
        typer.Argument(help="The prompt. Without it: --prompt-file, or stdin when piped.", show_default=False),
    ] = None,
    prompt_file: Annotated[
        Optional[Path], typer.Option("--prompt-file", "-f", help="Read the prompt from a file ('-' = stdin).")
    ] = None,
    profile: ProfileOpt = "auto",
    target: TargetOpt = None,
    draft: DraftOpt = None,
    k: KOpt = None,
    exact: ExactOpt = False,
    temperature: TemperatureOpt = 0.0,
    top_k: TopKOpt = 0,
    top_p: TopPOpt = 1.0,
    min_p: MinPOpt = 0.0,
    seed: SeedOpt = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", "-n", min=1)] = 256,
    stop: Annotated[
        Optional[list[str]], typer.Option("--stop", help="Stop string (repeatable); not included in the output.")
    ] = None,
    raw: Annotated[bool, typer.Option("--raw", help="Use the prompt as is, without the chat template.")] = False,
    json_output: Annotated[
        bool, typer.Option("--json", help='Print one JSON object: {"text","token_ids","finish_reason","stats"} '
                                          '(with a constraint also "structured_complete" and "parsed").')
    ] = False,
    schema: SchemaOpt = None,
    grammar: GrammarOpt = None,
    regex: RegexOpt = None,
    lenient_schema: LenientOpt = False,
    n_ctx: NCtxOpt = None,
    threads: ThreadsOpt = None,
    rpc: RpcOpt = None,
    tensor_split: TensorSplitOpt = None,
    show_rejected: ShowRejectedOpt = False,
    input_file: Annotated[
        Optional[Path],
        typer.Option(
            "--input", "-i",
            help=(
                "Batch: a JSONL file, one object per line: id, prompt or messages, and optionally "
                "max_tokens, temperature, top_k, top_p, min_p, seed, stop, raw, response_format, "
                "lenient_schema ('-' = stdin)."
            ),
        ),
    ] = None,
    output_file: Annotated[
        Optional[Path],
        typer.Option("--output", "-o", help="Batch: the JSONL results file; ids already in it are skipped (resume)."),
    ] = None,
    on_error: Annotated[
        OnError,
        typer.Option(
            "--on-error",
            help="Batch: skip bad lines and failed prompts (exit 1 at the end if any), or stop at the first.",
        ),
    ] = OnError.skip,
    parallel: Annotated[
        str,
        typer.Option(
            "--parallel", "-P",
            help=(
                "Batch: sequences decoded together (continuous batching): a number, or 'auto' "
                "(from the machine's batch cost and memory). 1 runs prompts one at a time, "
                "the only way a draft model is used in a batch."
            ),
        ),
    ] = "auto",
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No diagnostics or stats on stderr.")] = False,
    verbose: VerboseOpt = False,
) -> None:
    """Generate text for one prompt, or for every line of a JSONL batch."""
    options: dict[str, Any] = dict(
        max_tokens=max_tokens,
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        seed=seed,
        stop=tuple(stop or ()),
    )
    with cli_errors():
        batch = input_file is not None or output_file is not None
        response_format, spec = response_format_from_options(schema, grammar, regex, lenient_schema, batch=batch)
        _warn(spec, quiet)
        if batch:
            if prompt is not None or prompt_file is not None:
                raise InputError("a batch (--input) takes its prompts from the file; drop the prompt argument")
            if input_file is None or output_file is None:
                raise InputError("a batch needs both --input FILE.jsonl and --output FILE.jsonl")
            if json_output:
                raise InputError("--json is for one prompt; a batch already writes JSON lines to --output")
            if response_format is not None:
                options["response_format"] = response_format
            if lenient_schema:  # every line's schema, as a line's own "lenient_schema": true
                options["lenient_schema"] = True
            _run_batch(
                input_file, output_file, on_error.value, options, raw=raw, quiet=quiet, verbose=verbose,
                parallel=parse_parallel(parallel),
                plan_args=dict(profile=profile, target=target, draft=draft, k=k, n_ctx=n_ctx, threads=threads,
                               exact=exact, rpc=rpc, tensor_split=tensor_split),
            )
            return

        text = read_prompt(prompt, prompt_file)  # before loading models: fail fast
        p = make_plan(profile, target=target, draft=draft, k=k, n_ctx=n_ctx, threads=threads, exact=exact,
                      rpc=rpc, tensor_split=tensor_split)
        engine = load_engine(p, quiet=quiet, verbose=verbose)
        try:
            if spec is not None:
                from edgespec.constraints import bind

                options["constraint"] = bind_option(bind, spec, engine.target_model, schema or grammar or "--regex")
            if json_output:
                result = engine.generate(text, raw=raw, **options)
                payload = result.to_dict()
                sys.stdout.write(json.dumps(payload, ensure_ascii=False) + "\n")
                sys.stdout.flush()
                done: Any = result
            else:
                done = _run_single(engine, text, options, raw=raw, show_rejected=show_rejected, quiet=quiet)
        finally:
            engine.close()
        check_complete(done)


def _warn(spec: Any, quiet: bool) -> None:
    """What lenient mode relaxed, said on stderr (a schema is never relaxed silently)."""
    for w in (spec.warnings if spec is not None else ()):
        if not quiet:
            err_console().print(Text(f"warning: the constraint is relaxed: {w}", style="yellow"))


def _run_single(engine: Any, text: str, options: dict, *, raw: bool, show_rejected: bool, quiet: bool) -> Any:
    from edgespec.cli.readout import Readout

    err = err_console()
    if quiet:
        err.quiet = True
    readout = Readout(err_console=err, show_rejected=show_rejected, show_forced="constraint" in options)
    if engine.drafter_name != "none":
        readout.print_legend()
    try:
        return readout.show(engine.stream(text, raw=raw, **options)).done
    except KeyboardInterrupt:
        raise typer.Exit(EXIT_INTERRUPTED) from None  # the readout already said so


def _run_batch(
    input_file: Path,
    output_file: Path,
    on_error: str,
    options: dict,
    *,
    raw: bool,
    quiet: bool,
    verbose: bool = False,
    parallel: int | str = "auto",
    plan_args: dict,
) -> None:
    from edgespec.batching.results import ResultWriter, pending_jobs, read_jobs, run_batch

    err = err_console()
    if quiet:
        err.quiet = True
    inp = read_jobs(input_file, lenient=bool(options.get("lenient_schema")))
    for e in inp.errors[:MAX_REPORTED_BAD_LINES]:
        prefix = "error" if on_error == "stop" else "skipping"
        err.print(Text(f"{prefix}: {e}"))
    if len(inp.errors) > MAX_REPORTED_BAD_LINES:
        err.print(Text(f"... and {len(inp.errors) - MAX_REPORTED_BAD_LINES} more bad lines"))
    if inp.errors and on_error == "stop":
        raise InputError(
            f"{len(inp.errors)} bad line(s) in {inp.source}; fix them, or pass --on-error skip to run the rest"
        )

    with ResultWriter(output_file, input=inp) as writer:
        if writer.torn_line is not None:
            err.print(Text(
                f"{output_file}:{writer.torn_line}: {writer.torn_action} a torn last line left by an interrupted run",
                style="yellow" if err.is_terminal else "",
            ))
        todo = list(pending_jobs(inp.jobs, writer.done))
        already = len(inp.jobs) - len(todo)
        if not todo:
            err.print(Text(f"nothing to do: all {len(inp.jobs)} ids are already in {output_file}"))
            if inp.errors:
                raise typer.Exit(1)
            return

        if already:
            err.print(Text(f"resuming: {already} of {len(inp.jobs)} ids already in {output_file}, {len(todo)} to go"))
        p = make_plan(**plan_args)
        engine = load_engine(p, quiet=quiet, verbose=verbose)
        defaults = dict(options, raw=raw)
        progress = _BatchProgress(err, total=len(todo), source=inp.source)
        try:
            with progress:
                summary = run_batch(engine, todo, writer, defaults=defaults, on_error=on_error,
                                    observer=progress, parallel=parallel)
        except KeyboardInterrupt:
            err.print(Text(
                f"interrupted: {writer.written} result(s) written to {output_file}; "
                "run the same command again to resume"
            ))
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except EdgespecError:
            if writer.written:  # before any result (a refused --parallel), the error alone says it
                err.print(Text(f"stopped: {writer.written} result(s) written to {output_file}"))
            raise
        finally:
            engine.close()

    if progress.run is not None and progress.run.stats.steps:
        err.print(Text(progress.run.summary()))
    parts = [f"wrote {summary.done} result(s) to {output_file}"]
    if already:
        parts.append(f"{already} already there")
    if inp.errors:
        parts.append(f"{len(inp.errors)} bad input line(s) skipped")
    if summary.failed:
        parts.append(f"{len(summary.failed)} prompt(s) failed")
    if summary.incomplete:
        parts.append(f"{summary.incomplete} structured answer(s) incomplete (their lines say why: structure_error)")
    err.print(Text("; ".join(parts)))
    if inp.errors or summary.failed:
        raise typer.Exit(1)
    if summary.incomplete:
        raise typer.Exit(IncompleteStructureError.exit_code)


class _BatchProgress(BatchObserver):
    """Progress on stderr: a bar on a terminal, one plain line per prompt otherwise."""

    def __init__(self, console: Any, *, total: int, source: str):
        self.console = console
        self.total = total
        self.source = source
        self.count = 0
        self.tokens = 0
        self.t0 = time.perf_counter()
        self.run: Any = None
        self.bar: Progress | None = None
        if console.is_terminal and not console.quiet:
            self.bar = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[rate]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=console,
            )
            self.task = self.bar.add_task("generating", total=total, rate="")

    def __enter__(self) -> "_BatchProgress":
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def batch_started(self, run: Any) -> None:
        self.run = run
        self.t0 = time.perf_counter()
        note = run.parallel_reason
        if run.drafter_note:
            note += f"; {run.drafter_note}"
        self.console.print(Text(note))

    def job_started(self, job: Any) -> None:
        pass

    def job_done(self, job: Any, record: dict) -> None:
        self.count += 1
        stats = record.get("stats", {})
        self.tokens += int(stats.get("generated_tokens", 0))
        elapsed = time.perf_counter() - self.t0  # wall clock: sequences overlap in a batch
        rate = f"{self.tokens / elapsed:.1f} tok/s overall" if elapsed > 0 else ""
        if self.bar is not None:
            self.bar.update(self.task, advance=1, rate=rate)
        else:
            self.console.print(Text(
                f"[{self.count}/{self.total}] id {json.dumps(job.id)}: "
                f"{stats.get('generated_tokens', 0)} tokens, {record.get('finish_reason')}; {rate}"
            ))

    def job_failed(self, job: Any, error: EdgespecError) -> None:
        self.count += 1
        if self.bar is not None:
            self.bar.update(self.task, advance=1)
        self.console.print(Text(f"failed: {self.source}:{job.line} (id {json.dumps(job.id)}): {error}"))

