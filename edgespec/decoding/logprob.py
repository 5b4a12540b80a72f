"""Token log-probabilities (``logprobs``): one verify row's log-softmax, read for the
token committed there and the likeliest others.

Pure numpy, like ``sampling``. The row is the target's logits at that position as the
sampler receives them: logit bias, repetition penalties, the end-of-generation ban
(``ignore_eos`` / ``min_tokens``) and, under a constraint, the grammar's mask applied;
before temperature and the top-k / top-p / min-p filters. So a logprob does not depend
on the temperature (OpenAI's and llama-server's default, ``post_sampling_probs: false``)
and a token the grammar or a ban rules out has none (it is never listed).

The speculative loop computes this only when a request asks for it
(``SpeculativeLoop.logprobs`` is not None): every committed token's row is a verify
row it has already, so speculation returns what plain decoding would, row for row.
"""

from __future__ import annotations

import numpy as np

from ..events import TokenLogprob

MAX_TOP = 20  # OpenAI's limit on top_logprobs


def token_logprob(row: np.ndarray, token: int, n_top: int) -> TokenLogprob:
    """``token``'s log-probability under log-softmax(``row``), with the ``n_top`` most
    likely tokens of the row (highest first; -inf ones never listed)."""
    x = np.asarray(row, dtype=np.float64)
    m = float(np.max(x))
    lse = m + float(np.log(np.sum(np.exp(x - m))))
    top: tuple[tuple[int, float], ...] = ()
    if n_top > 0:
        k = min(n_top, x.shape[0])
        part = np.argpartition(-x, k - 1)[:k]
        order = sorted(part.tolist(), key=lambda i: (-x[i], i))
        top = tuple((int(i), float(x[i]) - lse) for i in order if np.isfinite(x[i]))
    return TokenLogprob(id=int(token), logprob=float(x[token]) - lse, top=top)
