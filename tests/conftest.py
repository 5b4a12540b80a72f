"""Shared pytest fixtures: tiny GGUF models generated once per test session.

All model fixtures are session-scoped ``pathlib.Path``s in one temporary directory:

* ``tiny_target``       llama arch, F32, 320-token byte-level BPE vocab (BOS=1, EOS=2,
                        ChatML template); the target model.
* ``tiny_same``         the target's weights and vocabulary in a separate file (only
                        ``general.name`` differs): a drafter that always agrees.
* ``tiny_noisy``        the target's weights plus Gaussian noise, same vocabulary: a
                        drafter with roughly 50-85% greedy top-1 agreement.
* ``tiny_other_vocab``  a 300-token model with a different vocabulary: must be rejected
                        as a drafter for ``tiny_target``.
* ``tiny_small_vocab``  a 36-token model (flatter logits) for sampling statistics; pass
                        prompts as token ids (ids 0-4 are control tokens).
* ``tiny_lfm2``         a hybrid: ``lfm2`` arch (short-conv, attention, short-conv,
                        attention layers), the 320-token vocabulary (tests/tiny_hybrid.py).
* ``tiny_qwen35``       a hybrid: ``qwen35`` arch (3 Gated DeltaNet layers, then full
                        attention), the 320-token vocabulary (tests/tiny_hybrid.py).
* ``tiny_truncated``    the target's file cut in half (corrupt GGUF).
* ``tiny_not_gguf``     4 KB of random bytes.

They need the ``gguf`` package (test extra); without it the fixtures skip.

Engines, one factory for every module (``open_engine``; the fixture ``engines`` opens
them for one module and closes them after its tests):

* ``reference``         plain greedy decoding on ``tiny_target`` with batch-invariant
                        kernels: what speculation and the server's answers must equal.
* ``engines``           ``engines(model, draft=None, k=None, memory=True, **options)``:
                        an Engine with the tests' defaults (see ``open_engine``).

``ISSUE_PROFILES``: the device profiles the project shipped with (issue 1), which must stay.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

# No test may read or write the developer's own profiles (~/.config/edgespec): tests that
# need user profiles point XDG_CONFIG_HOME at their own tmp_path; the rest see none.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="edgespec-test-config-")
# llama.cpp's OpenMP threads spin while they wait; tests run several engines and CLI
# subprocesses at once on small machines, where spinning threads starve each other
# (measured: a full suite 5 min instead of over 25 on a loaded 2-core VM). Speed is
# measured in benchmarks/, never here.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# No engine measures c(n) when it loads (``measuring.first_use``): its timings would make a
# test's plan depend on the order the tests ran in; tests/test_first_use.py turns it on.
os.environ["EDGESPEC_FIRST_USE"] = "0"

from tiny_hybrid import make_tiny_lfm2, make_tiny_qwen35
from tiny_models import make_tiny_model, write_random_bytes, write_truncated

# The noise level that gives the noisy drafter its target agreement (see
# test_tiny_models.test_noisy_draft_agreement_in_range).
NOISY_DRAFT_NOISE = 0.1


@pytest.fixture(autouse=True)
def _no_copies_of_the_developers_models(monkeypatch):
    """A copy ``edgespec models optimize`` wrote beside a model in the developer's own cache
    (~/.cache/edgespec/models) does not change what the tests plan: only copies under the
    temporary folder (the tests' own, as test_optimize writes them) are found."""
    from edgespec.catalog import optimized

    real = optimized.optimized_copy_for
    tmp = Path(tempfile.gettempdir()).resolve()

    def under_tmp(target, type_name=None):
        found = real(target, type_name)
        return found if found is not None and tmp in Path(found).resolve().parents else None

    monkeypatch.setattr(optimized, "optimized_copy_for", under_tmp)


@pytest.fixture(scope="session")
def tiny_models_dir(tmp_path_factory) -> Path:
    pytest.importorskip("gguf")
    return tmp_path_factory.mktemp("tiny_models")


@pytest.fixture(scope="session")
def tiny_target(tiny_models_dir) -> Path:
    return make_tiny_model(tiny_models_dir / "target.gguf", seed=0, name="edgespec-tiny-target")


@pytest.fixture(scope="session")
def tiny_same(tiny_models_dir) -> Path:
    return make_tiny_model(tiny_models_dir / "same.gguf", seed=0, name="edgespec-tiny-same")


@pytest.fixture(scope="session")
def tiny_noisy(tiny_models_dir) -> Path:
    return make_tiny_model(
        tiny_models_dir / "noisy.gguf",
        seed=0,
        noise=NOISY_DRAFT_NOISE,
        noise_seed=1,
        name="edgespec-tiny-noisy",
    )


@pytest.fixture(scope="session")
def tiny_other_vocab(tiny_models_dir) -> Path:
    return make_tiny_model(tiny_models_dir / "other_vocab.gguf", vocab="other", seed=2, name="edgespec-tiny-other")


@pytest.fixture(scope="session")
def tiny_small_vocab(tiny_models_dir) -> Path:
    return make_tiny_model(tiny_models_dir / "small_vocab.gguf", vocab="small", seed=3, name="edgespec-tiny-small")


@pytest.fixture(scope="session")
def tiny_lfm2(tiny_models_dir) -> Path:
    return make_tiny_lfm2(tiny_models_dir / "lfm2.gguf", seed=0, name="edgespec-tiny-lfm2")


@pytest.fixture(scope="session")
def tiny_qwen35(tiny_models_dir) -> Path:
    return make_tiny_qwen35(tiny_models_dir / "qwen35.gguf", seed=0, name="edgespec-tiny-qwen35")


@pytest.fixture(scope="session")
def tiny_truncated(tiny_models_dir, tiny_target) -> Path:
    return write_truncated(tiny_target, tiny_models_dir / "truncated.gguf", 0.5)


@pytest.fixture(scope="session")
def tiny_not_gguf(tiny_models_dir) -> Path:
    return write_random_bytes(tiny_models_dir / "not_gguf.gguf", 4096, seed=0)


ISSUE_PROFILES = frozenset(
    {
        "m1",
        "m2",
        "m2max",
        "m3pro",
        "m3max",
        "m4pro",
        "m4max",
        "rtx3060-laptop",
        "rtx4070-laptop",
        "rtx4090",
        "cpu-laptop",
        "cpu-small",
        "raspberry-pi-5",
        "jetson-orin-nano",
    }
)


def open_engine(
    model,
    draft=None,
    *,
    k: int | None = None,
    memory: bool = True,
    n_ctx: int = 512,
    exact: bool = True,
    n_threads: int | None = 1,
    **options,
):
    """An ``edgespec.Engine`` on ``model`` with the tests' defaults: batch-invariant kernels
    (speculation equals plain greedy decoding token for token), one thread, a 512-token
    context. ``k``: draft exactly k tokens every round (None: the learned policy);
    ``memory``: the memory of earlier answers (off where runs of one prompt are compared);
    ``options``: the rest of ``Engine``'s keywords, and ``DraftingOptions``' fields."""
    from dataclasses import fields

    from edgespec import DraftingOptions, Engine

    names = {f.name for f in fields(DraftingOptions)}
    drafting = DraftingOptions(k=k, memory=memory, **{n: options.pop(n) for n in list(options) if n in names})
    return Engine(model, draft=draft, drafting=drafting, n_ctx=n_ctx, exact=exact, n_threads=n_threads, **options)


@pytest.fixture(scope="module")
def engines():
    """``engines(model, draft=None, **options)``: ``open_engine`` for this module's tests,
    every engine closed when they end."""
    opened = []

    def make(model, draft=None, **options):
        engine = open_engine(model, draft, **options)
        opened.append(engine)
        return engine

    yield make
    for engine in opened:
        engine.close()


@pytest.fixture(scope="module")
def reference(tiny_target, engines):
    """Plain greedy decoding on ``tiny_target`` (batch-invariant kernels): what speculation
    and the server's answers must equal."""
    return engines(tiny_target, None, n_ctx=1024)


@pytest.fixture()
def prompt_file(tmp_path) -> Path:
    """A JSONL file of short prompts for the tiny models (bench_support.TINY_PROMPTS)."""
    from bench_support import write_prompt_file

    return write_prompt_file(tmp_path / "prompts.jsonl")
