"""``edgespec generate --input``: a resumable JSONL batch, one result line per prompt.

The batch half of ``generate`` (``cli/generate.py`` declares every option of the command
and hands a batch here): the batch's own options, the checks that a batch was asked for
whole, the bad input lines reported, resuming from the results file, the progress on
stderr, the summary line and the exit code. Reading jobs is ``edgespec.batching.jobs``'s,
writing results ``batching.writer``'s, running them ``batching.results``'; the plan is ``plan_options``'.
"""

import json
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

from edgespec.batching.results import BatchObserver
from edgespec.cli.common import EXIT_INTERRUPTED, err_console, load_engine, parse_parallel
from edgespec.cli.memory_options import MemoryOptions, remembering
from edgespec.cli.plan_options import PlanOptions, make_plan
from edgespec.cli.speedup import sources_part
from edgespec.errors import EdgespecError, IncompleteStructureError, InputError


class OnError(str, Enum):
    skip = "skip"
    stop = "stop"


MAX_REPORTED_BAD_LINES = 20

InputOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--input",
        "-i",
        help=(
            "Batch: a JSONL file, one object per line: id, prompt or messages, and optionally "
            "max_tokens, temperature, top_k, top_p, min_p, seed, stop, raw, response_format, "
            "lenient_schema ('-' = stdin)."
        ),
    ),
]
OutputOpt = Annotated[
    Optional[Path],
    typer.Option("--output", "-o", help="Batch: the JSONL results file; ids already in it are skipped (resume)."),
]
OnErrorOpt = Annotated[
    OnError,
    typer.Option(
        "--on-error",
        help="Batch: skip bad lines and failed prompts (exit 1 at the end if any), or stop at the first.",
    ),
]
ParallelOpt = Annotated[
    str,
    typer.Option(
        "--parallel",
        "-P",
        help=(
            "Batch: sequences decoded together (continuous batching): a number, or 'auto' "
            "(from the machine's batch cost and memory). 1 runs prompts one at a time, "
            "the only way a draft model is used in a batch."
        ),
    ),
]


def generate_batch(
    input_file: Path | None,
    output_file: Path | None,
    on_error: OnError,
    options: dict,
    *,
    plan: PlanOptions,
    response_format: Any,
    lenient_schema: bool,
    raw: bool,
    parallel: str,
    quiet: bool,
    verbose: bool,
    has_prompt: bool,
    json_output: bool,
    memory: MemoryOptions = MemoryOptions(),
) -> None:
    """A batch as ``generate`` was given it (``--input`` or ``--output``): checked whole,
    then run. ``options`` are the command line's generation options, the defaults of
    every line."""
    if has_prompt:
        raise InputError("a batch (--input) takes its prompts from the file; drop the prompt argument")
    if input_file is None or output_file is None:
        raise InputError("a batch needs both --input FILE.jsonl and --output FILE.jsonl")
    if json_output:
        raise InputError("--json is for one prompt; a batch already writes JSON lines to --output")
    options = dict(options)
    if response_format is not None:
        options["response_format"] = response_format
    if lenient_schema:  # every line's schema, as a line's own "lenient_schema": true
        options["lenient_schema"] = True
    _run_batch(
        input_file,
        output_file,
        on_error.value,
        options,
        raw=raw,
        quiet=quiet,
        verbose=verbose,
        parallel=parse_parallel(parallel),
        plan=plan,
        memory=memory,
    )


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
    plan: PlanOptions,
    memory: MemoryOptions = MemoryOptions(),
) -> None:
    from edgespec.batching.jobs import read_jobs
    from edgespec.batching.results import pending_jobs, run_batch
    from edgespec.batching.writer import ResultWriter

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
            err.print(
                Text(
                    f"{output_file}:{writer.torn_line}: {writer.torn_action} a torn last line "
                    "left by an interrupted run",
                    style="yellow" if err.is_terminal else "",
                )
            )
        todo = list(pending_jobs(inp.jobs, writer.done))
        already = len(inp.jobs) - len(todo)
        if not todo:
            err.print(Text(f"nothing to do: all {len(inp.jobs)} ids are already in {output_file}"))
            if inp.errors:
                raise typer.Exit(1)
            return

        if already:
            err.print(Text(f"resuming: {already} of {len(inp.jobs)} ids already in {output_file}, {len(todo)} to go"))
        p = make_plan(memory.apply(plan))
        engine = load_engine(p, quiet=quiet, verbose=verbose)
        defaults = dict(options, raw=raw)
        progress = _BatchProgress(err, total=len(todo), source=inp.source)
        try:
            with remembering(engine, memory, err=err, quiet=quiet), progress:
                summary = run_batch(
                    engine, todo, writer, defaults=defaults, on_error=on_error, observer=progress, parallel=parallel
                )
        except KeyboardInterrupt:
            err.print(
                Text(
                    f"interrupted: {writer.written} result(s) written to {output_file}; "
                    "run the same command again to resume"
                )
            )
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except EdgespecError:
            if writer.written:  # before any result (a refused --parallel), the error alone says it
                err.print(Text(f"stopped: {writer.written} result(s) written to {output_file}"))
            raise
        finally:
            engine.close()

    if progress.run is not None and progress.run.stats.steps:
        err.print(Text(progress.run.summary()))
    if sum(progress.kept.values()):
        err.print(Text(sources_part(progress.kept)))
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
        self.kept: dict[str, int] = {}  # accepted drafts by where they came from, over the results
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
        for source, n in (stats.get("accepted_by_source") or {}).items():
            self.kept[source] = self.kept.get(source, 0) + int(n)
        elapsed = time.perf_counter() - self.t0  # wall clock: sequences overlap in a batch
        rate = f"{self.tokens / elapsed:.1f} tok/s overall" if elapsed > 0 else ""
        if self.bar is not None:
            self.bar.update(self.task, advance=1, rate=rate)
        else:
            self.console.print(
                Text(
                    f"[{self.count}/{self.total}] id {json.dumps(job.id)}: "
                    f"{stats.get('generated_tokens', 0)} tokens, {record.get('finish_reason')}; {rate}"
                )
            )

    def job_failed(self, job: Any, error: EdgespecError) -> None:
        self.count += 1
        if self.bar is not None:
            self.bar.update(self.task, advance=1)
        self.console.print(Text(f"failed: {self.source}:{job.line} (id {json.dumps(job.id)}): {error}"))
