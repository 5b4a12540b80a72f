"""Where profiles live, and reading and writing them: the shipped TOML files, the user's
folder, ``extends`` and key-by-key overrides (merging), and recording measured figures
into a user profile (``record_measurements``, for ``edgespec tune``)."""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any, Mapping

from .. import catalog
from ..errors import ProfileError
from .schema import SCHEMA_VERSION, Profile
from .validate import _build, _show

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

# The package holding the shipped TOML files (edgespec/profile_data/).
DATA_PACKAGE = "edgespec.profile_data"


# --------------------------------------------------------------------------------------
# Finding and reading files
# --------------------------------------------------------------------------------------


def user_dir() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "edgespec" / "profiles"


def _shipped_files() -> dict[str, Any]:
    """name -> Traversable of each shipped TOML file."""
    from importlib.resources import files

    root = files(DATA_PACKAGE)
    return {
        entry.name[: -len(".toml")]: entry
        for entry in root.iterdir()
        if entry.name.endswith(".toml") and entry.is_file()
    }


def _user_files() -> dict[str, Path]:
    d = user_dir()
    if not d.is_dir():
        return {}
    return {p.stem: p for p in sorted(d.glob("*.toml")) if p.is_file()}


def _parse(text: str, where: str) -> dict:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ProfileError(f"{where}: not valid TOML: {exc}") from None


def _deep_merge(base: dict, over: Mapping) -> dict:
    out = dict(base)
    for key, value in over.items():
        # a figure (inline table with "value", or a verify table with "n") replaces whole
        is_leaf_table = isinstance(value, Mapping) and ("value" in value or "n" in value)
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and not is_leaf_table:
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def _raw(name: str, _seen: tuple[str, ...] = ()) -> tuple[dict, str, str]:
    """The merged raw table for ``name``, the file to name in errors, and its origin."""
    if name in _seen:
        raise ProfileError(f"profile {name}: `extends` makes a cycle: {' -> '.join(_seen + (name,))}")
    shipped, user = _shipped_files(), _user_files()
    if name not in shipped and name not in user:
        known = ", ".join(sorted(set(shipped) | set(user))) or "none"
        raise ProfileError(f"unknown profile {name!r}; known profiles: {known}, or auto")
    base: dict = {}
    origin = "shipped"
    where = f"{DATA_PACKAGE}/{name}.toml"
    if name in shipped:
        base = _parse(shipped[name].read_text(encoding="utf-8"), where)
    if name in user:
        path = user[name]
        where = str(path)
        try:
            data = _parse(path.read_text(encoding="utf-8"), where)
        except OSError as exc:
            raise ProfileError(f"{where}: cannot read: {exc.strerror or exc}") from None
        if "name" in data and data["name"] != name:
            raise ProfileError(
                f'{where}: name: found {_show(data["name"])}; allowed: "{name}" (the file name without .toml)'
            )
        parent = data.pop("extends", None)
        if parent is not None and not isinstance(parent, str):
            raise ProfileError(f"{where}: extends: found {_show(parent)}; allowed: a profile name")
        if parent is not None and not (parent == name and name in shipped):
            base, _, _ = _raw(parent, _seen + (name,))
            origin = f"user, extends {parent}"
        else:
            origin = "user over shipped" if name in shipped else "user"
        base = _deep_merge(base, data)
    base["name"] = name
    return base, where, origin


def load_profile(name: str) -> Profile:
    """The profile called ``name`` (shipped, user, or user over shipped), validated."""
    data, where, origin = _raw(name)
    prof = _build(data, where, expected_name=name)
    return replace(prof, origin=origin, path=where)


def list_profiles() -> list[Profile]:
    """Every shipped and user profile, by name."""
    names = sorted(set(_shipped_files()) | set(_user_files()))
    return [load_profile(n) for n in names]


def profile_names() -> list[str]:
    return sorted(set(_shipped_files()) | set(_user_files()))


# --------------------------------------------------------------------------------------
# Writing measured figures (for `edgespec tune`)
# --------------------------------------------------------------------------------------


def record_measurements(
    profile: str,
    *,
    pair: str | None = None,
    alpha: float | None = None,
    gamma: float | None = None,
    target_step_ms: float | None = None,
    verify: Mapping[int, float] | None = None,
    overhead_ms: float | None = None,
    decode_gbs: float | None = None,
    alpha_ngram: float | None = None,
    ngram_hit: float | None = None,
    exact_slowdown: float | None = None,
    batch: Mapping[int, float] | None = None,
    rpc_round_trip_ms: float | None = None,
    mtp_alpha: float | None = None,
    mtp_gamma: float | None = None,
    source: str = "edgespec tune",
    when: _dt.date | None = None,
    extends: str | None = None,
) -> Path:
    """Write measured figures into the user profile ``profile`` and return its path.

    The file is ``$XDG_CONFIG_HOME/edgespec/profiles/<profile>.toml``. If ``profile`` is
    a shipped name the file overrides that profile key by key; otherwise it needs
    ``extends`` (the profile it starts from) the first time. Pair figures (α, γ, step
    time, c(n) measured with one pair) go under ``[cost.pair."<pair>"]``; a model's own MTP
    head's α and γ under ``[cost.mtp]``; device figures under ``[cost]``. Each is marked
    ``measured`` with ``source`` and the date. The result is validated by loading it back;
    the file is replaced atomically.
    """
    when = when or _dt.date.today()
    path = user_dir() / f"{profile}.toml"
    data = _user_data(path, profile, extends)

    def fig(value: float) -> dict:
        return {"value": round(float(value), 4), "status": "measured", "source": source, "date": when}

    cost = data.setdefault("cost", {})
    for key, value in (
        ("overhead_ms", overhead_ms),
        ("decode_gbs", decode_gbs),
        ("alpha_ngram", alpha_ngram),
        ("ngram_hit", ngram_hit),
        ("exact_slowdown", exact_slowdown),
        ("rpc_round_trip_ms", rpc_round_trip_ms),
    ):
        if value is not None:
            cost[key] = fig(value)
    if head := {k: fig(v) for k, v in (("alpha", mtp_alpha), ("gamma", mtp_gamma)) if v is not None}:
        cost.setdefault("mtp", {}).update(head)
    pair_figs = {
        k: fig(v) for k, v in (("alpha", alpha), ("gamma", gamma), ("target_step_ms", target_step_ms)) if v is not None
    }
    verify_table = _cost_table(verify, source, when) if verify else None
    _place_pair_figures(cost, pair, pair_figs, verify_table)
    if batch:  # a device figure: the cost of n sequences per decode
        cost["batch"] = _cost_table(batch, source, when)
    _write_checked(path, _measured_text(profile, data, source, when), profile)
    return path


def _measured_text(profile: str, data: dict, source: str, when: _dt.date) -> str:
    """A user profile's TOML text, with the header saying where its figures came from."""
    base = "the shipped profile" if profile in _shipped_files() else data.get("extends", "the base")
    return (
        f"# edgespec profile {profile}: figures measured on this machine by {source}.\n"
        f"# Last written {when.isoformat()}. Keys not set here come from {base}.\n" + dump_toml(data)
    )


def _user_data(path: Path, profile: str, extends: str | None) -> dict:
    """The user file's table as it is (or a new one), with ``extends`` and ``schema``."""
    data: dict = {}
    if path.exists():
        data = _parse(path.read_text(encoding="utf-8"), str(path))
    elif profile not in _shipped_files():
        if extends is None:
            raise ProfileError(
                f"{path}: a new profile needs a base: pass extends=<profile> (one of {', '.join(profile_names())})"
            )
    if extends is not None and extends != profile:
        data["extends"] = extends
    data.setdefault("schema", SCHEMA_VERSION)
    return data


def _cost_table(costs: Mapping[int, float], source: str, when: _dt.date) -> dict:
    """A measured c(n) table: ``{n = [...], c = [...], status, source, date}``."""
    ns = sorted(int(n) for n in costs)
    return {
        "n": ns,
        "c": [round(max(1.0, float(costs[n])), 4) for n in ns],
        "status": "measured",
        "source": source,
        "date": when,
    }


def _place_pair_figures(cost: dict, pair: str | None, pair_figs: dict, verify_table: dict | None) -> None:
    """α, γ and step time belong to a pair; c(n) too when a pair is named, else to the device."""
    if pair_figs or (verify_table and pair):
        if not pair:
            raise ProfileError("record_measurements: alpha, gamma and target_step_ms belong to a pair; pass pair=")
        catalog.get_pair(pair)
        pt = cost.setdefault("pair", {}).setdefault(pair, {})
        pt.update(pair_figs)
        if verify_table:
            pt["verify"] = verify_table
    elif verify_table:
        cost["verify"] = verify_table


def _write_checked(path: Path, text: str, profile: str) -> None:
    """Replace ``path`` atomically, then load the profile back: a write that does not
    validate is undone, so it never replaces a working file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_bytes() if path.exists() else None
    _atomic_write(path, text.encode("utf-8"))
    try:
        load_profile(profile)
    except ProfileError:
        if old is None:
            path.unlink()
        else:
            _atomic_write(path, old)
        raise


def _atomic_write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_bytes(data)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(k: str) -> str:
    return k if _BARE_KEY.match(k) else '"' + k.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if isinstance(v, (_dt.date, _dt.datetime)):
        return v.isoformat()
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    if isinstance(v, Mapping):
        return "{ " + ", ".join(f"{_key(k)} = {_value(x)}" for k, x in v.items()) + " }"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _is_leaf(v: Any) -> bool:
    return isinstance(v, Mapping) and ("value" in v or "n" in v)


def dump_toml(data: Mapping, _prefix: str = "") -> str:
    """TOML for profile data: figures as inline tables, other tables as sections."""
    lines = []
    tables = []
    for k, v in data.items():
        if isinstance(v, Mapping) and not _is_leaf(v):
            tables.append((k, v))
        else:
            lines.append(f"{_key(k)} = {_value(v)}")
    out = "\n".join(lines) + ("\n" if lines else "")
    for k, v in tables:
        name = f"{_prefix}{_key(k)}"
        has_scalars = any(not (isinstance(x, Mapping) and not _is_leaf(x)) for x in v.values())
        body = dump_toml(v, name + ".")
        out += ("\n" if out else "") + (f"[{name}]\n" if has_scalars or not v else "") + body
    return out
