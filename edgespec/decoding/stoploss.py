"""The stop-loss: a request whose drafting measures slower than plain decoding stops drafting.

The drafting policy (``decoding.policy``) drafts when its estimates say a round pays. The
estimates can be wrong for a while (a prior that under-states c(n), acceptance rates
learned on other text, a draft source that is right less often than its history says),
and every round also pays for the drafter's own work, paid or not. The stop-loss watches
what the request's rounds really cost against what plain decoding would have:

* every round of the request spent ``(verify + draft seconds) / t1`` plain steps, where t1
  is the median of the last plain rounds it saw, and committed tokens that plain decoding
  would have paid one step each. t1 is its own, not the cost model's scale: with no plain
  step measured that scale comes from the rounds' times through the c(n) table, and a
  wrong table (a GPU's curve on a CPU) would make every round look cheap. So when no
  plain round was seen for ``REFERENCE_EVERY`` rounds, the next round is plain: one round
  without drafts in 64, which also anchors the cost
  model's c(n) to a real plain step;
* once at least ``MIN_DRAFTED`` rounds drafted, if the committed tokens per step spent
  are below ``FLOOR`` and the loss exceeds ``MIN_LOSS`` steps, drafting pauses for
  ``pause`` rounds (plain steps, no drafter work), and the count starts again. Each trip
  doubles the pause, so a request whose drafts keep losing drafts less and less, and
  one whose text starts copying later can still draft again.

Both thresholds are in steps and tokens, not seconds, so a uniformly busy machine does
not trip it; a plain round counts too, so the drafter's work in rounds that draft nothing
is paid for. Pure arithmetic over numbers handed in.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

MIN_DRAFTED = 12  # rounds that drafted before the verdict: a few unlucky rounds are no trend
FLOOR = 0.97  # committed tokens per plain step spent, below which drafting loses
MIN_LOSS = 3.0  # plain steps lost before drafting pauses (a small loss is noise)
FIRST_PAUSE = 32  # rounds without drafting after the first trip; doubles at every trip
REFERENCE_EVERY = 64  # rounds after which a plain step is measured again


@dataclass
class StopLoss:
    """The ledger of one request's rounds (``begin`` at each request)."""

    spent: float = 0.0  # plain steps' worth of time spent since the count started
    committed: int = 0  # tokens committed in that time
    drafted: int = 0  # rounds that verified drafts since the count started
    paused: int = 0  # rounds left without drafting
    pause: int = FIRST_PAUSE  # the next pause's length
    trips: int = 0
    # kept across requests: the machine's plain step, not the text's
    plain: deque = field(default_factory=lambda: deque(maxlen=5))  # the last plain rounds' seconds
    since_plain: int = 0  # rounds since the last plain round (or since the start)
    timed: bool = False  # a timed round was seen (a caller that times nothing never needs a reference)

    def begin(self) -> None:
        """A new request: the ledger and the pauses start again (the plain step stays)."""
        self.spent, self.committed, self.drafted, self.paused, self.pause, self.trips = 0.0, 0, 0, 0, FIRST_PAUSE, 0

    def allows(self) -> bool:
        """Whether this round may draft: not while paused (counted down), and not when a
        plain step is due as the ledger's reference."""
        if self.paused > 0:
            self.paused -= 1
            return False
        if not self.timed:
            return True
        return bool(self.plain) and self.since_plain < REFERENCE_EVERY

    @property
    def step_seconds(self) -> float | None:
        """The plain step the ledger counts in (None: none measured yet)."""
        return float(sorted(self.plain)[len(self.plain) // 2]) if self.plain else None

    def record(self, *, seconds: float, committed: int, drafted: bool, plain_step: float | None = None) -> None:
        """A round took ``seconds`` (verify + drafting) and committed ``committed`` tokens;
        ``drafted``: it verified drafts. ``plain_step``: a one-token round's decode time
        alone (its drafter's look is in ``seconds``), the ledger's reference. Rounds before
        the first plain step are not counted."""
        self.timed = self.timed or seconds > 0.0
        if plain_step is not None:
            if plain_step > 0.0:
                self.plain.append(plain_step)
            self.since_plain = 0
        elif seconds > 0.0:  # an untimed round (a caller that measures nothing) asks for no reference
            self.since_plain += 1
        step = self.step_seconds
        if not step or committed <= 0:
            return
        self.spent += seconds / step
        self.committed += committed
        self.drafted += int(drafted)
        if self.drafted < MIN_DRAFTED:
            return
        if self.committed < FLOOR * self.spent and self.spent - self.committed > MIN_LOSS:
            self.trips += 1
            self.paused = self.pause
            self.pause *= 2
            self.spent, self.committed, self.drafted = 0.0, 0, 0

    @property
    def rate(self) -> float:
        """Committed tokens per plain step spent since the count started (1: plain's)."""
        return self.committed / self.spent if self.spent else 1.0
