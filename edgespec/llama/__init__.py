"""The one door to llama.cpp: every ``llama_cpp`` import in edgespec lives here.

It knows how to load a GGUF model and make a context, decode a batch and hand back the
logits of the rows asked for as numpy views, trim a sequence from the KV memory and
read its last position, tokenize and detokenize (streaming, UTF-8 safe), read metadata,
and check that a draft vocabulary can stand in for a target's. It knows nothing about
speculation, sampling or what the tokens mean: callers decide which rows they need and
where to roll back to.

Positions: a ``Context`` keeps the list of tokens its KV memory holds for sequence 0
(``Context.tokens``), so ``n_past == len(tokens)`` and ``pos_max() == n_past - 1`` at
all times; ``decode`` appends after success and ``rollback`` trims. Everything above
this module reasons about KV state through that list.

The door is a package: ``backend`` (the binding, its log, process-wide state),
``kernels`` (batch-invariant or llama.cpp's, and why), ``model`` (files, loading,
tokens), ``vocab`` (draft/target compatibility), ``context`` (decode, rollback), ``nextn``
(a target's hidden rows), ``mtp`` (the model's multi-token-prediction head) and
``assistant`` (a Gemma 4 assistant: a draft model's context reading the target's KV), ``multi``
(many sequences in one KV pool, one decode for all of them) and ``quantize`` (a copy of a
model file in another weight type, through llama.cpp's quantize API).
Import from ``edgespec.llama``; the submodules are its rooms, not its API.
"""

from __future__ import annotations

from .assistant import AssistantContext, check_assistant, is_assistant
from .backend import (
    LLAMA_CPP_PYTHON_VERSION,
    LLAMA_MAX_SEQ,
    default_threads,
    max_parallel_sequences,
    set_verbose,
    supports_gpu_offload,
    system_info,
)
from .context import Context, common_prefix_len
from .kernels import FAST_KERNELS
from .model import ASSISTANT_ARCH, Detokenizer, Model, check_gguf_file
from .mtp import MtpContext, check_mtp
from .multi import MultiContext, SeqView
from .quantize import BITS_PER_WEIGHT, UNQUANTIZED, ftype_of, quantize_model, quantized_size, run_quantize
from .vocab import (
    VOCAB_CHECK_START_TOKEN_ID,
    VOCAB_MAX_SIZE_DIFFERENCE,
    check_vocab_compatible,
    check_vocab_files,
)

__all__ = [
    "ASSISTANT_ARCH",
    "AssistantContext",
    "BITS_PER_WEIGHT",
    "UNQUANTIZED",
    "FAST_KERNELS",
    "LLAMA_CPP_PYTHON_VERSION",
    "LLAMA_MAX_SEQ",
    "VOCAB_CHECK_START_TOKEN_ID",
    "VOCAB_MAX_SIZE_DIFFERENCE",
    "Context",
    "Detokenizer",
    "Model",
    "MtpContext",
    "MultiContext",
    "SeqView",
    "check_assistant",
    "check_gguf_file",
    "check_mtp",
    "check_vocab_compatible",
    "check_vocab_files",
    "common_prefix_len",
    "default_threads",
    "ftype_of",
    "is_assistant",
    "max_parallel_sequences",
    "quantize_model",
    "quantized_size",
    "run_quantize",
    "set_verbose",
    "supports_gpu_offload",
    "system_info",
]
