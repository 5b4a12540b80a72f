"""One generation at a time: a worker thread fed by a bounded FIFO queue of jobs.

An ``Engine`` holds one KV session and is not safe to drive from two threads, so every
request becomes a ``ServeJob`` that waits in ``Worker``'s queue; the worker thread takes
jobs in arrival order and runs ``engine.stream()`` for each. (One engine for everyone
also means the previous request's KV prefix is reused: a chat continuation decodes only
its new tokens.) The queue is bounded: ``submit`` raises ``QueueFull`` rather than let
waits grow without limit, and the HTTP layer answers 503 with ``Retry-After``.

A job's events travel to the asyncio side through ``loop.call_soon_threadsafe`` into an
``asyncio.Queue``: no executor thread is parked per waiting request. ``ServeJob.cancel()`` (a
client hung up) is seen by the worker between two events: it stops iterating and closes
the generator, which leaves the engine's caches consistent (see ``Engine.stream``), and
takes the next job. A job cancelled while still queued is skipped without running.

What reaches the job's queue, in order: ``Started`` (the prompt was accepted) or
``Failed`` (the engine refused it before generating: a bad value, a prompt longer than
the context), then the engine's ``Token`` / ``Round`` events and its ``Done``, or
``Failed`` if the engine failed midway. The worker never raises into the event loop and
knows nothing of HTTP.

With ``parallel`` > 1 the worker runs up to that many generations at once, as slots of
one multi-sequence batch (``edgespec.batching.runner``): concurrent requests share each decode
instead of waiting in line. Between two decodes it admits queued jobs into free slots
and drops the sequences of jobs that were cancelled; events reach each job as above.

**Failures never leave a caller waiting.** What can fail before serving is built in
``Worker()`` (the batch of ``parallel`` slots, checked against llama.cpp's sequence
limit), so a server that cannot serve refuses to start. Any exception in one
generation or one batch step, typed or not, reaches the jobs it concerns as ``Failed``
and the worker takes the next job (after a step failure the slots are emptied; the
single stream's caches are cleared). Should the thread itself end, every job it held
or that waits gets ``Failed(WorkerDied)``, ``submit`` refuses new ones, ``alive`` turns
false and ``on_fatal`` is called (``serve`` then stops the server); ``next_event``
answers ``WorkerDied`` to a caller whose job can no longer get an event.

**Memories.** ``memories`` (``memories.KeyMemories``) holds the index of earlier answers
of each API key; a job's ``memory`` option is its key's index (or False: ``memory=False``
here, ``serve --no-memory``), set by the app when it builds the job, so one key's
answers never draft another key's request, one at a time or in slots.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

from edgespec.errors import EdgespecError
from edgespec.events import Done

from .memories import DEFAULT_MAX_KEYS, KeyMemories
from .metrics import Metrics

log = logging.getLogger("edgespec.server")


class QueueFull(Exception):
    """Every slot of the request queue is taken."""


class WorkerDied(Exception):
    """The generation thread has ended: this server cannot generate any more."""


@dataclass(frozen=True)
class Started:
    """The engine accepted the prompt and is generating; ``queue_wait`` in seconds;
    ``cached``: the prompt's tokens already in the KV cache as it started (a prompt of
    token ids on the single stream), else None."""

    queue_wait: float
    cached: int | None = None


@dataclass(frozen=True)
class Failed:
    """The generation could not start or stopped with an error."""

    error: BaseException


@dataclass(eq=False)
class ServeJob:
    """One request's generation: what to run, and where its events go.

    ``prompt`` and ``options`` are ``Engine.stream``'s arguments. Create it on the event
    loop that will read ``events``.
    """

    prompt: Any
    options: dict
    loop: asyncio.AbstractEventLoop = field(default_factory=asyncio.get_running_loop)
    events: asyncio.Queue = field(default_factory=asyncio.Queue)
    enqueued_at: float = field(default_factory=time.perf_counter)
    _cancelled: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        """Stop this job: skip it if queued, stop its generation if running."""
        self._cancelled.set()

    @property
    def cancelled(self) -> bool:
        return self._cancelled.is_set()

    def post(self, item: Any) -> None:
        """Hand an item to the reading side (called from the worker thread)."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:  # the loop is closed: the server is gone, nobody reads
            self.cancel()


class Worker:
    """The thread that owns the engine, and the bounded queue in front of it.

    ``parallel`` > 1 builds the batch runner here, so that a failure (more sequences than
    llama.cpp holds, no memory for the KV pool) stops the server before it is ready.
    ``on_fatal(error)`` is called if the thread dies. ``memory``: whether requests draft
    from earlier answers (their key's, at most ``memory_keys`` keys kept)."""

    def __init__(
        self,
        engine: Any,
        *,
        max_queue: int,
        metrics: Metrics,
        parallel: int = 1,
        on_fatal: Callable[[BaseException], None] | None = None,
        memory: bool = True,
        memory_keys: int = DEFAULT_MAX_KEYS,
    ) -> None:
        if max_queue < 1:
            raise ValueError(f"max_queue must be at least 1 (got {max_queue})")
        if parallel < 1:
            raise ValueError(f"parallel must be at least 1 (got {parallel})")
        self.engine = engine
        self.parallel = parallel
        self.memories = KeyMemories(engine, enabled=memory, max_keys=memory_keys)
        self._active: set[ServeJob] = set()  # parallel slots: the jobs generating now
        self.max_queue = max_queue
        self.metrics = metrics
        self.on_fatal = on_fatal
        self._jobs: queue.Queue[ServeJob | None] = queue.Queue(maxsize=max_queue)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._current: ServeJob | None = None
        self._stopping = False
        self._died: BaseException | None = None  # why the thread ended, if it did
        self._runner: Any = self._new_runner() if parallel > 1 else None

    def _new_runner(self) -> Any:
        from edgespec.batching.run import check_parallel
        from edgespec.batching.runner import BatchRunner

        # llama.cpp's sequence limit and the KV memory, each slot holding the whole context
        check_parallel(self.engine, self.parallel, self.engine.n_ctx)
        return BatchRunner(self.engine, self.parallel, n_ctx_seq=self.engine.n_ctx)

    # -- the asyncio side -------------------------------------------------------------
    def submit(self, job: ServeJob) -> None:
        """Queue ``job`` (FIFO); ``QueueFull`` when ``max_queue`` jobs already wait or the
        server is stopping, ``WorkerDied`` when the worker has ended."""
        self.start()
        with self._lock:  # the dying thread drains the queue under this lock: no job is left in it
            if self._died is not None:
                raise WorkerDied(self.failure())
            if self._stopping:
                raise QueueFull("the server is shutting down")
            try:
                self._jobs.put_nowait(job)
            except queue.Full:
                raise QueueFull(f"{self.max_queue} requests are already waiting") from None

    def submit_all(self, jobs: list[ServeJob]) -> None:
        """Queue every one of ``jobs`` or none (the choices of one request, ``n`` > 1):
        ``QueueFull`` when the queue has no room for all of them, as ``submit``."""
        self.start()
        with self._lock:  # only submits add to the queue, all under this lock: the room stays
            if self._died is not None:
                raise WorkerDied(self.failure())
            if self._stopping:
                raise QueueFull("the server is shutting down")
            if self._jobs.qsize() + len(jobs) > self.max_queue:
                raise QueueFull(
                    f"{self._jobs.qsize()} requests are waiting and {len(jobs)} choices do not fit "
                    f"in the queue of {self.max_queue}"
                )
            for job in jobs:
                self._jobs.put_nowait(job)

    async def next_event(self, job: ServeJob, poll: float = 1.0) -> Any:
        """The job's next event; ``Failed(WorkerDied)`` once the worker has ended and no
        event is left for it (checked every ``poll`` seconds while waiting)."""
        while True:
            if not job.events.empty():  # the common case, without a timer
                return job.events.get_nowait()
            try:
                return await asyncio.wait_for(job.events.get(), poll)
            except asyncio.TimeoutError:
                if self._died is not None or (self._thread is not None and not self._thread.is_alive()):
                    if job.events.empty():
                        return Failed(WorkerDied(self.failure()))

    def failure(self) -> str:
        """Why the worker ended, in words."""
        e = self._died
        why = f"{type(e).__name__}: {e}" if e is not None else "it stopped"
        return f"the generation worker has stopped ({why}); restart the server"

    @property
    def waiting(self) -> int:
        """Jobs in the queue, not counting the one running."""
        return self._jobs.qsize()

    @property
    def busy(self) -> bool:
        return self._current is not None or bool(self._active)

    @property
    def alive(self) -> bool:
        """False once the thread has ended (after ``stop``, or if it died); a worker
        that has not started yet counts as alive (it starts on the first job)."""
        return not self._stopping and self._died is None and (self._thread is None or self._thread.is_alive())

    def start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="edgespec-generation", daemon=True)
                self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the running and the queued jobs and end the thread."""
        with self._lock:
            self._stopping = True
            thread = self._thread
        for current in [self._current, *list(self._active)]:
            if current is not None:
                current.cancel()
        self._fail_queued(QueueFull("the server is shutting down"))
        if thread is not None:
            self._jobs.put(None)
            thread.join(timeout)
        elif self._runner is not None:
            self._runner.close()
            self._runner = None

    def drain(self) -> int:
        """The server is shutting down: refuse new jobs, and end the running and queued
        ones now with ``Failed(QueueFull)`` (a 503, or an error event on a stream), before
        uvicorn would cancel their requests. Call it on the event loop; returns how many
        jobs it ended. The thread itself ends in ``stop``."""
        ending = QueueFull("the request was still open when the shutdown grace ran out")
        with self._lock:
            self._stopping = True
            running = [job for job in (self._current, *self._active) if job is not None and not job.cancelled]
        for job in running:
            job.cancel()
            job.events.put_nowait(Failed(ending))  # on the loop already: ahead of anything posted later
        return len(running) + self._fail_queued(ending)

    def _fail_queued(self, error: BaseException) -> int:
        failed = 0
        while True:
            try:
                job = self._jobs.get_nowait()
            except queue.Empty:
                return failed
            if job is not None:
                failed += not job.cancelled
                job.cancel()
                job.post(Failed(error))

    # -- the worker thread -------------------------------------------------------------
    def _run(self) -> None:
        try:
            if self.parallel > 1:
                self._run_slots()
            else:
                self._run_single()
        except BaseException as e:  # the thread ends: nobody may be left waiting
            log.exception("the generation worker died")
            with self._lock:
                self._died = e
                dead = WorkerDied(self.failure())
                for job in [self._current, *self._active]:
                    if job is not None:
                        job.post(Failed(dead))
                self._fail_queued(dead)
            if self.on_fatal is not None:
                self.on_fatal(e)

    def _run_single(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            if job.cancelled:
                self.metrics.count_cancelled(started=False)
                continue
            self._current = job
            try:
                self._serve(job)
            except Exception as e:  # a bug or a broken call: this job fails, the next one runs
                log.exception("generation failed")
                job.post(Failed(e))
                self.engine.reset()  # the caches may be half-written: start the next one clean
            finally:
                self._current = None

    def _serve(self, job: ServeJob) -> None:
        wait = time.perf_counter() - job.enqueued_at
        try:
            events = self.engine.stream(job.prompt, **job.options)
        except EdgespecError as e:
            job.post(Failed(e))
            return
        self.metrics.observe_queue_wait(wait)
        job.post(Started(queue_wait=wait, cached=self._cached(job.prompt)))
        finished = False
        try:
            for event in events:
                if job.cancelled:
                    break
                if isinstance(event, Done):
                    # counted before the client hears of it: /metrics is never behind a reply
                    self.metrics.observe_generation(event.stats)
                    finished = True
                    self._current = None  # and idle: /health after a reply never says busy
                job.post(event)
        except EdgespecError as e:
            job.post(Failed(e))
        finally:
            # Closing the generator runs the engine's own clean-up: both caches are left
            # consistent and the next request reuses what they hold.
            events.close()
        if not finished and job.cancelled:
            self.metrics.count_cancelled(started=True)

    def _cached(self, prompt: Any) -> int | None:
        """The prompt's tokens the engine's KV cache holds now (what it will not decode
        again), for a prompt of token ids; None for text."""
        ctx = getattr(self.engine, "ctx", None)
        if not isinstance(prompt, list) or not prompt or not isinstance(prompt[0], int) or ctx is None:
            return None
        from edgespec.llama import common_prefix_len

        return common_prefix_len(ctx.tokens, prompt[:-1])

    # -- parallel slots ---------------------------------------------------------------
    def _run_slots(self) -> None:
        runner = self._runner
        try:
            while True:
                if not self._admit(runner):
                    return
                if not runner.active:
                    continue
                try:
                    outcomes = runner.step()
                except Exception as e:  # the decode failed: every job in it fails, the slots empty
                    if not isinstance(e, EdgespecError):
                        log.exception("a batch step failed")
                    for job in self._active:
                        job.post(Failed(e))
                    self._active.clear()
                    runner.release_all()
                    continue
                for o in outcomes:
                    self._active.discard(o.key)
                    if o.error is not None:  # its grammar matcher failed: it alone ends
                        o.key.post(Failed(o.error))
                    elif o.cancelled:
                        self.metrics.count_cancelled(started=True)
        finally:
            runner.close()

    def _admit(self, runner: Any) -> bool:
        """Move queued jobs into free slots; wait for one only when nothing runs.
        False when the worker is told to stop."""
        from edgespec.batching.runner import Request

        while runner.has_room:
            try:
                job = self._jobs.get(block=not runner.active)
            except queue.Empty:
                return True
            if job is None:
                return False
            if job.cancelled:
                self.metrics.count_cancelled(started=False)
                continue
            wait = time.perf_counter() - job.enqueued_at
            req = Request(
                job,
                job.prompt,
                job.options,
                on_event=lambda ev, j=job: self._forward(j, ev),
                cancelled=lambda j=job: j.cancelled,
            )
            try:
                failed = runner.admit(req)
                error = failed.error if failed is not None else None
            except Exception as e:  # a bug in preparing this one request: it fails alone
                log.exception("admitting a request failed")
                error = e
            if error is not None:
                job.post(Failed(error))
                continue
            self.metrics.observe_queue_wait(wait)
            job.post(Started(queue_wait=wait))
            self._active.add(job)
        return True

    def _forward(self, job: ServeJob, event: Any) -> None:
        if isinstance(event, Done):
            # counted before the client hears of it: /metrics is never behind a reply
            self.metrics.observe_generation(event.stats)
            self._active.discard(job)  # and its slot no longer busy (/health after a reply)
        job.post(event)
