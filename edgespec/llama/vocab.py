"""Whether a draft vocabulary can stand in for a target's: llama.cpp's own rules."""

from __future__ import annotations

import os

from ..errors import IncompatibleVocabError
from .backend import _llama
from .model import Model

# llama.cpp's own rule for draft/target compatibility (common/speculative.cpp):
# vocab sizes may differ by at most this much, and token texts must agree from id 5 up.
VOCAB_MAX_SIZE_DIFFERENCE = 128
VOCAB_CHECK_START_TOKEN_ID = 5


def check_vocab_compatible(target: Model, draft: Model) -> None:
    """Raise IncompatibleVocabError unless ``draft`` can draft for ``target``.

    The rules are llama.cpp's (common/speculative.cpp): same vocabulary type, same
    BOS/EOS ids and add-BOS/add-EOS flags, sizes within 128 of each other, and identical
    token text for every id from 5 up to the smaller size.
    """
    names = f"target {target.label} and draft {draft.label}"
    if target.vocab_type != draft.vocab_type:
        raise IncompatibleVocabError(
            f"{names} use different tokenizer types ({target.vocab_type} vs "
            f"{draft.vocab_type}); pick a draft model from the target's family, or use "
            "--draft ngram"
        )
    for what, a, b in (
        ("add-BOS flag", target.add_bos, draft.add_bos),
        ("add-EOS flag", target.add_eos, draft.add_eos),
        ("BOS token", target.bos, draft.bos),
        ("EOS token", target.eos, draft.eos),
    ):
        if a != b:
            raise IncompatibleVocabError(
                f"{names} disagree on the {what} ({a} vs {b}); pick a draft model from the "
                "target's family, or use --draft ngram"
            )
    if abs(target.n_vocab - draft.n_vocab) > VOCAB_MAX_SIZE_DIFFERENCE:
        raise IncompatibleVocabError(
            f"{names} have vocabularies of {target.n_vocab} and {draft.n_vocab} tokens "
            f"(more than {VOCAB_MAX_SIZE_DIFFERENCE} apart); pick a draft model from the "
            "target's family, or use --draft ngram"
        )
    get_t, get_d = _llama.llama_vocab_get_text, _llama.llama_vocab_get_text
    vt, vd = target._vocab, draft._vocab
    for i in range(VOCAB_CHECK_START_TOKEN_ID, min(target.n_vocab, draft.n_vocab)):
        a, b = get_t(vt, i), get_d(vd, i)
        if a != b:
            ta = a.decode("utf-8", errors="replace")
            tb = b.decode("utf-8", errors="replace")
            raise IncompatibleVocabError(
                f"{names} have different vocabularies: token {i} is {ta!r} in the target "
                f"and {tb!r} in the draft; pick a draft model from the target's family, "
                "or use --draft ngram"
            )


def check_vocab_files(
    target_path: str | os.PathLike,
    draft_path: str | os.PathLike,
    *,
    target_name: str | None = None,
    draft_name: str | None = None,
) -> None:
    """``check_vocab_compatible`` on two files, loading only their vocabularies; the
    message names them ``target_name`` and ``draft_name`` (default: their file names)."""
    t = Model(target_path, vocab_only=True)
    d = Model(draft_path, vocab_only=True)
    t.label, d.label = target_name or t.label, draft_name or d.label
    try:
        check_vocab_compatible(t, d)
    finally:
        t.close()
        d.close()
