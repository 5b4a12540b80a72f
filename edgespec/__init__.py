"""edgespec: speculative decoding for local LLMs on the machines people own.

    from edgespec import Engine
    with Engine("target.gguf", draft="ngram") as engine:
        print(engine.generate("Write a haiku about caches", max_tokens=64).text)
"""

from .engine import Engine, Result
from .errors import EdgespecError
from .events import Done, Round, Stats, Token

__version__ = "0.1.0"

__all__ = ["Engine", "Result", "EdgespecError", "Token", "Round", "Done", "Stats", "__version__"]
