"""Tuning prompts: three code edits that return the whole input (a Python module, an
Express server, a function), the prompts the drafting policy's priors were chosen on,
beside ``edgespec.measuring.prompts.CALIBRATION``.

They are NOT held out: ``benchmarks/record_traces.py`` records on them for offline replay,
and no published figure may be measured on them (the held-out sets are the other files of
this folder). First used by ``benchmarks/ngram_speedup.py`` (version 0.1, deleted; see
docs/results.md's superseded section). ``PROMPTS`` maps a name to the prompt text.
"""

from __future__ import annotations

INVENTORY = """import json
from dataclasses import dataclass, field


@dataclass
class Item:
    sku: str
    name: str
    quantity: int = 0
    price_cents: int = 0


@dataclass
class Inventory:
    items: dict[str, Item] = field(default_factory=dict)

    def add(self, item: Item) -> None:
        if item.sku in self.items:
            raise ValueError(f"duplicate sku {item.sku}")
        self.items[item.sku] = item

    def remove(self, sku: str) -> Item:
        return self.items.pop(sku)

    def restock(self, sku: str, amount: int) -> None:
        if amount <= 0:
            raise ValueError("amount must be positive")
        self.items[sku].quantity += amount

    def total_value_cents(self) -> int:
        return sum(i.quantity * i.price_cents for i in self.items.values())

    def to_json(self) -> str:
        return json.dumps({sku: vars(item) for sku, item in self.items.items()})
"""

SERVER = """const express = require("express");
const app = express();
app.use(express.json());

const users = new Map();
let nextId = 1;

app.get("/users", (req, res) => {
  res.json([...users.values()]);
});

app.get("/users/:id", (req, res) => {
  const user = users.get(Number(req.params.id));
  if (!user) return res.status(404).json({ error: "not found" });
  res.json(user);
});

app.post("/users", (req, res) => {
  const { name, email } = req.body;
  if (!name || !email) return res.status(400).json({ error: "name and email required" });
  const user = { id: nextId++, name, email };
  users.set(user.id, user);
  res.status(201).json(user);
});

app.delete("/users/:id", (req, res) => {
  users.delete(Number(req.params.id));
  res.status(204).end();
});

app.listen(3000, () => console.log("listening on 3000"));
"""

PARSER = """def parse_config(lines):
    config = {}
    section = None
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line[1:-1].strip()
            config.setdefault(section, {})
            continue
        if "=" not in line:
            raise SyntaxError(f"line {number}: expected key = value")
        key, value = (part.strip() for part in line.split("=", 1))
        if section is None:
            raise SyntaxError(f"line {number}: key outside a section")
        config[section][key] = value
    return config
"""

PROMPTS = {
    "rename-method": "Here is a Python module:\n\n```python\n" + INVENTORY + "```\n\n"
    "Rename the method `total_value_cents` to `stock_value_cents` everywhere. "
    "Return the whole file and nothing else.",
    "add-endpoint-check": "Here is an Express server:\n\n```javascript\n" + SERVER + "```\n\n"
    'Make the DELETE route return 404 with {"error": "not found"} when the user does not '
    "exist. Return the whole file with that change.",
    "add-docstrings": "Add a one-line docstring to this function and keep everything else "
    "exactly the same. Return the whole function.\n\n```python\n" + PARSER + "```",
}
