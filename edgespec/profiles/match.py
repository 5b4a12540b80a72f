"""Matching a machine to a device profile: the closest profile for what ``detect`` read,
scaled to the machine (memory the models may use, threads), and a sentence saying why.

This is the one place that maps a ``Machine`` to a ``Profile``; ``detect`` only reads
facts, the planner asks here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Sequence

from ..detect import GIB, Machine, Probe, read_machine
from ..errors import ProfileError
from .schema import GB, Figure, Profile
from .store import list_profiles

TIERS = {"": 0, "pro": 1, "max": 2, "ultra": 3}


@dataclass(frozen=True)
class Detection:
    machine: Machine
    profile: Profile  # scaled to the machine
    base: str  # the profile it was scaled from
    explanation: str

    def to_dict(self) -> dict:
        return {"machine": self.machine.to_dict(), "profile": self.base, "explanation": self.explanation}


def _apple_chip(name: str) -> tuple[int, int] | None:
    """ "Apple M2 Max" -> (2, 2): generation and tier (0 base, 1 Pro, 2 Max, 3 Ultra)."""
    m = re.match(r"Apple M(\d+)(?:\s+(Pro|Max|Ultra))?", name.strip(), re.I)
    if not m:
        return None
    return int(m.group(1)), TIERS[(m.group(2) or "").lower()]


def _prefer_user(cands: list[Profile]) -> list[Profile]:
    return sorted(cands, key=lambda p: p.origin == "shipped")


def match_profile(machine: Machine, profiles: Sequence[Profile]) -> tuple[Profile, str]:
    """The closest profile and a sentence saying why: by Apple chip, then by board
    (Jetson, Raspberry Pi), then by NVIDIA GPU, else the CPU profile for the core count."""
    by_kind: dict[str, list[Profile]] = {}
    for p in _prefer_user(list(profiles)):
        by_kind.setdefault(p.match.kind, []).append(p)
    if machine.chip:
        return _by_chip(machine, by_kind)
    return _by_board(machine, by_kind) or _by_gpu(machine, by_kind) or _nearest_cpu(machine, by_kind, "")


def _nearest_cpu(machine: Machine, by_kind: dict[str, list[Profile]], why: str) -> tuple[Profile, str]:
    cands = by_kind.get("cpu", [])
    if not cands:
        raise ProfileError("no CPU profile is installed; reinstall edgespec")
    n = machine.physical_cores
    for p in cands:
        lo, hi = p.match.cores or (1, 1 << 16)
        if lo <= n <= hi:
            return p, f"{why}{n} physical cores: {p.name}"
    p = min(cands, key=lambda p: min(abs(n - c) for c in (p.match.cores or (n, n))))
    return p, f"{why}{n} physical cores, closest: {p.name}"


def _by_chip(machine: Machine, by_kind: dict[str, list[Profile]]) -> tuple[Profile, str]:
    chip = machine.chip or ""
    apple = by_kind.get("apple", [])
    for p in apple:
        if any(chip.lower() == c.lower() for c in p.match.chips):
            return p, f"{chip}: {p.name}"
    want = _apple_chip(chip)
    scored = []
    for p in apple:
        for c in p.match.chips:
            have = _apple_chip(c)
            if want and have:
                scored.append(((abs(want[1] - have[1]), abs(want[0] - have[0]), -have[0]), p))
    if scored:
        p = min(scored, key=lambda t: t[0])[1]
        return p, f"{chip}: no profile of its own; closest chip profile {p.name}, scaled to it"
    return _nearest_cpu(machine, by_kind, f"{chip}: no Apple profile; ")


def _by_board(machine: Machine, by_kind: dict[str, list[Profile]]) -> tuple[Profile, str] | None:
    board = machine.board or ""
    for kind in ("jetson", "raspberry-pi"):
        for p in by_kind.get(kind, []):
            if any(b.lower() in board.lower() for b in p.match.boards):
                return p, f"{board}: {p.name}"
    if board and re.search(r"jetson|orin", board, re.I) and by_kind.get("jetson"):
        p = by_kind["jetson"][0]
        return p, f"{board}: closest board profile {p.name}"
    if board and re.search(r"raspberry", board, re.I) and by_kind.get("raspberry-pi"):
        p = by_kind["raspberry-pi"][0]
        return p, f"{board}: closest board profile {p.name}, scaled to it"
    return None


def _by_gpu(machine: Machine, by_kind: dict[str, list[Profile]]) -> tuple[Profile, str] | None:
    if not machine.gpus:
        return None
    gpu = max(machine.gpus, key=lambda g: g.memory_bytes or 0)
    if machine.gpu_offload is False:
        return _nearest_cpu(
            machine,
            by_kind,
            f"found {gpu.name}, but this llama-cpp-python build cannot offload to a GPU "
            '(reinstall it with CMAKE_ARGS="-DGGML_CUDA=on" to use it); ',
        )
    cuda = by_kind.get("nvidia", [])
    for p in cuda:
        if any(g.lower() in gpu.name.lower() for g in p.match.gpus):
            return p, f"{gpu.name}: {p.name}"
    if not cuda:
        return None
    vram = gpu.memory_bytes or 0
    fits = [p for p in cuda if p.models_gb.value * GB <= vram]
    p = max(fits, key=lambda p: p.models_gb.value) if fits else min(cuda, key=lambda p: p.models_gb.value)
    return p, f"{gpu.name}: no profile of its own; closest by memory {p.name}, scaled to it"


def _usable_apple(total: int) -> float:
    # Metal lets the GPU address about 2/3 of unified memory on machines up to 36 GB
    # and about 3/4 above (recommendedMaxWorkingSetSize).
    return total * (2 / 3 if total <= 36 * (1 << 30) else 3 / 4)


def scale(profile: Profile, machine: Machine) -> Profile:
    """The profile with the memory and threads of this machine."""
    notes: list[str] = []
    mem = profile.models_gb
    if machine.chip and machine.total_bytes:
        usable = _usable_apple(machine.total_bytes)
        mem = Figure(
            round(usable / GB, 1),
            "estimated",
            f"detected {machine.total_bytes / GIB:.0f} GiB unified memory × "
            f"{'2/3' if usable < machine.total_bytes * 0.7 else '3/4'} (Metal's working-set limit)",
        )
    elif profile.backend == "cuda" and machine.gpus and profile.match.kind == "nvidia":
        vram = max(g.memory_bytes or 0 for g in machine.gpus)
        if vram:
            mem = Figure(
                round(vram / GB - 0.5, 1),
                "estimated",
                f"detected {vram / GIB:.1f} GiB VRAM less 0.5 GB for the driver and display",
            )
    elif machine.total_bytes:
        usable = machine.total_bytes * 0.8
        src = f"detected {machine.total_bytes / GB:.1f} GB RAM × 0.8"
        if machine.available_bytes is not None and machine.available_bytes < usable:
            usable = machine.available_bytes
            src = f"detected {machine.available_bytes / GB:.1f} GB RAM available now"
        mem = Figure(round(usable / GB, 1), "estimated", src)
    if mem != profile.models_gb:
        notes.append(f"memory for models: {mem.value:g} GB ({mem.source})")
    threads = profile.n_threads
    if profile.backend == "cpu" or profile.n_gpu_layers == 0:
        threads = machine.physical_cores
        notes.append(f"threads: {threads} (one per physical core)")
    return replace(profile, models_gb=mem, n_threads=threads, notes=tuple(notes))


def detect_profile(probe: Probe | None = None, profiles: Sequence[Profile] | None = None) -> Detection:
    """Read the machine, pick the closest profile, scale it to the machine."""
    machine = read_machine(probe)
    profiles = list(profiles) if profiles is not None else list_profiles()
    base, why = match_profile(machine, profiles)
    scaled = scale(base, machine)
    return Detection(machine, scaled, base.name, f"detected {machine.summary()} → {why}")
