"""The verify-cost priors by backend and weight-type mix (costmodel.priors), and the mix a
GGUF file's tensor types give (catalog.gguf.weight_mix)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from edgespec.catalog.gguf import classify_mix, read_tensor_types, weight_mix
from edgespec.costmodel import costs, priors
from edgespec.costmodel.adaptive import VerifyCost
from edgespec.errors import ModelFileError, ProfileError

MEASURED = VerifyCost((1, 2), (1.0, 1.01))
PROFILE_Q4_0 = VerifyCost((1, 2), (1.0, 1.02))
PROFILE_ANY = VerifyCost((1, 2), (1.0, 1.03))


# -- the fallback order ------------------------------------------------------------------------


def test_a_measured_curve_for_the_file_comes_first():
    c = priors.choose_verify_prior("cpu", "Q4_0", {"Q4_0": PROFILE_Q4_0, "default": PROFILE_ANY}, measured=MEASURED)
    assert c.cost is MEASURED and c.origin == "measured"


def test_then_the_profiles_curve_for_the_mix():
    c = priors.choose_verify_prior("cpu", "Q4_0", {"Q4_0": PROFILE_Q4_0, "default": PROFILE_ANY})
    assert c.cost is PROFILE_Q4_0 and c.origin == "profile:Q4_0"


def test_then_the_backends_row_for_the_mix_before_the_profiles_curve_for_any_weights():
    c = priors.choose_verify_prior("cpu", "Q4_0", {"Q8_0": PROFILE_Q4_0, "default": PROFILE_ANY})
    assert c.cost is priors.CPU_Q4_0 and c.origin == "table:cpu/Q4_0"
    assert "measured" in c.source
    # a bare curve from a profile counts as its curve for any weights
    assert priors.verify_prior("cpu", "Q4_0", PROFILE_ANY) is priors.CPU_Q4_0


def test_then_the_profiles_curve_for_any_weights_then_the_backends_default():
    c = priors.choose_verify_prior("metal", "IQ2_XXS", {"default": PROFILE_ANY})
    assert c.cost is PROFILE_ANY and c.origin == "profile"
    assert priors.verify_prior("metal", "IQ2_XXS", PROFILE_ANY) is PROFILE_ANY
    c = priors.choose_verify_prior("metal", "IQ2_XXS")
    assert c.cost is priors.VERIFY_PRIORS["metal"]["default"].cost and c.origin == "table:metal/default"
    assert priors.verify_prior("cuda", None) is priors.VERIFY_PRIORS["cuda"]["default"].cost


def test_mix_names_are_matched_without_regard_to_case():
    assert priors.verify_prior("cpu", "q4_0") is priors.CPU_Q4_0
    assert priors.verify_prior("cpu", "Q4_0", {"q4_0": PROFILE_Q4_0}) is PROFILE_Q4_0


def test_an_unknown_backend_is_a_profile_error_that_lists_the_known_ones():
    with pytest.raises(ProfileError, match=r"'vulkan'.*cpu, cpu-exact, metal, cuda"):
        priors.verify_prior("vulkan", "Q4_0")


# -- the table's data --------------------------------------------------------------------------


def test_the_names_planning_and_decoding_import_are_the_tables_cpu_rows():
    assert costs.CPU_VERIFY_PRIOR is priors.VERIFY_PRIORS["cpu"]["Q4_K_M"].cost
    assert costs.CPU_VERIFY_PRIOR is priors.VERIFY_PRIORS["cpu"]["default"].cost
    assert costs.CPU_EXACT_VERIFY_PRIOR is priors.VERIFY_PRIORS["cpu-exact"]["default"].cost


def test_repacked_q4_0_keeps_its_steps_on_the_cpu():
    """Rows one by one below 4, tiles from 4 and from 8: verifying 4 costs less than 3, and
    8 less than 7 (issue 37's measurements)."""
    q = priors.CPU_Q4_0
    assert q(4) < q(3) and q(8) < q(7)
    assert q(4) < priors.CPU_Q4_K_M(4) - 0.5  # 4 tokens for ~1.8 steps, against ~2.6 on Q4_K_M
    for n, want in ((2, 1.71), (4, 1.79), (8, 3.18), (16, 4.17)):
        assert q(n) == pytest.approx(want, abs=0.02)


def test_the_metal_rows_say_quantized_verifies_are_not_nearly_free():
    """The published tables: on Apple GPUs c(2) is 1.6-1.9 for quantized weights (the old
    memory-bound estimate had c(8) = 1.22), flat to 8 for F16."""
    for mix in ("Q4_K_M", "Q4_0", "Q8_0"):
        assert priors.verify_prior("metal", mix)(2) >= 1.6
    f16 = priors.verify_prior("metal", "F16")
    assert f16(8) - f16(2) < 0.1


def test_every_row_has_a_source_and_every_published_row_a_url_and_its_arithmetic():
    for backend, rows in priors.VERIFY_PRIORS.items():
        assert "default" in rows, backend
        for mix, row in rows.items():
            assert row.status in ("measured", "published", "estimated") and row.source, (backend, mix)
            if row.status == "published":
                assert "https://github.com/ggml-org/llama.cpp/" in row.source, (backend, mix)
                assert re.search(r"c\S* = ", row.source), (backend, mix)
            assert row.cost(1) == 1.0 and all(row.cost(n) >= 1.0 for n in range(1, 17))


# -- the mix of a file -------------------------------------------------------------------------


def _layers(*parts: tuple[str, int]) -> list[tuple[str, str, int, int]]:
    return [(f"blk.{i}.w", kind, n, 2) for i, (kind, n) in enumerate(parts)]


@pytest.mark.parametrize(
    "tensors, want",
    [
        (_layers(("Q4_0", 100)), "Q4_0"),
        (_layers(("Q4_0", 95), ("Q8_0", 5)), "Q4_0"),
        (_layers(("Q4_K", 80), ("Q6_K", 20)), "Q4_K_M"),
        (_layers(("Q4_K", 97), ("Q5_K", 3)), "Q4_K_S"),
        (_layers(("Q8_0", 60), ("Q4_0", 40)), "Q8_0+Q4_0"),
        (_layers(("IQ4_NL", 100)), "IQ4_NL"),
        # the embedding, the output head and 1-D tensors (norms, biases) do not count
        (
            _layers(("Q4_0", 10))
            + [
                ("token_embd.weight", "Q6_K", 1000, 2),
                ("output.weight", "Q8_0", 1000, 2),
                ("blk.0.attn_norm.weight", "F32", 1000, 1),
            ],
            "Q4_0",
        ),
        ([("token_embd.weight", "F16", 10, 2)], ""),
    ],
)
def test_classify_mix(tensors, want):
    assert classify_mix(tensors) == want


def _write(path, kind: str, arrays: dict[str, np.ndarray]):
    gguf = pytest.importorskip("gguf")
    w = gguf.GGUFWriter(str(path), "llama")
    qtype = getattr(gguf.GGMLQuantizationType, kind)
    for name, a in arrays.items():
        if kind == "F32" or a.ndim < 2:
            w.add_tensor(name, a.astype(np.float32))
        else:
            w.add_tensor(name, gguf.quants.quantize(a, qtype), raw_dtype=qtype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_weight_mix_reads_the_tensor_types_from_the_header(tmp_path):
    rng = np.random.default_rng(0)
    arrays = {f"blk.{i}.ffn_up.weight": rng.standard_normal((64, 256)).astype(np.float32) for i in range(2)}
    arrays["blk.0.attn_norm.weight"] = np.ones(256, dtype=np.float32)
    path = _write(tmp_path / "m.gguf", "Q8_0", arrays)
    types = read_tensor_types(path)
    assert ("blk.0.ffn_up.weight", "Q8_0", 64 * 256, 2) in types
    assert ("blk.0.attn_norm.weight", "F32", 256, 1) in types
    assert weight_mix(path) == "Q8_0"
    # the cache is keyed by the file's version: a rewritten file is read again
    path.unlink()
    _write(path, "F32", {**arrays, "blk.2.ffn_up.weight": arrays["blk.0.ffn_up.weight"]})
    assert weight_mix(path) == "F32"


def test_weight_mix_of_the_tiny_models_and_of_broken_files(tiny_target, tiny_truncated, tiny_not_gguf, tmp_path):
    assert weight_mix(tiny_target) == "F32"
    with pytest.raises(ModelFileError):
        weight_mix(tiny_truncated)
    with pytest.raises(ModelFileError, match="not a GGUF"):
        weight_mix(tiny_not_gguf)
    with pytest.raises(ModelFileError, match="cannot read"):
        weight_mix(tmp_path / "missing.gguf")


def test_the_embedded_target_is_a_q4_k_m_mix():
    from edgespec.catalog import DEFAULT_TARGET, is_available, resolve_model

    if not is_available(DEFAULT_TARGET):
        pytest.skip("the embedded 1.5B is not installed")
    assert weight_mix(resolve_model(DEFAULT_TARGET)) == "Q4_K_M"
