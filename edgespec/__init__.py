"""edgespec: speculative decoding for local LLMs on the machines people own.

    from edgespec import Engine
    with Engine("target.gguf", draft="ngram") as engine:
        print(engine.generate("Write a haiku about caches", max_tokens=64).text)

    engine = edgespec.load("ollama:qwen2.5-coder:7b")   # any model name; the drafter chosen
"""

from .engine import Engine, Result
from .errors import EdgespecError
from .events import Done, Round, Stats, Token

__version__ = "0.1.0"


def __getattr__(name: str):
    # edgespec.load plans (catalog, profiles, local stores): imported on first use, so
    # `import edgespec` and the CLI's start stay light
    if name == "load":
        from .loading import load

        return load
    raise AttributeError(f"module 'edgespec' has no attribute {name!r}")


__all__ = ["Engine", "Result", "load", "EdgespecError", "Token", "Round", "Done", "Stats", "__version__"]
