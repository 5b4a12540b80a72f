"""Model names as the CLI shows them (issue 28, items 5 and 7): whole and on one line when
stdout is a pipe, never read as Rich markup or emoji codes, the name the user gave
rather than an Ollama blob's file name, and a broken store entry that says what is
wrong with it instead of "unknown model, did you mean <the same name>".

The stores are fake, under a temporary HOME: an Ollama folder whose manifests point at
tiny GGUFs (tests/tiny_models.py), an LM Studio repo with brackets in its name, and a
Hugging Face cache holding a 0-byte GGUF."""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer
from rich.console import Console
from typer.testing import CliRunner

from edgespec import catalog
from edgespec.catalog import local, stores
from edgespec.errors import IncompatibleVocabError, ModelFileError
from edgespec.planning import planner
from tiny_models import make_tiny_model, write_random_bytes

TARGET = "ollama:qwen2.5-coder:1.5b"
LONG = "ollama:hf.co/some-organisation/a-rather-long-repository-name-GGUF:Q4_K_M"  # the target's bytes
DRAFT = "ollama:tm:0.5b"  # ":tm:" is Rich's emoji code for ™
BRACKETS = "pub/model[red]x["  # LM Studio: "[red]" is Rich markup
OTHER = "ollama:other:1b"  # another vocabulary
NOT_GGUF, CORRUPT, DANGLING, EMPTY = "ollama:notgguf", "ollama:broken", "ollama:ghost", "hf:zero/empty-GGUF"


def _blob(root: Path, data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    (root / "blobs" / f"sha256-{digest}").write_bytes(data)
    return f"sha256:{digest}"


def _manifest(root: Path, rel: str, digest: str | None, text: str | None = None) -> None:
    f = root / "manifests" / rel
    f.parent.mkdir(parents=True, exist_ok=True)
    f.write_text(
        text
        if text is not None
        else json.dumps(
            {"schemaVersion": 2, "layers": [{"mediaType": stores.OLLAMA_MODEL_LAYER, "digest": digest, "size": 1}]}
        )
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    pytest.importorskip("gguf")
    src = tmp_path_factory.mktemp("src")
    target = make_tiny_model(src / "target.gguf", seed=0, name="tiny-target", n_ctx_train=512)
    draft = make_tiny_model(src / "draft.gguf", seed=0, name="tiny-draft", n_embd=32, n_ff=64, n_layer=1)
    other = make_tiny_model(src / "other.gguf", vocab="other", seed=2, name="tiny-other", n_embd=32, n_ff=64, n_layer=1)
    home = tmp_path_factory.mktemp("home")
    o = home / "ollama"
    t, d = _blob(o, target.read_bytes()), _blob(o, draft.read_bytes())
    _manifest(o, "registry.ollama.ai/library/qwen2.5-coder/1.5b", t)
    _manifest(o, "hf.co/some-organisation/a-rather-long-repository-name-GGUF/Q4_K_M", t)
    _manifest(o, "registry.ollama.ai/library/tm/0.5b", d)
    _manifest(o, "registry.ollama.ai/library/other/1b", _blob(o, other.read_bytes()))
    _manifest(o, "registry.ollama.ai/library/notgguf/latest", _blob(o, write_random_bytes(src / "x").read_bytes()))
    _manifest(o, "registry.ollama.ai/library/broken/latest", None, text="{not json")
    _manifest(o, "registry.ollama.ai/library/ghost/latest", "sha256:" + "0" * 64)
    lms = home / ".lmstudio" / "models" / "pub" / "model[red]x["
    lms.mkdir(parents=True)
    (lms / "m.gguf").write_bytes(draft.read_bytes())
    empty = home / "hub" / "models--zero--empty-GGUF" / "snapshots" / "abc" / "empty.gguf"
    empty.parent.mkdir(parents=True)
    empty.write_bytes(b"")
    return home, {"target_blob": o / "blobs" / t.replace(":", "-"), "draft_blob": o / "blobs" / d.replace(":", "-")}


@pytest.fixture
def home(tree, tmp_path, monkeypatch):
    h, paths = tree
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.setenv("OLLAMA_MODELS", str(h / "ollama"))
    monkeypatch.setenv("HF_HUB_CACHE", str(h / "hub"))
    monkeypatch.setenv("LLAMA_CACHE", str(tmp_path / "no-llama-cache"))
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    for var in (
        "HF_HOME",
        "HUGGINGFACE_HUB_CACHE",
        "XDG_CACHE_HOME",
        "HF_HUB_OFFLINE",
        "EDGESPEC_MODEL_PATH",
        "COLUMNS",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(stores, "OLLAMA_SYSTEM_ROOTS", ())
    catalog.forget()
    yield paths
    catalog.forget()


def _app() -> typer.Typer:
    from edgespec.cli.generate import generate
    from edgespec.cli.profiles import models_app, profiles_app

    app = typer.Typer()
    app.add_typer(models_app, name="models")
    app.add_typer(profiles_app, name="profiles")
    app.command("generate")(generate)
    return app


def cli(*args: str):
    return CliRunner().invoke(_app(), list(args))


def one_line_with(out: str, *names: str) -> str:
    """The line of ``out`` that holds every one of ``names`` whole (what grep would find)."""
    lines = [line for line in out.splitlines() if all(n in line for n in names)]
    assert lines, f"no line holds {names} whole:\n{out}"
    return lines[0]


# -- item 5: tables in a pipe -------------------------------------------------------------


def test_models_list_in_a_pipe_has_each_name_whole_on_one_line(home):
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    r = subprocess.run(
        [sys.executable, "-m", "edgespec", "models", "list"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
    )  # stdout is a pipe, as with `| grep`
    assert r.returncode == 0, r.stderr
    for name in (TARGET, LONG, DRAFT, BRACKETS, "qwen2.5-coder-1.5b"):
        one_line_with(r.stdout, name)
    one_line_with(r.stdout, BRACKETS, "lmstudio", "drafts for")  # its own row, whole
    # the script interface is unchanged
    d = json.loads(
        subprocess.run(
            [sys.executable, "-m", "edgespec", "models", "list", "--json"],
            capture_output=True,
            text=True,
            timeout=300,
            env=env,
        ).stdout
    )
    assert {TARGET, LONG, DRAFT, BRACKETS} <= {m["name"] for m in d["local"]}


def test_models_pairs_in_a_pipe_has_each_pair_on_one_line(home):
    r = cli("models", "pairs", "--profile", "rtx4090")
    assert r.exit_code == 0, r.output
    line = one_line_with(r.stdout, f"{LONG} (ollama)", f"{DRAFT} (ollama)")
    assert "×" in line  # (the same blob as ollama:qwen2.5-coder:1.5b: one row for the two names)


def test_profiles_list_in_a_pipe_has_each_profile_on_one_line(home):
    from edgespec import profiles

    r = cli("profiles", "list")
    assert r.exit_code == 0, r.output
    for p in profiles.list_profiles():
        one_line_with(r.stdout, p.name, p.description)


def test_on_a_terminal_the_console_keeps_the_terminal_s_width(monkeypatch):
    from edgespec.cli.common import out_console

    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    monkeypatch.setenv("COLUMNS", "100")
    assert out_console().width == 100


# -- item 7: names are not markup ---------------------------------------------------------


def test_names_are_printed_as_they_are_not_as_markup_or_emoji_codes(home):
    r = cli("models", "list")
    assert r.exit_code == 0, r.output
    assert DRAFT in r.stdout and "™" not in r.stdout
    assert BRACKETS in r.stdout
    r = cli("models", "pairs", "--profile", "rtx4090")
    assert f"{DRAFT} (ollama)" in r.stdout and "™" not in r.stdout


def test_messages_do_not_read_markup_either(home):
    from edgespec.cli.common import err_console, out_console

    for con in (out_console(), err_console()):
        with con.capture() as cap:
            con.print("loading ollama:tm:0.5b from pub/model[red]x[ [bold]")
        assert cap.get().strip() == "loading ollama:tm:0.5b from pub/model[red]x[ [bold]"


# -- item 7: Ollama models by the name given, not by their blob ------------------------------


def test_models_check_names_the_models_as_given(home):
    r = cli("models", "check", TARGET, DRAFT)
    assert r.exit_code == 0, r.output
    assert f"compatible: {DRAFT} can draft for {TARGET}" in r.stdout and "sha256-" not in r.stdout
    r = cli("models", "check", TARGET, OTHER)
    assert r.exit_code == IncompatibleVocabError.exit_code
    assert f"target {TARGET} and draft {OTHER}" in r.stdout and "sha256-" not in r.stdout


def test_a_vocabulary_mismatch_names_the_models_as_given(home):
    r = cli("generate", "--target", TARGET, "--draft", OTHER, "--max-tokens", "2", "--raw", "x")
    assert r.exit_code == IncompatibleVocabError.exit_code, r.output
    assert f"target {TARGET} and draft {OTHER}" in r.stderr and "sha256-" not in r.stderr


def test_the_engine_names_models_by_the_plan_s_names(home, tiny_target):
    from edgespec import Engine

    p = planner.plan("cpu-small", target=TARGET, draft=DRAFT, n_gpu_layers=0)
    kw = p.engine_kwargs()
    assert kw["names"] == (TARGET, DRAFT)
    with Engine(**kw) as e:
        assert (e.target_model.label, e.draft_model.label) == (TARGET, DRAFT)
        assert e.target_path.name.startswith("sha256-")
    kw = planner.plan("cpu-small", target=str(tiny_target), draft="none").engine_kwargs()
    assert kw["names"][0] is None  # a path: its file name says it


def test_the_chat_banner_names_the_models_as_given_and_as_they_are(home):
    from edgespec import engine_for
    from edgespec.cli.chat import ChatSession

    p = planner.plan("cpu-small", target=TARGET, draft=BRACKETS, n_gpu_layers=0)
    with engine_for(p) as engine:
        assert engine.plan is p  # the engine keeps the plan it was built from
        buf = io.StringIO()
        ChatSession(
            engine, system=None, options={}, console=Console(file=buf, width=200, markup=False, emoji=False)
        )._banner()
    assert f"edgespec chat · {TARGET} · drafter model ({BRACKETS}) ·" in buf.getvalue()


# -- item 7: a broken store entry says what is wrong -----------------------------------------


@pytest.mark.parametrize("warm", [False, True], ids=["cold", "after-a-scan"])
@pytest.mark.parametrize(
    "name, why",
    [
        (NOT_GGUF, "not a GGUF"),
        (CORRUPT, "corrupt manifest"),
        (DANGLING, "missing (dangling)"),
        (EMPTY, "empty"),
    ],
)
def test_a_broken_store_entry_says_why_and_never_suggests_itself(home, name, why, warm):
    if warm:
        catalog.scan()
    with pytest.raises(ModelFileError) as e:
        catalog.resolve_model(name)
    msg = str(e.value)
    assert "cannot be used" in msg and why in msg, msg
    assert "did you mean" not in msg and "unknown model" not in msg and "model file not found" not in msg


def test_the_cli_says_why_a_store_entry_cannot_be_used(home):
    r = cli("generate", "--target", NOT_GGUF, "--max-tokens", "2", "x")
    assert r.exit_code == ModelFileError.exit_code, r.output
    assert "cannot be used" in r.stderr and "not a GGUF" in r.stderr and "did you mean" not in r.stderr
    r = cli("generate", "--target", EMPTY, "--max-tokens", "2", "x")
    assert r.exit_code == ModelFileError.exit_code, r.output
    assert "cannot be used" in r.stderr and "did you mean 'hf:zero/empty-GGUF'" not in r.stderr


def test_a_suggestion_is_never_the_name_typed(home):
    assert local.suggest("ollama:abc", ["ollama:abc", "OLLAMA:ABC", "ollama:abd"]) == ["ollama:abd"]
    with pytest.raises(Exception, match="did you mean 'ollama:qwen2.5-coder:1.5b'"):
        catalog.resolve_model("ollama:qwen2.5-coder:1.6b")
