"""Prompt sets for ``repeat_workloads.py``: four workloads, each a sequence of 32 different
requests whose answers share one shape (issue 27 item 8).

Written for this benchmark and never tuned on (held out: no drafter, policy or default
was chosen by looking at them), and not taken from the other benchmark files:

* ``extraction``: support tickets of one fictional product into one JSON schema;
* ``tests``: a pytest test for each of 32 small, different functions;
* ``edits``: an agent-like loop with tools: each request asks for the same kind of edit
  (a guard that raises ``ValueError``) on a different small file, after the agent's
  ``read_file`` call and its result (rendered prompts stay under 600 tokens);
* ``sql``: 32 questions over one SQLite schema given in the system prompt.

A request is a list of chat messages (and, for ``edits``, the tools list the template
renders); ``repeat_workloads.py`` renders them with the target's own chat template.
The first 24 requests of each are the in-process sequence; the last 8 are what the warm
pass (a second process with the saved index) and the in-process run both answer after
the index was saved, so warm and in-process speeds compare on the same requests.

Each workload's data (its system prompt, its 32 inputs, its schema or tools) lives in its own
module, ``prompts/repeat_<workload>.py``; this one knows only the request and workload records
and how the four are built from that data.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.prompts.repeat_edits import EDIT_TOOLS, EDITS, edit_messages
from benchmarks.prompts.repeat_extraction import TICKET_SCHEMA, TICKET_SYSTEM, TICKETS
from benchmarks.prompts.repeat_sql import QUESTIONS, SQL_SYSTEM
from benchmarks.prompts.repeat_tests import FUNCTIONS, TEST_SYSTEM

N_REQUESTS = 32


@dataclass(frozen=True)
class Request:
    id: str
    messages: list[dict]


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # "schema" (constrained by ``schema``) or "free" (free text)
    max_tokens: int
    requests: list[Request]
    schema: dict | None = None
    tools: list[dict] | None = None
    notes: str = ""
    extra: dict = field(default_factory=dict)


# -- the workloads ---------------------------------------------------------------------------


def _user(system: str, content: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


def workloads() -> dict[str, Workload]:
    return {
        "extraction": Workload(
            "extraction",
            "schema",
            96,
            [Request(f"ticket-{i + 1:02d}", _user(TICKET_SYSTEM, f"Ticket:\n{t}")) for i, t in enumerate(TICKETS)],
            schema=TICKET_SCHEMA,
            notes="support tickets into one JSON schema (response_format json_schema)",
        ),
        "tests": Workload(
            "tests",
            "free",
            128,
            [
                Request(
                    f"test-{i + 1:02d}",
                    _user(TEST_SYSTEM, f"Write a pytest test for this function:\n```python\n{f}\n```"),
                )
                for i, f in enumerate(FUNCTIONS)
            ],
            notes="a pytest test for each of 32 small functions",
        ),
        "edits": Workload(
            "edits",
            "free",
            128,
            [Request(f"edit-{i + 1:02d}", edit_messages(i + 1, p, a, t)) for i, (p, a, t) in enumerate(EDITS)],
            tools=EDIT_TOOLS,
            notes="agent loop: read_file called and answered, the edit is the next tool call",
        ),
        "sql": Workload(
            "sql",
            "free",
            80,
            [Request(f"sql-{i + 1:02d}", _user(SQL_SYSTEM, q)) for i, q in enumerate(QUESTIONS)],
            notes="32 questions over one SQLite schema in the system prompt",
        ),
    }


WORKLOADS = tuple(workloads())
