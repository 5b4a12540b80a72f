"""The built-in prompts of ``edgespec bench`` and ``edgespec tune``.

Two disjoint sets over the same five kinds of work, because whether speculation pays
depends mostly on the kind of text:

* ``code``       writing new code from a description (little to copy from the prompt);
* ``edit``       editing or refactoring given code (the answer repeats much of it);
* ``summarize``  summarising a given text;
* ``qa``         answering a question about a given text (answers quote it);
* ``chat``       open-ended chat and creative writing (nothing to copy).

``CALIBRATION`` is what ``tune`` measures acceptance on; ``HELD_OUT`` is what ``bench``
runs by default, so a choice tuned on one set is judged on the other. The prompts are
user messages, rendered with the target's own chat template. This module is data: it
knows nothing about models or timing.
"""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("code", "edit", "summarize", "qa", "chat")


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    kind: str  # one of KINDS, or "custom" for prompts from a file
    prompt: str | tuple[dict, ...]  # a user message, or chat messages


# --------------------------------------------------------------------------------------
# Texts the prompts work on
# --------------------------------------------------------------------------------------

_INVENTORY = """\
class Inventory:
    def __init__(self):
        self.items = {}

    def add(self, name, qty):
        if name in self.items:
            self.items[name] = self.items[name] + qty
        else:
            self.items[name] = qty

    def remove(self, name, qty):
        if name not in self.items:
            raise KeyError(name)
        if self.items[name] < qty:
            raise ValueError("not enough " + name)
        self.items[name] = self.items[name] - qty
        if self.items[name] == 0:
            del self.items[name]

    def total(self):
        t = 0
        for name in self.items:
            t = t + self.items[name]
        return t
"""

_FETCH = """\
import json
import urllib.request


def fetch_users(base_url):
    resp = urllib.request.urlopen(base_url + "/users")
    data = json.loads(resp.read().decode("utf-8"))
    users = []
    for u in data:
        if u["active"] == True:
            users.append({"id": u["id"], "name": u["name"], "email": u["email"]})
    return users


def fetch_orders(base_url, user_id):
    resp = urllib.request.urlopen(base_url + "/users/" + str(user_id) + "/orders")
    data = json.loads(resp.read().decode("utf-8"))
    orders = []
    for o in data:
        if o["status"] != "cancelled":
            orders.append({"id": o["id"], "total": o["total"], "status": o["status"]})
    return orders
"""

_PARSE = """\
function parseConfig(text) {
  var lines = text.split("\\n");
  var result = {};
  for (var i = 0; i < lines.length; i++) {
    var line = lines[i].trim();
    if (line.length == 0 || line[0] == "#") {
      continue;
    }
    var eq = line.indexOf("=");
    if (eq == -1) {
      throw new Error("bad line " + (i + 1) + ": " + line);
    }
    var key = line.substring(0, eq).trim();
    var value = line.substring(eq + 1).trim();
    result[key] = value;
  }
  return result;
}
"""

_STATS = """\
def summarize(values):
    n = len(values)
    mean = sum(values) / n
    var = sum((v - mean) ** 2 for v in values) / n
    ordered = sorted(values)
    if n % 2 == 1:
        median = ordered[n // 2]
    else:
        median = (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {"n": n, "mean": mean, "var": var, "median": median}
"""

_BRIDGE = (
    "The Millbrook footbridge was built in 1931 to connect the textile mills on the east "
    "bank of the river with the workers' housing on the west bank. It is a steel truss "
    "bridge 84 metres long, resting on two stone piers. After the last mill closed in "
    "1978 the bridge fell out of use, and in 1996 it was closed to the public when "
    "inspectors found corrosion in the lower chords. A local trust raised 1.2 million "
    "pounds between 2015 and 2019 to restore it. The restoration replaced about a third "
    "of the steelwork, repainted the whole structure in its original green, and added "
    "lighting along the deck. The bridge reopened in May 2021 and now carries about "
    "2,000 pedestrians and cyclists a day. The trust plans to add an exhibition about "
    "the mills in the old toll house on the east bank."
)

_SLEEP = (
    "Researchers followed 312 university students for one semester to see how sleep "
    "affected exam results. Students wore activity trackers that recorded when they fell "
    "asleep and woke up. Those who slept on average seven hours or more scored 8 percent "
    "higher on final exams than those who slept less than six hours, even after "
    "accounting for prior grades. Consistency mattered as well: students whose bedtime "
    "varied by more than two hours from night to night did worse than students with "
    "regular schedules who slept the same total amount. The effect was strongest for "
    "exams held in the morning. The authors caution that the study was observational, "
    "so it cannot prove that sleep causes better grades, and that students who sleep "
    "well may differ in other ways, such as having fewer paid jobs."
)

_POLICY = (
    "Refund policy. Customers may return any product within 30 days of delivery for a "
    "full refund, provided the product is unused and in its original packaging. "
    "Opened software, gift cards and perishable goods cannot be returned. For products "
    "that arrive damaged, customers must report the damage within 7 days and include a "
    "photo; we then send a replacement at no cost or issue a refund, at the customer's "
    "choice. Refunds are paid to the original payment method within 10 business days "
    "after we receive the returned item. Return shipping is free for damaged or wrong "
    "items; for other returns the customer pays shipping, which is deducted from the "
    "refund. Orders shipped outside the European Union are not eligible for free "
    "return shipping."
)

_COMET = (
    "Comet C/2023 A3 (Tsuchinshan-ATLAS) was discovered in January 2023 by the Purple "
    "Mountain Observatory in China and, independently, by the ATLAS survey in South "
    "Africa. It is a long-period comet that probably comes from the Oort cloud. It "
    "passed closest to the Sun on 27 September 2024, at about 0.39 astronomical units, "
    "and closest to Earth on 12 October 2024, at about 0.47 astronomical units. In "
    "mid-October it reached a magnitude of around -4.9 for observers who could see it "
    "in forward scattering, making it visible to the naked eye in the evening sky. Its "
    "orbit is slightly hyperbolic after the passage, so it may never return."
)

# --------------------------------------------------------------------------------------
# The sets
# --------------------------------------------------------------------------------------

CALIBRATION: tuple[BenchPrompt, ...] = (
    BenchPrompt(
        "cal-code",
        "code",
        "Write a Python function `merge_intervals(intervals)` that merges overlapping "
        "[start, end] intervals and returns them sorted. Include a docstring and a "
        "short example.",
    ),
    BenchPrompt(
        "cal-edit",
        "edit",
        "Refactor this class to use `collections.defaultdict` and add type hints. "
        "Return the whole updated class.\n\n```python\n" + _INVENTORY + "```",
    ),
    BenchPrompt("cal-summarize", "summarize", "Summarise the following text in three sentences.\n\n" + _BRIDGE),
    BenchPrompt(
        "cal-qa",
        "qa",
        "Read the policy and answer: a customer outside the EU received a damaged "
        "item 10 days ago. What can they get, and who pays shipping?\n\n" + _POLICY,
    ),
    BenchPrompt(
        "cal-chat",
        "chat",
        "I'm planning a weekend hiking trip with two friends who have never hiked "
        "before. What should we pack, and how do we pick a trail?",
    ),
)

HELD_OUT: tuple[BenchPrompt, ...] = (
    BenchPrompt(
        "code-lru",
        "code",
        "Implement an LRU cache class in Python with `get(key)` and `put(key, value)` "
        "in O(1) time, without using functools. Explain the design briefly.",
    ),
    BenchPrompt(
        "code-sql",
        "code",
        "Write a SQL query that returns, for each customer, their total spending in "
        "2024 and their most recent order date, from tables customers(id, name) and "
        "orders(id, customer_id, total, created_at).",
    ),
    BenchPrompt(
        "edit-fetch",
        "edit",
        "Refactor this module: factor out the repeated request-and-parse code into a "
        "helper, use f-strings, and fix the `== True` comparison. Return the whole "
        "module.\n\n```python\n" + _FETCH + "```",
    ),
    BenchPrompt(
        "edit-js",
        "edit",
        "Rewrite this JavaScript function with `const`/`let`, strict equality and a "
        "`for...of` loop over the lines. Keep the behaviour the same and return the "
        "full function.\n\n```javascript\n" + _PARSE + "```",
    ),
    BenchPrompt(
        "edit-stats",
        "edit",
        "Add type hints and a docstring to this function and make it raise "
        "ValueError on an empty list. Return the complete function.\n\n```python\n" + _STATS + "```",
    ),
    BenchPrompt(
        "summarize-sleep", "summarize", "Summarise this study for a student newsletter in about 60 words.\n\n" + _SLEEP
    ),
    BenchPrompt(
        "summarize-comet", "summarize", "Give a bullet-point summary of the key facts in this text.\n\n" + _COMET
    ),
    BenchPrompt(
        "qa-bridge",
        "qa",
        "Using only the text below, answer: when was the bridge closed, why, and what "
        "did the restoration change?\n\n" + _BRIDGE,
    ),
    BenchPrompt(
        "qa-sleep",
        "qa",
        "According to the text, which students did worse, and what are the study's "
        "limitations? Quote the relevant sentences.\n\n" + _SLEEP,
    ),
    BenchPrompt(
        "chat-story",
        "chat",
        "Write a short story (about 150 words) about a lighthouse keeper who finds a "
        "message in a bottle addressed to her.",
    ),
    BenchPrompt(
        "chat-advice", "chat", "What are some good ways to stay focused when working from home? Give me practical tips."
    ),
)


def prompt_set(name: str) -> tuple[BenchPrompt, ...]:
    """``"held-out"`` (bench's default) or ``"calibration"`` (tune's)."""
    sets = {"held-out": HELD_OUT, "calibration": CALIBRATION}
    if name not in sets:
        raise ValueError(f"unknown prompt set {name!r}; known: {', '.join(sets)}")
    return sets[name]
