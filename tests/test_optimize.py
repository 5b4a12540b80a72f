"""``edgespec models optimize``: llama.cpp's quantize API (in a child process), the perplexity
on the held-out text, the copy's place and name, finding it again (``optimized_copy_for``,
``models list``), and every way it can fail (a missing or corrupt file, a full disk, no
folder to write in, an existing copy, Ctrl-C) leaving no half-written file behind.

On tiny F32 models (64 and 128 wide: rows split into Q4_0's and Q8_0's 32-weight blocks).
No assertion depends on how fast anything ran. The real 1.5B is one integration test."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from edgespec import catalog, llama
from edgespec.catalog import optimized, verify_cache
from edgespec.costmodel import adaptive
from edgespec.detect import GPU, Machine
from edgespec.errors import InputError, ModelFileError, OutputError
from edgespec.llama import Context, Model
from edgespec.measuring import optimize, perplexity

CPU = Machine(
    system="Linux",
    arch="x86_64",
    cpu="Test CPU",
    physical_cores=2,
    logical_cores=2,
    total_bytes=8 << 30,
    available_bytes=4 << 30,
    gpu_offload=False,
)
GPU_BOX = Machine(
    system="Linux",
    arch="x86_64",
    cpu="Test CPU",
    physical_cores=8,
    logical_cores=16,
    total_bytes=32 << 30,
    available_bytes=16 << 30,
    gpus=(GPU("RTX", 8 << 30),),
    gpu_offload=True,
)
TEXT = "the quick brown fox jumps over the lazy dog. def main():\n    return 0\n" * 6
FAST = {"n_max": 4, "repeats": 1, "text": TEXT, "machine": CPU, "threads": 1}


@pytest.fixture
def place(tmp_path, monkeypatch, tiny_target):
    """A model folder of its own (EDGESPEC_MODEL_PATH) holding a copy of the tiny target;
    edgespec's cache, config and HOME in tmp_path."""
    models = tmp_path / "models"
    models.mkdir()
    shutil.copy(tiny_target, models / "tiny.gguf")
    for var in ("OLLAMA_MODELS", "HF_HOME", "HF_HUB_CACHE", "LLAMA_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("EDGESPEC_MODEL_PATH", str(models))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(optimize, "_load_average", lambda: 0.0)  # a quiet machine (see the busy test)
    catalog.forget()
    yield models / "tiny.gguf"
    catalog.forget()


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") or ".edgespec-" in p.name)


# -- llama.cpp's quantize API --------------------------------------------------------------------


def test_quantize_model_writes_a_q4_0_file_llama_cpp_loads(tiny_target, tmp_path):
    out = tmp_path / "q4.gguf"
    llama.quantize_model(tiny_target, out, "Q4_0", threads=1, allow_requantize=False)
    assert catalog.read_header(out).quant == "Q4_0"
    assert out.stat().st_size < tiny_target.stat().st_size / 3  # 4.5 bits a weight against 32
    m = Model(out, exact=False)
    try:
        ctx = Context(m, n_ctx=64, n_threads=1)
        assert ctx.decode(m.tokenize("hello world"), rows=[0]).shape == (1, m.n_vocab)
        ctx.close()
        assert m.file_type == "Q4_0"  # the door reads the type the header names
    finally:
        m.close()


def test_an_engine_built_by_hand_starts_from_its_weight_types_curve(tiny_target, tmp_path):
    # Engine(target) with no verify_cost: the CPU table's row for the file's type, so a
    # Q4_0 file is not planned on Q4_K_M's curve (c(4) 1.79 against 2.69), nor an F32 one
    # off the table (its default row)
    from edgespec import Engine
    from edgespec.costmodel import priors

    q4 = tmp_path / "q4.gguf"
    llama.quantize_model(tiny_target, q4, "Q4_0", threads=1, allow_requantize=False)
    for path, row in ((q4, priors.CPU_Q4_0), (tiny_target, priors.VERIFY_PRIORS["cpu"]["default"].cost)):
        with Engine(path, draft="ngram", n_ctx=256, n_threads=1) as eng:
            assert [round(eng.verify_cost(n), 2) for n in (2, 3, 4, 8)] == [round(row(n), 2) for n in (2, 3, 4, 8)]
    with Engine(q4, n_ctx=256, n_threads=1, exact=True) as eng:  # the batch-invariant kernels: their own row
        assert round(eng.verify_cost(4), 2) == round(priors.CPU_EXACT(4), 2)


def test_run_quantize_reports_llama_cpps_reason(tiny_target, tiny_truncated, tmp_path):
    q4 = tmp_path / "q4.gguf"
    llama.run_quantize(tiny_target, q4, "Q4_0", threads=1, allow_requantize=False)
    assert catalog.read_header(q4).quant == "Q4_0"
    with pytest.raises(ModelFileError, match="requantiz"):  # a quantized source needs allow_requantize
        llama.run_quantize(q4, tmp_path / "q8.gguf", "Q8_0", threads=1, allow_requantize=False)
    llama.run_quantize(q4, tmp_path / "q8.gguf", "Q8_0", threads=1, allow_requantize=True)
    assert catalog.read_header(tmp_path / "q8.gguf").quant == "Q8_0"
    with pytest.raises(ModelFileError, match="truncated.gguf as Q4_0"):
        llama.run_quantize(tiny_truncated, tmp_path / "x.gguf", "Q4_0", threads=1)
    with pytest.raises(ValueError, match="unknown weight type"):
        llama.run_quantize(tiny_target, tmp_path / "y.gguf", "Q3_X")
    assert llama.quantized_size(1_000_000, "Q4_0") > 1_000_000 * 4.5 / 8


def test_run_quantize_kills_its_child_when_interrupted(tiny_target, tmp_path):
    psutil = pytest.importorskip("psutil")
    before = {c.pid for c in psutil.Process().children()}

    def interrupt():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        llama.run_quantize(tiny_target, tmp_path / "q4.gguf", "Q4_0", threads=1, poll=interrupt)
    alive = [
        c
        for c in psutil.Process().children()
        if c.pid not in before and c.is_running() and c.status() != psutil.STATUS_ZOMBIE
    ]
    assert alive == []


# -- perplexity ----------------------------------------------------------------------------------


def test_perplexity_is_exp_of_the_mean_next_token_nll(tiny_target):
    m = Model(tiny_target, exact=False)
    try:
        ctx = Context(m, n_ctx=64, n_batch=32, n_threads=1)
        tokens = m.tokenize(TEXT, add_special=False)[:45]
        got = perplexity.perplexity(ctx, tokens, chunk=20, batch=7, bos=m.bos)
        assert ctx.n_past == 0  # left empty
        # by hand: each chunk of 20 after BOS, all its logits in one decode, every token scored
        nll = []
        for s in range(0, len(tokens), 20):
            seq = [m.bos] + tokens[s : s + 20]
            ctx.clear()
            logits = np.array(ctx.decode(seq, rows=range(len(seq) - 1)), dtype=np.float64)
            logp = (
                logits
                - np.log(np.exp(logits - logits.max(1, keepdims=True)).sum(1, keepdims=True))
                - logits.max(1, keepdims=True)
            )
            nll += [-logp[i, t] for i, t in enumerate(seq[1:])]
        assert got.tokens == len(tokens) == len(nll)
        assert got.value == pytest.approx(float(np.exp(np.mean(nll))), rel=1e-3)
        assert got.value > 1.0
        with pytest.raises(InputError, match="too short"):
            perplexity.perplexity(ctx, tokens[:1], chunk=20, batch=7, bos=None)
        ctx.close()
    finally:
        m.close()


def test_the_held_out_text_ships_with_the_package():
    text = perplexity.heldout_text()
    assert len(text.split()) > 1500 and "def " in text  # prose and code, ~2,600 tokens on Qwen's vocabulary


# -- the copy: where, what, found again ----------------------------------------------------------


def test_choose_type_takes_the_4_bit_type_that_verifies_cheapest_by_the_priors():
    t, why = optimize.choose_type("Q4_K_M", CPU)
    assert t == "Q4_0" and "Q4_K_M" in why and "\n" not in why
    cheap, dear = adaptive.VerifyCost((2, 8), (1.5, 3.0)), adaptive.VerifyCost((2, 8), (1.7, 4.6))
    t, why = optimize.choose_type("q4_k_m", CPU, {"Q4_K_M": dear, "Q4_0": dear, "IQ4_NL": cheap})
    assert t == "IQ4_NL" and "2.25 steps on average against 3.15 for Q4_K_M" in why
    with pytest.raises(InputError, match="no weight type verifies cheaper than Q4_K_M on cuda"):
        optimize.choose_type("Q4_K_M", GPU_BOX, {"Q4_K_M": cheap, "Q4_0": dear})
    assert optimize.choose_type("F16", CPU, {"Q4_0": cheap})[0] == "Q4_0"  # no row for the original's type
    assert optimize.backend_of(GPU_BOX) == "cuda" and optimize.backend_of(CPU) == "cpu"


def test_optimize_writes_measures_and_records_the_copy(place):
    r = optimize.optimize(place, **FAST)
    copy = place.with_name("tiny.edgespec-Q4_0.gguf")
    assert r.path == copy and copy.is_file() and r.type == "Q4_0" and r.before.quant == "F32"
    assert catalog.read_header(copy).quant == "Q4_0"
    d = r.to_dict()
    assert {"path", "type", "perplexity_before", "perplexity_after", "c_before", "c_after"} <= set(d)
    assert d["perplexity_before"] > 1 and d["perplexity_after"] > 1 and list(d["c_after"]) == ["1", "2", "3", "4"]
    assert abs(d["perplexity_change_percent"]) < 25  # Q4_0 of random weights: close, not equal
    assert d["load_average"] is None or d["load_average"] >= 0
    busy = optimize.Optimized(**{**r.__dict__, "load_average": 3.5})
    assert any("busy while timing (load average 3.5 for 1 threads)" in n for n in busy.notes)
    assert not any("busy" in n for n in optimize.Optimized(**{**r.__dict__, "load_average": 0.5}).notes)
    json.dumps(d)
    assert leftovers(place.parent) == ["tiny.edgespec-Q4_0.gguf"]  # no temporary file left
    # the planner's two readers
    assert optimized.optimized_copy_for(place) == copy and optimized.optimized_copy_for(copy) is None
    for path, a in ((place, r.before), (copy, r.after)):
        curve = verify_cache.measured_curve(path, machine=CPU)
        # the cache keeps 4 decimals: compare within that, not after a second rounding
        assert curve is not None and all(abs(curve(n) - a.verify[n]) < 1e-3 for n in (2, 3, 4))
    assert verify_cache.measured_curve(place, machine=GPU_BOX) is None  # another machine's is not ours
    assert verify_cache.measured_curve(place, machine=CPU, exact=True) is None  # nor the exact kernels'
    # a source replaced in place has no copy until it is optimized again
    st = place.stat()
    os.utime(place, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    assert optimized.optimized_copy_for(place) is None and verify_cache.measured_curve(place, machine=CPU) is None


def test_curves_timed_on_a_busy_machine_are_not_kept(place, monkeypatch):
    monkeypatch.setattr(optimize, "_load_average", lambda: 9.0)
    r = optimize.optimize(place, **FAST)
    assert r.busy and "load average 9.0 for 1 threads" in r.notes[0] and r.to_dict()["load_average"] == 9.0
    assert verify_cache.measured_curve(place, machine=CPU) is None
    assert verify_cache.measured_curve(r.path, machine=CPU) is None
    assert optimized.optimized_copy_for(place) == r.path  # the copy itself is whole and found


def test_an_existing_copy_needs_force(place):
    optimize.optimize(place, **FAST)
    copy = place.with_name("tiny.edgespec-Q4_0.gguf")
    first = copy.stat().st_mtime_ns
    with pytest.raises(InputError, match="already exists.*--force"):
        optimize.optimize(place, **FAST)
    assert copy.stat().st_mtime_ns == first
    time.sleep(0.01)
    optimize.optimize(place, force=True, **FAST)
    assert copy.stat().st_mtime_ns > first and leftovers(place.parent) == ["tiny.edgespec-Q4_0.gguf"]
    with pytest.raises(InputError, match="already Q4_0"):
        optimize.optimize(copy, **FAST)


def test_an_unrecorded_copy_counts_only_beside_a_newer_original(place, tmp_path):
    copy = place.with_name("tiny.edgespec-Q8_0.gguf")
    shutil.copy(place, copy)
    assert optimized.optimized_copy_for(place) == copy and optimized.optimized_copy_for(place, "Q4_0") is None
    st = copy.stat()
    os.utime(copy, ns=(st.st_atime_ns, place.stat().st_mtime_ns - 10**9))
    assert optimized.optimized_copy_for(place) is None


def test_models_list_shows_the_copy_beside_its_original(place):
    from edgespec.catalog import listing

    optimize.optimize(place, **FAST)
    catalog.forget()
    rows = {r["name"]: r for r in listing.local_rows(catalog.scan())}
    assert rows["tiny.edgespec-Q4_0"]["optimized_from"] == "tiny" and rows["tiny.edgespec-Q4_0"]["quant"] == "Q4_0"
    assert rows["tiny"]["optimized_copy"] == str(place.with_name("tiny.edgespec-Q4_0.gguf"))
    assert rows["tiny"]["optimized_from"] is None


def test_a_copy_goes_to_edgespecs_folder_when_the_originals_cannot_be_written(place, tmp_path, monkeypatch):
    real = optimize.tempfile.mkstemp

    def mkstemp(*a, dir=None, **kw):  # the tests run as root: chmod is no bar
        if Path(dir) == place.parent:
            raise PermissionError(13, "Permission denied")
        return real(*a, dir=dir, **kw)

    monkeypatch.setattr(optimize.tempfile, "mkstemp", mkstemp)
    r = optimize.optimize(place, **FAST)
    assert r.path == tmp_path / "cache" / "tiny.edgespec-Q4_0.gguf" and r.path.is_file()
    assert optimized.optimized_copy_for(place) == r.path
    catalog.forget()
    assert any(m.name == "edgespec:tiny.edgespec-Q4_0" for m in catalog.scan().models)
    # neither folder: one clear error, nothing written
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("EDGESPEC_CACHE", str(tmp_path / "file" / "cache"))
    with pytest.raises(OutputError, match="cannot write a copy of tiny: neither .* EDGESPEC_CACHE"):
        optimize.optimize(place, force=True, **FAST)
    assert leftovers(place.parent) == []


def test_not_enough_disk_is_refused_before_anything_is_written(place, monkeypatch):
    monkeypatch.setattr(optimize, "_free_bytes", lambda folder: 1000)
    with pytest.raises(OutputError, match=r"not enough disk space for the Q4_0 copy of tiny: about 0\.\d\d GB"):
        optimize.optimize(place, **FAST)
    cache = place.parent.parent / "cache"
    assert leftovers(place.parent) == [] and (not cache.exists() or leftovers(cache) == [])


def test_bad_files_are_one_clear_error(place, tiny_truncated, tiny_not_gguf, tmp_path):
    with pytest.raises(ModelFileError, match="model file not found"):
        optimize.optimize(tmp_path / "nope.gguf", **FAST)
    with pytest.raises(ModelFileError, match="not a GGUF model file"):
        optimize.optimize(tiny_not_gguf, **FAST)
    bad = place.with_name("cut.gguf")
    shutil.copy(tiny_truncated, bad)
    with pytest.raises(ModelFileError):
        optimize.optimize(bad, **FAST)
    assert leftovers(place.parent) == []


def test_an_interrupted_or_failed_quantize_leaves_no_file(place, monkeypatch):
    def half_then(exc):
        def fake(src, dst, type_name, **kw):
            Path(dst).write_bytes(b"GGUF" + b"\0" * 1000)  # half a file, then the interruption
            raise exc

        return fake

    for exc in (KeyboardInterrupt(), OutputError("the disk filled up")):
        monkeypatch.setattr(llama, "run_quantize", half_then(exc))
        with pytest.raises(type(exc)):
            optimize.optimize(place, **FAST)
        assert leftovers(place.parent) == []
    assert optimized.optimized_copy_for(place) is None


# -- the command ----------------------------------------------------------------------------------


@pytest.fixture
def cli():
    from edgespec.cli.profiles import models_app

    app = typer.Typer()
    app.add_typer(models_app, name="models")
    runner = CliRunner()
    return lambda *args: runner.invoke(app, list(map(str, args)))


def test_cli_models_optimize_json_and_table(place, cli):
    r = cli("models", "optimize", "tiny", "--json", "--threads", 1)
    assert r.exit_code == 0, r.output
    d = json.loads(r.stdout)
    assert d["type"] == "Q4_0" and d["path"].endswith("tiny.edgespec-Q4_0.gguf") and d["name"] == "tiny"
    assert d["perplexity_before"] > 1 and d["heldout_tokens"] > 2000 and "16" in d["c_before"]
    r = cli("models", "optimize", "tiny")
    assert r.exit_code == 2 and "already exists" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    r = cli("models", "optimize", str(place), "--force", "--type", "q8_0", "--threads", 1)
    assert r.exit_code == 0, r.output
    assert "perplexity" in r.stdout and "c(4)=" in r.stdout and "Q8_0" in r.stdout
    r = cli("models", "list")
    assert "optimized copy of tiny" in r.stdout


@pytest.mark.parametrize(
    "args, code, words",
    [
        (["/no/such.gguf"], 3, "model file not found"),
        (["tiny", "--type", "Q9_9"], 2, "unknown weight type"),
    ],
)
def test_cli_models_optimize_errors_are_one_line(place, cli, args, code, words):
    r = cli("models", "optimize", *args)
    assert r.exit_code == code and words in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_ctrl_c_in_the_middle_leaves_no_copy(place):
    """The real command in its own process, interrupted once the copy's temporary file exists
    (llama.cpp writing it in the child, or the copy being measured): exit 130, nothing left.
    A wider tiny model keeps that window open long enough to hit it."""
    from tiny_models import make_tiny_model

    make_tiny_model(place, seed=0, n_embd=256, n_ff=1024, n_layer=4, n_head=4, n_head_kv=2)
    env = {**os.environ, "OMP_WAIT_POLICY": "PASSIVE"}
    p = subprocess.Popen(
        [sys.executable, "-m", "edgespec", "models", "optimize", str(place), "--threads", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    deadline = time.time() + 120
    while not any(n.endswith(".partial") for n in os.listdir(place.parent)):
        assert p.poll() is None and time.time() < deadline, "the command ended before its copy was begun"
        time.sleep(0.002)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    assert p.returncode == 130, err
    assert "interrupted" in err and leftovers(place.parent) == []
    cache = Path(os.environ["EDGESPEC_CACHE"])
    assert not cache.exists() or leftovers(cache) == []


# -- the real model ---------------------------------------------------------------------------------


@pytest.mark.integration
def test_real_1_5b_q4_k_m_becomes_a_q4_0_copy(tmp_path, monkeypatch):
    try:
        real = catalog.resolve_model(catalog.DEFAULT_TARGET)
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"{catalog.DEFAULT_TARGET} not available: {e}")
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    src = tmp_path / "models" / real.name
    src.parent.mkdir()
    src.symlink_to(real)  # the copy goes next to the link, not into the real cache
    r = optimize.optimize(src, text=perplexity.heldout_text()[:1500], n_max=4, repeats=1, machine=CPU)
    assert r.before.quant == "Q4_K_M" and r.type == "Q4_0" and r.path.parent == src.parent
    assert abs(r.perplexity_change) < 0.05 and r.after.size_bytes < r.before.size_bytes
