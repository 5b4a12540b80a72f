"""A llama.cpp build this CPU cannot run (issue 43): the install script builds without Intel
AMX where the CPU lists it, and the first use finds out in a child process whether the
build decodes, turning a SIGILL into one line with the command that fixes it."""

from __future__ import annotations

import json
import os
import platform
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from edgespec.cli.generate import generate
from edgespec.errors import IllegalInstructionError
from edgespec.llama import build_check

ROOT = Path(__file__).resolve().parent.parent
SIGILL_CHILD = [sys.executable, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGILL)"]
PASSING_CHILD = [sys.executable, "-c", "print('decoded')"]
AMX_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f amx_bf16 amx_tile amx_int8\n"
PLAIN_CPUINFO = "processor\t: 0\nflags\t\t: fpu sse2 avx2 avx512f avx512_bf16\n"


@pytest.fixture()
def cache(tmp_path, monkeypatch) -> Path:
    """An empty edgespec cache: no build has passed yet."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "edgespec" / "build-checks.json"


@pytest.fixture()
def amx_cpu(tmp_path, monkeypatch) -> None:
    """An x86-64 CPU whose /proc/cpuinfo lists AMX."""
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(AMX_CPUINFO)
    monkeypatch.setattr(build_check, "CPUINFO", cpuinfo)
    monkeypatch.setattr(build_check.platform, "machine", lambda: "x86_64")


def fake_build(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).write_bytes(b"\x7fELF" + name.encode())
    return folder


# -- the child --------------------------------------------------------------------------------


def test_a_child_that_dies_of_sigill_gives_the_message_and_the_command_that_fixes_it(cache, amx_cpu, tiny_target):
    with pytest.raises(IllegalInstructionError) as caught:
        build_check.check(tiny_target, command=SIGILL_CHILD)
    message = str(caught.value)
    assert caught.value.exit_code == 6
    assert '"Illegal instruction"' in message and tiny_target.name in message
    assert "uses CPU instructions this machine does not run" in message
    assert "lists Intel AMX (amx_tile in /proc/cpuinfo) without enabling it" in message
    # the one command, at the end: the rebuild without AMX, in this Python
    command = message.rsplit(": ", 1)[1]
    words = shlex.split(command)
    assert words[:2] == [f"CFLAGS={build_check.NO_AMX}", f"CXXFLAGS={build_check.NO_AMX}"]
    version = build_check.importlib_metadata.version("llama-cpp-python")
    pip = ["-m", "pip", "install", "--force-reinstall", "--no-cache-dir", "--no-deps", f"llama-cpp-python=={version}"]
    assert words[-8:] == [sys.executable, *pip]
    assert all(w.startswith("CMAKE_ARGS=-DGGML_") for w in words[2:-8])  # the backends it has (RPC)
    assert not build_check.passed() and not cache.exists()  # a failure is never kept


def test_without_amx_listed_the_command_rebuilds_for_this_cpu(tmp_path, monkeypatch):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(PLAIN_CPUINFO)
    monkeypatch.setattr(build_check, "CPUINFO", cpuinfo)
    assert not build_check.lists_amx()
    message = build_check.sigill_message(Path("m.gguf"))
    assert "built for another CPU" in message and "CFLAGS" not in message
    assert message.endswith(" -m pip install --force-reinstall --no-cache-dir --no-deps llama-cpp-python==0.3.36")


def test_the_command_keeps_the_backends_the_build_has(tmp_path):
    lib = fake_build(tmp_path / "lib", "libllama.so", "libggml-base.so", "libggml-cpu.so", "libggml-rpc.so")
    command = build_check.fix_command(amx=True, lib=lib)
    assert 'CMAKE_ARGS="-DGGML_RPC=on"' in command and "-mno-amx-tile" in command
    assert "CMAKE_ARGS" not in build_check.fix_command(amx=False, lib=fake_build(tmp_path / "cpu", "libllama.so"))


def test_a_passing_child_is_kept_per_build_and_runs_again_for_a_new_build(cache, tmp_path, monkeypatch):
    lib = fake_build(tmp_path / "lib", "libllama.so", "libggml-cpu.so")
    monkeypatch.setattr(build_check, "library_dir", lambda: lib)
    assert not build_check.passed()
    assert build_check.check(tmp_path / "m.gguf", command=PASSING_CHILD)
    assert build_check.passed()
    (entry,) = json.loads(cache.read_text())["passed"].values()
    assert [Path(f).name for f, _, _ in entry["libraries"]] == ["libggml-cpu.so", "libllama.so"]
    # the same build: the child does not run again (it would die)
    assert build_check.check(tmp_path / "m.gguf", command=SIGILL_CHILD)
    # a rebuilt library (another size and mtime): checked again
    (lib / "libggml-cpu.so").write_bytes(b"\x7fELF rebuilt with AMX")
    os.utime(lib / "libggml-cpu.so", ns=(1, 1))
    assert not build_check.passed()
    with pytest.raises(IllegalInstructionError):
        build_check.check(tmp_path / "m.gguf", command=SIGILL_CHILD)


def test_a_child_that_fails_otherwise_says_nothing_and_keeps_nothing(cache, tiny_target):
    assert not build_check.check(tiny_target, command=[sys.executable, "-c", "raise SystemExit(3)"])
    assert not build_check.check(tiny_target, command=[sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
    assert not cache.exists()


def test_the_real_child_decodes_a_model_on_both_kinds_of_kernels(cache, tiny_target):
    r = subprocess.run(build_check.child_command(tiny_target), capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "decoded"
    assert build_check.check(tiny_target) and build_check.passed()


def test_the_library_is_found_without_importing_llama_cpp():
    lib = build_check.library_dir()
    assert lib is not None and lib.name == "lib"
    identity = build_check.build_identity()
    assert identity and any("llama" in Path(f).name for f, _, _ in identity)


# -- the command line -------------------------------------------------------------------------


@pytest.fixture()
def run():
    app = typer.Typer()
    app.command("generate")(generate)
    app.command("other")(lambda: None)  # two commands: `generate` stays a subcommand
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


def test_the_cli_turns_a_sigill_in_the_child_into_one_line_and_exit_6(run, cache, amx_cpu, monkeypatch, tiny_target):
    monkeypatch.setattr(build_check, "child_command", lambda *a, **k: SIGILL_CHILD)
    r = run("generate", "--target", tiny_target, "--draft", "none", "--max-tokens", "4", "--raw", "hello")
    assert r.exit_code == 6, r.output
    (line,) = r.stderr.strip().splitlines()[-1:]
    assert line.startswith('error: llama.cpp died with "Illegal instruction"'), r.stderr
    assert "Traceback" not in r.stderr and not r.stdout
    assert line.endswith(f"llama-cpp-python=={build_check.importlib_metadata.version('llama-cpp-python')}")


def test_the_cli_checks_once_per_build(run, cache, monkeypatch, tiny_target):
    calls = []

    def child(*args, **kwargs):
        calls.append(args)
        return PASSING_CHILD

    monkeypatch.setattr(build_check, "child_command", child)
    for _ in range(2):
        r = run("generate", "--target", tiny_target, "--draft", "none", "--max-tokens", "4", "--raw", "hello")
        assert r.exit_code == 0, r.output
    assert calls == [(Path(tiny_target),)]
    assert build_check.passed()


# -- the install script -----------------------------------------------------------------------


def install_plan(tmp_path: Path, cpuinfo: str, **env: str) -> dict[str, str]:
    """What ``install.sh --dry-run`` would build with, on a CPU with this cpuinfo."""
    (tmp_path / "cpuinfo").write_text(cpuinfo)
    base = {k: v for k, v in os.environ.items() if k not in ("CFLAGS", "CXXFLAGS", "CMAKE_ARGS")}
    r = subprocess.run(
        ["sh", str(ROOT / "install.sh"), "--dry-run"],
        env={**base, "EDGESPEC_CPUINFO": str(tmp_path / "cpuinfo"), "XDG_CACHE_HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return dict(line.split("=", 1) for line in r.stdout.splitlines())


x86_only = pytest.mark.skipif(
    platform.machine().lower() not in ("x86_64", "amd64"), reason="AMX flags are for x86-64 builds"
)


@x86_only
def test_the_install_script_builds_without_amx_where_the_cpu_lists_it(tmp_path):
    plan = install_plan(tmp_path, AMX_CPUINFO)
    assert plan["CFLAGS"] == plan["CXXFLAGS"] == "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    assert plan["version"] == "0.3.36"
    assert plan["wheels"] == f"{tmp_path}/edgespec/wheels/llama_cpp_python-0.3.36-noamx"
    plain = install_plan(tmp_path, PLAIN_CPUINFO)
    assert plain["CFLAGS"] == plain["CXXFLAGS"] == ""
    assert plain["wheels"] == f"{tmp_path}/edgespec/wheels/llama_cpp_python-0.3.36"


@x86_only
def test_the_install_script_keys_its_wheel_cache_by_the_callers_flags(tmp_path):
    rpc = install_plan(tmp_path, AMX_CPUINFO, CMAKE_ARGS="-DGGML_RPC=on")
    assert rpc["CMAKE_ARGS"] == "-DGGML_RPC=on"
    assert rpc["wheels"].endswith("/llama_cpp_python-0.3.36-rpc-noamx")  # .ci/run's cache
    cuda = install_plan(tmp_path, AMX_CPUINFO, CMAKE_ARGS="-DGGML_RPC=on -DGGML_CUDA=on")
    mine = install_plan(tmp_path, AMX_CPUINFO, CFLAGS="-O3")
    assert mine["CFLAGS"] == "-O3 -mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
    names = {Path(p["wheels"]).name for p in (rpc, cuda, mine)}
    assert len(names) == 3 and all(n.startswith("llama_cpp_python-0.3.36-") for n in names)


def test_the_readme_install_is_the_command_ci_runs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    lines = [line.strip() for line in readme.splitlines() if line.startswith("python3 -m venv .venv")]
    (install,) = lines
    assert "sh install.sh '.[models]'" in install and "edgespec generate" in install
    assert install in {line.strip() for line in ci.splitlines()}
