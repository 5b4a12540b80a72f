"""The sampling options of one request: ``SamplingParams``, their one check, their names.

``SamplingParams`` says how to pick the next token (temperature, top-k/p, min-p, the
penalties, the seed, logit bias, the end-of-generation bans); ``validate`` is the one
check of those values (the engine runs it on every call, ``batching.jobs`` on every input
line), and ``SamplingOptionError`` names the first bad one. ``SAMPLING_KEYS`` is the one
list of the options' names; ``params_from`` builds checked params from keyword options.

This module only holds and checks values: what each knob does to a row of logits is
``edgespec.decoding.sampling``'s (numpy appears here only as the scalar types a caller may
pass). It knows nothing of ``llama_cpp``, drafters or the speculative loop.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

from edgespec.errors import InputError

__all__ = ["SAMPLING_KEYS", "SamplingOptionError", "SamplingParams", "params_from"]


class SamplingOptionError(InputError):
    """One sampling option is out of range: ``option`` (its name), ``value`` and
    ``allowed`` (what it must be), for callers that word the message their own way."""

    def __init__(self, option: str, value: object, allowed: str) -> None:
        self.option, self.value, self.allowed = option, value, allowed
        super().__init__(f"invalid sampling option {option}={value!r}: {allowed}")


@dataclass(frozen=True)
class SamplingParams:
    """How to pick the next token. Defaults are greedy decoding with no penalties.

    ``repeat_penalty``, ``frequency_penalty`` and ``presence_penalty`` follow llama.cpp:
    for each distinct token among the last ``penalty_last_n`` tokens (``-1`` = the whole
    history, ``0`` = penalties off), a positive logit is divided by ``repeat_penalty``
    and a non-positive one multiplied by it, then ``count * frequency_penalty +
    presence_penalty`` is subtracted.

    ``logit_bias``: (token id, bias) pairs added to the logits first (``-inf`` bans the
    token; an id given twice gets both). ``ignore_eos``: the end-of-generation tokens are
    never sampled; ``min_tokens``: not before that many tokens were generated (the
    speculative loop applies both: it knows those tokens and each row's position).
    """

    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = off
    top_p: float = 1.0  # 1 = off
    min_p: float = 0.0  # 0 = off
    repeat_penalty: float = 1.0  # 1 = off
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int | None = None  # None = fresh OS entropy
    logit_bias: tuple[tuple[int, float], ...] = ()
    ignore_eos: bool = False
    min_tokens: int = 0  # end-of-generation tokens banned before this many tokens

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def bans_eog(self) -> bool:
        """Whether end-of-generation tokens are banned at some position."""
        return self.ignore_eos or self.min_tokens > 0

    @property
    def uses_penalties(self) -> bool:
        return self.penalty_last_n != 0 and (
            self.repeat_penalty != 1.0 or self.frequency_penalty != 0.0 or self.presence_penalty != 0.0
        )

    def validate(self) -> None:
        """Raise ``SamplingOptionError`` (an ``InputError``) naming the first bad value
        and the allowed range. This is the one check of these values: the engine runs it
        on every call and ``batching.jobs`` on every input line."""

        def bad(name: str, value: object, allowed: str) -> InputError:
            return SamplingOptionError(name, value, allowed)

        def number(name: str, value: object) -> float:
            if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
                raise bad(name, value, "must be a number")
            if not math.isfinite(float(value)):
                raise bad(name, value, "must be a finite number")
            return float(value)

        def integer(name: str, value: object) -> int:
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise bad(name, value, "must be an integer")
            return int(value)

        if number("temperature", self.temperature) < 0:
            raise bad("temperature", self.temperature, "must be >= 0 (0 means greedy)")
        if integer("top_k", self.top_k) < 0:
            raise bad("top_k", self.top_k, "must be >= 0 (0 turns top-k off)")
        top_p = number("top_p", self.top_p)
        if not 0.0 < top_p <= 1.0:
            raise bad("top_p", self.top_p, "must be in (0, 1] (1 turns top-p off)")
        min_p = number("min_p", self.min_p)
        if not 0.0 <= min_p <= 1.0:
            raise bad("min_p", self.min_p, "must be in [0, 1] (0 turns min-p off)")
        if number("repeat_penalty", self.repeat_penalty) <= 0:
            raise bad("repeat_penalty", self.repeat_penalty, "must be > 0 (1 turns it off)")
        number("frequency_penalty", self.frequency_penalty)
        number("presence_penalty", self.presence_penalty)
        if integer("penalty_last_n", self.penalty_last_n) < -1:
            raise bad(
                "penalty_last_n",
                self.penalty_last_n,
                "must be >= -1 (-1 = whole history, 0 = penalties off)",
            )
        if self.seed is not None and integer("seed", self.seed) < 0:
            raise bad("seed", self.seed, "must be a non-negative integer or None")
        if not isinstance(self.ignore_eos, bool):
            raise bad("ignore_eos", self.ignore_eos, "must be true or false")
        if integer("min_tokens", self.min_tokens) < 0:
            raise bad("min_tokens", self.min_tokens, "must be >= 0")
        for pair in self.logit_bias:
            if not (isinstance(pair, tuple) and len(pair) == 2):
                raise bad("logit_bias", pair, "must be (token id, bias) pairs")
            if integer("logit_bias", pair[0]) < 0:
                raise bad("logit_bias", pair[0], "token ids must be >= 0")
            bias = pair[1]
            if isinstance(bias, bool) or not isinstance(bias, (int, float)) or math.isnan(bias) or bias == math.inf:
                raise bad("logit_bias", bias, "a bias must be a finite number or -inf (a ban)")

    def check_vocab(self, n_vocab: int) -> None:
        """Raise ``SamplingOptionError`` if a logit bias names a token outside ``0..n_vocab-1``."""
        for tok, _ in self.logit_bias:
            if tok >= n_vocab:
                raise SamplingOptionError("logit_bias", tok, f"token ids must be below the vocabulary size {n_vocab}")


# The sampling options' names, as SamplingParams declares them: the one list of them.
SAMPLING_KEYS = tuple(f.name for f in fields(SamplingParams))


def params_from(options: dict) -> SamplingParams:
    """``SamplingParams`` from keyword options, checked (``validate``): an unknown name is
    an ``InputError`` naming it; ``logit_bias`` may be a mapping {token id: bias} or
    (id, bias) pairs."""
    unknown = sorted(set(options) - set(SAMPLING_KEYS))
    if unknown:
        raise InputError(f"unknown generation option{'s' if len(unknown) > 1 else ''}: {', '.join(unknown)}")
    bias = options.get("logit_bias")
    if bias is not None and not isinstance(bias, tuple):
        try:
            pairs = bias.items() if isinstance(bias, dict) else bias
            options = {**options, "logit_bias": tuple((t, b) for t, b in pairs)}
        except (TypeError, ValueError):
            raise SamplingOptionError("logit_bias", bias, "must map token ids to biases") from None
    params = SamplingParams(**{k: v for k, v in options.items() if v is not None or k == "seed"})
    params.validate()
    return params
