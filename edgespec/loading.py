"""``edgespec.load``: an Engine from any model name, with the drafter chosen as the CLI
chooses it; ``engine_for``: the Engine a ``Plan`` describes.

``Engine`` itself takes files (it sits below the catalog and the planner). This is the
one call a script makes when it has a name instead: a catalog name, ``ollama:NAME:TAG``,
an LM Studio ``publisher/repo``, ``hf:org/repo``, or a path. The planner picks the
profile, the drafter (every compatible local model, prompt lookup or plain decoding,
ranked by the cost model) and k, exactly as ``edgespec generate --target NAME`` does;
``draft=`` and ``k=`` override it the same way as ``--draft`` and ``--k`` (the drafter's
name normalised as the command line normalises it). The engine keeps the plan as
``engine.plan``.
"""

from __future__ import annotations

from typing import Any

from .costmodel.adaptive import normalize_draft
from .engine import Engine
from .planning.planner import Plan, plan


def load(
    target: str | None = None,
    *,
    draft: str | None = None,
    profile: str | None = "auto",
    k: int | None = None,
    n_ctx: int | None = None,
    exact: bool = False,
    offline: bool | None = None,
    **engine_options: Any,
) -> Engine:
    """Plan for ``target`` (None: the profile's default pair) and build its Engine.

    ``engine_options`` go to ``Engine`` as they are (``n_threads``, ``n_batch``, ...).
    The plan that was used is on the engine as ``engine.plan``. Raises the planner's
    errors (an unknown or ambiguous name lists the candidates) before loading anything.
    """
    p = plan(profile, target=target, draft=normalize_draft(draft), k=k, n_ctx=n_ctx, exact=exact, offline=offline)
    return engine_for(p, offline=offline, **engine_options)


def engine_for(p: Plan, *, offline: bool | None = None, **engine_options: Any) -> Engine:
    """The Engine plan ``p`` describes (``engine_options`` on top, as ``Engine`` takes
    them), keeping the plan as ``engine.plan``."""
    engine = Engine(**{**p.engine_kwargs(offline=offline), **engine_options})
    engine.plan = p
    return engine
