"""Running a JSONL batch: the pending jobs through the engine, each result settled as it comes.

``run_batch`` skips the jobs whose id the output already holds (the resume rule,
``pending_jobs``), runs the rest one after another through ``engine.generate`` or, with
``parallel``, many per decode through ``engine.run_many``, and settles each outcome the
same way either way (``_settle``): a result is written as one line and counted, a failure
reported and skipped (or raised with ``on_error="stop"``). The input side (reading and
checking the lines) is ``edgespec.batching.jobs``; the output file (one whole line per
result, torn-line repair, resuming) is ``edgespec.batching.writer``.

This module knows the engine only through ``generate(prompt, **options)`` and
``run_many(requests, parallel=)``; it never prints: progress reaches the caller through
``BatchObserver`` callbacks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator

from edgespec.batching.jobs import Job
from edgespec.batching.writer import ResultWriter, result_record
from edgespec.errors import EdgespecError, InputError

__all__ = ["BatchObserver", "BatchSummary", "pending_jobs", "run_batch"]


class BatchObserver:
    """Callbacks through which a batch reports progress (all optional no-ops)."""

    def batch_started(self, run: Any) -> None:
        """A parallel run is about to start (``run.n_parallel``, ``run.stats``)."""

    def job_started(self, job: Job) -> None: ...

    def job_done(self, job: Job, record: dict[str, Any]) -> None: ...

    def job_failed(self, job: Job, error: EdgespecError) -> None: ...


@dataclass
class BatchSummary:
    total: int = 0  # valid jobs in the input
    skipped: int = 0  # already in the output (resumed)
    done: int = 0  # generated and written now
    incomplete: int = 0  # of those, structured answers that are not complete (structure_error)
    failed: list[tuple[Job, EdgespecError]] = field(default_factory=list)


def pending_jobs(jobs: Iterable[Job], done: set[str]) -> Iterator[Job]:
    """The jobs whose id is not in ``done`` (the resume rule)."""
    return (job for job in jobs if job.key not in done)


def run_batch(
    engine: Any,
    jobs: list[Job],
    writer: ResultWriter,
    *,
    defaults: dict[str, Any] | None = None,
    on_error: str = "skip",
    observer: BatchObserver | None = None,
    parallel: int | str | None = None,
) -> BatchSummary:
    """Generate every job not yet in ``writer`` and append its result.

    ``parallel`` (a number, or ``"auto"``) runs that many sequences per decode through
    ``engine.run_many`` (continuous batching; results are written as each finishes, in
    whatever order); ``None`` or 1 runs the jobs one after another through
    ``engine.generate``. Resuming is the same either way: ids already written are skipped.

    ``defaults`` are the generation settings of the command line; a line's own settings
    override them. A job that fails with an ``EdgespecError`` (a prompt too long for the
    context, ...) is reported to the observer and skipped, or re-raised with
    ``on_error="stop"``; it is not written, so a rerun tries it again. KeyboardInterrupt
    propagates; everything written so far stays whole.
    """
    if on_error not in ("skip", "stop"):
        raise InputError(f"--on-error must be 'skip' or 'stop', not {on_error!r}")
    observer = observer or BatchObserver()
    defaults = dict(defaults or {})
    summary = BatchSummary(total=len(jobs))
    todo = list(pending_jobs(jobs, writer.done))
    summary.skipped = summary.total - len(todo)
    settle = _Settle(writer, summary, observer, on_error)
    if parallel not in (None, 1):
        _run_parallel(engine, todo, defaults, parallel, settle)
        return summary
    for job in todo:
        observer.job_started(job)
        try:
            result, error = engine.generate(job.prompt, **_job_options(job, defaults)), None
        except EdgespecError as e:
            result, error = None, e
        settle(job, result, error)
    return summary


@dataclass
class _Settle:
    """The one settle step of both loops: a finished job's result is written, counted and
    reported; a failed one is counted and reported, then skipped or (``on_error="stop"``)
    raised. Nothing is written for a failed job, so a rerun tries it again."""

    writer: ResultWriter
    summary: BatchSummary
    observer: BatchObserver
    on_error: str

    def __call__(self, job: Job, result: Any, error: EdgespecError | None) -> None:
        if error is not None:
            self.summary.failed.append((job, error))
            self.observer.job_failed(job, error)
            if self.on_error == "stop":
                raise error
            return
        record = result_record(job, result)
        self.writer.write(record)
        self.summary.done += 1
        self.summary.incomplete += "structure_error" in record
        self.observer.job_done(job, record)


def _job_options(job: Job, defaults: dict[str, Any]) -> dict[str, Any]:
    options = {**defaults, **job.options}
    if not isinstance(job.prompt, str):
        options.pop("raw", None)
    return options


def _run_parallel(engine: Any, todo: list[Job], defaults: dict[str, Any], parallel: int | str, settle: _Settle) -> None:
    from edgespec.batching.runner import Request

    by_key = {job.key: job for job in todo}
    run = engine.run_many(
        [Request(job.key, job.prompt, _job_options(job, defaults)) for job in todo], parallel=parallel
    )
    settle.observer.batch_started(run)
    for job in todo:
        settle.observer.job_started(job)
    for outcome in run:
        settle(by_key[outcome.key], outcome.result, outcome.error)
