"""A copy of a model in the weight type whose verify is cheapest on this machine, with
what it costs in quality and gains in verify cost measured (``edgespec models optimize``).

On a CPU, speculation pays or not by c(n), a verify of n tokens against one step, and
c(n) belongs to the weight type's kernels: llama.cpp repacks Q4_0 weights into 4- and
8-row GEMM tiles, so a Q4_0 file verifies 4 tokens for about 1.8 steps where the Q4_K_M
mix (Q4_K with Q6_K) pays 2.6 (issue 37's table, Qwen2.5-Coder-1.5B on a 2-core x86 VM).
``choose_type`` says which type and why, in one line (from ``costmodel.priors``' table of
c(n) per backend and weight type, where this build has it); ``optimize`` then:

1. checks the file (missing, not GGUF, truncated: ``ModelFileError``) and picks where the
   copy goes (``catalog.optimized``: next to the original, or edgespec's model folder),
   refusing an existing copy unless ``force`` and a disk without room for it;
2. measures the original's perplexity on the held-out text that ships with edgespec
   (``perplexity``), on llama.cpp's own kernels;
3. writes the copy under a hidden temporary name through llama.cpp's quantize API in a
   child process (``llama.run_quantize``: Ctrl-C stops it at once);
4. measures the copy's perplexity, then c(1..16) of both files side by side (each batch
   size on one file, then the other; the fastest of a few sweeps), and renames the copy
   into place: a copy that exists is a whole, measured one. On any error or Ctrl-C the
   temporary file is removed;
5. records both curves (``catalog.verify_cache``, for the planner; not when the load
   average exceeded the threads while timing: such curves are the load's) and the copy's
   source (``catalog.optimized``, so ``optimized_copy_for`` finds it).

Timings are the fastest of a few sweeps on whatever else the machine runs: ``edgespec
tune`` measures more. Nothing here prints; ``phase`` hears what is being done.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .. import catalog, llama
from ..catalog import optimized, verify_cache
from ..errors import InputError, OutputError
from ..llama import Context, Model, check_gguf_file, default_threads
from .decode_times import back, fit_verify_cost, hold
from .perplexity import BATCH, CHUNK, Perplexity, heldout_text, perplexity

PREFIX_TOKENS = 64  # the KV position c(n) is timed at
SOURCE = "edgespec models optimize"


@dataclass(frozen=True)
class Assessment:
    """One file's figures: perplexity on the held-out text, step time and c(n)."""

    path: Path
    quant: str
    size_bytes: int
    perplexity: float
    tokens: int
    step_ms: float
    verify: dict[int, float]  # n -> c(n), c(1) = 1
    seconds: float


@dataclass(frozen=True)
class Optimized:
    source: Path
    source_name: str
    path: Path
    type: str
    reason: str
    before: Assessment
    after: Assessment
    threads: int
    quantize_seconds: float
    load_average: float | None = None  # the highest 1-minute load average seen while timing

    @property
    def perplexity_change(self) -> float:
        """Relative change of the perplexity, +0.009 for +0.9%."""
        return self.after.perplexity / self.before.perplexity - 1.0

    @property
    def verify_gain(self) -> float:
        """Mean c(2..8) of the original over the copy's: above 1, the copy verifies cheaper."""
        ns = [n for n in range(2, 9) if n in self.before.verify and n in self.after.verify]
        return sum(self.before.verify[n] for n in ns) / sum(self.after.verify[n] for n in ns) if ns else 1.0

    @property
    def busy(self) -> bool:
        """Whether other work competed for the cores while c(n) was timed."""
        return self.load_average is not None and self.load_average > self.threads

    @property
    def notes(self) -> tuple[str, ...]:
        notes = []
        if self.busy:
            notes.append(
                f"the machine was busy while timing (load average {self.load_average:.1f} for "
                f"{self.threads} threads): c(n) is unreliable and was not kept for the planner; "
                "run it again (--force) when it is quiet"
            )
        if self.verify_gain <= 1.0:
            notes.append("the copy verifies no cheaper than the original here (mean c(2..8)); keep using the original")
        return tuple(notes)

    def to_dict(self) -> dict[str, Any]:
        b, a = self.before, self.after
        return {
            "path": str(self.path),
            "type": self.type,
            "reason": self.reason,
            "source": str(self.source),
            "source_name": self.source_name,
            "source_type": b.quant,
            "perplexity_before": round(b.perplexity, 4),
            "perplexity_after": round(a.perplexity, 4),
            "perplexity_change_percent": round(100 * self.perplexity_change, 2),
            "heldout_tokens": b.tokens,
            "c_before": {str(n): round(c, 3) for n, c in sorted(b.verify.items())},
            "c_after": {str(n): round(c, 3) for n, c in sorted(a.verify.items())},
            "step_ms_before": round(b.step_ms, 2),
            "step_ms_after": round(a.step_ms, 2),
            "verify_gain": round(self.verify_gain, 3),
            "size_bytes_before": b.size_bytes,
            "size_bytes_after": a.size_bytes,
            "threads": self.threads,
            "seconds": {
                "measure_original": round(b.seconds, 1),
                "quantize": round(self.quantize_seconds, 1),
                "measure_copy_and_curves": round(a.seconds, 1),
            },
            "load_average": None if self.load_average is None else round(self.load_average, 2),
            "notes": list(self.notes),
        }


CANDIDATES = ("Q4_0", "IQ4_NL")  # 4-bit types: a copy about a Q4_K_M's size, so a plain step costs about the same
MIN_GAIN = 0.05  # a type must verify this much cheaper than the original's to be worth a copy


def backend_of(machine: Any) -> str:
    """Where a model runs on ``machine`` (a ``detect.Machine``): "metal", "cuda" or "cpu"."""
    if machine.gpu_offload and machine.chip:
        return "metal"
    return "cuda" if machine.gpu_offload and machine.gpus else "cpu"


def _priors(backend: str) -> dict[str, Any] | None:
    """The verify-cost priors by weight type for ``backend`` (``costmodel.priors``), None
    where this build has no such table."""
    try:
        from ..costmodel import priors
    except ImportError:
        return None
    rows = getattr(priors, "VERIFY_PRIORS", {}).get(backend)
    return {mix: row.cost for mix, row in rows.items()} if rows else None


def _mean_c(curve: Any) -> float:
    return sum(curve(n) for n in range(2, 9)) / 7


def choose_type(source_quant: str, machine: Any, table: dict[str, Any] | None = None) -> tuple[str, str]:
    """The weight type a copy should have on ``machine`` and why, in one line: of the 4-bit
    types, the one whose verify of 2..8 tokens costs least by the priors for this backend
    (``table``: weight type -> c(n); ``costmodel.priors`` by default), if it beats the
    original's type by ``MIN_GAIN``. ``InputError`` where none does."""
    backend = backend_of(machine)
    table = _priors(backend) if table is None else table
    src = source_quant.upper()
    if table is None:  # no table: what issue 37 measured on a CPU, nothing known elsewhere
        if backend != "cpu":
            raise InputError(
                f"models run on the GPU ({backend}) here, where no weight type is known to verify "
                f"cheaper than {src}; pass --type Q4_0 to make (and measure) a copy anyway"
            )
        return "Q4_0", (
            f"Q4_0: on a CPU llama.cpp repacks Q4_0 weights into 4- and 8-row GEMM tiles, so a verify "
            f"of several tokens costs less than with {src} (measured below)"
        )
    options = {t: _mean_c(table[t]) for t in CANDIDATES if t in table}
    if not options:
        raise InputError(f"no weight type is known to verify cheaper than {src} on {backend}; pass --type")
    best = min(options, key=options.get)
    if best == src:
        raise InputError(
            f"the model is already {src}, the 4-bit type whose verify costs least on {backend}: nothing to optimize"
        )
    mine = table.get(src)
    if mine is None:
        return best, f"{best}: a verify of 2-8 tokens costs {options[best]:.2f} steps on average ({backend} priors)"
    if options[best] > _mean_c(mine) * (1 - MIN_GAIN):
        raise InputError(
            f"no weight type verifies cheaper than {src} on {backend} by the priors ({best}: "
            f"{options[best]:.2f} steps for 2-8 tokens against {_mean_c(mine):.2f}); pass --type to "
            "make (and measure) a copy anyway"
        )
    return best, (
        f"{best}: a verify of 2-8 tokens costs {options[best]:.2f} steps on average against "
        f"{_mean_c(mine):.2f} for {src} ({backend} priors; measured below)"
    )


def destination(source: Path, store: str, name: str, type_name: str, need_bytes: int, *, force: bool) -> Path:
    """The copy's path: the first folder of ``optimized.folders`` that can be written and has
    room (``OutputError`` if none); an existing copy is refused unless ``force``."""
    writable = [f for f in optimized.folders(source, store) if _writable(f)]
    if not writable:
        tried = " nor ".join(str(f) for f in optimized.folders(source, store))
        raise OutputError(
            f"cannot write a copy of {name}: neither {tried} can be written; "
            "set EDGESPEC_CACHE to a folder you can write"
        )
    roomy = [f for f in writable if _free_bytes(f) >= need_bytes]
    if not roomy:
        f = writable[0]
        raise OutputError(
            f"not enough disk space for the {type_name} copy of {name}: about "
            f"{need_bytes / catalog.GB:.2f} GB needed in {f}, {_free_bytes(f) / catalog.GB:.2f} GB free; "
            "free some space, or set EDGESPEC_CACHE to a folder on another disk"
        )
    out = roomy[0] / optimized.copy_name(optimized.stem_for(source, store, name), type_name)
    if out.exists() and not force:
        raise InputError(f"{out} already exists (an optimized copy of {name}); --force writes it again")
    return out


def _writable(folder: Path) -> bool:
    """Whether a file can be created in ``folder`` (made if missing): tried, not guessed."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".edgespec-probe-", dir=folder)
        os.close(fd)
        os.unlink(probe)
        return True
    except OSError:
        return False


def _free_bytes(folder: Path) -> int:
    return shutil.disk_usage(folder).free


def _open(path: Path, threads: int, n_max: int) -> tuple[Model, Context]:
    """``path`` on llama.cpp's own kernels (what plain decoding runs) and a context for it."""
    model = Model(path, exact=False)
    try:
        return model, Context(model, n_ctx=max(CHUNK + 1, PREFIX_TOKENS + 1 + n_max), n_batch=BATCH, n_threads=threads)
    except BaseException:
        model.close()
        raise


def _bos(model: Model) -> int | None:
    return model.bos if model.add_bos and model.bos >= 0 else None


def measure_perplexity(path: Path, text: str, *, threads: int) -> Perplexity:
    """The perplexity of the model file ``path`` on ``text``."""
    model, ctx = _open(path, threads, 1)
    try:
        return perplexity(ctx, model.tokenize(text, add_special=False, parse_special=False), bos=_bos(model))
    finally:
        ctx.close()
        model.close()


def measure_curves(
    paths: list[Path], text: str, *, threads: int, n_max: int = 16, repeats: int = 5
) -> list[tuple[float, dict[int, float]]]:
    """(step ms, c(1..n_max)) of each model file, timed side by side: each batch of n tokens
    is decoded (all rows' logits, as a verify asks) on every file in turn at the same KV
    position and rolled back, in ``repeats`` sweeps after a warm-up one (alternately n =
    n_max..1 and 1..n_max), and the fastest time of each is kept. On a machine busy with
    other work the fastest of a few is the least disturbed, and timing the files back to
    back gives them the same moments; ``tune`` measures more, with medians."""
    opened: list[tuple[Model, Context]] = []
    try:
        for p in paths:
            opened.append(_open(p, threads, n_max))
        prefixes = []
        for model, ctx in opened:
            prefix = ([_bos(model)] if _bos(model) is not None else []) + model.tokenize(text, add_special=False)
            prefixes.append(prefix[:PREFIX_TOKENS])
            hold(ctx, prefixes[-1])
        best = [dict.fromkeys(range(1, n_max + 1), math.inf) for _ in paths]
        for sweep in range(repeats + 1):
            for n in range(1, n_max + 1) if sweep % 2 else range(n_max, 0, -1):
                for (_, ctx), prefix, fastest in zip(opened, prefixes, best):
                    batch = [prefix[i % len(prefix)] for i in range(n)]
                    t0 = time.perf_counter()
                    ctx.decode(batch, rows=range(n))
                    dt = time.perf_counter() - t0
                    back(ctx, prefix)
                    if sweep:
                        fastest[n] = min(fastest[n], dt * 1e3)
    finally:
        for model, ctx in opened:
            ctx.close()
            model.close()
    out = []
    for ms in best:
        curve = fit_verify_cost({n: t / ms[1] for n, t in ms.items()})
        out.append((ms[1], {n: curve(n) for n in range(1, n_max + 1)}))
    return out


def _load_average() -> float | None:
    try:
        return os.getloadavg()[0]
    except (AttributeError, OSError):  # not on this platform
        return None


def _assessment(path: Path, ppl: Perplexity, curve: tuple[float, dict[int, float]], seconds: float) -> Assessment:
    return Assessment(
        path=path,
        quant=catalog.read_header(path).quant,
        size_bytes=path.stat().st_size,
        perplexity=ppl.value,
        tokens=ppl.tokens,
        step_ms=curve[0],
        verify=curve[1],
        seconds=seconds,
    )


def optimize(
    path: str | os.PathLike,
    *,
    type_name: str | None = None,
    force: bool = False,
    threads: int | None = None,
    machine: Any = None,
    text: str | None = None,
    n_max: int = 16,
    repeats: int = 5,
    phase: Callable[[str], None] | None = None,
) -> Optimized:
    """Write and measure the optimized copy of the model file ``path`` (see the module docstring)."""
    say = phase or (lambda _msg: None)
    source = check_gguf_file(path)
    model = catalog.describe_file(source)  # the store's name; a truncated header fails here
    src_quant = model.header.quant
    if type_name is None:
        if machine is None:
            from ..detect import read_machine

            machine = read_machine()
        type_name, reason = choose_type(src_quant, machine)
    else:
        type_name = type_name.strip().upper()
        try:
            llama.ftype_of(type_name)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        reason = f"{type_name}: asked for (--type)"
    if src_quant.upper() == type_name:
        raise InputError(f"{model.name} is already {type_name}: nothing to optimize")
    if optimized.parse_copy_name(source.name):
        raise InputError(f"{source.name} is itself an optimized copy; optimize its original instead")
    dest = destination(
        source, model.source, model.name, type_name, llama.quantized_size(model.header.params, type_name), force=force
    )
    threads = threads or default_threads()
    text = heldout_text() if text is None else text

    say(f"measuring {model.name} ({src_quant}): perplexity on the held-out text")
    t0 = time.perf_counter()
    ppl_before = measure_perplexity(source, text, threads=threads)
    seconds_before = time.perf_counter() - t0
    tmp = dest.with_name(f".{dest.name}.{os.getpid()}.partial")
    try:
        say(f"writing the {type_name} copy with llama.cpp's quantize ({threads} threads)")
        t0 = time.perf_counter()
        llama.run_quantize(
            source, tmp, type_name, threads=threads, allow_requantize=src_quant.upper() not in llama.UNQUANTIZED
        )
        quantize_seconds = time.perf_counter() - t0
        say(f"measuring the {type_name} copy: perplexity, then c(1..{n_max}) of both files in turn")
        t0 = time.perf_counter()
        ppl_after = measure_perplexity(tmp, text, threads=threads)
        load = _load_average()
        curves = measure_curves([source, tmp], text, threads=threads, n_max=n_max, repeats=repeats)
        load = max(load, _load_average()) if load is not None else None
        seconds_after = time.perf_counter() - t0
        os.replace(tmp, dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    before = _assessment(source, ppl_before, curves[0], seconds_before)
    after = _assessment(dest, ppl_after, curves[1], seconds_after)
    result = Optimized(
        source=source,
        source_name=model.name,
        path=dest,
        type=after.quant or type_name,
        reason=reason,
        before=before,
        after=after,
        threads=threads,
        quantize_seconds=quantize_seconds,
        load_average=load,
    )
    for a in (before, after) if not result.busy else ():  # a busy machine's curves would mislead the planner
        verify_cache.record(
            a.path,
            {n: c for n, c in a.verify.items() if n >= 2},
            step_ms=a.step_ms,
            threads=threads,
            exact=False,
            source=SOURCE,
            machine=machine,
        )
    figures = {
        k: v
        for k, v in result.to_dict().items()
        if k in ("perplexity_before", "perplexity_after", "c_before", "c_after", "verify_gain")
    }
    optimized.record(dest, source, source_name=model.name, type_name=result.type, figures=figures)
    return result
