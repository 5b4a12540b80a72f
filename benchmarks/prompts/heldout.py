"""Held-out prompts for the prompt-lookup check (benchmarks/ngram_policy.py).

Written for that check and never used to tune anything: the drafting policy's priors
and the profiles' figures come from ``edgespec.measuring.prompts.CALIBRATION`` and the
prompts of ``benchmarks/prompts/tuning.py``. Three kinds copy their input (an edit that
returns the whole file, a refactor, answers quoting a document) and three do not (new
code, a story, a question without context).
"""

from __future__ import annotations

SCHEDULER = '''"""Tiny job scheduler for the nightly export."""
import heapq
import time
from dataclasses import dataclass, field


@dataclass(order=True)
class Job:
    run_at: float
    name: str = field(compare=False)
    retries: int = field(default=0, compare=False)


class Scheduler:
    def __init__(self, max_retries=3):
        self.queue = []
        self.max_retries = max_retries
        self.done = []

    def submit(self, name, delay=0.0):
        job = Job(time.time() + delay, name)
        heapq.heappush(self.queue, job)
        return job

    def next_due(self, now=None):
        now = time.time() if now is None else now
        if self.queue and self.queue[0].run_at <= now:
            return heapq.heappop(self.queue)
        return None

    def fail(self, job, backoff=30.0):
        job.retries += 1
        if job.retries > self.max_retries:
            return False
        job.run_at = time.time() + backoff * job.retries
        heapq.heappush(self.queue, job)
        return True

    def finish(self, job):
        self.done.append(job.name)
'''

REPORT = """function buildReport(orders) {
  var totals = {};
  for (var i = 0; i < orders.length; i++) {
    var o = orders[i];
    if (!totals[o.region]) {
      totals[o.region] = { count: 0, revenue: 0, refunds: 0 };
    }
    totals[o.region].count += 1;
    if (o.status === "refunded") {
      totals[o.region].refunds += o.amount;
    } else {
      totals[o.region].revenue += o.amount;
    }
  }
  var lines = [];
  for (var region in totals) {
    var t = totals[region];
    var net = t.revenue - t.refunds;
    lines.push(region + ": " + t.count + " orders, net " + net.toFixed(2));
  }
  lines.sort();
  return lines.join("\\n");
}
"""

TENANCY = """Section 4. Deposits. The landlord may ask for a deposit of no more than two months
of rent. The deposit must be kept in a separate bank account, and the landlord must tell
the tenant the name of the bank within fourteen days of receiving it.

Section 5. Repairs. The landlord is responsible for repairs to the roof, the heating
system, the plumbing and the electrical wiring. The tenant must report a needed repair in
writing. If the landlord does not begin the repair within ten working days of the report,
the tenant may arrange the repair and deduct its reasonable cost from the next rent
payment, up to one month of rent.

Section 6. Entry. The landlord may enter the home to inspect it or to carry out repairs
after giving at least twenty-four hours of written notice, and only between eight in the
morning and eight in the evening, except in an emergency such as a fire or a flood.

Section 7. Ending the tenancy. A tenant on a periodic lease may end it with one month of
written notice. A landlord must give three months of written notice and state the reason,
which must be one of those listed in Schedule B."""

# (name, kind, grounded, prompt)
PROMPTS: tuple[tuple[str, str, bool, str], ...] = (
    (
        "edit-scheduler",
        "edit",
        True,
        "Rename the class `Scheduler` to `JobScheduler` and the method `fail` to `retry_later` "
        "in this file. Return the whole file, nothing else.\n\n```python\n" + SCHEDULER + "```",
    ),
    (
        "edit-report-const",
        "edit",
        True,
        "In this JavaScript function, replace every `var` with `const` or `let` as "
        "appropriate. Return the complete function with no explanation.\n\n```js\n" + REPORT + "```",
    ),
    (
        "refactor-scheduler",
        "refactor",
        True,
        "Refactor this module so that `submit` and `fail` share one private helper "
        "`_push(job, at)` for putting a job on the heap. Show the full refactored module.\n\n"
        "```python\n" + SCHEDULER + "```",
    ),
    (
        "quote-tenancy",
        "document",
        True,
        "Using only the text below, answer: when may the tenant deduct repair costs from the "
        "rent, and when may the landlord enter the home? Quote the exact sentences that "
        "support each answer.\n\n" + TENANCY,
    ),
    (
        "new-code-durations",
        "new code",
        False,
        "Write a Python function `parse_duration(text)` that turns strings like '1h30m', "
        "'45s' or '2d 4h' into a number of seconds, raising ValueError on bad input. Include "
        "a docstring and a few examples.",
    ),
    (
        "story-lighthouse",
        "story",
        False,
        "Write a short story about a lighthouse keeper who repairs old radios and one night "
        "hears a voice answering from a ship that sank fifty years ago.",
    ),
    (
        "question-tides",
        "question",
        False,
        "Why are there two high tides a day in most places, and why do they come about fifty minutes later each day?",
    ),
)
