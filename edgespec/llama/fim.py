"""Fill-in-the-middle: a model's FIM tokens as llama.cpp reads them from the GGUF, and
the infill prompt in the model's repository-level format, as llama-server builds it.

``fim_tokens(model)`` asks llama.cpp's vocabulary (``llama_vocab_fim_*``: the GGUF's
``tokenizer.ggml.fim_*_token_id`` keys, else the token texts llama.cpp knows, such as
Qwen2.5-Coder's ``<|fim_prefix|>``, ``<|fim_suffix|>``, ``<|fim_middle|>``,
``<|repo_name|>`` and ``<|file_sep|>``); a model without the prefix, suffix and middle
tokens raises ``NoFimTokens``, which names the missing ones.

``infill_prompt`` is llama-server's ``format_prompt_infill`` (tools/server, llama.cpp
as llama-cpp-python 0.3.36 vendors it), the repository-level pattern of Qwen2.5-Coder's
report (arXiv 2409.12186)::

    <|repo_name|>myproject\\n<|file_sep|>name0\\n text0 ... <|file_sep|>filename\\n
    <|fim_prefix|>prefix prompt<|fim_suffix|>suffix<|fim_middle|>

the same token budgets (the prefix's last ``3 n_batch / 4`` tokens, the suffix's first
``n_batch / 4 - 2 - len(prompt)``, the extra chunks' last ``n_ctx - n_batch - 2 n_predict``
tokens), the same tokenization (text without special tokens, the ``prompt`` with them)
and the same chunk separator for a model without ``<|file_sep|>``. One difference: a
model that adds BOS gets it first, where llama-server puts the extra chunks before it.
It knows nothing of HTTP or of generation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from edgespec.errors import InputError

from .backend import _llama

REPO_NAME = "myproject"  # llama-server's fixed project and file names
FILE_NAME = "filename"
DEFAULT_N_BATCH = 2048  # llama-server's default --batch-size, the budget of prefix and suffix
CHUNK_SEPARATOR = "\n\n--- snippet ---\n\n"  # between extra chunks, without <|file_sep|>


class NoFimTokens(InputError):
    """The model has no fill-in-the-middle tokens: it cannot complete between a prefix
    and a suffix."""

    param = "input_prefix"


@dataclass(frozen=True)
class FimTokens:
    """A model's FIM token ids; ``pad``, ``rep`` (repository name) and ``sep`` (file
    separator) are None when the vocabulary has none."""

    pre: int
    suf: int
    mid: int
    pad: int | None = None
    rep: int | None = None
    sep: int | None = None


@dataclass(frozen=True)
class ExtraChunk:
    """A file of the repository the editor sends beside the one being edited."""

    text: str
    filename: str = "tmp"


def fim_tokens(model) -> FimTokens:
    """The FIM tokens of ``model`` (an ``edgespec.llama.Model``); ``NoFimTokens`` when
    its vocabulary lacks the prefix, suffix or middle token."""
    vocab = model._vocab

    def get(fn) -> int | None:
        t = int(fn(vocab))
        return None if t < 0 else t

    pre, suf, mid = get(_llama.llama_vocab_fim_pre), get(_llama.llama_vocab_fim_suf), get(_llama.llama_vocab_fim_mid)
    missing = [name for name, t in (("prefix", pre), ("suffix", suf), ("middle", mid)) if t is None]
    if missing:
        names = " and ".join(", ".join(missing).rsplit(", ", 1)) + (" tokens" if len(missing) > 1 else " token")
        raise NoFimTokens(
            f"infill is not supported by this model: its vocabulary has no fill-in-the-middle "
            f"{names} (use a code model trained for infill, such as Qwen2.5-Coder)"
        )
    return FimTokens(
        pre=pre,
        suf=suf,
        mid=mid,
        pad=get(_llama.llama_vocab_fim_pad),
        rep=get(_llama.llama_vocab_fim_rep),
        sep=get(_llama.llama_vocab_fim_sep),
    )


def _text(model, text: str) -> list[int]:
    return model.tokenize(text, add_special=False, parse_special=False) if text else []


def infill_prompt(
    model,
    fim: FimTokens,
    *,
    prefix: str,
    suffix: str,
    prompt: str = "",
    extra: Sequence[ExtraChunk] = (),
    n_ctx: int,
    n_batch: int = DEFAULT_N_BATCH,
    n_predict: int = -1,
) -> list[int]:
    """The token ids of an infill request (see the module's docstring for the layout
    and the budgets). ``n_batch`` above ``n_ctx / 2`` is taken as ``n_ctx / 2``, so that
    a small context keeps room for the middle."""
    n_batch = max(4, min(n_batch, n_ctx // 2))
    extra_ids: list[int] = []
    if fim.rep is not None:
        extra_ids += [fim.rep, *_text(model, REPO_NAME + "\n")]
    for chunk in extra:
        if fim.sep is not None:
            extra_ids += [fim.sep, *_text(model, chunk.filename + "\n")]
        else:
            extra_ids += _text(model, CHUNK_SEPARATOR)
        extra_ids += _text(model, chunk.text)
    if fim.sep is not None:
        extra_ids += [fim.sep, *_text(model, FILE_NAME + "\n")]
    prompt_ids = model.tokenize(prompt, add_special=False, parse_special=True) if prompt else []
    prefix_ids, suffix_ids = _text(model, prefix), _text(model, suffix)
    n_prefix = min(len(prefix_ids), 3 * (n_batch // 4))
    n_suffix = min(len(suffix_ids), max(0, n_batch // 4 - (2 + len(prompt_ids))))
    n_extra = min(max(0, n_ctx - n_batch - 2 * n_predict), len(extra_ids))
    ids = [model.bos] if model.add_bos and model.bos >= 0 else []
    ids += extra_ids[len(extra_ids) - n_extra :]
    ids += [fim.pre, *prefix_ids[len(prefix_ids) - n_prefix :], *prompt_ids]
    ids += [fim.suf, *suffix_ids[:n_suffix], fim.mid]
    return ids


def suffix_stop(suffix: str) -> str | None:
    """The text at which a middle has reached the suffix: a newline and the suffix's
    first non-blank line (its first line too: the text right after the cursor, which
    llama.vim sends as the rest of the cursor's line), without trailing white space; None
    when the suffix has no such line. A middle that writes that line again, at the start
    of a line, has run into the text after it."""
    for line in suffix.split("\n"):
        if line.strip():
            return "\n" + line.rstrip()
    return None


def keeps_newline(suffix: str, stop: str) -> bool:
    """Whether a middle cut at ``suffix_stop(suffix)`` ends with the newline before it:
    when that line is the suffix's first, the suffix starts with its text, so the newline
    the stop string took belongs to the middle."""
    return stop == "\n" + suffix.split("\n")[0].rstrip()
