"""Drafters that are models: a draft model of the target's family (``ModelDrafter``), and
the drafting step a model's logits share with the target's own MTP head (``draft_tokens``,
used by ``decoding.mtp``): greedy at temperature 0, sampled from q above it, masked by a
grammar's guide, stopped by the policy's ``keep_drafting``.

It knows llama.cpp only through the draft model's ``llama.Context``; the protocol it
follows is ``decoding.drafters``'.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..constraints import mask_logits
from ..llama import Context, Model, common_prefix_len
from . import sampling
from .drafters import BaseDrafter, KeepDrafting, Pick, Proposal
from .params import SamplingParams


class ModelDrafter(BaseDrafter):
    """A small GGUF model of the target's family, with its own context and KV cache.

    Its cache follows the committed text across rounds: each ``propose`` trims it to the
    longest prefix it shares with the committed tokens (dropping rejected drafts) and
    decodes only what is new — usually the last draft token it never decoded plus the
    target's bonus/correction token — then drafts one token per decode. At temperature
    0 it drafts greedily; above it samples from its own distribution q and hands q back
    for the rejection test. It stops early when its top probability falls below
    ``p_min``: a guess that unsure costs more verify time than it is likely to save.

    Its vocabulary may be up to 128 ids smaller than the target's (llama.cpp's rule;
    Qwen2.5-7B has 152,064 tokens, its 0.5B drafter 151,936), so the committed text can
    hold ids the draft model does not have, and decoding one would fail. The draft model
    never sees them: it resyncs past them, conditioning on the text after the last such
    id only (its cache then starts there, at position 0). We chose this over proposing
    nothing while such an id is in the text because an id can come with the prompt or
    early in a chat, which would silence the drafter for the rest of the session; a
    draft that sees less context is worse but still verified by the target, so output is
    unchanged either way. Right after such an id (nothing in the text after it) it
    proposes nothing. (Ids it proposes are its own; the loop cuts those the target lacks.)
    """

    name = "model"

    def __init__(
        self, model: Model, *, n_ctx: int, n_batch: int = 512, n_threads: int | None = None, p_min: float = 0.0
    ) -> None:
        self.model = model
        self.ctx = Context(model, n_ctx=n_ctx, n_batch=n_batch, n_threads=n_threads)
        self.p_min = p_min
        self._params = SamplingParams()
        self._rng = np.random.default_rng(0)

    @property
    def t_decode(self) -> float:
        return self.ctx.t_decode

    def begin(self, tokens: Sequence[int], params: SamplingParams, rng: np.random.Generator) -> None:
        self._params = params
        self._rng = rng
        # prefill now (all but the last token) so the first round pays only for drafting
        self._sync(tokens[:-1], want_logits=False)

    def _sync(self, tokens: Sequence[int], want_logits: bool = True) -> np.ndarray | None:
        """Make the draft cache hold exactly ``tokens`` past the last id outside the
        draft's vocabulary; return the last row's logits. If no token is left, return
        None and leave the cache as it is (the next call trims it)."""
        ctx = self.ctx
        tokens = self._in_vocab_tail(tokens)
        if not tokens:
            return None
        keep = common_prefix_len(ctx.tokens, tokens)
        if want_logits and keep == len(tokens):
            keep -= 1  # re-decode the last token to get its logits
        if ctx.recurrent:  # its drafts were decoded one per call: back through a checkpoint
            keep = ctx.reuse_chunks(tokens[:keep], 0)
        else:
            ctx.rollback(keep)
        new = tokens[keep:]
        if not new:
            return None
        logits = ctx.decode(new, rows=(len(new) - 1,) if want_logits else ())
        ctx.checkpoint()  # a recurrent state's copy here, where the next round resumes
        return logits

    def _in_vocab_tail(self, tokens: Sequence[int]) -> Sequence[int]:
        """``tokens`` after the last id the draft model lacks (all of them if none)."""
        n_vocab = self.model.n_vocab
        if not tokens or (max(tokens) < n_vocab and min(tokens) >= 0):  # the usual case, in C
            return tokens
        for i in range(len(tokens) - 1, -1, -1):
            if not 0 <= tokens[i] < n_vocab:
                return tokens[i + 1 :]
        return tokens

    def propose(
        self,
        tokens: Sequence[int],
        k: int,
        keep_drafting: KeepDrafting | None = None,
        guide=None,
        pick: Pick | None = None,
    ) -> Proposal:
        if k <= 0:
            return Proposal([])
        # Never draft past the context: the draft cache holds len(tokens) + k - 1 tokens.
        k = min(k, self.ctx.n_ctx - len(tokens))
        if k <= 0:
            return Proposal([])
        logits = self._sync(tokens)
        if logits is None:  # the last token is one the draft model does not have
            return Proposal([])
        return draft_tokens(
            logits[0],
            lambda tok: self.ctx.decode([tok])[0],
            k,
            self._params,
            self._rng,
            guide=guide,
            keep_drafting=keep_drafting,
            is_eog=self.model.is_eog,
            p_min=self.p_min,
            source="model",
        )

    def close(self) -> None:  # (accepted: nothing; the next _sync trims what was rejected)
        self.ctx.close()


def draft_tokens(
    row: np.ndarray,
    step: Callable[[int], np.ndarray],
    k: int,
    params: SamplingParams,
    rng: np.random.Generator,
    *,
    guide=None,
    keep_drafting: KeepDrafting | None = None,
    is_eog: Callable[[int], bool],
    p_min: float = 0.0,
    source: str,
) -> Proposal:
    """Draft up to ``k`` tokens one at a time from a model's logits: ``row`` is the first
    draft's, ``step(tok)`` the next one's after drafting ``tok`` (never called after the
    last). Greedy at temperature 0; above it sampled from q (handed back for the rejection
    test); under a ``guide`` masked (q') and the guide advanced. It stops at an
    end-of-generation token, when the top probability falls below ``p_min``, or when
    ``keep_drafting`` says so. What the model drafter and the MTP head share."""
    greedy = params.greedy
    ids: list[int] = []
    confs: list[float] = []
    qs: list[np.ndarray] = []
    for i in range(k):
        if guide is not None:
            row = _masked(row, guide.allowed())  # q': the draft's masked distribution
            if not np.isfinite(row.max()):
                break  # every allowed token is outside the draft's vocabulary
        if greedy:
            tok = int(np.argmax(row))
            conf = _top_prob(row, tok)
        else:
            q = sampling.probs_from_logits(row, params)
            conf = float(q.max())
            tok = sampling.sample(q, rng)
        if conf < p_min:
            break  # a fixed cut-off, when one is set (the learned policy needs none)
        ids.append(tok)
        confs.append(conf)
        if not greedy:
            qs.append(q)
        if guide is not None:
            guide.consume([tok])  # the next draft's mask follows this one
        if is_eog(tok):
            break  # nothing follows the end of generation
        if keep_drafting is not None and not keep_drafting(i + 1, conf):
            break
        if i + 1 < k:
            # the last draft token is not decoded here: if it is accepted, the next
            # round decodes it together with the target's bonus token
            row = step(tok)
    q_arr = np.stack(qs) if (qs and not greedy) else None
    return Proposal(ids, q_arr, confidence=tuple(confs), source=source)


def _masked(row: np.ndarray, allowed: np.ndarray | None) -> np.ndarray:
    """A draft logits row with the tokens the grammar forbids at -inf (``allowed`` is
    over the target's vocabulary, which may be up to 128 ids longer or shorter)."""
    if allowed is None:
        return row
    n = row.shape[0]
    if allowed.shape[0] < n:
        allowed = np.concatenate([allowed, np.zeros(n - allowed.shape[0], dtype=bool)])
    return mask_logits(row, allowed[:n])


def _top_prob(row: np.ndarray, tok: int) -> float:
    """Softmax probability of ``tok`` (the argmax) at temperature 1."""
    m = row[tok]
    return 1.0 / float(np.exp(row - m).sum())  # float32 is plenty for a confidence
