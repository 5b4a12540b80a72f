"""Validation: raw TOML tables to a ``Profile``, with one-line errors naming the file,
the dotted key, what was found and what is allowed. Unknown keys are errors (typos
must not be silently ignored)."""

from __future__ import annotations

import datetime as _dt
from typing import Any, Iterable, Mapping

from .. import catalog
from ..costmodel import adaptive
from ..errors import ProfileError
from .schema import (
    BACKENDS,
    DRAFTERS,
    KINDS,
    SCHEMA_VERSION,
    STATUSES,
    WEIGHT_MIXES,
    Figure,
    Match,
    MtpFigures,
    PairCost,
    Profile,
    VerifyFigure,
)

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

    def verify(self, key: str, required: bool = True, per_weights: bool = False) -> VerifyFigure | None:
        """A c(n) table; ``per_weights``: one of ``cost.verify_weights``, which may also say
        how far drafting pays with those weights (``k_max``, ``drafters``)."""
        allowed = (
            "{ n = [batch sizes ≥ 2, increasing], c = [costs ≥ 1, one per n], "
            'status = "measured" | "estimated", source = "..."'
            + (", k_max = <1..64>, drafters = [model | ngram] (both optional)" if per_weights else "")
            + " }"
        )
        value = self.get(key, _MISSING if required else None, allowed)
        if value is None:
            return None
        if not isinstance(value, Mapping):
            raise self.fail(key, value, allowed)
        t = _Table(value, self.where, f"{self.prefix}{key}.")
        n, c = t.get("n", _MISSING, "a list of batch sizes"), t.get("c", _MISSING, "a list of costs")
        if not (
            isinstance(n, list)
            and n
            and all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in n)
            and n == sorted(set(n))
        ):
            raise t.fail("n", n, "a non-empty increasing list of integer batch sizes ≥ 1")
        if not (
            isinstance(c, list)
            and len(c) == len(n)
            and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 1.0 <= x <= 1000 for x in c)
        ):
            raise t.fail("c", c, f"a list of {len(n)} numbers ≥ 1 (one cost per batch size in n)")
        extra: dict[str, Any] = {}
        if per_weights:
            extra["k_max"] = t.number("k_max", 1, 64, default=None, integer=True) if "k_max" in value else None
            drafters = t.strings("drafters", DRAFTERS, default=None) if "drafters" in value else None
            extra["drafters"] = drafters
        fig = VerifyFigure(
            cost=adaptive.VerifyCost(tuple(n), tuple(float(x) for x in c)),
            status=t.string("status", STATUSES),
            source=t.string("source"),
            date=t.date("date"),
            **extra,
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
    """A validated ``Profile`` from one merged TOML table; every key is checked, table by
    table, and a key nobody asked about is an error."""
    top = _Table(data, where)
    schema = top.number("schema", 1, SCHEMA_VERSION, default=SCHEMA_VERSION, integer=True)
    del schema
    name = top.string("name", default=expected_name)
    if name != expected_name:
        raise top.fail("name", name, f'"{expected_name}" (the file name without .toml)')
    description = top.string("description", default="")
    backend = top.string("backend", BACKENDS)
    fields = dict(
        match=_match(top.table("match", required=False)),
        **_memory(top.table("memory")),
        **_run(top.table("run"), backend),
        **_choice(top.table("choice")),
        **_cost(top.table("cost")),
    )
    top.done()
    return Profile(name=name, description=description, backend=backend, **fields)  # type: ignore[arg-type]


def _match(m: _Table) -> Match:
    kind = m.string("kind", KINDS, default="cpu")
    cores = m.get("cores", None, "[min, max] physical cores")
    if cores is not None and not (
        isinstance(cores, list)
        and len(cores) == 2
        and all(isinstance(x, int) and x >= 1 for x in cores)
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
    return match


def _memory(mem: _Table) -> dict[str, Any]:
    out = dict(
        models_gb=mem.figure("models_gb", 0.1, 4096),
        bandwidth_gbs=mem.figure("bandwidth_gbs", 0.1, 100_000),
        headroom_gb=float(mem.number("headroom_gb", 0, 64, default=0.75)),
    )
    mem.done()
    return out


def _run(run: _Table, backend: str) -> dict[str, Any]:
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
    return dict(n_threads=n_threads, n_gpu_layers=n_gpu_layers, n_ctx=n_ctx)


def _choice(ch: _Table) -> dict[str, Any]:
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
    return dict(pairs=pairs, drafters=drafters, k_min=k_min, k_max=k_max, p_min=p_min, min_gain=min_gain)


def _cost(cost: _Table) -> dict[str, Any]:
    out = dict(
        overhead_ms=cost.figure("overhead_ms", 0, 10_000),
        decode_gbs=cost.figure("decode_gbs", 0.01, 100_000),
        verify=cost.verify("verify"),
        alpha_model=cost.figure("alpha_model", 0, 0.99),
        alpha_ngram=cost.figure("alpha_ngram", 0, 0.99),
        ngram_hit=cost.figure("ngram_hit", 0, 1),
        gamma_ngram=cost.figure("gamma_ngram", 0, 1),
        exact_slowdown=cost.figure("exact_slowdown", 0.5, 5),
        verify_weights=_verify_weights(cost.table("verify_weights", required=False)),
        batch=cost.verify("batch", required=False),
        rpc_round_trip_ms=cost.figure("rpc_round_trip_ms", 0, 100_000, required=False),
        pair_costs=_pair_costs(cost.table("pair", required=False)),
        mtp=_mtp(cost.table("mtp", required=False)),
    )
    cost.done()
    return out


def _mtp(t: _Table) -> MtpFigures:
    """``cost.mtp``: the evidence on a model's own MTP head here (every key optional)."""
    fig = MtpFigures(
        alpha=t.figure("alpha", 0, 0.99, required=False),
        gamma=t.figure("gamma", 0, 10, required=False),
        k_max=t.number("k_max", 1, 16, default=None, integer=True) if "k_max" in t.data else None,
        note=t.string("note", default=""),
    )
    t.done()
    return fig


def _verify_weights(table: _Table) -> tuple[tuple[str, VerifyFigure], ...]:
    """``cost.verify_weights``: one c(n) table per weight-type mix."""
    out = []
    for mix in list(table.data):
        if mix not in WEIGHT_MIXES:
            raise table.fail(mix, _UNKNOWN, "weight-type mixes: " + ", ".join(WEIGHT_MIXES))
        fig = table.verify(mix, per_weights=True)
        if fig is not None:  # always: the key is there
            out.append((mix, fig))
    table.done()
    return tuple(out)


def _pair_costs(pair_table: _Table) -> tuple[tuple[str, PairCost], ...]:
    known_pairs = [p.name for p in catalog.PAIRS]
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
    return tuple(pair_costs)
