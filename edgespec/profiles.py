"""Device profiles: what a machine can hold and how fast it is.

A profile is one TOML file (schema below) turned into a frozen ``Profile``. The shipped
ones live in the repo's ``profiles/`` folder (installed as a package, read with
importlib.resources); user profiles in ``$XDG_CONFIG_HOME/edgespec/profiles/*.toml``
(default ``~/.config/edgespec/profiles``) add to them. A user file named like a shipped
profile overrides it key by key, and ``extends = "NAME"`` starts a new profile from an
existing one, so ``tune`` can write only what it measured.

Every figure the cost model uses is an inline table saying where it came from::

    decode_gbs = { value = 250, status = "estimated", source = "llama.cpp ...", date = 2026-01-02 }

``status`` is ``measured`` or ``estimated``. Validation errors are one line naming the
file, the key, what was found and what is allowed (``ProfileError``).

The choice made from a profile (pair, drafter, k) is ``edgespec.planner``'s.

Schema (version 1)::

    schema = 1
    name = "m2max"                      # = the file name without .toml
    description = "..."
    backend = "metal"                   # metal | cuda | cpu
    extends = "m2max"                   # optional: start from another profile
    [match]                             # how detection recognises the device
    kind = "apple"                      # apple | nvidia | jetson | raspberry-pi | cpu
    chips = ["Apple M2 Max"]            # apple: sysctl machdep.cpu.brand_string
    gpus = ["RTX 4090"]                 # nvidia: substrings of nvidia-smi's name
    boards = ["Raspberry Pi 5"]         # jetson / raspberry-pi: device-tree model
    cores = [1, 4]                      # cpu: physical core range
    [memory]
    models_gb = FIGURE                  # memory models may use (GPU-addressable / VRAM / RAM)
    bandwidth_gbs = FIGURE              # peak memory bandwidth
    headroom_gb = 0.75                  # compute buffers etc. beyond weights + KV cache
    [run]
    n_threads = "physical"              # or a number
    n_gpu_layers = -1                   # -1 = all layers on the GPU, 0 = CPU only
    n_ctx = 4096
    [choice]
    pairs = ["qwen2.5-coder-7b+0.5b"]   # catalog pairs, most preferred first
    drafters = ["model", "ngram"]       # drafters to consider
    k_min = 1
    k_max = 8
    p_min = 0.75                        # model drafter stops below this draft probability
    min_gain = 0.05                     # below 1 + min_gain predicted: decode plainly
    [cost]
    overhead_ms = FIGURE                # per decode step, beyond reading the weights
    decode_gbs = FIGURE                 # weight bytes read per second while decoding
    verify = { n = [2, 4, 8], c = [1.05, 1.1, 1.2], status = ..., source = ... }  # c(n)
    alpha_model = FIGURE                # acceptance per drafted token, same-family draft
    alpha_ngram = FIGURE                # acceptance per token when the n-gram drafter proposes
    ngram_hit = FIGURE                  # share of rounds in which it proposes
    gamma_ngram = FIGURE                # cost of an n-gram proposal, in target steps
    exact_slowdown = FIGURE             # plain tok/s on llama.cpp's kernels / on batch-invariant ones
    [cost.pair."qwen2.5-coder-1.5b+0.5b"]   # figures for one pair (all optional)
    alpha = FIGURE
    gamma = FIGURE                      # draft step / target step
    target_step_ms = FIGURE
    verify = {...}
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import os
import re
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

from . import adaptive, catalog
from .errors import ProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SCHEMA_VERSION = 1
BACKENDS = ("metal", "cuda", "cpu")
DRAFTERS = ("model", "ngram")
STATUSES = ("measured", "estimated")
KINDS = ("apple", "nvidia", "jetson", "raspberry-pi", "cpu")
# The installed package holding the shipped TOML files (the repo's profiles/ folder).
DATA_PACKAGE = "edgespec.profile_data"
GB = 1_000_000_000


# --------------------------------------------------------------------------------------
# The dataclasses
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Figure:
    """A number with its provenance."""

    value: float
    status: str  # "measured" | "estimated"
    source: str
    date: _dt.date | None = None

    def to_dict(self) -> dict:
        d: dict[str, Any] = {"value": self.value, "status": self.status, "source": self.source}
        if self.date is not None:
            d["date"] = self.date.isoformat()
        return d


@dataclass(frozen=True)
class VerifyFigure:
    """c(n) with its provenance."""

    cost: adaptive.VerifyCost
    status: str
    source: str
    date: _dt.date | None = None

    def __call__(self, n: int) -> float:
        return self.cost(n)

    def to_dict(self) -> dict:
        d: dict[str, Any] = {
            "n": list(self.cost.n),
            "c": list(self.cost.c),
            "status": self.status,
            "source": self.source,
        }
        if self.date is not None:
            d["date"] = self.date.isoformat()
        return d


@dataclass(frozen=True)
class PairCost:
    """Figures for one model pair on this device; each overrides the device-wide one."""

    alpha: Figure | None = None
    gamma: Figure | None = None
    target_step_ms: Figure | None = None
    verify: VerifyFigure | None = None


@dataclass(frozen=True)
class Match:
    kind: str
    chips: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    boards: tuple[str, ...] = ()
    cores: tuple[int, int] | None = None


@dataclass(frozen=True)
class Profile:
    name: str
    description: str
    backend: str
    match: Match
    models_gb: Figure
    bandwidth_gbs: Figure
    headroom_gb: float
    n_threads: int | None  # None: one per physical core
    n_gpu_layers: int
    n_ctx: int
    pairs: tuple[str, ...]
    drafters: tuple[str, ...]
    k_min: int
    k_max: int
    p_min: float
    min_gain: float
    overhead_ms: Figure
    decode_gbs: Figure
    verify: VerifyFigure
    alpha_model: Figure
    alpha_ngram: Figure
    ngram_hit: Figure
    gamma_ngram: Figure
    exact_slowdown: Figure
    pair_costs: tuple[tuple[str, PairCost], ...] = ()
    origin: str = "shipped"  # "shipped" | "user" | "user over shipped"
    path: str = ""
    notes: tuple[str, ...] = ()  # e.g. how detection scaled it to this machine

    def pair_cost(self, pair: str | None) -> PairCost:
        for name, pc in self.pair_costs:
            if name == pair:
                return pc
        return PairCost()

    def figures(self) -> list[tuple[str, Figure | VerifyFigure]]:
        """Every figure with its dotted key, for display."""
        out: list[tuple[str, Figure | VerifyFigure]] = [
            ("memory.models_gb", self.models_gb),
            ("memory.bandwidth_gbs", self.bandwidth_gbs),
            ("cost.overhead_ms", self.overhead_ms),
            ("cost.decode_gbs", self.decode_gbs),
            ("cost.verify", self.verify),
            ("cost.alpha_model", self.alpha_model),
            ("cost.alpha_ngram", self.alpha_ngram),
            ("cost.ngram_hit", self.ngram_hit),
            ("cost.gamma_ngram", self.gamma_ngram),
            ("cost.exact_slowdown", self.exact_slowdown),
        ]
        for name, pc in self.pair_costs:
            for f in dataclasses.fields(pc):
                value = getattr(pc, f.name)
                if value is not None:
                    out.append((f'cost.pair."{name}".{f.name}', value))
        return out

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "description": self.description,
            "backend": self.backend,
            "origin": self.origin,
            "path": self.path,
            "match": {
                "kind": self.match.kind,
                "chips": list(self.match.chips),
                "gpus": list(self.match.gpus),
                "boards": list(self.match.boards),
                "cores": list(self.match.cores) if self.match.cores else None,
            },
            "memory": {
                "models_gb": self.models_gb.to_dict(),
                "bandwidth_gbs": self.bandwidth_gbs.to_dict(),
                "headroom_gb": self.headroom_gb,
            },
            "run": {"n_threads": self.n_threads, "n_gpu_layers": self.n_gpu_layers, "n_ctx": self.n_ctx},
            "choice": {
                "pairs": list(self.pairs),
                "drafters": list(self.drafters),
                "k_min": self.k_min,
                "k_max": self.k_max,
                "p_min": self.p_min,
                "min_gain": self.min_gain,
            },
            "cost": {
                "overhead_ms": self.overhead_ms.to_dict(),
                "decode_gbs": self.decode_gbs.to_dict(),
                "verify": self.verify.to_dict(),
                "alpha_model": self.alpha_model.to_dict(),
                "alpha_ngram": self.alpha_ngram.to_dict(),
                "ngram_hit": self.ngram_hit.to_dict(),
                "gamma_ngram": self.gamma_ngram.to_dict(),
                "exact_slowdown": self.exact_slowdown.to_dict(),
                "pair": {
                    name: {
                        f.name: getattr(pc, f.name).to_dict()
                        for f in dataclasses.fields(pc)
                        if getattr(pc, f.name) is not None
                    }
                    for name, pc in self.pair_costs
                },
            },
            "notes": list(self.notes),
        }


# --------------------------------------------------------------------------------------
# Finding and reading files
# --------------------------------------------------------------------------------------


def user_dir() -> Path:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".config"
    return base / "edgespec" / "profiles"


def _shipped_files() -> dict[str, Any]:
    """name -> Traversable of each shipped TOML file."""
    root: Any = None
    try:
        from importlib.resources import files

        root = files(DATA_PACKAGE)
    except (ModuleNotFoundError, TypeError):
        # A source checkout that is not installed: the folder beside the package.
        checkout = Path(__file__).resolve().parent.parent / "profiles"
        root = checkout if checkout.is_dir() else None
    if root is None:
        return {}
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
                f"{where}: name: found {_show(data['name'])}; allowed: \"{name}\" (the file name "
                "without .toml)"
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
# Validation
# --------------------------------------------------------------------------------------

_MISSING = object()
_UNKNOWN = object()


class _Table:
    """Reads one TOML table, naming file and dotted key in every error, and rejects keys
    it was not asked about (typos must not be silently ignored)."""

    def __init__(self, data: Any, where: str, prefix: str = "") -> None:
        if not isinstance(data, Mapping):
            raise ProfileError(f"{where}: {prefix.rstrip('.') or '(top level)'}: found {_show(data)}; allowed: a table")
        self.data, self.where, self.prefix = data, where, prefix
        self.used: set[str] = set()

    def fail(self, key: str, found: Any, allowed: str) -> ProfileError:
        shown = "nothing (missing)" if found is _MISSING else "an unknown key" if found is _UNKNOWN else _show(found)
        return ProfileError(f"{self.where}: {self.prefix}{key}: found {shown}; allowed: {allowed}")

    def get(self, key: str, default: Any = _MISSING, allowed: str = "") -> Any:
        self.used.add(key)
        value = self.data.get(key, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise self.fail(key, _MISSING, allowed)
            return default
        return value

    def table(self, key: str, required: bool = True) -> "_Table":
        value = self.get(key, _MISSING if required else {}, "a table")
        return _Table(value, self.where, f"{self.prefix}{key}.")

    def string(self, key: str, choices: Iterable[str] | None = None, default: Any = _MISSING) -> str:
        choices = tuple(choices) if choices else None
        allowed = " | ".join(choices) if choices else "a string"
        value = self.get(key, default, allowed)
        if not isinstance(value, str) or (choices and value not in choices):
            raise self.fail(key, value, allowed)
        return value

    def number(self, key: str, lo: float, hi: float, default: Any = _MISSING, integer: bool = False) -> Any:
        kind = "an integer" if integer else "a number"
        allowed = f"{kind} from {lo:g} to {hi:g}"
        value = self.get(key, default, allowed)
        ok_type = isinstance(value, int) if integer else isinstance(value, (int, float))
        if isinstance(value, bool) or not ok_type or not (lo <= value <= hi):
            raise self.fail(key, value, allowed)
        return value

    def strings(self, key: str, choices: Iterable[str] | None = None, default: Any = _MISSING) -> tuple[str, ...]:
        choices = tuple(choices) if choices else None
        allowed = f"a list of {' | '.join(choices)}" if choices else "a list of strings"
        value = self.get(key, default, allowed)
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.fail(key, value, allowed)
        if choices:
            for v in value:
                if v not in choices:
                    raise self.fail(key, v, allowed)
        return tuple(value)

    def figure(self, key: str, lo: float, hi: float, required: bool = True) -> Figure | None:
        allowed = (
            f'{{ value = <number {lo:g}..{hi:g}>, status = "measured" | "estimated", '
            'source = "<where it comes from>" }'
        )
        value = self.get(key, _MISSING if required else None, allowed)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.fail(key, value, allowed)
        t = _Table(value, self.where, f"{self.prefix}{key}.")
        fig = Figure(
            value=float(t.number("value", lo, hi)),
            status=t.string("status", STATUSES),
            source=t.string("source"),
            date=t.date("date"),
        )
        t.done()
        return fig

    def date(self, key: str) -> _dt.date | None:
        value = self.get(key, None, "a TOML date (2026-11-29)")
        if value is None:
            return None
        if isinstance(value, _dt.datetime):
            return value.date()
        if isinstance(value, _dt.date):
            return value
        if isinstance(value, str):
            try:
                return _dt.date.fromisoformat(value)
            except ValueError:
                pass
        raise self.fail(key, value, "a TOML date (2026-11-29)")

    def verify(self, key: str, required: bool = True) -> VerifyFigure | None:
        allowed = (
            '{ n = [batch sizes ≥ 2, increasing], c = [costs ≥ 1, one per n], '
            'status = "measured" | "estimated", source = "..." }'
        )
        value = self.get(key, _MISSING if required else None, allowed)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.fail(key, value, allowed)
        t = _Table(value, self.where, f"{self.prefix}{key}.")
        n, c = t.get("n", _MISSING, "a list of batch sizes"), t.get("c", _MISSING, "a list of costs")
        if not (isinstance(n, list) and n and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in n)
                and n == sorted(set(n))):
            raise t.fail("n", n, "a non-empty increasing list of integer batch sizes ≥ 1")
        if not (isinstance(c, list) and len(c) == len(n)
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 1.0 <= x <= 1000 for x in c)):
            raise t.fail("c", c, f"a list of {len(n)} numbers ≥ 1 (one cost per batch size in n)")
        fig = VerifyFigure(
            cost=adaptive.VerifyCost(tuple(n), tuple(float(x) for x in c)),
            status=t.string("status", STATUSES),
            source=t.string("source"),
            date=t.date("date"),
        )
        t.done()
        return fig

    def done(self) -> None:
        extra = [k for k in self.data if k not in self.used]
        if extra:
            allowed = ", ".join(sorted(self.used)) or "no keys"
            raise self.fail(extra[0], _UNKNOWN, "the keys " + allowed)


def _show(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a table"
    text = repr(value) if not isinstance(value, str) else f'"{value}"'
    return text if len(text) <= 60 else text[:57] + "..."


def _build(data: Mapping, where: str, *, expected_name: str) -> Profile:
    top = _Table(data, where)
    schema = top.number("schema", 1, SCHEMA_VERSION, default=SCHEMA_VERSION, integer=True)
    del schema
    name = top.string("name", default=expected_name)
    if name != expected_name:
        raise top.fail("name", name, f'"{expected_name}" (the file name without .toml)')
    description = top.string("description", default="")
    backend = top.string("backend", BACKENDS)

    m = top.table("match", required=False)
    kind = m.string("kind", KINDS, default="cpu")
    cores = m.get("cores", None, "[min, max] physical cores")
    if cores is not None and not (
        isinstance(cores, list) and len(cores) == 2 and all(isinstance(x, int) and x >= 1 for x in cores)
        and cores[0] <= cores[1]
    ):
        raise m.fail("cores", cores, "[min, max] physical cores, e.g. [1, 4]")
    match = Match(
        kind=kind,
        chips=m.strings("chips", default=[]),
        gpus=m.strings("gpus", default=[]),
        boards=m.strings("boards", default=[]),
        cores=tuple(cores) if cores else None,
    )
    m.done()

    mem = top.table("memory")
    models_gb = mem.figure("models_gb", 0.1, 4096)
    bandwidth = mem.figure("bandwidth_gbs", 0.1, 100_000)
    headroom = float(mem.number("headroom_gb", 0, 64, default=0.75))
    mem.done()

    run = top.table("run")
    threads = run.get("n_threads", "physical", '"physical" or an integer from 1 to 512')
    if threads == "physical":
        n_threads = None
    elif isinstance(threads, int) and not isinstance(threads, bool) and 1 <= threads <= 512:
        n_threads = threads
    else:
        raise run.fail("n_threads", threads, '"physical" or an integer from 1 to 512')
    n_gpu_layers = run.number("n_gpu_layers", -1, 100_000, integer=True)
    if backend == "cpu" and n_gpu_layers != 0:
        raise run.fail("n_gpu_layers", n_gpu_layers, '0 for backend "cpu"')
    n_ctx = run.number("n_ctx", 256, 1 << 20, default=4096, integer=True)
    run.done()

    ch = top.table("choice")
    pairs = ch.strings("pairs")
    known_pairs = [p.name for p in catalog.PAIRS]
    for p in pairs:
        if p not in known_pairs:
            raise ch.fail("pairs", p, "catalog pairs: " + ", ".join(known_pairs))
    if not pairs:
        raise ch.fail("pairs", [], "at least one catalog pair")
    drafters = ch.strings("drafters", DRAFTERS, default=list(DRAFTERS))
    k_min = ch.number("k_min", 1, 64, default=1, integer=True)
    k_max = ch.number("k_max", 1, 64, default=8, integer=True)
    if k_max < k_min:
        raise ch.fail("k_max", k_max, f"an integer ≥ k_min ({k_min})")
    p_min = float(ch.number("p_min", 0.0, 0.99, default=0.75))
    min_gain = float(ch.number("min_gain", 0.0, 1.0, default=0.05))
    ch.done()

    cost = top.table("cost")
    overhead = cost.figure("overhead_ms", 0, 10_000)
    decode_gbs = cost.figure("decode_gbs", 0.01, 100_000)
    verify = cost.verify("verify")
    alpha_model = cost.figure("alpha_model", 0, 0.99)
    alpha_ngram = cost.figure("alpha_ngram", 0, 0.99)
    ngram_hit = cost.figure("ngram_hit", 0, 1)
    gamma_ngram = cost.figure("gamma_ngram", 0, 1)
    exact_slowdown = cost.figure("exact_slowdown", 0.5, 5)
    pair_table = cost.table("pair", required=False)
    pair_costs = []
    for pname in list(pair_table.data):
        if pname not in known_pairs:
            raise pair_table.fail(f'"{pname}"', _UNKNOWN, "catalog pairs: " + ", ".join(known_pairs))
        t = pair_table.table(pname)
        pair_costs.append(
            (
                pname,
                PairCost(
                    alpha=t.figure("alpha", 0, 0.99, required=False),
                    gamma=t.figure("gamma", 0, 10, required=False),
                    target_step_ms=t.figure("target_step_ms", 0.01, 1e6, required=False),
                    verify=t.verify("verify", required=False),
                ),
            )
        )
        t.done()
    pair_table.done()
    cost.done()
    top.done()

    return Profile(
        name=name, description=description, backend=backend, match=match,
        models_gb=models_gb, bandwidth_gbs=bandwidth, headroom_gb=headroom,
        n_threads=n_threads, n_gpu_layers=n_gpu_layers, n_ctx=n_ctx,
        pairs=pairs, drafters=drafters, k_min=k_min, k_max=k_max, p_min=p_min,
        min_gain=min_gain, overhead_ms=overhead, decode_gbs=decode_gbs, verify=verify,
        alpha_model=alpha_model, alpha_ngram=alpha_ngram, ngram_hit=ngram_hit,
        gamma_ngram=gamma_ngram, exact_slowdown=exact_slowdown, pair_costs=tuple(pair_costs),
    )  # type: ignore[arg-type]


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
    source: str = "edgespec tune",
    when: _dt.date | None = None,
    extends: str | None = None,
) -> Path:
    """Write measured figures into the user profile ``profile`` and return its path.

    The file is ``$XDG_CONFIG_HOME/edgespec/profiles/<profile>.toml``. If ``profile`` is
    a shipped name the file overrides that profile key by key; otherwise it needs
    ``extends`` (the profile it starts from) the first time. Pair figures (α, γ, step
    time, c(n) measured with one pair) go under ``[cost.pair."<pair>"]``; device figures
    under ``[cost]``. Each is marked ``measured`` with ``source`` and the date. The
    result is validated by loading it back; the file is replaced atomically.
    """
    when = when or _dt.date.today()
    path = user_dir() / f"{profile}.toml"
    data: dict = {}
    if path.exists():
        data = _parse(path.read_text(encoding="utf-8"), str(path))
    elif profile not in _shipped_files():
        if extends is None:
            raise ProfileError(
                f"{path}: a new profile needs a base: pass extends=<profile> (one of "
                f"{', '.join(profile_names())})"
            )
    if extends is not None and extends != profile:
        data["extends"] = extends
    data.setdefault("schema", SCHEMA_VERSION)

    def fig(value: float) -> dict:
        return {"value": round(float(value), 4), "status": "measured", "source": source, "date": when}

    cost = data.setdefault("cost", {})
    for key, value in (("overhead_ms", overhead_ms), ("decode_gbs", decode_gbs),
                       ("alpha_ngram", alpha_ngram), ("ngram_hit", ngram_hit),
                       ("exact_slowdown", exact_slowdown)):
        if value is not None:
            cost[key] = fig(value)
    pair_figs = {k: v for k, v in (("alpha", alpha), ("gamma", gamma), ("target_step_ms", target_step_ms)) if v is not None}
    verify_table = None
    if verify:
        ns = sorted(int(n) for n in verify)
        verify_table = {
            "n": ns, "c": [round(float(verify[n]), 4) for n in ns],
            "status": "measured", "source": source, "date": when,
        }
    if pair_figs or (verify_table and pair):
        if not pair:
            raise ProfileError("record_measurements: alpha, gamma and target_step_ms belong to a pair; pass pair=")
        catalog.get_pair(pair)
        pt = cost.setdefault("pair", {}).setdefault(pair, {})
        for k, v in pair_figs.items():
            pt[k] = fig(v)
        if verify_table:
            pt["verify"] = verify_table
    elif verify_table:
        cost["verify"] = verify_table

    text = (
        f"# edgespec profile {profile}: figures measured on this machine by {source}.\n"
        f"# Last written {when.isoformat()}. Keys not set here come from "
        f"{'the shipped profile' if profile in _shipped_files() else data.get('extends', 'the base')}.\n"
        + dump_toml(data)
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    old = path.read_bytes() if path.exists() else None
    _atomic_write(path, text.encode("utf-8"))
    try:
        load_profile(profile)  # validate; a bad write must not replace a working file
    except ProfileError:
        if old is None:
            path.unlink()
        else:
            _atomic_write(path, old)
        raise
    return path


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
