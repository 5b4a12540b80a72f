"""The results file, the time budget and the report of ``measure.py`` (benchmarks/gpu/):
``Recorder`` runs each phase under the budget and rewrites the JSON atomically after it, and
``summary`` is the short table printed at the end of a run. Knows the results' layout (what
``to_profile.py`` reads); not how any phase measures.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any, Callable

import numpy as np

SCHEMA = 1


class Recorder:
    """The results dictionary, rewritten atomically to ``path`` after every phase."""

    def __init__(self, path: Path, budget_s: float) -> None:
        self.path = path
        self.t0 = time.monotonic()
        self.budget_s = budget_s
        self.data: dict[str, Any] = {
            "schema": SCHEMA,
            "tool": "benchmarks/gpu/measure.py",
            "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "finished": None,
            "complete": False,
            "budget_s": budget_s,
            "phases": {},
        }

    def left(self) -> float:
        return self.budget_s - (time.monotonic() - self.t0)

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps(self.data, indent=1, default=json_default) + "\n", encoding="utf-8")
        os.replace(tmp, self.path)

    def phase(self, name: str, need_s: float, fn: Callable[[], Any]) -> Any:
        """Run ``fn`` as phase ``name`` if at least ``need_s`` seconds are left; record its
        result under ``name``, its status and time under ``phases``; never raise."""
        entry: dict[str, Any] = {"status": "skipped", "seconds": 0.0}
        self.data["phases"][name] = entry
        if self.left() < need_s:
            entry["reason"] = f"{self.left():.0f} s left of the budget, the phase needs ~{need_s:.0f} s"
            say(f"[{name}] skipped: {entry['reason']}")
            self.save()
            return None
        say(f"[{name}] start ({self.left():.0f} s left)")
        t = time.monotonic()
        try:
            result = fn()
            self.data[name] = result
            entry["status"] = "done"
        except Exception as exc:  # noqa: BLE001 - a failed phase must not lose the others
            result = None
            entry["status"] = "error"
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["traceback"] = traceback.format_exc()[-4000:]
            say(f"[{name}] error: {entry['error']}")
        entry["seconds"] = round(time.monotonic() - t, 2)
        say(f"[{name}] {entry['status']} in {entry['seconds']} s")
        self.save()
        return result


def json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def late(args: argparse.Namespace) -> bool:
    """Past the run's budget: long phases stop their loops and say they were cut short."""
    return time.monotonic() > getattr(args, "deadline", float("inf"))


def rnd(x: float | None, nd: int = 4) -> float | None:
    return None if x is None else round(float(x), nd)


def summary(d: dict) -> str:
    """A short table of the results, for the end of the run's output."""
    lines = [f"device: {d.get('device', {}).get('name', '?')}"]
    st = d.get("steps") or {}
    for name, m in (st.get("models") or {}).items():
        c = m["verify_cost"]
        lines.append(
            f"{name:>14}: step {m['step_ms']:.3f} ms  c(2) {c.get('2')}  c(4) {c.get('4')}  "
            f"c(8) {c.get('8')}  c(16) {c.get('16')}"
        )
    for g in st.get("gamma") or []:
        lines.append(f"γ {g['draft']} -> {g['target']}: {g['gamma']}")
    for key in ("batch_invariance", "exactness"):
        for kern, v in ((d.get(key) or {}).get("kernels") or {}).items():
            flag = v.get("all_bit_identical", v.get("all_identical"))
            lines.append(
                f"{key} {kern}: {flag}" + (f"  max |Δlogit| {v['max_abs_diff']}" if "max_abs_diff" in v else "")
            )
    for key in ("speculation", "speculation_exact"):
        sp = d.get(key) or {}
        for p in sp.get("points") or []:
            lines.append(
                f"{key} k={p['k']}: measured {p['measured_speedup']}x  predicted {p['predicted_speedup']}x  "
                f"α {p['alpha']}  overhead {p['overhead_fraction']}"
            )
    lines.append("phases: " + ", ".join(f"{k} {v['status']}" for k, v in d.get("phases", {}).items()))
    return "\n".join(lines)
