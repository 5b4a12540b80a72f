"""The small frozen records that flow out of a generation.

``Engine.stream()`` yields ``Token`` and ``Round`` events and ends with one ``Done``;
the CLI, the live readout, the batch writer and the benchmarks all consume this same
stream. ``Stats`` is the running account of one generation. Nothing here knows how
tokens were produced or how they will be shown.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass(frozen=True)
class TokenLogprob:
    """The target's log-probability of one committed token (``id``) at its position, and
    ``top``: the likeliest tokens there as (id, logprob), highest first (requested with
    ``logprobs``; ``edgespec.decoding.logprob`` says which distribution)."""

    id: int
    logprob: float
    top: tuple[tuple[int, float], ...] = ()


@dataclass(frozen=True)
class Token:
    """One committed token of the answer.

    ``text`` is the printable piece this token completed; it is ``""`` while a multi-byte
    UTF-8 character is still incomplete, and text held back because it might be the
    start of a stop string is released with a later token. ``from_draft`` is True when
    the drafter proposed this token and the target accepted it; False when the target
    produced it itself (the bonus token of a round, or a correction after a rejection).
    ``forced``: one of those accepted drafts was forced by the grammar (structured
    output), not proposed by the drafter. ``logprob``: its ``TokenLogprob`` when the
    generation was asked for them (``logprobs``), else None.
    """

    id: int
    text: str
    from_draft: bool
    round: int
    forced: bool = False
    logprob: TokenLogprob | None = None


@dataclass(frozen=True)
class Round:
    """Summary of one speculation round, emitted after its tokens.

    ``drafted`` tokens were proposed, ``accepted`` of them kept, ``rejected`` = the rest.
    ``rejected_text`` is the detokenized text of the rejected draft tokens (for a
    struck-through display). ``k`` is the draft length bound used for this round.
    ``forced`` of the drafted tokens were forced by the grammar (structured output:
    drafted for free, not by the drafter); they count in ``drafted``/``accepted`` too.
    """

    index: int
    drafted: int
    accepted: int
    rejected: int
    k: int
    drafter: str
    rejected_ids: tuple[int, ...] = ()
    rejected_text: str = ""
    forced: int = 0
    source: str = ""


@dataclass
class Stats:
    """Counters and timings of one generation (mutable while it runs)."""

    drafter: str = "none"
    prompt_tokens: int = 0  # tokens in the prompt
    prompt_tokens_processed: int = 0  # of those, decoded now (the rest reused from cache)
    # how the cache was reused: "prefix", "rollback" (a tail undone), "checkpoint" (a
    # recurrent state restored, llama.recurrent), "none" (decoded from the start)
    prompt_reuse: str = "none"
    generated_tokens: int = 0
    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    rejected: int = 0
    from_draft_tokens: int = 0  # committed tokens that came from accepted drafts
    forced: int = 0  # drafted by the grammar (in ``drafted`` too): its forced
    # tokens and the likely tokens of the text it forces
    forced_accepted: int = 0  # of those, accepted (in ``accepted`` too)
    accepted_by_position: list[int] = field(default_factory=list)
    drafted_by_position: list[int] = field(default_factory=list)
    # drafted and accepted tokens by where they came from: "prompt" (prompt lookup),
    # "memory" (earlier answers), "grammar" (forced and likely tokens), "model", "mtp"
    # (the target's own MTP head), "assistant" (a Gemma 4 assistant)
    drafted_by_source: dict[str, int] = field(default_factory=dict)
    accepted_by_source: dict[str, int] = field(default_factory=dict)
    k_final: int = 0
    t_prompt: float = 0.0  # seconds prefilling the prompt (both models)
    t_draft: float = 0.0  # seconds inside the drafter's propose()
    t_verify: float = 0.0  # seconds inside the target's llama_decode
    t_decode_draft: float = 0.0  # seconds inside the draft model's llama_decode
    t_generate: float = 0.0  # wall seconds from first round to the end
    t_total: float = 0.0  # wall seconds including the prompt
    t_mask: float = 0.0  # seconds computing grammar masks and forced tokens
    # A sequence of a parallel batch shares each decode with others: its t_prompt and
    # t_verify are its share of the steps (in proportion to its rows), and t_batch its
    # share of the steps it generated in (decode and the Python around it); 0 alone.
    t_batch: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    def count_source(self, source: str, drafted: int, accepted: int) -> None:
        """``drafted`` tokens from ``source``, ``accepted`` of them kept."""
        self.drafted_by_source[source] = self.drafted_by_source.get(source, 0) + drafted
        self.accepted_by_source[source] = self.accepted_by_source.get(source, 0) + accepted

    @property
    def mean_accepted_length(self) -> float:
        """Mean number of drafted tokens accepted per round."""
        return self.accepted / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_round(self) -> float:
        """Mean tokens committed per round (accepted + the target's own token)."""
        return self.generated_tokens / self.rounds if self.rounds else 0.0

    @property
    def tokens_per_second(self) -> float:
        return self.generated_tokens / self.t_generate if self.t_generate > 0 else 0.0

    @property
    def drafting_rounds(self) -> int:
        """Rounds that verified at least one drafted token."""
        return self.drafted_by_position[0] if self.drafted_by_position else 0

    @property
    def t_rounds(self) -> float:
        """Time of this generation's rounds: its wall time, or in a batch its share."""
        return self.t_batch or self.t_generate

    @property
    def t_other(self) -> float:
        """Time of the rounds spent outside llama_decode (Python, sampling, ...)."""
        return max(0.0, self.t_rounds - self.t_verify - self.t_decode_draft)

    @property
    def overhead_fraction(self) -> float:
        """Share of round time spent outside llama_decode: the Python overhead."""
        return self.t_other / self.t_rounds if self.t_rounds > 0 else 0.0

    @property
    def acceptance_by_position(self) -> list[float]:
        return [a / d if d else 0.0 for a, d in zip(self.accepted_by_position, self.drafted_by_position)]

    def to_dict(self) -> dict:
        d = asdict(self)
        for name in (
            "acceptance_rate",
            "mean_accepted_length",
            "tokens_per_round",
            "tokens_per_second",
            "t_other",
            "overhead_fraction",
            "acceptance_by_position",
        ):
            d[name] = getattr(self, name)
        for key, value in d.items():
            if isinstance(value, float):
                d[key] = round(value, 6)
            elif isinstance(value, list):
                d[key] = [round(v, 6) if isinstance(v, float) else v for v in value]
        return d


@dataclass(frozen=True)
class Done:
    """The last event: why generation stopped and its final statistics.

    ``finish_reason`` is ``"stop"`` (end-of-generation token or a stop string),
    ``"length"`` (``max_tokens`` reached or the context is full) or ``"interrupted"``.

    Under a constraint (structured output), ``structured_complete`` says whether the
    output completes the structure (False when ``max_tokens`` cut it; None without a
    constraint, or when a lazy grammar's trigger never appeared), ``parsed`` holds
    the parsed JSON value when a JSON structure is complete, ``structure_error`` says
    why it is not when ``structured_complete`` is False (``max_tokens`` ran out, the
    context filled up, a stop string cut it), and ``relaxed`` lists what lenient mode
    relaxed in the schema (then ``parsed`` is checked against the relaxed schema only).
    ``logprobs``: one ``TokenLogprob`` per token of ``token_ids`` when they were asked for, else None.
    """

    finish_reason: str
    stats: Stats
    text: str
    token_ids: tuple[int, ...]
    structured_complete: bool | None = None
    parsed: Any = None
    logprobs: tuple[TokenLogprob, ...] | None = None
    structure_error: str | None = None
    relaxed: tuple[str, ...] = ()


Event = Token | Round | Done


@dataclass(frozen=True)
class Result:
    """A finished generation: its text, token ids, why it ended, and its stats; under a
    constraint also ``structured_complete``, ``parsed``, ``structure_error`` and
    ``relaxed`` (as on ``Done``), and ``logprobs`` when asked for."""

    text: str
    token_ids: list[int]
    finish_reason: str
    stats: Stats
    structured_complete: bool | None = None
    parsed: Any = None
    logprobs: tuple[TokenLogprob, ...] | None = None
    structure_error: str | None = None
    relaxed: tuple[str, ...] = ()

    @classmethod
    def from_done(cls, done: Done) -> "Result":
        return cls(
            done.text,
            list(done.token_ids),
            done.finish_reason,
            done.stats,
            done.structured_complete,
            done.parsed,
            done.logprobs,
            done.structure_error,
            tuple(done.relaxed),
        )

    def structure_dict(self) -> dict:
        """The structure's keys of ``to_dict`` (empty without a constraint):
        ``structured_complete`` and ``parsed``, ``structure_error`` when it is not
        complete, ``relaxed`` when lenient mode relaxed something."""
        d: dict = {}
        if self.structured_complete is not None:
            d["structured_complete"] = self.structured_complete
            d["parsed"] = self.parsed
        if self.structure_error is not None:
            d["structure_error"] = self.structure_error
        if self.relaxed:
            d["relaxed"] = list(self.relaxed)
        return d

    def to_dict(self) -> dict:
        return {
            "text": self.text,
            "token_ids": list(self.token_ids),
            "finish_reason": self.finish_reason,
            "stats": self.stats.to_dict(),
            **self.structure_dict(),
            **(
                {}
                if self.logprobs is None
                else {
                    "logprobs": [
                        {"id": lp.id, "logprob": lp.logprob, "top": [list(t) for t in lp.top]} for lp in self.logprobs
                    ]
                }
            ),
        }
