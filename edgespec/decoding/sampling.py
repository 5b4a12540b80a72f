"""Turning one row of logits into a token: penalties, filters, sampling, the residual.

This module is pure numpy. It knows llama.cpp's *semantics* for each knob (so that a
user who sets ``--top-p 0.9`` gets what llama.cpp would have given them) but it never
imports ``llama_cpp``: logits arrive as numpy rows from ``edgespec.llama`` and leave as
token ids or probability vectors. It knows nothing about drafters, KV caches or the
speculative loop; the loop calls these functions for the target's distribution ``p``
and, when a drafter samples from a model, for the draft's distribution ``q``.

The pipeline for one position is::

    logits --apply_penalties(history)--> logits' --probs_from_logits--> probs --sample--> id

``probs_from_logits`` applies, in llama.cpp's default sampler-chain order:

    top-k  ->  top-p  ->  min-p  ->  temperature  ->  softmax

so top-p and min-p look at the *untempered* distribution (top-p renormalised over what
top-k kept), exactly as ``llama_sampler_init_top_k/top_p/min_p/temp`` chained in that
order do. Speculative decoding stays lossless whatever the order, as long as p and q
are both computed with this same function: the guarantee is "tokens are distributed
as ``probs_from_logits`` of the target", which the rejection step preserves.

Greedy (temperature 0) never needs probabilities: the loop takes ``argmax`` of the
(penalised) logits. For convenience ``probs_from_logits`` still accepts temperature 0
and returns the one-hot distribution on the first maximum, which is the limit of
temperature -> 0 and makes rejection sampling degenerate to "accept iff equal".

The options themselves (``SamplingParams``, their check, their names) are
``edgespec.decoding.params``'s; this module only reads them.

Logit bias (``SamplingParams.logit_bias``) is added before the penalties, as llama.cpp's
sampler chain does; a bias of ``-inf`` bans a token. ``ban`` sets given ids to ``-inf``
(the loop bans the end-of-generation tokens for ``ignore_eos`` and ``min_tokens``).
Banning keeps speculation lossless: the target's p gives a banned token probability 0,
so a drafted one is always rejected.

Not here: DRY, XTC, typical-p, mirostat, grammars. Token ids in a penalty history or a
logit bias must be valid indices into the logits row.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from edgespec.errors import DecodeError

if TYPE_CHECKING:  # the options live in params.py; here they are only read
    from .params import SamplingParams

__all__ = [
    "apply_penalties",
    "apply_logit_bias",
    "ban",
    "probs_from_logits",
    "sample",
    "residual",
    "make_rng",
]

# Below this total mass the residual max(0, p - q) is rounding noise, not a distribution:
# a rejection happens with probability equal to that mass, so returning p instead costs
# at most ~1e-12 of total-variation error.
_RESIDUAL_EPS = 1e-12


def apply_logit_bias(logits: np.ndarray, bias: Sequence[tuple[int, float]]) -> np.ndarray:
    """``logits`` with each (id, bias) added (a copy; ``-inf`` bans the id)."""
    out = np.array(logits, copy=True)
    if bias:
        ids = np.fromiter((t for t, _ in bias), dtype=np.int64, count=len(bias))
        vals = np.fromiter((b for _, b in bias), dtype=np.float64, count=len(bias))
        with np.errstate(invalid="ignore"):
            np.add.at(out, ids, vals.astype(out.dtype))
    return out


def ban(logits: np.ndarray, ids: Sequence[int]) -> np.ndarray:
    """``logits`` with ``ids`` set to ``-inf`` (a copy): those tokens cannot be chosen."""
    out = np.array(logits, copy=True)
    if len(ids):
        out[np.asarray(ids, dtype=np.int64)] = -np.inf
    return out


def apply_penalties(logits: np.ndarray, history: Sequence[int], params: SamplingParams) -> np.ndarray:
    """Return a penalised copy of ``logits`` (same dtype); the input is left untouched.

    ``history`` is every token so far (prompt and generated); only the last
    ``params.penalty_last_n`` are looked at (all of them when it is -1).
    """
    out = np.array(logits, copy=True)
    if not params.uses_penalties or len(history) == 0:
        return out
    n = params.penalty_last_n
    window = np.asarray(history[-n:] if n > 0 else history, dtype=np.int64)
    ids, counts = np.unique(window, return_counts=True)
    vals = out[ids].astype(np.float64)
    # llama.cpp: dividing a negative logit would make the token *more* likely, so
    # non-positive logits are multiplied instead.
    with np.errstate(over="ignore"):  # clipped below
        vals = np.where(vals <= 0, vals * params.repeat_penalty, vals / params.repeat_penalty)
        vals -= counts * params.frequency_penalty + params.presence_penalty
    if np.issubdtype(out.dtype, np.floating):
        # an extreme penalty (repeat_penalty 1e-40, ...) must not turn a logit into an
        # infinity, which the filters cannot rank; the row's largest finite value can be
        big = float(np.finfo(out.dtype).max)
        vals = np.clip(vals, -big, big)
    out[ids] = vals
    return out


def probs_from_logits(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """Probabilities (float64, summing to 1, same length as ``logits``) after the filters.

    Order: top-k, top-p, min-p (these three on the untempered logits), temperature,
    softmax. Filtered-out tokens get probability exactly 0. With ``temperature == 0``
    the result is one-hot on ``argmax(logits)``. Raises ``DecodeError`` if the row has
    no finite maximum (NaN or all -inf logits: a broken model or compute error).
    """
    logits = np.asarray(logits)
    if logits.dtype != np.float32 and logits.dtype != np.float64:
        logits = logits.astype(np.float32)
    n_vocab = logits.shape[-1]
    if logits.ndim != 1 or n_vocab == 0:
        raise ValueError(f"expected a non-empty 1-D logits row, got shape {logits.shape}")
    probs = np.zeros(n_vocab, dtype=np.float64)

    if params.greedy:
        best = int(np.argmax(logits))
        if not math.isfinite(float(logits[best])):
            raise _non_finite(logits)
        probs[best] = 1.0
        return probs

    # ``idx`` holds the surviving candidates (None = the whole vocabulary) and ``x``
    # their logits; everything after top-k works on the survivors only.
    idx: np.ndarray | None = None
    x = logits
    k = params.top_k
    if 0 < k < n_vocab:
        # argpartition is O(n); the k survivors come back unordered.
        idx = np.argpartition(logits, n_vocab - k)[n_vocab - k :]
        x = logits[idx]

    x_max = x.max()  # max propagates NaN, so this also catches NaN rows
    if not math.isfinite(float(x_max)):
        raise _non_finite(logits)

    if params.top_p < 1.0 or params.min_p > 0.0:
        keep = _top_p_min_p(x, x_max, params.top_p, params.min_p)
        if keep is not None:
            x = x[keep]
            idx = keep if idx is None else idx[keep]

    # Temperature, then a stable softmax over the survivors. exp() runs in the logits'
    # own precision (float32: ~1e-7 relative error, twice as fast on 152k rows); the
    # normalisation and the result are float64 so that p and q ratios stay exact enough.
    # 1/T can overflow the row's float type (T < ~3e-39 in float32) and inf * 0 at the
    # maximum is NaN: the largest finite factor gives the same (greedy-like) result.
    # Overflow to -inf (x far below x_max) is harmless: exp gives 0.
    with np.errstate(over="ignore"):
        e = x - x_max  # a new array: the caller's logits are never written
        e *= e.dtype.type(min(1.0 / params.temperature, float(np.finfo(e.dtype).max)))
    np.exp(e, out=e)
    e = e.astype(np.float64, copy=False)
    e /= e.sum()
    if idx is None:
        return e
    probs[idx] = e
    return probs


# Above this many candidates top-p finds its cut with a histogram instead of a sort.
_TOP_P_SORT_MAX = 1024
_TOP_P_BUCKETS = 4096


def _top_p_min_p(x: np.ndarray, x_max, top_p: float, min_p: float) -> np.ndarray | None:
    """Indices into ``x`` that survive top-p then min-p (None = all of them survive).

    Both filters keep a prefix of the candidates sorted by logit, so applying them in
    sequence keeps the shorter prefix. Min-p (a threshold on the logit relative to the
    maximum, p_i >= min_p * p_max) is a cheap mask, so it goes first and shrinks what
    top-p has to look at; top-p's cumulative mass is still normalised over all of ``x``
    (the top-k survivors), as in llama.cpp where top-p runs before min-p.
    """
    cand: np.ndarray | None = None
    if min_p > 0.0:
        cand = np.flatnonzero(x >= float(x_max) + math.log(min_p))
    if top_p >= 1.0:
        return cand

    # Untempered probabilities (unnormalised); the target mass is top_p of all of x.
    w = np.exp(x - x_max)
    target = top_p * float(w.sum(dtype=np.float64))
    if cand is not None:
        if float(w[cand].sum(dtype=np.float64)) < target:
            return cand  # min-p's prefix is the shorter one
        pool = cand
        xs = x[cand]
        ws = w[cand]
    else:
        pool = None
        xs, ws = x, w
    kept = _nucleus(xs, ws, target)
    return kept if pool is None else pool[kept]


def _nucleus(x: np.ndarray, w: np.ndarray, target: float) -> np.ndarray:
    """Smallest set of indices, by descending ``w`` (= exp(x - max)), with mass >= target.

    Includes the token whose cumulative mass first reaches the target (llama.cpp's
    rule). Small sets are sorted; large ones (a 152k vocabulary with top-k off) are
    bucketed by logit in O(n) and only the bucket where the cut falls is sorted.
    """
    n = x.shape[0]
    if n <= _TOP_P_SORT_MAX:
        order = np.argsort(-w, kind="stable")
        cum = np.cumsum(w[order], dtype=np.float64)
        hit = int(np.searchsorted(cum, target, side="left"))
        return order[: hit + 1]

    # Bucket 0 holds the largest logits; buckets are equal-width in logit space.
    x_top = float(x.max())
    finite = np.isfinite(x)
    x_low = float(x[finite].min())
    span = max(x_top - x_low, 1e-30)
    b = (x_top - x) * ((_TOP_P_BUCKETS - 1) / span)
    b[~finite] = _TOP_P_BUCKETS - 1  # -inf logits: weight 0, last bucket
    b = b.astype(np.int64)
    mass = np.bincount(b, weights=w, minlength=_TOP_P_BUCKETS)
    cum_b = np.cumsum(mass)
    jb = int(np.searchsorted(cum_b, target, side="left"))
    if jb >= _TOP_P_BUCKETS:  # rounding: the whole set is needed
        return np.arange(n)
    above = np.flatnonzero(b < jb)
    inside = np.flatnonzero(b == jb)
    inside = inside[np.argsort(-w[inside], kind="stable")]
    need = target - (float(cum_b[jb - 1]) if jb > 0 else 0.0)
    cum = np.cumsum(w[inside], dtype=np.float64)
    hit = int(np.searchsorted(cum, need, side="left"))
    return np.concatenate([above, inside[: hit + 1]])


def _non_finite(logits: np.ndarray) -> DecodeError:
    n_nan = int(np.isnan(logits).sum())
    return DecodeError(
        "the model produced no usable logits "
        f"({n_nan} NaN of {logits.shape[-1]}; the rest not finite either): the model "
        "file may be broken or the backend hit a compute error; try another model file "
        "or the CPU backend"
    )


def sample(probs: np.ndarray, rng: np.random.Generator) -> int:
    """Draw one token id from ``probs`` (need not be exactly normalised).

    Tokens with probability 0 are never returned, even under rounding.
    """
    nz = np.flatnonzero(probs > 0)
    if nz.size == 0:
        raise ValueError("cannot sample from a distribution with no positive probability")
    if nz.size == 1:
        return int(nz[0])
    cdf = np.cumsum(probs[nz], dtype=np.float64)
    u = rng.random() * cdf[-1]
    # side="right": u == cdf[j] belongs to j + 1, whose probability is positive.
    j = int(np.searchsorted(cdf, u, side="right"))
    return int(nz[min(j, nz.size - 1)])


def residual(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The distribution to resample from after rejecting a draft token: norm(max(0, p - q)).

    ``p`` is the target's distribution and ``q`` the draft's at the same position
    (Leviathan et al. 2023, Algorithm 1). If the residual has (numerically) zero mass,
    i.e. p == q, a rejection cannot happen in exact arithmetic, and ``p`` itself is
    returned (as a copy) rather than normalising rounding noise.
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    if p.shape != q.shape:
        raise ValueError(f"p and q differ in shape: {p.shape} vs {q.shape}")
    r = p - q
    np.maximum(r, 0.0, out=r)
    mass = r.sum()
    if not mass > _RESIDUAL_EPS:
        return p.copy()
    r /= mass
    return r


def accept(p_x: float, q_x: float, rng: np.random.Generator) -> bool:
    """The speculative acceptance test for a draft token x: true with probability
    min(1, p(x) / q(x)). A token the draft could not have produced (q(x) = 0) is rejected."""
    if q_x <= 0.0:
        return False
    return bool(rng.random() < min(1.0, p_x / q_x))


def make_rng(seed: int | None) -> np.random.Generator:
    """A numpy Generator; ``None`` draws fresh entropy from the OS."""
    return np.random.default_rng(seed)
