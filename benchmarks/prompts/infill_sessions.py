"""Editing sessions for ``infill_replay.py`` (issue 35 item 5): files typed forward in an
editor with llama.vim, a completion request at each pause of the cursor.

HELD OUT: written for this benchmark only and never used to tune anything (no drafter,
policy, budget or default was chosen by looking at them or at their results). Keep it so.

A session is one file being written from the top: ``typed`` is the file as it ends up,
with ``‸`` where the user paused and the editor asked for a completion (the marks are
not part of the text); ``below`` is what already stands below the cursor while typing
(the lines under the cursor's line: a ``main`` guard, a closing export); ``extra`` are
chunks of sibling files llama.vim's ring buffer holds (``{"filename", "text"}``), the same
for the whole session (llama.vim refreshes its ring only in normal mode). At the k-th
mark the buffer is ``typed`` up to the mark, the rest of the cursor's line empty (typing
forward), then ``below``. ``infill_replay.request_at`` turns that into llama.vim's body.
"""

from __future__ import annotations

from dataclasses import dataclass, field

MARK = "‸"


@dataclass(frozen=True)
class Session:
    name: str
    filename: str
    typed: str
    below: str
    extra: list[dict] = field(default_factory=list)

    def stops(self) -> list[int]:
        """The character offsets (in ``typed`` without the marks) where requests were made."""
        out, pos = [], 0
        for part in self.typed.split(MARK)[:-1]:
            pos += len(part)
            out.append(pos)
        return out

    def text(self) -> str:
        return self.typed.replace(MARK, "")


INVENTORY_MODELS = """from dataclasses import dataclass, field
from datetime import date


@dataclass
class Item:
    sku: str
    name: str
    quantity: int
    unit_price: float
    reorder_level: int = 5
    tags: list[str] = field(default_factory=list)


@dataclass
class Shipment:
    sku: str
    quantity: int
    arrives: date
"""

INVENTORY_ERRORS = '''class InventoryError(Exception):
    """Base class of the inventory's errors."""


class UnknownItem(InventoryError):
    def __init__(self, sku: str) -> None:
        super().__init__(f"no item with SKU {sku!r}")
        self.sku = sku


class NotEnoughStock(InventoryError):
    def __init__(self, sku: str, wanted: int, have: int) -> None:
        super().__init__(f"{sku}: wanted {wanted}, only {have} in stock")
        self.sku = sku
        self.wanted = wanted
        self.have = have
'''

INVENTORY = Session(
    name="py-inventory",
    filename="inventory/store.py",
    typed='''"""The stock of one warehouse: items by SKU, taking and receiving stock."""

from collections.abc import Iterable

from .errors import NotEnoughStock, UnknownItem
from .models import Item, Shipment


class Store:
    def __init__(self, items: Iterable[Item] = ()) -> None:
        self._items: dict[str, Item] = {‸item.sku: item for item in items}

    def get(self, sku: str) -> Item:
        try:
            return self._items[sku]
        except KeyError:
            ‸raise UnknownItem(sku) from None

    def add(self, item: Item) -> None:
        ‸self._items[item.sku] = item

    def take(self, sku: str, quantity: int) -> Item:
        item = self.get(sku)
        if item.quantity < quantity:
            ‸raise NotEnoughStock(sku, quantity, item.quantity)
        item.quantity -= quantity
        return item

    def receive(self, shipment: Shipment) -> Item:
        ‸item = self.get(shipment.sku)
        item.quantity += shipment.quantity
        return item

    def below_reorder_level(self) -> list[Item]:
        ‸return [item for item in self._items.values() if item.quantity <= item.reorder_level]

    def value(self) -> float:
        ‸return sum(item.quantity * item.unit_price for item in self._items.values())

    def tagged(self, tag: str) -> list[Item]:
        ‸return [item for item in self._items.values() if tag in item.tags]

    def remove(self, sku: str) -> Item:
        item = self.get(sku)
        ‸del self._items[sku]
        return item

    def __len__(self) -> int:
        ‸return len(self._items)

    def __contains__(self, sku: object) -> bool:
        ‸return sku in self._items
''',
    below="""

def load(path: str) -> Store:
    import json

    with open(path) as f:
        rows = json.load(f)
    return Store(Item(**row) for row in rows)
""",
    extra=[
        {"filename": "inventory/models.py", "text": INVENTORY_MODELS},
        {"filename": "inventory/errors.py", "text": INVENTORY_ERRORS},
    ],
)

EVENTS_TEST = """import { EventBus } from "./bus.js";

test("a handler gets the payload", () => {
  const bus = new EventBus();
  const seen = [];
  bus.on("saved", (doc) => seen.push(doc.id));
  bus.emit("saved", { id: 7 });
  expect(seen).toEqual([7]);
});

test("once runs a single time", () => {
  const bus = new EventBus();
  let calls = 0;
  bus.once("ready", () => calls++);
  bus.emit("ready");
  bus.emit("ready");
  expect(calls).toBe(1);
});

test("off removes the handler", () => {
  const bus = new EventBus();
  const handler = jest.fn();
  bus.on("tick", handler);
  bus.off("tick", handler);
  bus.emit("tick");
  expect(handler).not.toHaveBeenCalled();
});
"""

EVENTS_README = """## EventBus

- `on(name, handler)` subscribes and returns a function that unsubscribes.
- `once(name, handler)` subscribes for the next event only.
- `off(name, handler)` unsubscribes; unknown handlers are ignored.
- `emit(name, payload)` calls the handlers in the order they subscribed and returns how
  many were called. A handler that throws does not stop the others; the errors are
  passed to `onError` (by default `console.error`).
- `clear(name)` removes the handlers of one event, `clear()` of all.
"""

EVENT_BUS = Session(
    name="js-event-bus",
    filename="src/bus.js",
    typed="""// A small publish/subscribe bus for the editor's panels.

export class EventBus {
  constructor({ onError = console.error } = {}) {
    this.handlers = new Map();
    ‸this.onError = onError;
  }

  on(name, handler) {
    if (!this.handlers.has(name)) {
      ‸this.handlers.set(name, []);
    }
    this.handlers.get(name).push(handler);
    ‸return () => this.off(name, handler);
  }

  once(name, handler) {
    const wrapper = (payload) => {
      ‸this.off(name, wrapper);
      handler(payload);
    };
    ‸return this.on(name, wrapper);
  }

  off(name, handler) {
    const list = this.handlers.get(name);
    if (!list) {
      ‸return;
    }
    const i = list.indexOf(handler);
    if (i !== -1) {
      ‸list.splice(i, 1);
    }
  }

  emit(name, payload) {
    const list = (this.handlers.get(name) || []).slice();
    for (const handler of list) {
      try {
        ‸handler(payload);
      } catch (err) {
        ‸this.onError(err);
      }
    }
    ‸return list.length;
  }

  clear(name) {
    if (name === undefined) {
      ‸this.handlers.clear();
    } else {
      ‸this.handlers.delete(name);
    }
  }
}
""",
    below="""
export const bus = new EventBus();
""",
    extra=[{"filename": "src/bus.test.js", "text": EVENTS_TEST}, {"filename": "docs/bus.md", "text": EVENTS_README}],
)

CONFIG_DEFAULTS = """[server]
host = "127.0.0.1"
port = 8080
workers = 2

[cache]
directory = "~/.cache/fetcher"
max_entries = 1000
ttl_seconds = 3600

[retry]
attempts = 3
backoff_seconds = 0.5
"""

CONFIG_CLI = """def parse_args(argv=None):
    ap = argparse.ArgumentParser(prog="fetcher")
    ap.add_argument("--config", type=Path, default=Path("fetcher.toml"))
    ap.add_argument("--port", type=int, default=None, help="overrides [server] port")
    ap.add_argument("--workers", type=int, default=None, help="overrides [server] workers")
    ap.add_argument("--no-cache", action="store_true")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    config = load_config(args.config)
    config = apply_overrides(config, args)
    serve(config)
    return 0
"""

CONFIG = Session(
    name="py-config",
    filename="fetcher/config.py",
    typed='''"""fetcher's settings: read from a TOML file, checked, then overridden from the command line."""

import tomllib
from dataclasses import dataclass, replace
from pathlib import Path


class ConfigError(ValueError):
    pass


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    ‸port: int = 8080
    workers: int = 2


@dataclass(frozen=True)
class CacheConfig:
    ‸directory: str = "~/.cache/fetcher"
    max_entries: int = 1000
    ttl_seconds: int = 3600


@dataclass(frozen=True)
class RetryConfig:
    ‸attempts: int = 3
    backoff_seconds: float = 0.5


@dataclass(frozen=True)
class Config:
    server: ServerConfig
    ‸cache: CacheConfig
    retry: RetryConfig


def load_config(path: Path) -> Config:
    try:
        with open(path, "rb") as f:
            ‸data = tomllib.load(f)
    except FileNotFoundError:
        ‸raise ConfigError(f"{path}: no such file") from None
    server = ServerConfig(**data.get("server", {}))
    ‸cache = CacheConfig(**data.get("cache", {}))
    retry = RetryConfig(**data.get("retry", {}))
    if not 0 < server.port < 65536:
        ‸raise ConfigError(f"{path}: port {server.port} is not between 1 and 65535")
    if server.workers < 1:
        ‸raise ConfigError(f"{path}: workers must be at least 1, not {server.workers}")
    return Config(server=server, cache=cache, retry=retry)


def apply_overrides(config: Config, args) -> Config:
    server = config.server
    if args.port is not None:
        ‸server = replace(server, port=args.port)
    if args.workers is not None:
        ‸server = replace(server, workers=args.workers)
    cache = config.cache
    if args.no_cache:
        ‸cache = replace(cache, max_entries=0)
    return replace(config, server=server, cache=cache)
''',
    below="""

def describe(config: Config) -> str:
    s = config.server
    return f"{s.host}:{s.port} with {s.workers} workers"
""",
    extra=[{"filename": "fetcher.toml", "text": CONFIG_DEFAULTS}, {"filename": "fetcher/cli.py", "text": CONFIG_CLI}],
)

SESSIONS: dict[str, Session] = {s.name: s for s in (INVENTORY, EVENT_BUS, CONFIG)}
