"""Acceptance measured per model pair (``edgespec tune --save``), for any two models.

The profile keeps figures for the catalog's named pairs; a pair of models found on this
machine has no such name, so its measured acceptance α (and the draft's cost γ on the
profile it was measured with) is kept here, in ``$XDG_CONFIG_HOME/edgespec/pairs.json``
(else ``~/.config/edgespec``), keyed by the two models' identities
(``LocalModel.key``: the same bytes under any store's name). The automatic drafter
choice reads it before its prior. α is a property of the two models (and the text); γ
of the device, so it is used only with the profile that measured it.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from pathlib import Path
from typing import Any


def store_path() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "edgespec" / "pairs.json"


def _load() -> dict[str, Any]:
    try:
        data = json.loads(store_path().read_text(encoding="utf-8"))
        return data if isinstance(data.get("pairs"), dict) else {"pairs": {}}
    except (OSError, ValueError, AttributeError):
        return {"pairs": {}}


def lookup(target_key: str, draft_key: str) -> dict[str, Any] | None:
    """The record for this pair: ``alpha``, ``gamma``, ``profile``, ``date``, names."""
    rec = _load()["pairs"].get(f"{target_key}+{draft_key}")
    return rec if isinstance(rec, dict) and isinstance(rec.get("alpha"), (int, float)) else None


def record(
    target: Any,
    draft: Any,
    *,
    alpha: float,
    gamma: float | None,
    profile: str,
    source: str,
    when: _dt.date | None = None,
) -> Path:
    """Write the measured α (and γ on ``profile``) of ``draft`` drafting for ``target``
    (two ``LocalModel``s); the file is replaced atomically."""
    data = _load()
    data["pairs"][f"{target.key}+{draft.key}"] = {
        "target": target.name,
        "draft": draft.name,
        "alpha": round(min(max(alpha, 0.0), 0.99), 4),
        "gamma": None if gamma is None else round(gamma, 4),
        "profile": profile,
        "source": source,
        "date": (when or _dt.date.today()).isoformat(),
    }
    path = store_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n", encoding="utf-8")
    os.replace(tmp, path)
    return path
