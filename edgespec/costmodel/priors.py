"""c(n) before the first round: the verify-cost priors, keyed by backend and weight-type mix.

What a verify of n tokens costs against one plain step depends on the kernels llama.cpp
runs for the target's weights, not only on the device. On this project's 2-core AVX2 VM
a Q4_K_M file (Q4_K with Q6_K) verifies 4 tokens for 2.6 steps; the same model in Q4_0,
whose repacked GEMM runs rows one by one below 4 and in tiles from 4 and from 8, does it
for 1.8 (a step function: ``CPU_Q4_0`` keeps the steps, c(3) costs more than c(4)).

``VERIFY_PRIORS[backend][mix]`` holds one ``PriorRow`` per measured or published curve,
with its status and source; ``"default"`` is a backend's curve for a mix it has no row
for. A mix is what ``edgespec.catalog.gguf.weight_mix`` reads from a file's tensor types
("Q4_K_M", "Q4_0", "IQ4_NL", "Q8_0", "F16", ...); llama.cpp's file-type names (a header's
``general.file_type``) name the same classes.

``choose_verify_prior`` (and ``verify_prior``, its curve alone) picks, first found:

1. ``measured``: a curve measured for this very file (``tune``'s, per machine and file);
2. the profile's curve for this mix (``profile_verify[mix]``);
3. this backend's table row for the mix;
4. the profile's curve for any weights (``profile_verify["default"]``, or a bare curve);
5. this backend's default row.

A device profile's curve for any weights was measured or estimated on one weight type;
the table's row for the file's own mix, though from another device of the same backend,
keeps the shape that type's kernels give, which is what decides how long a draft pays.

The GPU rows are arithmetic on published llama.cpp benchmark tables: c(n) = n * t1 / tn
from "ppN" token rates (tn tokens/s at batch n), each row's source names the page and the
figures. Where sources disagree the larger cost is kept: a prior that over-states c(n)
costs a few rounds of drafting less until ``OnlineCost`` measures it, one that
under-states it makes the first rounds slower than plain decoding.

Pure data and a pure function: no file reading (the mix comes from ``catalog``), no
llama.cpp, no timing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..errors import ProfileError
from .adaptive import VerifyCost


@dataclass(frozen=True)
class PriorRow:
    """One c(n) curve with its provenance."""

    cost: VerifyCost
    status: str  # "measured" (this project, on the machine and file named) | "published" | "estimated"
    source: str


@dataclass(frozen=True)
class PriorChoice:
    """The curve a plan starts from, and why it is that one."""

    cost: VerifyCost
    origin: str  # "measured" | "profile:<mix>" | "table:<backend>/<mix>" | "profile" | "table:<backend>/default"
    source: str


def _curve(*c: float) -> VerifyCost:
    """c(1..len(c)), one value per n from 1."""
    return VerifyCost(tuple(range(1, len(c) + 1)), tuple(float(x) for x in c))


_VM = (
    "2-core AVX2 VM (this project's dev machine), llama.cpp in llama-cpp-python 0.3.36, default kernels, "
    "Qwen2.5-Coder-1.5B"
)

# Q4_K_M (the embedded default): ``tune`` on the 1.5B Q4_K_M. Note the dips at 8 and 16.
CPU_Q4_K_M = _curve(1.0, 1.67, 2.2, 2.69, 3.3, 3.85, 4.61, 4.57, 5.3, 5.8, 6.2, 6.49, 7.2, 7.8, 8.31, 6.84)
# Q4_0 and IQ4_NL requantized from it (llama_model_quantize): repacked, rows one by one
# below 4, tiles from 4 and from 8. c(2), c(4), c(8), c(16) are issue 37's measurements;
# the sizes between are ESTIMATED from that structure (``_STEPS``), not measured.
CPU_Q4_0 = _curve(1.0, 1.71, 2.42, 1.79, 2.5, 3.21, 3.92, 3.18, 3.89, 4.6, 5.31, 3.97, 4.68, 5.39, 6.1, 4.17)
CPU_IQ4_NL = _curve(1.0, 1.75, 2.5, 1.84, 2.59, 3.34, 4.09, 3.12, 3.87, 4.62, 5.37, 3.96, 4.71, 5.46, 6.21, 4.12)
CPU_Q8_0 = VerifyCost((1, 2, 4, 8, 16), (1.0, 2.38, 3.28, 3.4, 5.19))
# The batch-invariant kernels (``exact``) on Q4_K_M: no tiles, so no dips.
CPU_EXACT = _curve(1.0, 2.18, 2.65, 3.22, 3.93, 4.54, 5.0, 5.79, 6.13, 6.88, 7.35, 7.86, 8.45, 9.07, 9.73, 10.19)

_TUNE = f"measured: edgespec tune (llama_decode of n tokens with all logits against 1), {_VM} Q4_K_M"
_ISSUE37 = (
    f"measured at n = 2, 4, 8, 16: llama_decode of n tokens with all logits against 1, median of 12, {_VM}, "
    "requantized from the Q4_K_M with llama_model_quantize (issue 37's table)"
)
_STEPS = (
    "; the sizes between estimated, not measured: below 4 each row costs what the second did (c(2) - 1), "
    "from 4 and from 8 the measured tile plus the rows left over at that rate (c(n) = c(4 or 8) + their "
    "cost; c(12) = c(8) + c(4) - 1). A measurement of them on the shared VM under a load of ~10 "
    "(benchmarks/verify_curve.py, 2026-12-02) read a 579 ms step instead of 30 and was not used; it too "
    "had c(3) above c(4)"
)

# Apple GPUs (Metal). The 2026 op-level timings (#25250, #29110) say the small-batch
# mat-vec path costs about one more n=1 matvec per added column; the full-model pp-n
# tables (#10491, #10581) read lower for small models, higher for large ones.
METAL_Q4_0 = VerifyCost((1, 2, 3, 4, 5, 6, 7, 8), (1.0, 1.78, 2.54, 3.33, 3.77, 4.64, 5.64, 5.68))
METAL_Q8_0 = VerifyCost((1, 2, 3, 4), (1.0, 1.86, 2.72, 3.57))
METAL_Q4_K = VerifyCost((1, 2, 3, 4, 5, 6), (1.0, 1.62, 2.2, 2.47, 2.77, 3.4))
METAL_F16 = VerifyCost((1, 2, 4, 8), (1.0, 2.31, 2.37, 2.38))
# NVIDIA GPUs (CUDA): mmvq up to 8 columns (#14262: "viable up to a batch size of 8").
CUDA_Q4_0 = VerifyCost((1, 2, 3, 4, 5, 6, 7, 8), (1.0, 1.12, 1.2, 1.33, 1.54, 1.73, 1.96, 2.15))
CUDA_K = VerifyCost((1, 2, 3, 4, 5, 6, 7, 8), (1.0, 1.1, 1.26, 1.48, 1.54, 1.72, 1.95, 2.07))
CUDA_BF16 = VerifyCost((1, 2), (1.0, 1.06))

_GH = "https://github.com/ggml-org/llama.cpp/pull/"
_METAL_Q4_0_SRC = (
    f"published: {_GH}10491 (M1 Pro, llama 13B Q4_0, t/s pp1 21.24, pp2 23.90, pp3 25.05, pp4 25.55: "
    "c(n) = n*21.24/ppn = 1.78, 2.54, 3.33; the same page's 1B Q4_0 reads 1.36, 1.73, 2.08) for n <= 4; "
    f"n = 5..8 scale that c(4) by {_GH}10581's llama 3B Q4_0 ratios c(n)/c(4) (pp1 72.07, pp4 140.56, "
    "pp5 155.18, pp6 151.34, pp7 145.15, pp8 164.57: c = 2.05, 2.32, 2.86, 3.48, 3.50). "
    "https://github.com/ggml-org/llama.cpp/issues/25250 (M4 Pro, 2026) confirms the step from 1 to 2: "
    "MUL_MAT q4_0 4096x14336 137.6 us at n=1, 249.7 us at n=2, c(2) = 1.81 for the matmul alone"
)
_METAL_Q8_0_SRC = (
    f"published: {_GH}10491 (M1 Pro, llama 13B Q8_0, t/s pp1 12.28, pp2 13.22, pp3 13.54, pp4 13.76: "
    f"c = 1.86, 2.72, 3.57); {_GH}29110 (2026, op-level q8_0 4096x14336: 53.1 us n=1, 108.8 n=2, 403.9 n=8: "
    "c(2) = 2.05, c(8) = 7.61; Qwen3.8-27B Q8_0 decodes slower at draft n_max 2 than 1, 34.2 -> 32.5 t/s) "
    f"says the cost keeps growing ~linearly past 4, as the curve extrapolates. {_GH}10581's M1 Pro-rate "
    "7B Q8_0 rows read lower (c(4) = 1.42, c(8) = 2.67); the larger is kept"
)
_METAL_Q4_K_SRC = (
    f"published: {_GH}10581 (qwen2 32B Q4_K, t/s pp1 25.94, pp2 32.00, pp3 35.34, pp4 42.05, pp5 46.80, "
    "pp6 45.84: c = 1.62, 2.20, 2.47, 2.77, 3.40; beyond 6 extrapolated)"
)
_METAL_F16_SRC = (
    f"published: {_GH}10238 (M2 Ultra, llama 3B F16, t/s pp1 73.12, pp2 63.28, pp4 123.50, pp8 245.71: "
    "c = 2.31, 2.37, 2.38; before the small-batch kernels of #10491/#10581, none published since)"
)
_CUDA_Q4_0_SRC = (
    f"published: {_GH}15802 (2025, RTX 3090, llama 8B Q4_0, t/s pp1 156.56, pp2 279.89, pp3 390.96, "
    "pp4 470.48, pp5 509.70, pp6 541.57, pp7 559.30, pp8 583.77: c = 1.12, 1.20, 1.33, 1.54, 1.73, 1.96, 2.15); "
    "past 8 the mmq tiles take over: extrapolated (not measured)"
)
_CUDA_K_SRC = (
    f"published: {_GH}5434 (RTX 3090, llama 7B Q2_K_M, mmvq tiling, t/s 105.29, 190.78, 250.60, 284.61, "
    "341.47, 367.78, 377.19, 406.71 for n = 1..8: c = 1.10, 1.26, 1.48, 1.54, 1.72, 1.95, 2.07); a k-quant "
    "mix, not Q4_K_M itself (no Q4_K_M table found); past 8 extrapolated"
)
_CUDA_BF16_SRC = f"published: {_GH}14262 (RTX 3090, llama 8B BF16, t/s pp1 58.27, pp2 109.70: c(2) = 1.06)"

VERIFY_PRIORS: dict[str, dict[str, PriorRow]] = {
    "cpu": {
        "default": PriorRow(CPU_Q4_K_M, "measured", _TUNE),
        "Q4_K_M": PriorRow(CPU_Q4_K_M, "measured", _TUNE),
        "Q4_0": PriorRow(CPU_Q4_0, "estimated", _ISSUE37 + _STEPS),
        "IQ4_NL": PriorRow(CPU_IQ4_NL, "estimated", _ISSUE37 + _STEPS),
        "Q8_0": PriorRow(CPU_Q8_0, "measured", _ISSUE37 + "; between those, linear"),
    },
    "cpu-exact": {"default": PriorRow(CPU_EXACT, "measured", _TUNE + ", batch-invariant kernels")},
    "metal": {
        "default": PriorRow(METAL_Q4_K, "published", _METAL_Q4_K_SRC),
        "Q4_K_M": PriorRow(METAL_Q4_K, "published", _METAL_Q4_K_SRC),
        "Q4_K_S": PriorRow(METAL_Q4_K, "published", _METAL_Q4_K_SRC),
        "Q4_0": PriorRow(METAL_Q4_0, "published", _METAL_Q4_0_SRC),
        "Q8_0": PriorRow(METAL_Q8_0, "published", _METAL_Q8_0_SRC),
        "F16": PriorRow(METAL_F16, "published", _METAL_F16_SRC),
    },
    "cuda": {
        "default": PriorRow(CUDA_Q4_0, "published", _CUDA_Q4_0_SRC),
        "Q4_0": PriorRow(CUDA_Q4_0, "published", _CUDA_Q4_0_SRC),
        "Q4_K_M": PriorRow(CUDA_K, "published", _CUDA_K_SRC),
        "Q4_K_S": PriorRow(CUDA_K, "published", _CUDA_K_SRC),
        "BF16": PriorRow(CUDA_BF16, "published", _CUDA_BF16_SRC),
    },
}


def mix_key(weight_mix: str | None) -> str | None:
    """A mix name as the tables spell it (upper case), None for none."""
    return weight_mix.strip().upper() or None if weight_mix else None


def choose_verify_prior(
    backend: str,
    weight_mix: str | None = None,
    profile_verify: VerifyCost | Mapping[str, VerifyCost] | None = None,
    *,
    measured: VerifyCost | None = None,
) -> PriorChoice:
    """The c(n) a plan starts from, and where it comes from (see the module docstring
    for the order). ``backend``: "cpu", "cpu-exact" (batch-invariant kernels), "metal" or
    "cuda". ``weight_mix``: the target file's class (``catalog.gguf.weight_mix``), None
    when unknown. ``profile_verify``: the profile's curves, either one curve for any
    weights or a mapping from mix to curve ("default": any weights). ``measured``: a
    curve measured for this file. Raises ``ProfileError`` for an unknown backend."""
    table = VERIFY_PRIORS.get(backend)
    if table is None:
        raise ProfileError(
            f"no verify-cost priors for backend {backend!r}; known backends: " + ", ".join(VERIFY_PRIORS)
        )
    mix = mix_key(weight_mix)
    if measured is not None:
        return PriorChoice(measured, "measured", "measured for this file")
    by_mix: Mapping[str, VerifyCost]
    if isinstance(profile_verify, VerifyCost):
        by_mix = {"default": profile_verify}
    else:
        by_mix = {(mix_key(k) if k != "default" else k): v for k, v in (profile_verify or {}).items()}
    if mix and mix in by_mix:
        return PriorChoice(by_mix[mix], f"profile:{mix}", f"the profile's curve for {mix}")
    if mix and mix in table:
        row = table[mix]
        return PriorChoice(row.cost, f"table:{backend}/{mix}", row.source)
    if "default" in by_mix:
        return PriorChoice(by_mix["default"], "profile", "the profile's curve for any weights")
    row = table["default"]
    return PriorChoice(row.cost, f"table:{backend}/default", row.source)


def verify_prior(
    backend: str,
    weight_mix: str | None = None,
    profile_verify: VerifyCost | Mapping[str, VerifyCost] | None = None,
    *,
    measured: VerifyCost | None = None,
) -> VerifyCost:
    """The curve of ``choose_verify_prior`` alone."""
    return choose_verify_prior(backend, weight_mix, profile_verify, measured=measured).cost
