"""What one round verifies and which of it it keeps, pure: no cache, no matcher, no policy.

Notation as in ``decoding.speculative`` (Leviathan et al. 2023; Chen et al. 2023): ``p``
is the target's distribution at a verify row, ``q`` the drafter's; drafts d_1..d_k were
verified in one decode and row i is p(. | committed + d_1..d_i). ``accept`` applies the rules:

- temperature 0: d_i is accepted while it equals argmax p_i; the first mismatch is
  replaced by argmax p_i. Output is token for token the target's greedy output.
- temperature > 0 with q: d_i is accepted with probability min(1, p_i(d_i)/q_i(d_i));
  on rejection the replacement is sampled from norm(max(0, p_i - q_i)). With a fixed
  proposal (q is None) the target samples x ~ p_i itself and d_i is accepted iff x == d_i,
  otherwise x is kept. Either way the committed tokens follow p exactly.
- when every draft is accepted, row k gives a bonus token for free.

Under a constraint the rows it is handed are already masked (p', and q' from the
drafter); the rules are the same. Also here: the record of what a round verifies
(``Drafts``), the proposal as far as it is seen (``cut_proposal``), led by the grammar's
forced tokens (``with_forced``) or judged by its match before them (``beyond_forced``), all
``dataclasses.replace`` on the drafter's record, and
what the round's own token says of the first unverified id (``next_ok``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np

from . import sampling
from .drafters import Proposal
from .params import SamplingParams


@dataclass(frozen=True)
class Drafts:
    """What one round verifies: the first ids of ``proposal`` the policy chose, cut
    before ``cut``, the index of the first id the target's vocabulary lacks (None: none
    was cut; ``accept`` rejects that draft as p(d) = 0)."""

    proposal: Proposal
    ids: list[int]
    cut: int | None = None
    chosen: int | None = None  # how many of the proposal's ids the policy chose (None: ``ids``)

    @property
    def verified(self) -> Proposal:
        """The proposal as far as it is verified (what the drafter hears back)."""
        n = len(self.ids) if self.chosen is None else self.chosen
        return cut_proposal(self.proposal, n) if n < len(self.proposal.ids) else self.proposal


def cut_proposal(proposal: Proposal, n: int) -> Proposal:
    """``proposal`` seen only up to ``n`` ids (a drafter may offer more than asked)."""
    return replace(
        proposal,
        ids=list(proposal.ids[:n]),
        q=None if proposal.q is None else proposal.q[:n],
        confidence=tuple(proposal.confidence[:n]),
        after_break=tuple(proposal.after_break[:n]),
        probs=tuple(proposal.probs[:n]),
    )


def beyond_forced(proposal: Proposal, forced: int) -> Proposal:
    """A lookup proposal (prompt lookup's or the memory's) drafted after ``forced`` tokens
    the grammar drafted, judged by the part of its context match that lies before them.
    Its ``match_len`` counted them, but they match wherever the structure repeats (the
    same keys in every item of an array, the schema quoted in the prompt), whatever the
    model will choose next: after them, matches of 5-8 tokens went on with the previous
    item's value, right for 2 of 25 and 5 of 72 ids on two invoices (issue 43). Judged by the
    match length of the model's own text, such drafts fall in the short matches' buckets,
    which are learned from them."""
    if forced <= 0 or not proposal.match_len:
        return proposal
    return replace(proposal, match_len=max(0, proposal.match_len - forced))


def with_forced(proposal: Proposal, forced: Sequence[int]) -> Proposal:
    """The grammar's ``forced`` tokens followed by ``proposal``: a fixed proposal for the
    forced part (their rows of ``q`` are None), near-certain for the policy."""
    f = len(forced)
    return replace(
        proposal,
        ids=[*forced, *proposal.ids],
        forced=f,
        q=None if proposal.q is None else [*([None] * f), *proposal.q],
        confidence=(*([1.0] * f), *proposal.confidence),
        after_break=(*([False] * f), *proposal.after_break) if proposal.after_break else (),
    )


Row = Callable[[int, Sequence[int]], np.ndarray]


def accept(
    drafts: Sequence[int],
    row: Row,
    q: Sequence[np.ndarray | None] | None,
    params: SamplingParams,
    rng: np.random.Generator,
    is_eog: Callable[[int], bool],
    cut: int | None = None,
) -> tuple[list[int], list[bool], int]:
    """The tokens one round commits, whether each is a kept draft, and how many drafts
    were kept: the acceptance rules of the module docstring, nothing else (no cache, no
    policy). ``row(i, out)`` is p at verify row i as sampled (penalised for this
    round's tokens so far, ``out``; masked under a constraint), ``q`` the drafter's rows
    (None, or a row None: a fixed proposal, verified by matching a sample of p), and
    ``cut`` the index of a sampled draft the target lacked (``Drafts.cut``): when every
    draft before it is kept, the token comes from the residual max(0, p - q[cut]).
    Drafting stops at an accepted end-of-generation draft (its ``from_draft`` is True)."""
    out: list[int] = []
    from_draft: list[bool] = []
    for i, d in enumerate(drafts):
        r = row(i, out)
        if params.greedy:
            x = int(np.argmax(r))
            ok = x == d
        else:
            p = sampling.probs_from_logits(r, params)
            if q is None or q[i] is None:
                x = sampling.sample(p, rng)
                ok = x == d
            else:
                q_i = _fit(q[i], p.shape[0])
                ok = sampling.accept(float(p[d]), float(q_i[d]), rng)
                if not ok:
                    x = sampling.sample(sampling.residual(p, q_i), rng)
        if not ok:
            out.append(x)
            from_draft.append(False)
            return out, from_draft, i
        out.append(d)
        from_draft.append(True)
        if is_eog(d):  # generation ends here: the drafts after it are no candidates
            return out, from_draft, i + 1
    # Every draft accepted: the last row is p after d_k, a bonus token for free.
    last = row(len(drafts), out)
    if params.greedy:
        out.append(int(np.argmax(last)))
    elif cut is not None and q is not None and q[cut] is not None:
        # the cut draft, sampled from q, is rejected for sure (p(d) = 0), so the token
        # comes from the residual max(0, p - q) as for any rejection
        p = sampling.probs_from_logits(last, params)
        out.append(sampling.sample(sampling.residual(p, _fit(q[cut], p.shape[0])), rng))
    else:
        out.append(sampling.sample(sampling.probs_from_logits(last, params), rng))
    from_draft.append(False)
    return out, from_draft, len(drafts)


def next_ok(proposal: Proposal, out: Sequence[int], from_draft: Sequence[bool], n_acc: int, tested: int) -> bool | None:
    """A fixed proposal's first unverified id, when every tested draft was kept, is
    judged for free: the round's own next token is what verifying it would have tested
    (None: nothing is known)."""
    if proposal.q is None and n_acc == tested and not from_draft[-1] and len(proposal.ids) > n_acc:
        return out[-1] == proposal.ids[n_acc]
    return None


def _fit(q_row: np.ndarray, n_vocab: int) -> np.ndarray:
    """Draft probabilities on the target's vocabulary size (they may differ by <= 128;
    ids the draft does not have get probability 0, ids the target lacks are dropped)."""
    if q_row.shape[0] == n_vocab:
        return q_row
    if q_row.shape[0] > n_vocab:
        return q_row[:n_vocab]
    return np.concatenate([q_row, np.zeros(n_vocab - q_row.shape[0], dtype=q_row.dtype)])
