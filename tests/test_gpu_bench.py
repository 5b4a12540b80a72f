"""The GPU benchmark (benchmarks/gpu/) run end to end on the CPU with the tiny synthetic shape.

Device time is scarce (one short run on a lent H200), so everything that run executes is
exercised here first: the synthetic GGUF writer, every phase of measure.py and the JSON it
writes, and to_profile.py's profile, loaded back with edgespec's own profile loader.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

GPU_DIR = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"gpu_bench_{name}", GPU_DIR / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


synth = _load("synth_gguf")
measure = _load("measure")
to_profile = _load("to_profile")

NAMES = ("qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("gpu-bench") / "tiny.gguf"
    synth.make_model(path, "tiny")
    return path


def _argv(model: Path, out: Path, budget: float = 600) -> list[str]:
    argv = []
    for n in NAMES:  # the tiny model in every role, as run.sh's SMOKE mode does
        argv += ["--model", f"{n}={model}"]
    return argv + [
        "--pair",
        "qwen2.5-0.5b:qwen2.5-1.5b",
        "--pair",
        "qwen2.5-0.5b:qwen2.5-7b",
        "--pair",
        "qwen2.5-1.5b:qwen2.5-7b",
        "--spec-model",
        "qwen2.5-1.5b",
        "--out",
        str(out),
        "--budget-s",
        str(budget),
        "--n-gpu-layers",
        "0",
        "--threads",
        "1",
        "--n-ctx",
        "512",
        "--repeats",
        "2",
        "--long-position",
        "300",
        "--ks",
        "1,2",
        "--prompts",
        "1",
        "--prompt-len",
        "24",
        "--max-tokens",
        "16",
        "--spec-repeats",
        "1",
    ]


@pytest.fixture(scope="module")
def results(tiny, tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("gpu-results") / "gpu_results.json"
    assert measure.main(_argv(tiny, out)) == 0
    return json.loads(out.read_text())


# -- the synthetic models ---------------------------------------------------------------


@pytest.mark.parametrize("qtype", ["Q4_K", "Q6_K", "Q5_0", "Q8_0"])
def test_random_blocks_dequantize_to_the_asked_spread(qtype):
    import gguf
    from gguf import quants

    data = synth.quantized(np.random.default_rng(0), 64, 512, qtype, 0.03, zero_rows=(5,))
    w = quants.dequantize(data, gguf.GGMLQuantizationType[qtype])
    assert w.shape == (64, 512)
    assert np.isfinite(w).all()
    assert abs(w.std() - 0.03) < 0.003
    assert abs(w.mean()) < 0.003
    assert not w[5].any() and w[4].any()


def test_quant_mix_follows_llama_cpp_q4_k_m():
    s05, s7, tiny = synth.SHAPES["qwen2.5-0.5b"], synth.SHAPES["qwen2.5-7b"], synth.SHAPES["tiny"]
    # 896-wide rows are not a multiple of 256: llama.cpp falls back to Q5_0 / Q8_0, as in the
    # real Qwen2.5-Coder-0.5B Q4_K_M file (token_embd Q5_0, output Q8_0, attn_v Q8_0 / Q5_0)
    assert synth.tensor_type("blk.0.attn_q.weight", 896, 0, s05) == "Q5_0"
    assert synth.tensor_type("token_embd.weight", 896, None, s05) == "Q5_0"
    assert synth.tensor_type("output.weight", 896, None, s05) == "Q8_0"
    assert synth.tensor_type("blk.0.attn_v.weight", 896, 0, s05) == "Q8_0"
    assert synth.tensor_type("token_embd.weight", 256, None, tiny) == "Q6_K"  # tied: it is the output
    assert synth.tensor_type("blk.0.ffn_down.weight", 4864, 0, s05) == "Q6_K"  # first layers get more bits
    assert synth.tensor_type("blk.4.ffn_down.weight", 4864, 4, s05) == "Q4_K"
    assert synth.tensor_type("token_embd.weight", 3584, None, s7) == "Q4_K"  # untied: the output gets Q6_K
    assert synth.tensor_type("output.weight", 3584, None, s7) == "Q6_K"


def test_tiny_model_loads_with_its_vocabulary(tiny):
    from edgespec.llama import Model

    m = Model(tiny)
    try:
        assert m.n_vocab == synth.SHAPES["tiny"].n_vocab
        assert m.architecture == "qwen2"
        assert m.is_eog(m.n_vocab - 1)  # <|im_end|>
    finally:
        m.close()


# -- measure.py -------------------------------------------------------------------------


def test_every_phase_ran(results):
    assert {p: v["status"] for p, v in results["phases"].items()} == {
        p: "done"
        for p in ("device", "steps", "batch_invariance", "exactness", "speculation", "speculation_exact", "steps_exact")
    }
    assert results["complete"] is True and results["finished"]
    assert results["device"]["name"] and "system_info" in results["device"]


@pytest.mark.parametrize("phase", ["steps", "steps_exact"])
def test_steps_give_c_of_n_and_gamma(results, phase):
    st = results[phase]
    assert set(st["models"]) == set(NAMES)
    for m in st["models"].values():
        assert m["step_ms"] > 0
        assert m["verify_cost_measured"]["1"] == 1.0 and m["verify_cost"]["1"] == 1.0
        c = [m["verify_cost"][str(n)] for n in range(1, 17)]
        assert all(x >= 1.0 for x in c)  # measured as it is: tile dips are kept
        assert all(m["verify_ms"][str(n)] > 0 for n in range(1, 17))
    assert [(g["draft"], g["target"]) for g in st["gamma"]] == [
        ("qwen2.5-0.5b", "qwen2.5-1.5b"),
        ("qwen2.5-0.5b", "qwen2.5-7b"),
        ("qwen2.5-1.5b", "qwen2.5-7b"),
    ]
    assert all(g["gamma"] > 0 for g in st["gamma"])


def test_batch_invariance_is_reported_and_holds_for_the_exact_cpu_kernels(results):
    kern = results["batch_invariance"]["kernels"]
    assert set(kern) == {"exact=False", "exact=True"}
    for v in kern.values():
        assert isinstance(v["all_bit_identical"], bool)
        for pos in v["positions"]:
            assert [b["n"] for b in pos["batches"]] == list(range(1, 17))
            assert pos["single_rerun_identical"] is True  # the CPU is deterministic
    # edgespec's claim for its exact kernels on the CPU
    assert kern["exact=True"]["all_bit_identical"] is True
    assert kern["exact=True"]["max_abs_diff"] == 0.0


def test_exactness_reports_identity_and_first_difference(results):
    kern = results["exactness"]["kernels"]
    assert set(kern) == {"exact=False", "exact=True"}
    for v in kern.values():
        assert isinstance(v["all_identical"], bool)
        for case in v["cases"]:
            assert case["identical"] == (case["first_difference"] is None)
            assert case["tokens"] == 16
    assert kern["exact=True"]["exact_kernels"] is True
    assert kern["exact=True"]["all_identical"] is True


@pytest.mark.parametrize("phase", ["speculation", "speculation_exact"])
def test_speculation_has_predicted_and_measured_speedups(results, phase):
    sp = results[phase]
    assert sp["plain_tokens_per_second"] > 0
    assert sp["timing"]["gamma"] > 0
    assert [p["k"] for p in sp["points"]] == [1, 2]
    for p in sp["points"]:
        assert p["measured_speedup"] > 0 and p["predicted_speedup"] > 0
        assert 0 < p["alpha"] <= 1.0
        assert p["tokens_per_round"] >= 1.0
    if phase == "speculation_exact":
        # a self-draft on batch-invariant kernels agrees with its target every time
        assert all(p["alpha"] == 1.0 for p in sp["points"])


def test_summary_names_every_phase(results):
    text = measure.summary(results)
    assert "c(2)" in text and "γ qwen2.5-0.5b -> qwen2.5-7b" in text and "predicted" in text


def test_no_budget_skips_phases_but_still_writes_the_json(tiny, tmp_path):
    out = tmp_path / "r.json"
    assert measure.main(_argv(tiny, out, budget=0)) == 0
    data = json.loads(out.read_text())
    assert data["complete"] is False
    assert data["phases"]["steps"]["status"] == "skipped" and "budget" in data["phases"]["steps"]["reason"]


def test_a_failing_phase_is_recorded_and_the_rest_run(tmp_path):
    rec = measure.Recorder(tmp_path / "r.json", budget_s=60)

    def boom():
        raise RuntimeError("no GPU here")

    assert rec.phase("broken", 0, boom) is None
    assert rec.phase("fine", 0, lambda: {"x": 1}) == {"x": 1}
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["phases"]["broken"]["status"] == "error" and "no GPU here" in data["phases"]["broken"]["error"]
    assert data["fine"] == {"x": 1}


# -- to_profile.py ----------------------------------------------------------------------


def test_profile_from_results_loads_with_measured_figures(results, tmp_path):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    out = tmp_path / "cpu-bench.toml"
    assert to_profile.main([str(path), "--name", "cpu-bench", "--out", str(out)]) == 0
    prof = to_profile.check(out.read_text(), "cpu-bench")
    assert prof.backend == "cpu" and prof.n_gpu_layers == 0
    assert prof.verify.status == "measured"
    assert prof.verify.cost.n[0] == 2 and len(prof.verify.cost.n) == 15
    assert prof.exact_slowdown.status == "measured"
    pc = prof.pair_cost("qwen2.5-7b+0.5b")
    assert pc.gamma.status == "measured" and pc.target_step_ms.status == "measured"
    assert prof.pair_cost("qwen2.5-coder-1.5b+0.5b").alpha.status == "estimated"
    assert prof.alpha_model.status == "estimated" and "taken over" in prof.alpha_model.source


def test_gpu_results_become_a_cuda_profile(results):
    res = json.loads(json.dumps(results))
    res["device"].update(
        gpu_offload=True,
        name="NVIDIA H200",
        gpus=[{"name": "NVIDIA H200", "memory_mib": "143771", "driver": "580.159.03"}],
    )
    # three sizes that fit step = overhead + bytes / rate: 1 ms + bytes at 3000 GB/s
    for m, size in zip(res["steps"]["models"].values(), (0.49e9, 1.12e9, 4.68e9)):
        m["model_size_bytes"] = size
        m["step_ms"] = 1.0 + size / 3000e9 * 1e3
    data = to_profile.build(res, name="h200")
    prof = to_profile.check(to_profile.to_toml(data), "h200")
    assert prof.backend == "cuda" and prof.n_gpu_layers == -1 and prof.match.gpus == ("H200",)
    assert abs(prof.overhead_ms.value - 1.0) < 1e-3 and abs(prof.decode_gbs.value - 3000) < 1
    assert prof.models_gb.status == "measured" and 140 < prof.models_gb.value < 151
    assert prof.bandwidth_gbs.value == 4800 and prof.bandwidth_gbs.status == "estimated"


def test_figures_outside_the_schema_are_left_out_and_said(results):
    res = json.loads(json.dumps(results))
    for g in res["steps"]["gamma"]:
        if g["target"] == "qwen2.5-7b" and g["draft"] == "qwen2.5-0.5b":
            g["gamma"] = 60.0  # what a noisy run on a loaded CPU once gave
    data = to_profile.build(res, name="noisy")
    text = to_profile.to_toml(data)
    prof = to_profile.check(text, "noisy")
    assert prof.pair_cost("qwen2.5-7b+0.5b").gamma is None
    assert prof.pair_cost("qwen2.5-1.5b+0.5b").gamma is not None
    assert "# Not written: qwen2.5-7b+0.5b gamma 60.0" in text
