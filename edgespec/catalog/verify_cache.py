"""The verify cost c(n) measured per model file on this machine (``edgespec tune``,
``edgespec models optimize``), kept for the planner.

On a CPU, c(n) belongs to the weight type's kernels as much as to the machine: a Q4_0
file verifies 4 tokens for under 2 steps where a Q4_K_M one on the same CPU pays 2.6.
So a measured curve is kept per (machine, file, kernels) in
``$XDG_CONFIG_HOME/edgespec/verify-costs.json`` (else ``~/.config/edgespec``), beside
the pairs' α (``measured``):

* the machine is a fingerprint of what ``detect`` reads (system, architecture, CPU or
  chip, board, cores, GPUs, whether llama.cpp offloads): another machine, or this one
  with a new GPU, misses;
* the file is its resolved path, size and modification time: a file replaced in place
  misses, and its stale entry is dropped at the next write;
* the kernels are llama.cpp's own (what plain and, by default, speculative decoding run)
  or the batch-invariant ones ``--exact`` runs: their curves differ by far.

``measured_curve(path)`` is the pure reader the planner calls: the curve, or None. It
reads the machine (once per process, unless given one) and one small JSON file; it
never measures. ``record`` writes (atomically). Nothing here loads a model.

Beside c(n), an entry may keep ``mtp_gamma``: what one step of the file's own
multi-token-prediction head costs in target steps here (``measuring.first_use`` times it
for an engine drafting with ``--draft mtp``; ``measured_mtp_gamma`` reads it,
``record_mtp_gamma`` adds it to the entry). A new c(n) for the same file keeps it.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

from ..costmodel.adaptive import VerifyCost

VERSION = 1


def store_path() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "edgespec" / "verify-costs.json"


def machine_key(machine: Any = None) -> str:
    """A short fingerprint of the machine (a ``detect.Machine``; this one when None)."""
    if machine is None:
        return _this_machine_key()
    facts = [
        machine.system,
        machine.arch,
        machine.cpu,
        machine.chip,
        machine.board,
        machine.physical_cores,
        machine.logical_cores,
        [g.name for g in machine.gpus],
        machine.gpu_offload,
    ]
    return hashlib.sha256(json.dumps(facts).encode()).hexdigest()[:16]


@lru_cache(maxsize=1)
def _this_machine_key() -> str:
    from ..detect import read_machine

    return machine_key(read_machine())


def file_identity(path: str | os.PathLike) -> dict[str, Any] | None:
    """The file as the cache knows it (resolved path, size, mtime), None if it is gone."""
    p = Path(path).expanduser()
    try:
        st = p.stat()
        resolved = p.resolve()
    except OSError:
        return None
    return {"file": str(resolved), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _key(ident: Mapping[str, Any], machine: str, exact: bool) -> str:
    kernels = "exact" if exact else "llama.cpp"
    return f"{machine}|{kernels}|{ident['file']}|{ident['size']}|{ident['mtime_ns']}"


def _load() -> dict[str, Any]:
    try:
        data = json.loads(store_path().read_text(encoding="utf-8"))
        if data.get("version") == VERSION and isinstance(data.get("entries"), dict):
            return data
    except (OSError, ValueError, AttributeError):
        pass
    return {"version": VERSION, "entries": {}}


def measured_entry(path: str | os.PathLike, *, exact: bool = False, machine: Any = None) -> dict[str, Any] | None:
    """What was measured for this file here: ``c`` (n -> c(n)), ``step_ms``, ``threads``,
    ``source``, ``date``; None when nothing was (or the file changed since)."""
    ident = file_identity(path)
    if ident is None:
        return None
    rec = _load()["entries"].get(_key(ident, machine_key(machine), exact))
    if not isinstance(rec, dict) or not isinstance(rec.get("c"), dict):
        return None
    return rec


def measured_curve(path: str | os.PathLike, *, exact: bool = False, machine: Any = None) -> VerifyCost | None:
    """c(n) measured for the model file ``path`` on this machine (with llama.cpp's kernels,
    or the batch-invariant ones when ``exact``), or None: plan from the priors then."""
    rec = measured_entry(path, exact=exact, machine=machine)
    if rec is None:
        return None
    try:
        points = sorted((int(n), float(c)) for n, c in rec["c"].items() if int(n) >= 2)
        if not points:
            return None
        return VerifyCost(tuple(n for n, _ in points), tuple(max(1.0, c) for _, c in points))
    except (TypeError, ValueError):
        return None


def measured_mtp_gamma(path: str | os.PathLike, *, exact: bool = False, machine: Any = None) -> float | None:
    """γ of the file's own MTP head measured here (one head step over one target step), or None."""
    rec = measured_entry(path, exact=exact, machine=machine)
    g = rec.get("mtp_gamma") if rec is not None else None
    return float(g["value"]) if isinstance(g, dict) and isinstance(g.get("value"), (int, float)) else None


def record(
    path: str | os.PathLike,
    curve: Mapping[int, float] | VerifyCost,
    *,
    step_ms: float,
    threads: int,
    exact: bool,
    source: str,
    machine: Any = None,
    when: _dt.date | None = None,
    mtp_gamma: tuple[float, str] | None = None,
) -> Path | None:
    """Keep the c(n) measured for ``path`` (n -> c, or a ``VerifyCost``), with the MTP
    head's γ when given as (γ, how it was measured), else the one the entry had; entries
    of files that are gone or changed are dropped. The store's path, or None when the file
    is gone or the store cannot be written (a cache: the planner then uses its priors)."""
    ident = file_identity(path)
    if ident is None:
        return None
    if isinstance(curve, VerifyCost):
        curve = dict(zip(curve.n, curve.c))
    data = _load()
    entries = {k: v for k, v in data["entries"].items() if isinstance(v, dict) and _current(v)}
    key = _key(ident, machine_key(machine), exact)
    day = (when or _dt.date.today()).isoformat()
    head = _gamma_entry(*mtp_gamma, day) if mtp_gamma is not None else entries.get(key, {}).get("mtp_gamma")
    entries[key] = {
        **ident,
        "kernels": "exact" if exact else "llama.cpp",
        "threads": int(threads),
        "step_ms": round(float(step_ms), 3),
        "c": {str(n): round(float(c), 4) for n, c in sorted(curve.items())},
        "source": source,
        "date": day,
        **({"mtp_gamma": head} if head else {}),
    }
    data["entries"] = entries
    return write_json(store_path(), data)


def record_mtp_gamma(
    path: str | os.PathLike,
    gamma: float,
    *,
    exact: bool,
    source: str,
    machine: Any = None,
    when: _dt.date | None = None,
) -> Path | None:
    """Add the MTP head's γ to the entry already kept for ``path`` here (its c(n) as it
    is); None when there is none (``record`` writes both) or the store cannot be written."""
    ident = file_identity(path)
    if ident is None:
        return None
    data = _load()
    key = _key(ident, machine_key(machine), exact)
    rec = data["entries"].get(key)
    if not isinstance(rec, dict) or not isinstance(rec.get("c"), dict):
        return None
    rec["mtp_gamma"] = _gamma_entry(gamma, source, (when or _dt.date.today()).isoformat())
    return write_json(store_path(), data)


def _gamma_entry(gamma: float, source: str, day: str) -> dict[str, Any]:
    return {"value": round(float(gamma), 4), "source": source, "date": day}


def write_json(out: Path, data: Mapping[str, Any]) -> Path | None:
    """Replace the small JSON file ``out`` with ``data`` atomically (a temporary file in
    its folder, renamed over it); ``out``, or None when it cannot be written (a cache:
    its readers fall back to what they had)."""
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
        os.replace(tmp, out)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink()
        return None
    return out


def _current(rec: Mapping[str, Any]) -> bool:
    """Whether the file an entry names is still the file that was measured."""
    ident = file_identity(rec["file"]) if rec.get("file") else None
    return ident is not None and ident["size"] == rec.get("size") and ident["mtime_ns"] == rec.get("mtime_ns")
