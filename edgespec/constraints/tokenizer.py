"""llguidance's tokenizer over a loaded model's vocabulary, built once per model.

Building it walks the whole vocabulary (~1 s for Qwen2.5's 152k tokens), so it is cached
per ``llama.Model`` object (weakly: it goes when the model goes). The tokenizer keeps the
model's vocabulary pointer to tokenize forced text, so it must not outlive the open
model: a ``Constraint`` is valid while its engine is.
"""

from __future__ import annotations

import threading
import weakref

from llguidance import LLTokenizer

from ..llama import Model

_cache: "weakref.WeakKeyDictionary[Model, LLTokenizer]" = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def tokenizer_for(model: Model) -> LLTokenizer:
    """The llguidance tokenizer of ``model`` (every end-of-generation token counts as
    EOS, so a finished structure may end with <|im_end|> as well as <|endoftext|>)."""
    with _lock:
        tok = _cache.get(model)
        if tok is None:
            pieces, eog, vocab_ptr, tokenize_fptr = model.guidance_vocab()
            tok = LLTokenizer.from_llamacpp(
                tokens=pieces,
                vocab_ptr=vocab_ptr,
                tokenize_fptr=tokenize_fptr,
                eos_token=eog or [model.eos],
                slices=None,
            )
            _cache[model] = tok
        return tok
