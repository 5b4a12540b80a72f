"""What the model-catalog tests share: ``isolated`` (autouse where a module takes it: its own
edgespec cache and HF home per test, online, no Hub variables set) and ``cli`` (``edgespec
models ...`` through typer's test runner). A test module takes a fixture as
``cli = catalog_support.cli``."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """Every test gets its own edgespec cache and HF home, online by default."""
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "edgespec-cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    for var in ("HF_HUB_OFFLINE", "EDGESPEC_OFFLINE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def cli():
    import typer
    from typer.testing import CliRunner

    from edgespec.cli.profiles import models_app

    app = typer.Typer()
    app.add_typer(models_app, name="models")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(args))
