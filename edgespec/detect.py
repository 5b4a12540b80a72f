"""What machine is this? Reads the hardware as facts: a ``Machine``.

Everything it learns comes through a ``Probe``: ``run(argv)`` for commands
(``sysctl``, ``nvidia-smi``), ``read(path)`` for files (``/proc/cpuinfo``, the device
tree), and a few facts (OS, architecture, memory, core counts, whether the installed
llama.cpp can offload to a GPU). ``LocalProbe`` asks the real machine;
``RecordedProbe`` replays a TOML recording, which is how detection is tested for
machines we do not have (see ``tests/data/detect/``), and how a user's report can be
replayed.

Matching a machine to a device profile is ``edgespec.profiles.match``'s. This module
knows nothing about profiles, models or the cost of decoding.
"""

from __future__ import annotations

import platform
import re
import shutil
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence

from .errors import ProfileError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

NVIDIA_SMI = ("nvidia-smi", "--query-gpu=name,memory.total", "--format=csv")
GIB = 1 << 30


# --------------------------------------------------------------------------------------
# Probes
# --------------------------------------------------------------------------------------


class Probe(Protocol):
    def system(self) -> str: ...  # "Darwin" | "Linux" | "Windows"
    def arch(self) -> str: ...
    def run(self, argv: Sequence[str]) -> str | None: ...  # stdout, None if it failed
    def read(self, path: str) -> str | None: ...
    def memory(self) -> tuple[int | None, int | None]: ...  # total, available bytes
    def cpu_counts(self) -> tuple[int | None, int | None]: ...  # physical, logical
    def gpu_offload(self) -> bool | None: ...  # None: unknown


class LocalProbe:
    """The machine this process runs on."""

    def system(self) -> str:
        return platform.system()

    def arch(self) -> str:
        return platform.machine()

    def run(self, argv: Sequence[str]) -> str | None:
        if shutil.which(argv[0]) is None:
            return None
        try:
            out = subprocess.run(list(argv), capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return out.stdout if out.returncode == 0 else None

    def read(self, path: str) -> str | None:
        try:
            return Path(path).read_bytes().decode("utf-8", errors="replace")
        except OSError:
            return None

    def memory(self) -> tuple[int | None, int | None]:
        try:
            import psutil

            vm = psutil.virtual_memory()
            return int(vm.total), int(vm.available)
        except Exception:  # noqa: BLE001 - psutil missing or unsupported platform
            return None, None

    def cpu_counts(self) -> tuple[int | None, int | None]:
        try:
            import psutil

            return psutil.cpu_count(logical=False), psutil.cpu_count(logical=True)
        except Exception:  # noqa: BLE001
            import os

            return None, os.cpu_count()

    def gpu_offload(self) -> bool | None:
        try:
            from . import llama

            return llama.supports_gpu_offload()
        except Exception:  # noqa: BLE001 - llama.cpp not importable: unknown
            return None

    def rpc(self) -> bool | None:
        try:
            from .llama import rpc

            return rpc.rpc_available()
        except Exception:  # noqa: BLE001 - llama.cpp not importable: unknown
            return None


class RecordedProbe:
    """Replays a recording: a TOML file with ``system``, ``arch``, ``gpu_offload``,
    ``[memory]`` total/available, ``[cpu]`` physical/logical, ``[commands]`` (the
    command line joined by spaces -> its stdout) and ``[files]`` (path -> content).
    Commands and files not in the recording behave as missing."""

    def __init__(self, data: dict, name: str = "recording") -> None:
        self.data, self.name = data, name

    @classmethod
    def load(cls, path: str | Path) -> "RecordedProbe":
        p = Path(path)
        try:
            return cls(tomllib.loads(p.read_text(encoding="utf-8")), p.stem)
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ProfileError(f"{p}: cannot read machine recording: {exc}") from None

    def system(self) -> str:
        return self.data.get("system", "Linux")

    def arch(self) -> str:
        return self.data.get("arch", "x86_64")

    def run(self, argv: Sequence[str]) -> str | None:
        return self.data.get("commands", {}).get(" ".join(argv))

    def read(self, path: str) -> str | None:
        return self.data.get("files", {}).get(path)

    def memory(self) -> tuple[int | None, int | None]:
        m = self.data.get("memory", {})
        return m.get("total"), m.get("available")

    def cpu_counts(self) -> tuple[int | None, int | None]:
        c = self.data.get("cpu", {})
        return c.get("physical"), c.get("logical")

    def gpu_offload(self) -> bool | None:
        return self.data.get("gpu_offload")

    def rpc(self) -> bool | None:
        return self.data.get("rpc")


# --------------------------------------------------------------------------------------
# Reading the machine
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GPU:
    name: str
    memory_bytes: int | None


@dataclass(frozen=True)
class Machine:
    system: str
    arch: str
    cpu: str
    physical_cores: int
    logical_cores: int
    total_bytes: int | None
    available_bytes: int | None
    chip: str | None = None  # Apple silicon chip, e.g. "Apple M2 Max"
    board: str | None = None  # device-tree model: Raspberry Pi, Jetson
    gpus: tuple[GPU, ...] = ()
    gpu_offload: bool | None = None
    rpc: bool | None = None  # llama.cpp built with its RPC backend (``--rpc``, ``rpc-server``)

    def to_dict(self) -> dict:
        return asdict(self)

    def summary(self) -> str:
        bits = [self.chip or self.board or self.cpu or self.arch]
        bits.append(f"{self.physical_cores} cores")
        if self.total_bytes:
            bits.append(f"{self.total_bytes / GIB:.0f} GiB {'unified memory' if self.chip else 'RAM'}")
        for g in self.gpus:
            mem = f" {g.memory_bytes / GIB:.0f} GiB" if g.memory_bytes else ""
            bits.append(f"{g.name}{mem}")
        if not self.gpus and not self.chip and not re.search(r"jetson", self.board or "", re.I):
            bits.append("no NVIDIA GPU")
        return ", ".join(bits)


def _int(text: str | None) -> int | None:
    if text is None:
        return None
    m = re.search(r"\d+", text)
    return int(m.group()) if m else None


def _cpuinfo_field(cpuinfo: str | None, *names: str) -> str | None:
    for line in (cpuinfo or "").splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() in names and value.strip():
            return value.strip()
    return None


def parse_nvidia_smi(text: str | None) -> tuple[GPU, ...]:
    """``nvidia-smi --query-gpu=name,memory.total --format=csv`` -> GPUs.

    The output is a header line then ``NVIDIA GeForce RTX 4090, 24564 MiB`` per GPU.
    """
    gpus = []
    for line in (text or "").splitlines()[1:]:
        if "," not in line:
            continue
        name, _, mem = line.rpartition(",")
        mib = _int(mem)
        gpus.append(GPU(name.strip(), mib * (1 << 20) if mib is not None else None))
    return tuple(gpus)


def _meminfo(text: str | None) -> tuple[int | None, int | None]:
    vals = {}
    for line in (text or "").splitlines():
        key, _, value = line.partition(":")
        if key in ("MemTotal", "MemAvailable"):
            vals[key] = (_int(value) or 0) * 1024
    return vals.get("MemTotal"), vals.get("MemAvailable")


def read_machine(probe: Probe | None = None) -> Machine:
    probe = probe or LocalProbe()
    system, arch = probe.system(), probe.arch()
    total, available = probe.memory()
    physical, logical = probe.cpu_counts()
    chip = board = None
    cpu = ""
    if system == "Darwin":
        cpu = (probe.run(("sysctl", "-n", "machdep.cpu.brand_string")) or "").strip()
        if cpu.startswith("Apple"):
            chip = cpu
        total = total or _int(probe.run(("sysctl", "-n", "hw.memsize")))
        physical = physical or _int(probe.run(("sysctl", "-n", "hw.physicalcpu")))
        logical = logical or _int(probe.run(("sysctl", "-n", "hw.logicalcpu")))
    elif system == "Linux":
        cpuinfo = probe.read("/proc/cpuinfo")
        cpu = _cpuinfo_field(cpuinfo, "model name", "hardware", "cpu model") or ""
        model = probe.read("/proc/device-tree/model")
        board = model.strip("\x00 \n") if model else _cpuinfo_field(cpuinfo, "model")
        if board and not re.search(r"raspberry|jetson|nvidia|orin", board, re.I):
            board = None  # x86 /proc/cpuinfo "model" is a number, not a board
        if total is None or available is None:
            t, a = _meminfo(probe.read("/proc/meminfo"))
            total, available = total or t, available or a
        if logical is None and cpuinfo:
            logical = sum(1 for line in cpuinfo.splitlines() if line.startswith("processor"))
        if physical is None and cpuinfo:
            cores = _int(_cpuinfo_field(cpuinfo, "cpu cores"))
            physical = cores or logical
    else:
        cpu = platform.processor() if isinstance(probe, LocalProbe) else ""
    gpus = parse_nvidia_smi(probe.run(NVIDIA_SMI)) if system != "Darwin" else ()
    logical = logical or physical or 1
    physical = physical or logical
    return Machine(
        system=system,
        arch=arch,
        cpu=cpu,
        physical_cores=physical,
        logical_cores=logical,
        total_bytes=total,
        available_bytes=available,
        chip=chip,
        board=board,
        gpus=gpus,
        gpu_offload=probe.gpu_offload(),
        rpc=probe.rpc() if hasattr(probe, "rpc") else None,
    )


def machine_facts(machine: Machine) -> dict[str, Any]:
    """A flat view for display."""
    return {
        "system": f"{machine.system} {machine.arch}",
        "cpu": machine.chip or machine.cpu or "?",
        "cores": f"{machine.physical_cores} physical, {machine.logical_cores} logical",
        "memory": (
            f"{machine.total_bytes / GIB:.1f} GiB total"
            + (f", {machine.available_bytes / GIB:.1f} GiB available" if machine.available_bytes else "")
            if machine.total_bytes
            else "?"
        ),
        "board": machine.board or "-",
        "gpus": ", ".join(
            f"{g.name} ({g.memory_bytes / GIB:.1f} GiB)" if g.memory_bytes else g.name for g in machine.gpus
        )
        or "-",
        "gpu offload in llama.cpp": {True: "yes", False: "no", None: "unknown"}[machine.gpu_offload],
        "RPC backend in llama.cpp": {
            True: "yes (--rpc, edgespec rpc-server)",
            None: "unknown",
            False: 'no (rebuild with CMAKE_ARGS="-DGGML_RPC=on", see docs/scale-out.md)',
        }[machine.rpc],
    }
