"""The memory of earlier answers as ``benchmarks/repeat_workloads.py`` drives it: whether this
checkout's Engine has it (``memory=``, the suffix index, its store), a cold index per
workload, what an index holds, and the saved index the warm process loads. A failure
here stops the benchmark with a message (exit 2): a run without the memory it asked for
must not pass as a measurement of it.
"""

from __future__ import annotations

import inspect
import sys
import warnings
from pathlib import Path

from edgespec import Engine

MEMORY_MODES = ("suffix", "warm")


def fail(message: str) -> None:
    print(f"repeat_workloads.py: {message}", file=sys.stderr)
    raise SystemExit(2)


def has_memory_api() -> bool:
    """Whether Engine takes the memory (issue 27 item 1: the cross-request suffix memory):
    ``memory=`` before issue 36, ``drafting=DraftingOptions(memory=...)`` since."""
    params = inspect.signature(Engine.__init__).parameters
    return "memory" in params or "drafting" in params


def require_memory_api(modes: list[str]) -> None:
    wanted = [m for m in modes if m in MEMORY_MODES]
    if wanted and not has_memory_api():
        import edgespec.engine

        fail(
            f"mode(s) {', '.join(wanted)} need Engine(..., memory=True|False, memory_cap=N), the cross-request "
            f"suffix memory of issue 27 item 1; this checkout's Engine ({edgespec.engine.__file__}) has no "
            f"`memory` parameter. Run on a main that has the wiring, or leave them out: "
            f"--modes {','.join(m for m in modes if m not in MEMORY_MODES and m != 'batch') or 'plain,lookup'}"
        )
    if "warm" in wanted:
        try:
            from edgespec.decoding import suffix_store  # noqa: F401  (there, or a clear message now)
        except ImportError as e:
            fail(f"mode warm needs edgespec.decoding.suffix_store ({e})")


def memory_kwargs(on: bool, cap: int | None) -> dict:
    """``memory=...`` (and ``memory_cap``) where the Engine has them; nothing on a main
    without (where drafting is request-local, i.e. ``memory=False``)."""
    if not has_memory_api():
        if on:
            fail("memory=True asked of an Engine without a `memory` parameter")
        return {}
    kw: dict = {"memory": on}
    if on and cap is not None:
        kw["memory_cap"] = cap
    if "drafting" in inspect.signature(Engine.__init__).parameters:  # issue 36: one drafting record
        from edgespec import DraftingOptions

        return {"drafting": DraftingOptions(**kw)}
    return kw


def engine_memory(eng: Engine):
    """The engine's global index, or a loud failure if the wiring is not there."""
    from edgespec.decoding.suffix import SuffixIndex

    mem = getattr(eng, "memory", None)
    if not isinstance(mem, SuffixIndex):
        fail(
            f"Engine(memory=True).memory is {type(mem).__name__}, not a SuffixIndex: the memory wiring of "
            f"issue 27 is incomplete in this checkout"
        )
    return mem


def index_options(mem) -> dict:
    return {
        k: getattr(mem, k)
        for k in ("key_lens", "max_match", "max_candidates", "alpha", "min_prob", "name")
        if hasattr(mem, k)
    }


def fresh_memory(eng: Engine) -> None:
    """A cold index for the suffix engine (same cap and options as the engine's own)."""
    from edgespec.decoding.suffix import SuffixIndex

    old = engine_memory(eng)
    eng.memory = SuffixIndex(old.cap, **index_options(old))


def memory_report(eng: Engine) -> dict:
    mem = engine_memory(eng)
    return {
        "tokens": len(mem),
        "cap": mem.cap,
        "bytes": mem.nbytes(),
        "proposals": mem.proposals,
        "hits": mem.hits,
        "proposed": mem.proposed,
        "accepted": mem.accepted_ids,
    }


def store_identity(target: Path, wl: str) -> str:
    return f"{target.name}:repeat-workloads:{wl}"


def load_saved(path: Path, cap: int, options: dict):
    """The index saved at ``path`` (a ``suffix_store`` file; its identity is read from
    the file's header), all of it, or a loud failure: an unusable file must not pass as a
    cold start."""
    from edgespec.decoding import suffix_store

    path = path.resolve()
    match = [s for s in suffix_store.stats(path.parent) if s.path.resolve() == path]
    if not match or match[0].tokens == 0:
        fail(f"--warm-from {path}: no readable suffix memory there")
    with warnings.catch_warnings():
        warnings.simplefilter("error", suffix_store.SuffixStoreWarning)
        loaded = suffix_store.load(match[0].identity, cap=cap, directory=path.parent, **options)
    if len(loaded) != match[0].tokens:
        fail(f"--warm-from {path}: loaded {len(loaded)} tokens of the {match[0].tokens} saved")
    return loaded
