"""Which kernels a model runs on: batch-invariant ones for speculation, or llama.cpp's.

The note below says why; ``Model`` (weight repacking) and ``Context`` (the KV cache types
and flash attention) apply the choice.
"""

from __future__ import annotations

import os

# -- Batch-invariant numerics ------------------------------------------------------------
# Speculation verifies k+1 tokens in one decode; plain decoding runs one token at a time.
# Greedy output is only identical if a token's logits do not depend on how many tokens
# shared its batch. On the CPU backend three kernels break that (measured on the Qwen2.5
# GGUFs, logit differences of 0.3-0.5, enough to flip argmax):
#   - repacked weight layouts ("extra buffer types") switch to a GEMM at 4+ rows;
#   - the tiled K-quant matmul takes over at 8+ rows (env GGML_CPU_TILED_MM, read once);
#   - flash attention's split-KV path, used for 1 row once the KV view reaches 512
#     cells and K and V have the same f16/f32 type.
# So a model loaded for speculation (``Model(..., exact=True)``, the default) skips weight
# repacking, the tiled matmul is off (GGML_CPU_TILED_MM=0, process-wide, set here before
# the backend starts) and its contexts keep V in q8_0 (accumulated in f32) next to an f16
# K, which keeps attention on the same per-row path for every batch size.
# The price is real: on an AVX2 CPU the repacked Q4_K kernels decode ~1.3x faster than
# the per-row ones (measured on Qwen2.5-Coder-1.5B, 2 cores). Only speculation needs
# exact kernels: when edgespec decodes plainly by its own choice it loads the target with
# ``exact=False`` (llama.cpp's defaults, repacking included; see ``Engine``'s ``exact``).
# A draft model follows its target's kind of kernels. EDGESPEC_FAST_KERNELS=1
# makes every load fast, speculation included (then lossless only up to floating-point
# differences between batch sizes, as llama.cpp's own speculative decoding is).
FAST_KERNELS = os.environ.get("EDGESPEC_FAST_KERNELS", "") not in ("", "0")
if not FAST_KERNELS:
    os.environ.setdefault("GGML_CPU_TILED_MM", "0")
_GGML_TYPE_F16 = 1
_GGML_TYPE_Q8_0 = 8
_FLASH_ATTN_ENABLED = 1
