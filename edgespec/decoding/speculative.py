"""The speculation loop: one round = propose -> verify -> accept -> roll back.

Notation follows Leviathan et al. (2023) and Chen et al. (2023): ``p`` is the target's
distribution at a position, ``q`` the drafter's. A round drafts up to k tokens
d_1..d_k, then decodes ``[x_last, d_1, ..., d_k]`` in ONE target ``llama_decode`` with
logits at those k+1 rows: row i is p(. | committed + d_1..d_i). Which drafts are kept is
``decoding.verify.accept`` (pure; its docstring has the rules): greedy keeps the drafts that
match argmax p; sampling keeps d_i with probability min(1, p_i(d_i)/q_i(d_i)) and replaces
the first rejection from norm(max(0, p_i - q_i)), or, for a fixed proposal (q is None),
matches a sample of p; all kept, row k gives a bonus token. The committed tokens follow p.

KV bookkeeping (the part that is easy to get off by one): the target's cache holds every
committed token except the last one, ``x_last``, which has been chosen but not yet
decoded. The verify batch starts with it at position ``len(committed) - 1``. (In the
first round the cache may also lack the prompt's uncached tail, ``prefill``: the verify
batch then follows it in the same decode, as llama-server's prompt decode gives the
first token, so the prompt costs no separate weight read.) After
accepting n drafts the cache keeps ``x_last, d_1..d_n`` and the rest is removed with
``llama_memory_seq_rm``; the round's new last token (the correction or bonus) is, again,
not yet decoded. So after every round ``target.pos_max() == len(committed) - 2``.

Under a constraint (``matcher``, see ``edgespec.constraints``) every distribution is
the MASKED one, renormalised: p' = probs(mask_i(logits_i)) at verify row i, where mask_i is
the grammar state after committed + d_1..d_(i-1); a model drafter samples its drafts from
its own masked q' (decoding/drafters.py) and the test uses p'/q'. Prompt-lookup drafts are cut to
their grammar-valid prefix before verification (and judged by their context match before the
grammar's tokens of the round, ``verify.beyond_forced``), and the tokens the grammar forces
(``compute_ff_tokens``), then the likely tokens of the text it forces beyond them, lead
the draft at no drafting cost: a fixed proposal, accepted iff the target's masked sample
is that token (certain when it is the only one allowed).
The output is therefore distributed exactly as masked sampling from the target; under
greedy it is token for token the constrained run with no drafter (given batch-invariant
kernels). The matcher moves with the KV cache: after every round it has consumed exactly
the tokens committed after the prompt (asserted when ``settle`` commits).

Asked for ``logprobs`` (``SpeculativeLoop.logprobs``: how many alternatives per token),
each committed token also gets the target's log-probability at its verify row, the row
the token was chosen from (``edgespec.decoding.logprob``); not asked, nothing is computed.

A round in halves, so that a batch (``edgespec.batching``) can verify many sequences in
one decode: ``propose`` (the proposal, and the seconds drafting it took), the policy's
``choose``, ``drafts`` (a frozen ``Drafts`` record: what is verified, and where it was
cut), the target's decode, then ``settle``: ``accept`` (the rules, ``decoding.verify``),
``_commit`` (roll back, commit, advance the matcher), ``policy.observe`` and
``count_round``. What one half hands the next travels in those values, never on the loop;
proposals are changed with ``dataclasses.replace`` (``verify.cut_proposal``, ``verify.with_forced``).

This module knows nothing about text, stop strings or the screen: it yields token ids
with their ``from_draft`` flag and a ``Round`` record per round.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from ..constraints import Matcher, apply_mask
from ..events import Round, Stats, TokenLogprob
from ..llama import Context
from . import sampling
from .drafters import Drafter, Pick, Proposal
from .logprob import token_logprob
from .params import SamplingParams
from .policy import DraftPolicy, FixedPolicy
from .verify import Drafts, Row, accept, beyond_forced, cut_proposal, next_ok, with_forced


@dataclass
class RoundResult:
    tokens: list[int]
    from_draft: list[bool]
    info: Round
    logprobs: list[TokenLogprob] | None = None  # one per token, when asked for


@dataclass
class SpeculativeLoop:
    """State of one generation: the committed tokens and both caches kept in step."""

    target: Context
    drafter: Drafter
    committed: list[int]  # prompt + generated; the last one is not in the target KV
    params: SamplingParams
    rng: np.random.Generator
    policy: DraftPolicy | FixedPolicy
    stats: Stats
    n_vocab: int
    is_eog: Callable[[int], bool] = lambda t: False
    eog_ids: Sequence[int] = ()  # banned under params.ignore_eos / min_tokens
    rounds: int = 0
    last_k: int = 0  # the draft-length bound of the last round
    matcher: Matcher | None = None  # the constraint's state (None: free generation)
    n_prompt: int = -1  # prompt tokens in ``committed`` (default: all it holds at the start)
    logprobs: int | None = None  # None: none; N >= 0: each token's logprob and the top N
    # prompt tokens not yet in the target's KV (before x_last): the next round decodes them
    # in its verify batch, so the prompt's prefill also gives the first token's logits
    prefill: list[int] = field(default_factory=list)
    prompt_done: float | None = None  # when that decode returned (perf_counter)
    prefill_seconds: float = 0.0  # its seconds in the target's decode (prompt time, not a verify)

    def __post_init__(self) -> None:
        if self.n_prompt < 0:
            self.n_prompt = len(self.committed)  # the matcher consumes what follows

    def round(self, budget: int) -> RoundResult:
        """One speculation round committing at most ``budget`` (>= 1) tokens."""
        if self.prefill and (self.target.checkpoints is not None or self.drafter.reads_hidden):
            # a recurrent target: the prompt apart, its state kept where a request with this
            # prompt resumes; an MTP head or an assistant drafts from the prompt's hidden
            # rows: first
            self._prefill_apart(self.prefill)
        proposal, draft_seconds = self.propose(budget)
        # The policy picks how many of the proposed ids are worth verifying.
        n = self.policy.choose(
            proposal.ids,
            proposal.match_len,
            proposal.confidence,
            proposal.after_break,
            forced=proposal.forced,
            source=proposal.source,
            probs=proposal.probs,
        )
        drafts = self.drafts(proposal, n)
        masks = self.masks(drafts.ids)
        # Verify: x_last plus every draft in one decode, logits at all k+1 rows; in the
        # first round behind the rest of the prompt (``prefill``), as one decode
        pre = self.prefill
        t1: float | None = time.perf_counter()
        t_decode = self.target.t_decode if pre else 0.0
        batch = [*pre, self.committed[-1], *drafts.ids]
        rows = self.target.decode(batch, rows=range(len(pre), len(batch)))
        if pre:  # prompt time: neither the cost model's verify step nor the stop-loss's
            self.prefill, t1 = [], None
            self.prompt_done, self.prefill_seconds = time.perf_counter(), self.target.t_decode - t_decode
        return self.settle(drafts, rows, draft_seconds=draft_seconds, verify_start=t1, masks=masks)

    def _prefill_apart(self, pre: list[int]) -> None:
        """Decode the prompt's uncached tail on its own and keep a checkpoint of the
        recurrent state after it (``llama.Context.checkpoint``): the same prompt again,
        a regenerated answer or a server's repeated request, restores it."""
        t_decode = self.target.t_decode
        self.target.decode(pre, rows=())
        self._hand_hidden()
        self.target.checkpoint()
        self.prefill = []
        self.prompt_done, self.prefill_seconds = time.perf_counter(), self.target.t_decode - t_decode

    def propose(self, budget: int) -> tuple[Proposal, float]:
        """The drafter's proposal for this round, within the room the context and one
        verify batch leave (a round commits at most ``budget`` >= 1 tokens), and the
        seconds the drafter took. Under a constraint it starts with the forced tokens
        and keeps only its valid prefix."""
        target, policy, m = self.target, self.policy, self.matcher
        L = len(self.committed)
        # Room: the verify batch occupies positions L-1 .. L-1+n and one decode call, and
        # every draft must be undoable (a recurrent target: its snapshots; llama.Context)
        room = min(budget - 1, target.n_ctx - L, target.max_drafts)
        forced = self._grammar_draft(room) if m is not None and self.drafter.name != "none" else []
        l_max = policy.limit(room - len(forced))
        t0 = time.perf_counter()
        proposal = Proposal([])
        if l_max > 0:
            base = m.consumed if m is not None else 0
            if m is not None:
                m.consume(forced)  # the drafter drafts after the forced tokens, masked
            try:
                context = self.committed + forced if forced else self.committed
                pick = self._picker(l_max, after=len(forced))
                proposal = pick([self.drafter.propose(context, l_max, policy.keep_drafting, guide=m, pick=pick)])
            finally:
                if m is not None:
                    m.rollback(m.consumed - base)
        draft_seconds = time.perf_counter() - t0
        self.stats.t_draft += draft_seconds
        return (with_forced(proposal, forced) if forced else proposal), draft_seconds

    def _picker(self, l_max: int, after: int = 0) -> Pick:
        """The loop's choice among proposals: each cut to what fits (``_fit``; drafted
        ``after`` that many tokens of the grammar's); with several
        (``decoding.memory``) the policy keeps the one it expects the most of per unit of
        cost; an empty proposal when none is left."""
        policy = self.policy

        def pick(proposals: list[Proposal]) -> Proposal:
            options = [p for p in (self._fit(p, l_max, after) for p in proposals) if p.ids]
            if len(options) > 1:
                options.sort(
                    key=lambda p: -policy.rank(p.ids, p.match_len, p.after_break, source=p.source, probs=p.probs)
                )
            return options[0] if options else Proposal([])

        return pick

    def _fit(self, proposal: Proposal, l_max: int, after: int = 0) -> Proposal:
        """``proposal`` cut to ``l_max`` ids and, under a constraint, a fixed proposal cut to
        its grammar-valid prefix (the matcher stands after the forced tokens) and judged
        by its match before the ``after`` tokens the grammar drafted (``beyond_forced``)."""
        if len(proposal.ids) > l_max:
            proposal = cut_proposal(proposal, l_max)
        m = self.matcher
        if m is not None and proposal.q is None and proposal.ids:
            ok = m.validate(proposal.ids)
            proposal = cut_proposal(proposal, ok) if ok < len(proposal.ids) else proposal
            proposal = beyond_forced(proposal, after)
        return proposal

    def _grammar_draft(self, room: int) -> list[int]:
        """What the grammar drafts by itself: the forced tokens, then the likely tokens of
        the text it forces beyond them (``Matcher.likely``); a fixed proposal, verified
        like any other, so a wrong guess costs a verify row and never the output."""
        m = self.matcher
        if room <= 0:
            return []
        forced = m.forced()[:room]
        if len(forced) < room:
            base = m.consumed
            m.consume(forced)
            try:
                forced += m.likely()[: room - len(forced)]
            finally:
                m.rollback(m.consumed - base)
        return forced

    def masks(self, drafts: Sequence[int]) -> list | None:
        """The grammar's mask for each verify row (None without a constraint): row i is
        the state after the drafts before i. The matcher is left where it was."""
        if self.matcher is None:
            return None
        return self.matcher.masks(drafts, self.is_eog)

    def drafts(self, proposal: Proposal, n: int) -> Drafts:
        """The first ``n`` proposed ids, cut at the first id the target lacks: a draft
        vocabulary may be up to 128 ids larger than the target's. That draft cannot be
        decoded; it is still rejected by the rules in ``accept``, as p(d) = 0."""
        ids = list(proposal.ids[:n])
        bad = next((i for i, d in enumerate(ids) if not 0 <= d < self.n_vocab), None)
        return Drafts(proposal, ids if bad is None else ids[:bad], bad, len(ids))

    def settle(
        self,
        drafts: Drafts,
        rows: np.ndarray,
        draft_seconds: float = 0.0,
        verify_start: float | None = None,
        masks: list | None = None,
    ) -> RoundResult:
        """Accept or reject ``drafts`` against the target's logit ``rows`` (x_last and
        each draft: len(drafts.ids) + 1 rows), roll the sequence back past the first
        rejection, commit, and let the policy learn. ``draft_seconds``: what drafting
        them took (``propose``); ``verify_start``: when this round's own decode began
        (None when it shared a batch: the batch is timed by its owner). ``masks``: the
        rows' grammar masks (``masks()``), computed here when not given."""
        proposal = drafts.proposal
        if masks is None and self.matcher is not None:
            masks = self.masks(drafts.ids)
        row, read = self._row_reader(rows, masks), None
        if self.logprobs is not None:
            row, read = _recorded(row)
        self.last_k = self.policy.bound
        out, from_draft, n_acc = accept(drafts.ids, row, proposal.q, self.params, self.rng, self.is_eog, cut=drafts.cut)
        # an accepted end-of-generation draft ends generation: the drafts past it were
        # never candidates, so they count as neither drafted nor rejected
        tested = drafts.ids[:n_acc] if from_draft[-1] else drafts.ids
        # token j was chosen at verify row j (a kept draft, the correction or the bonus)
        lps = None if read is None else [token_logprob(r, t, self.logprobs) for r, t in zip(read, out)]
        self._commit(out, n_acc)
        self._hand_hidden()
        self.drafter.accepted(drafts.verified, n_acc)  # (the memory counts its own drafts)
        n_forced = min(proposal.forced, len(drafts.ids))
        self.policy.observe(
            batch=len(drafts.ids) + 1,
            tested=len(tested),
            accepted=n_acc,
            verify_seconds=0.0 if verify_start is None else time.perf_counter() - verify_start,
            draft_seconds=draft_seconds,
            drafted=len(proposal.ids) - proposal.forced,
            match_len=proposal.match_len,
            next_ok=next_ok(proposal, out, from_draft, n_acc, len(tested)),
            after_break=proposal.after_break,
            forced=n_forced,
            source=proposal.source,
            probs=proposal.probs,
        )
        self.rounds += 1
        source = proposal.source or self.drafter.name
        count_round(self.stats, len(tested), n_acc, n_forced, source)
        info = Round(
            index=self.rounds,
            drafted=len(tested),
            accepted=n_acc,
            rejected=len(tested) - n_acc,
            k=self.policy.bound,
            drafter=self.drafter.name,
            rejected_ids=tuple(tested[n_acc:]),
            forced=n_forced,
            source=source if len(tested) > n_forced else "",
        )
        return RoundResult(out, from_draft, info, lps)

    def _commit(self, out: list[int], n_acc: int) -> None:
        """Roll back and commit ``out``: the target keeps x_last and the ``n_acc``
        accepted drafts (positions < L + n_acc), and the grammar moves with the KV cache
        (it consumes exactly what is committed)."""
        self.target.rollback(len(self.committed) + n_acc)
        self.committed.extend(out)
        m = self.matcher
        if m is not None:
            m.consume(out)
            assert m.consumed == len(self.committed) - self.n_prompt, "matcher out of step with the KV cache"
            self.stats.t_mask = m.t_mask

    def _hand_hidden(self) -> None:
        """The protocol's one door to the target (``decoding.drafters``): a drafter that
        reads hidden rows (the MTP head, a Gemma 4 assistant) gets those of the positions
        the target's cache kept of its last decode; any other drafter, nothing, and none
        are asked for."""
        if self.drafter.reads_hidden:
            self.drafter.observe_verify(self.target.tokens, self.target.hidden_kept())

    def _row_reader(self, rows: np.ndarray, masks: list | None):
        """``row(i, out)``: verify row i as this round samples it, ``_logits`` then the
        grammar's mask; the masking time counts in the matcher's ``t_mask``."""
        if masks is None:
            return lambda i, out: self._logits(rows[i], out)
        m = self.matcher

        def row(i: int, out: Sequence[int]) -> np.ndarray:
            logits = self._logits(rows[i], out)
            t0 = time.perf_counter()
            masked = apply_mask(masks[i], logits)
            m.t_mask += time.perf_counter() - t0
            return masked

        return row

    def _logits(self, row: np.ndarray, out: Sequence[int]) -> np.ndarray:
        """The target's row for the position after committed + ``out`` (this round's
        tokens so far), as plain decoding would sample it: logit bias, then penalties,
        then the end-of-generation ban (``ignore_eos``, or fewer than ``min_tokens``
        generated before this position)."""
        params = self.params
        if params.logit_bias:
            row = sampling.apply_logit_bias(row, params.logit_bias)
        row = _penalized(row, self.committed, out, params)
        generated = len(self.committed) - self.n_prompt + len(out)
        if params.ignore_eos or generated < params.min_tokens:
            row = sampling.ban(row, self.eog_ids)
        return row


def count_round(st: Stats, tested: int, n_acc: int, n_forced: int, source: str = "") -> None:
    """A round's counts in ``st``: ``tested`` drafts, ``n_acc`` of them kept, the first
    ``n_forced`` the grammar's and the rest from ``source`` ("prompt", "memory", "model", ...);
    per draft position, how often it was drafted and kept; and both per source."""
    st.rounds += 1
    if n_forced:
        st.count_source("grammar", min(tested, n_forced), min(n_acc, n_forced))
    if tested > n_forced:
        st.count_source(source or "prompt", tested - n_forced, max(0, n_acc - n_forced))
    st.drafted += tested
    st.accepted += n_acc
    st.rejected += tested - n_acc
    st.from_draft_tokens += n_acc
    st.forced += n_forced
    st.forced_accepted += min(n_acc, n_forced)
    for j in range(tested):
        if j >= len(st.drafted_by_position):
            st.drafted_by_position.append(0)
            st.accepted_by_position.append(0)
        st.drafted_by_position[j] += 1
        st.accepted_by_position[j] += 1 if j < n_acc else 0


def _recorded(row: Row) -> tuple[Row, list[np.ndarray]]:
    """``row`` that also keeps every row it reads, in order (for the logprobs)."""
    read: list[np.ndarray] = []

    def reading(i: int, out: Sequence[int]) -> np.ndarray:
        r = row(i, out)
        read.append(r)
        return r

    return reading, read


def _penalized(row: np.ndarray, history: Sequence[int], extra: Sequence[int], params: SamplingParams) -> np.ndarray:
    """The target's logits with repetition penalties over the last ``penalty_last_n``
    tokens of committed + this round's tokens (``-1``: all of them), as plain decoding
    would see them at this position."""
    if not params.uses_penalties:
        return row
    n = params.penalty_last_n
    # apply_penalties keeps the last n of what it is given; -1 means all of it, which
    # history[-n:] (= history[1:]) is not
    recent = history if n < 0 else history[-n:]
    return sampling.apply_penalties(row, [*recent, *extra], params)
