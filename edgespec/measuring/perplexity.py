"""Perplexity: how well a model predicts a text, from llama.cpp's own logits.

``perplexity(ctx, tokens)`` is exp of the mean negative log-likelihood of each next
token: the text is cut into chunks of ``chunk`` tokens, each decoded from an empty
context (after BOS when the model adds one) in batches with the logits of every row,
and every token of a chunk after its first (every token, after BOS) is scored against
the log-softmax of the row before it. Chunks keep the cost linear in the text and the
same for two files of one model, which is what a before/after comparison needs.

``heldout_text()`` is the text that ships with edgespec for that comparison
(``edgespec/measuring/data/heldout.txt``: about 2,600 tokens of English prose, Python
code and questions and answers, written for edgespec and used nowhere else: no prompt
of ``bench`` or ``tune`` draws on it).

Nothing here loads a model or prints; the caller owns the context.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from importlib import resources
from typing import Sequence

import numpy as np

from ..errors import InputError
from ..llama import Context

CHUNK = 512
BATCH = 128


def heldout_text() -> str:
    """The held-out text that ships in the package."""
    return resources.files("edgespec.measuring").joinpath("data", "heldout.txt").read_text(encoding="utf-8")


@dataclass(frozen=True)
class Perplexity:
    value: float  # exp(mean NLL)
    tokens: int  # tokens scored
    seconds: float  # wall time of the decodes and the scoring

    @property
    def mean_nll(self) -> float:
        return math.log(self.value)


def next_token_nll(logits: np.ndarray, targets: Sequence[int]) -> np.ndarray:
    """−log p(target) of each row under its softmax (rows: one per target)."""
    x = np.asarray(logits, dtype=np.float32)
    top = x.max(axis=1)
    lse = top.astype(np.float64) + np.log(np.exp(x - top[:, None]).sum(axis=1, dtype=np.float64))
    return lse - x[np.arange(len(targets)), np.asarray(targets, dtype=np.int64)]


def perplexity(
    ctx: Context, tokens: Sequence[int], *, chunk: int = CHUNK, batch: int = BATCH, bos: int | None = None
) -> Perplexity:
    """The perplexity of ``ctx``'s model on ``tokens`` (see the module docstring). ``bos``:
    the token each chunk starts after (the model's BOS when it adds one). The context is
    cleared before each chunk and left empty."""
    if chunk < 2 or batch < 1:
        raise InputError("perplexity needs chunks of at least 2 tokens and batches of at least 1")
    lead = [] if bos is None else [bos]
    if chunk + len(lead) > ctx.n_ctx or batch > ctx.n_batch:
        raise InputError(
            f"a context of {ctx.n_ctx} tokens (batch {ctx.n_batch}) cannot hold chunks of {chunk} in batches of {batch}"
        )
    t0 = time.perf_counter()
    total, count = 0.0, 0
    for start in range(0, len(tokens), chunk):
        seq = lead + [int(t) for t in tokens[start : start + chunk]]
        if len(seq) < 2:
            continue
        ctx.clear()
        for p in range(0, len(seq), batch):
            part = seq[p : p + batch]
            targets = seq[p + 1 : p + 1 + len(part)]
            if not targets:
                break
            logits = ctx.decode(part, rows=range(len(targets)))
            total += float(next_token_nll(logits, targets).sum())
            count += len(targets)
    ctx.clear()
    if count == 0:
        raise InputError("the text is too short to measure a perplexity (it needs at least 2 tokens)")
    return Perplexity(math.exp(total / count), count, time.perf_counter() - t0)
