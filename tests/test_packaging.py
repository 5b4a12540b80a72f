"""The wheel ships the whole package: every module and data file under ``edgespec/`` in the
source tree is in the wheel that ``pip install .`` builds, and nothing else is.

A hand-kept package list once left ``edgespec.constraints`` out, so the README's install
gave an edgespec that could not import while the suite (run from the checkout) passed.
``.ci/run`` also installs the wheel in a fresh virtualenv and uses it from another folder;
this test names the missing file where that smoke run would only fail."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "edgespec"


def source_files() -> set[str]:
    """Every file of the package in the source tree, as a wheel names it."""
    return {
        p.relative_to(ROOT).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix not in (".pyc", ".pyo")
    }


@pytest.fixture(scope="module")
def wheel_files(tmp_path_factory) -> set[str]:
    pytest.importorskip("setuptools")
    out = tmp_path_factory.mktemp("wheel")
    # The build works on a copy so the checkout gets no build/ or egg-info folder.
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    shutil.copytree(PACKAGE, src / "edgespec", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = out.glob("edgespec-*.whl")
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if n.startswith("edgespec/")}


def test_the_wheel_holds_every_file_of_the_package(wheel_files):
    missing = sorted(source_files() - wheel_files)
    assert not missing, f"left out of the wheel (pyproject.toml's packages/package-data): {missing}"


def test_the_wheel_holds_nothing_the_source_tree_lacks(wheel_files):
    extra = sorted(wheel_files - source_files())
    assert not extra, f"in the wheel but not in edgespec/ (a stale build folder?): {extra}"


def test_every_package_folder_is_a_package():
    """A folder of modules without __init__.py would be a namespace package, which
    packages.find (not find_namespace) leaves out of the wheel."""
    for folder in PACKAGE.rglob("*"):
        if folder.is_dir() and folder.name != "__pycache__" and any(folder.glob("*.py")):
            assert (folder / "__init__.py").is_file(), f"{folder.relative_to(ROOT)} has no __init__.py"
