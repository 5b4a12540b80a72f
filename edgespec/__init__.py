"""edgespec: speculative decoding for local LLMs on the machines people own.

from edgespec import Engine
with Engine("target.gguf", draft="ngram") as engine:
    print(engine.generate("Write a haiku about caches", max_tokens=64).text)

engine = edgespec.load("ollama:qwen2.5-coder:7b")   # any model name; the drafter chosen
"""

from .costmodel.drafting import DraftingOptions
from .engine import Engine, Result
from .errors import EdgespecError
from .events import Done, Round, Stats, Token

__version__ = "0.1.0"


# The rest of the public face, each where it lives: imported on first use, so `import
# edgespec` and the CLI's start stay light (edgespec.load plans: catalog, profiles, local
# stores).
_LAZY = {
    "load": ("loading", "load"),
    "engine_for": ("loading", "engine_for"),  # the Engine a Plan describes
    "plan": ("planning.planner", "plan"),
    "Request": ("batching.runner", "Request"),
    "resolve_model": ("catalog", "resolve_model"),
    "on_server_lost": ("llama.rpc", "on_server_lost"),
    "SuffixIndex": ("decoding.suffix", "SuffixIndex"),  # the memory of earlier answers
    "load_memory": ("decoding.suffix_store", "load"),
    "save_memory": ("decoding.suffix_store", "save"),
}


def __getattr__(name: str):
    if name in _LAZY:
        from importlib import import_module

        where, attr = _LAZY[name]
        return getattr(import_module(f".{where}", __name__), attr)
    raise AttributeError(f"module 'edgespec' has no attribute {name!r}")


__all__ = [
    "Engine",
    "DraftingOptions",
    "Result",
    "load",
    "engine_for",
    "plan",
    "Request",
    "resolve_model",
    "on_server_lost",
    "EdgespecError",
    "SuffixIndex",
    "load_memory",
    "save_memory",
    "Token",
    "Round",
    "Done",
    "Stats",
    "__version__",
]
