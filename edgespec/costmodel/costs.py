"""What a verify or a batch costs, in target steps: the priors and their online refinement.

c(n) is the time of one target decode of n tokens relative to a one-token step. The
drafting policy (``edgespec.decoding.policy``) weighs expected committed tokens against it, and a
batch of sequences (``edgespec.batching.runner``) weighs its drafts against the batch's c(n).
``OnlineCost`` starts from a prior (the profile's or ``tune``'s figures, else one of the
measured curves below) and refines it from the timings of the rounds themselves.

Pure arithmetic over numbers handed in: no llama.cpp, no timing of its own.
"""

from __future__ import annotations

import bisect
import math

from .adaptive import VerifyCost

# c(n) of Qwen2.5-Coder-1.5B Q4_K_M on llama.cpp's kernels, 2-core AVX2 VM (tune), used
# as the prior on a CPU when no profile figure is given. Note the dips at 8 and 16.
CPU_VERIFY_PRIOR = VerifyCost(
    tuple(range(1, 17)),
    (1.0, 1.67, 2.2, 2.69, 3.3, 3.85, 4.61, 4.57, 5.3, 5.8, 6.2, 6.49, 7.2, 7.8, 8.31, 6.84),
)
# The same on the batch-invariant kernels (``exact``): no tiles, so no dips.
CPU_EXACT_VERIFY_PRIOR = VerifyCost(
    tuple(range(1, 17)),
    (1.0, 2.18, 2.65, 3.22, 3.93, 4.54, 5.0, 5.79, 6.13, 6.88, 7.35, 7.86, 8.45, 9.07, 9.73, 10.19),
)
# A memory-bound accelerator: verifying a few more tokens is nearly free.
GPU_VERIFY_PRIOR = VerifyCost((1, 16), (1.0, 1.45))
# One decode of n sequences, one new token each (100-token contexts), relative to one:
# measured with llama.cpp's low-level API on the 2-core dev VM, 1.5B Q4_K_M, llama.cpp's
# kernels (issue 14's table). The weights are read once for all of them.
CPU_BATCH_PRIOR = VerifyCost((1, 4, 8, 16, 32), (1.0, 2.67, 4.54, 5.27, 9.13))
# A GPU decodes dozens of sequences for little more than one (memory-bound).
GPU_BATCH_PRIOR = VerifyCost((1, 16, 64), (1.0, 1.3, 2.2))


class OnlineCost:
    """c(n) for n = 1..n_max: a prior refined by timed rounds.

    For each n it keeps a decaying mean of the measured seconds. The single-step time
    t1 is taken from the n = 1 rounds when there are enough of them, otherwise from all
    rounds through the prior's shape. Then c(n) = (w_n·t̄_n / t1 + w0_n·prior(n)) /
    (w_n + w0_n): the prior counts as ``prior_weight`` measurements at first, and fades
    at the rate old measurements do; the prior is first scaled by the measured/prior
    ratio of n's nearest measured neighbours, so an n not measured yet follows them.
    """

    def __init__(self, prior: VerifyCost, n_max: int = 16, *, prior_weight: float = 2.0,
                 decay: float = 0.97) -> None:
        self.n_max = max(1, n_max)
        self.prior = [prior(n) for n in range(self.n_max + 1)]  # index 0 unused
        self.prior_w = [prior_weight] * (self.n_max + 1)
        self.decay = decay
        self.mean_s = [0.0] * (self.n_max + 1)
        self.weight = [0.0] * (self.n_max + 1)
        self.table = list(self.prior)  # c(n) by index; table[1] == 1
        self.table[0] = 0.0

    def observe(self, n: int, seconds: float) -> None:
        """One verify of n tokens took ``seconds``."""
        if not 1 <= n <= self.n_max or not seconds > 0.0 or not math.isfinite(seconds):
            return
        w = self.weight[n] * self.decay
        self.mean_s[n] = (self.mean_s[n] * w + seconds) / (w + 1.0)
        self.weight[n] = w + 1.0
        self.prior_w[n] *= self.decay
        self._refresh()

    @property
    def step_seconds(self) -> float | None:
        """Estimated seconds of a one-token step (None before any measurement)."""
        if self.weight[1] >= 3.0:
            return self.mean_s[1]
        num = den = 0.0
        for n in range(1, self.n_max + 1):
            if self.weight[n]:
                num += self.weight[n] * self.mean_s[n]
                den += self.weight[n] * self.prior[n]
        return num / den if den else None

    def _refresh(self) -> None:
        t1 = self.step_seconds
        if not t1:
            return
        # The prior's shape, scaled by what was measured around each n: an n's prior is
        # multiplied by the measured/prior ratio interpolated between its nearest measured
        # neighbours (n = 1 has ratio 1), so a machine slower or faster at batches than
        # the prior is seen at every n, not only where the policy happened to verify.
        xs, ratio = [1], [1.0]
        for n in range(2, self.n_max + 1):
            if self.weight[n]:
                xs.append(n)
                ratio.append(self.mean_s[n] / t1 / self.prior[n])
        for n in range(2, self.n_max + 1):
            i = bisect.bisect_left(xs, n)
            lo = i - 1
            hi = i + 1 if i < len(xs) and xs[i] == n else i  # leave n's own measurement out
            if hi < len(xs):
                f = (n - xs[lo]) / (xs[hi] - xs[lo])
                scale = ratio[lo] + f * (ratio[hi] - ratio[lo])
            else:
                scale = ratio[lo]
            w, w0 = self.weight[n], self.prior_w[n]
            base = self.prior[n] * scale
            measured = self.mean_s[n] / t1 if w else 0.0
            self.table[n] = max(1.0, (w * measured + w0 * base) / (w + w0))

    def __call__(self, n: int) -> float:
        if n <= self.n_max:
            return self.table[max(n, 1)]
        return self.table[self.n_max] * n / self.n_max

    def as_verify_cost(self) -> VerifyCost:
        return VerifyCost(tuple(range(1, self.n_max + 1)), tuple(self.table[1:]))
