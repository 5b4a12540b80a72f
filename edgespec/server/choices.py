"""Several choices from one prompt (``n`` > 1): one worker job per choice, one response.

Each choice is its own generation, a ``ChoiceJob`` in the worker's queue, all queued at
once or not at all (``Worker.submit_all``), their events tagged with the choice's index
on one shared queue. What they share is the prompt:

* ``serve --parallel 1`` (one stream) runs them one after another on the engine's own
  context; the second and later ones find the prompt in the KV cache (prefix reuse)
  and decode only its last token.
* ``--parallel N`` runs them as sequences of the batch, side by side when slots are
  free: the first computes the prompt, the others take its cells
  (``MultiContext.share``, ``llama_memory_seq_cp``) instead of computing them.

Choice ``i`` samples with seed ``seed + i`` when the request (or the server) gives a
seed, so the choices differ and each is reproducible; without one each draws its own.
Greedy choices are all the same answer. Each choice has its own ``index``, text or
message, ``finish_reason``, structure and logprobs; ``usage`` counts the prompt once and
sums the completion tokens, and ``timings`` are summed over the choices, ``prompt_n``
counting the prompt tokens the request computed (once when the choices share it). Streamed, the
chunks of the choices interleave as their tokens come, each with its ``index``; every
choice ends with its own finish chunk, then the usage chunk (when asked) and
``[DONE]``. An error in any choice fails the request (an error event once streaming).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any, AsyncIterator, Awaitable, Callable

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from edgespec.events import Done, Round, Stats, Token

from .responses import Gone, ReplyBody, error_for, event
from .schema import ApiError
from .worker import Failed, ServeJob, Started, Worker


@dataclass(frozen=True)
class Tagged:
    """An event of choice ``index``."""

    index: int
    item: Any


@dataclass(eq=False)
class ChoiceJob(ServeJob):
    """The job of one choice: its events reach the shared queue tagged with its index."""

    index: int = 0

    def post(self, item: Any) -> None:
        super().post(Tagged(self.index, item))


@dataclass(eq=False)
class JobGroup:
    """The jobs of one request's choices, read and cancelled together (the disconnect
    watcher takes it for a job: ``cancel``, ``cancelled``, ``events``)."""

    jobs: list[ChoiceJob]
    worker: Worker
    events: asyncio.Queue = field(init=False)
    backlog: list[Tagged] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.events = self.jobs[0].events

    async def next(self) -> Any:
        """The next item of any choice (``Tagged``), or an untagged ``Failed``."""
        if self.backlog:
            return self.backlog.pop(0)
        return await self.worker.next_event(self.jobs[0])

    def cancel(self) -> None:
        for job in self.jobs:
            job.cancel()

    @property
    def cancelled(self) -> bool:
        return all(job.cancelled for job in self.jobs)


def choice_jobs(prompt: Any, options: dict, n: int) -> list[ChoiceJob]:
    """``n`` jobs on one event queue; choice i with seed + i when a seed is given."""
    events: asyncio.Queue = asyncio.Queue()
    seed = options.get("seed")
    return [
        ChoiceJob(
            prompt=prompt,
            options={**options, "seed": seed + i} if seed is not None else dict(options),
            events=events,
            index=i,
        )
        for i in range(n)
    ]


def combined_stats(stats: list[Stats]) -> Stats:
    """The choices' stats as one, the rest summed; the prompt once: its tokens the
    request computed are every choice's, less the one token each choice after the first
    decodes again (the prompt's last, in its first verify batch). So a prompt shared by
    all the choices counts once; one computed again by each, n times."""
    first = stats[0]
    processed = sum(s.prompt_tokens_processed for s in stats) - (len(stats) - 1)
    names = (
        "generated_tokens",
        "rounds",
        "drafted",
        "accepted",
        "rejected",
        "from_draft_tokens",
        "forced",
        "forced_accepted",
        "t_prompt",
        "t_draft",
        "t_verify",
        "t_decode_draft",
        "t_generate",
        "t_total",
        "t_mask",
        "t_batch",
    )
    by_source = {
        name: dict(sum((Counter(getattr(s, name)) for s in stats), Counter()))
        for name in ("drafted_by_source", "accepted_by_source")
    }
    return replace(
        first,
        prompt_tokens_processed=processed,
        accepted_by_position=[],
        drafted_by_position=[],
        **by_source,
        **{name: sum(getattr(s, name) for s in stats) for name in names},
    )


async def serve_choices(
    request: Request,
    worker: Worker,
    jobs: list[ChoiceJob],
    make_reply: Callable[[int, float], ReplyBody],
    *,
    stream: bool,
    param: str,
    submit: Callable[[list[ServeJob]], None],
    watch: Callable[[Request, Any], Awaitable[None]],
) -> Response:
    """The response of one request's choices: ``submit`` queues them (raising the
    ``ApiError`` of a full queue), ``make_reply(index, queue_wait)`` builds a choice's
    ``ReplyBody``, ``watch`` cancels the group when the client hangs up."""
    if len(jobs) > worker.max_queue:
        raise ApiError(
            400, f"n={len(jobs)} is more choices than this server queues at once ({worker.max_queue})", param="n"
        )
    submit(jobs)
    group = JobGroup(jobs, worker)
    watcher = asyncio.create_task(watch(request, group))
    early: list[Tagged] = []  # (nothing comes before the first Started; kept if it did)
    try:
        while True:  # the first word: a choice Started, or the prompt is refused
            item = await group.next()
            failed = _failure(item)
            if failed is not None:
                raise error_for(failed, param=param)
            if isinstance(item.item, Started):
                break
            early.append(item)
        group.backlog.extend(early)
    except BaseException:
        group.cancel()
        watcher.cancel()
        raise
    replies = [make_reply(i, item.item.queue_wait) for i in range(len(jobs))]
    for r in replies[1:]:
        r.id, r.created = replies[0].id, replies[0].created
    if stream:
        return StreamingResponse(
            _sse(replies, group, watcher),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )
    try:
        finished = 0
        while True:
            item = await group.next()
            failed = _failure(item)
            if failed is not None:
                raise error_for(failed, param=None)
            if isinstance(item.item, Started):
                continue
            replies[item.index].feed(item.item)
            if isinstance(item.item, Done):
                finished += 1
                if finished == len(replies):
                    return JSONResponse(_body(replies))
    finally:
        group.cancel()
        watcher.cancel()


def _failure(item: Any) -> BaseException | None:
    """The error an item carries: the group's own (a hang-up, a dead worker) or a choice's."""
    if isinstance(item, Failed):
        return item.error
    return item.item.error if isinstance(item.item, Failed) else None


def _body(replies: list[ReplyBody]) -> dict:
    first = replies[0]
    st = combined_stats([r.done.stats for r in replies])
    out = first.body()
    out.pop("token_ids", None)
    out["choices"] = [r.choice() for r in replies]
    if first.req.return_tokens:
        for choice, r in zip(out["choices"], replies):
            choice["token_ids"] = list(r.done.token_ids)
    out["usage"], out["timings"] = first.usage(st), first.timings(st)
    return out


async def _sse(replies: list[ReplyBody], group: JobGroup, watcher: asyncio.Task) -> AsyncIterator[str]:
    """The server-sent events of the choices, interleaved as they come."""
    try:
        if replies[0].chat:
            for r in replies:
                yield event(r.chunk(text="", first=True))
        finished = 0
        while True:
            item = await group.next()
            failed = _failure(item)
            if failed is not None:
                if not isinstance(failed, Gone):
                    yield event(error_for(failed, param=None).body())
                    yield event("[DONE]")
                return
            reply, ev = replies[item.index], item.item
            if not isinstance(ev, (Token, Round, Done)):
                continue  # a later choice's Started
            for chunk in reply.stream_chunks(ev, usage=False):
                yield event(chunk)
            if isinstance(ev, Done):
                finished += 1
                if finished == len(replies):
                    if replies[0].req.include_usage():
                        st = combined_stats([r.done.stats for r in replies])
                        yield event(replies[0].usage_chunk(st))
                    yield event("[DONE]")
                    return
    finally:
        group.cancel()
        watcher.cancel()
