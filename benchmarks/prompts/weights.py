"""Held-out prompts for the weight-type check (benchmarks/weight_types.py, issue 37).

Written for that check on 2026-12-04 and never used to tune anything (nor seen by the
policy's priors or the profiles' figures). Six copy their input: an edit that returns the
whole file, the same code rewritten with async/await, a config change, answers that quote
a report, a changelog turned into release notes, tests that repeat the code under test;
three do not (new code, a letter, an explanation without a document). Each entry:
(name, kind, grounded, text).
"""

from __future__ import annotations

GRADEBOOK = """import json
import statistics


class Gradebook:
    def __init__(self, course, passing=50):
        self.course = course
        self.passing = passing
        self.scores = {}

    def record(self, student, assignment, score):
        if not 0 <= score <= 100:
            raise ValueError(f"score out of range: {score}")
        self.scores.setdefault(student, {})[assignment] = score

    def average(self, student):
        marks = self.scores.get(student)
        if not marks:
            return None
        return statistics.mean(marks.values())

    def failing(self):
        return sorted(s for s in self.scores if (self.average(s) or 0) < self.passing)

    def best(self, assignment):
        pairs = [(m[assignment], s) for s, m in self.scores.items() if assignment in m]
        return max(pairs)[1] if pairs else None

    def export(self, path):
        with open(path, "w") as fh:
            json.dump({"course": self.course, "scores": self.scores}, fh, indent=2)
"""

CALLBACKS = """function loadProfile(userId, done) {
  db.getUser(userId, function (err, user) {
    if (err) return done(err);
    db.getSettings(user.settingsId, function (err, settings) {
      if (err) return done(err);
      cache.put("profile:" + userId, { user: user, settings: settings }, function (err) {
        if (err) return done(err);
        done(null, { user: user, settings: settings });
      });
    });
  });
}

function removeProfile(userId, done) {
  db.deleteUser(userId, function (err) {
    if (err) return done(err);
    cache.drop("profile:" + userId, function (err) {
      if (err) return done(err);
      done(null, true);
    });
  });
}
"""

SERVICE_YAML = """service:
  name: billing-api
  replicas: 2
  image: registry.internal/billing-api:4.2.1
  port: 8080
  env:
    LOG_LEVEL: info
    DB_POOL_SIZE: "10"
    FEATURE_INVOICE_V2: "false"
  probes:
    liveness: /healthz
    readiness: /ready
  resources:
    cpu: 500m
    memory: 512Mi
"""

OUTAGE_REPORT = """Incident 2291: checkout latency, 14 November.

At 09:12 UTC the payments gateway began timing out for roughly one in five requests.
The on-call engineer saw the alert at 09:15 and paged the database team at 09:21,
because the slow queries all touched the orders table. The cause was an index on
orders.created_at that a migration had dropped the evening before; the migration was
meant to rebuild it concurrently but ran with a typo in the index name. Queries that
had taken 4 ms took up to 2.8 seconds. At 09:48 the index was recreated and latency
returned to normal by 09:55. About 3,100 checkouts failed and 2,650 of those customers
retried successfully within the hour. Follow-ups: a check in CI that compares indexes
before and after each migration, and an alert on the p95 latency of the orders queries
at 200 ms instead of 1 second."""

CHANGELOG = """- parser: accept trailing commas in arrays and objects (#412)
- parser: report the line and column of an unterminated string (#415)
- cli: new --indent option for the format command, default 2 (#420)
- cli: exit with code 3, not 1, when an input file is missing (#421)
- core: 30% faster loading of documents over 10 MB by reading them in chunks (#430)
- docs: a page on embedding the library in a web worker (#433)
- fix: numbers with exponents such as 1e-7 lost their sign when formatted (#436)"""

SPANS_PY = """def overlap_length(a, b):
    start = max(a[0], b[0])
    end = min(a[1], b[1])
    return max(0, end - start)


def busiest_hour(bookings):
    counts = [0] * 24
    for start, end in bookings:
        if not 0 <= start < end <= 24:
            raise ValueError(f"bad booking: {start}-{end}")
        for hour in range(start, end):
            counts[hour] += 1
    return counts.index(max(counts))
"""

PROMPTS = [
    (
        "edit-gradebook",
        "edit",
        True,
        "Add type hints to every method of this class and a one-line docstring to each. "
        "Return the whole file and nothing else.\n\n```python\n" + GRADEBOOK + "```",
    ),
    (
        "async-callbacks",
        "refactor",
        True,
        "Rewrite these two functions with async/await, assuming db and cache now return "
        "promises. Keep the names and the behaviour. Return only the code.\n\n```javascript\n" + CALLBACKS + "```",
    ),
    (
        "yaml-change",
        "edit",
        True,
        "In this deployment config, set replicas to 3, turn FEATURE_INVOICE_V2 on, and raise "
        "the memory to 1Gi. Output the complete YAML.\n\n```yaml\n" + SERVICE_YAML + "```",
    ),
    (
        "report-quotes",
        "question",
        True,
        "Read the incident report and answer each question with the sentence of the report "
        "that answers it, quoted exactly:\n1. When did the timeouts start?\n2. What was the "
        "cause?\n3. How slow did the queries get?\n4. What are the follow-ups?\n\n" + OUTAGE_REPORT,
    ),
    (
        "release-notes",
        "rewrite",
        True,
        "Turn this changelog into release notes for version 2.4.0 with the sections "
        "'New', 'Faster', 'Fixed' and 'Docs'. Keep every item's wording and its issue "
        "number.\n\n" + CHANGELOG,
    ),
    (
        "tests-intervals",
        "tests",
        True,
        "Add a test file for these two functions using pytest, with one test for each "
        "branch of busiest_hour. Begin by repeating the functions under test.\n\n```python\n" + SPANS_PY + "```",
    ),
    (
        "new-rate-limiter",
        "new code",
        False,
        "Write a Python class TokenBucket implementing a thread-safe token-bucket rate "
        "limiter with a method acquire(n=1, timeout=None) that blocks until n tokens are "
        "available or the timeout passes.",
    ),
    (
        "letter-hedge",
        "letter",
        False,
        "Write a short, friendly letter to a neighbour proposing to share the cost of "
        "trimming the tall hedge between your two gardens, and suggesting a weekend for it.",
    ),
    (
        "explain-raft",
        "explanation",
        False,
        "Explain in plain words how the Raft consensus algorithm elects a leader and what "
        "happens when two candidates split the vote.",
    ),
]
