"""The plan options: what a command line asks of the planner, declared once.

Ten options choose the model pair and how it runs: ``--profile``, ``--target``,
``--draft``, ``--k``, ``--exact``, ``--n-ctx``, ``--threads``, ``--rpc``,
``--tensor-split`` and ``--optimized/--no-optimized``. Their Typer declarations are the
``Annotated`` aliases below (each
command gives the defaults in its signature); a command gathers what it was given into
one frozen ``PlanOptions`` (where each is parsed and normalised, once) and ``make_plan``
turns that into the profile's plan with those options in it. ``bench`` and ``tune``
take seven of them (their ``--draft`` names the drafters to measure, and they measure a
grid of k).

Nothing here loads a model: the plan is data, ``common.load_engine`` builds the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any, Optional

import typer

from edgespec.costmodel.adaptive import normalize_draft
from edgespec.errors import InputError

ProfileOpt = Annotated[str, typer.Option("--profile", "-p", help="Device profile name, or 'auto'.")]
TargetOpt = Annotated[
    Optional[str],
    typer.Option("--target", "-m", help="Target model: a GGUF path or catalog name (overrides the profile)."),
]
DraftOpt = Annotated[
    Optional[str],
    typer.Option(
        "--draft",
        "-d",
        help=(
            "Drafter: a GGUF path, 'ngram', 'mtp' (the target's own MTP head), 'assistant' (a Gemma 4 "
            "target's assistant found beside it) or 'none' (overrides the profile)."
        ),
    ),
]
KOpt = Annotated[
    Optional[int],
    typer.Option("--k", min=1, help="Draft exactly this many tokens every round instead of the learned policy."),
]
ExactOpt = Annotated[
    bool,
    typer.Option(
        "--exact",
        help="Batch-invariant kernels: speculation gives plain greedy decoding's output token for "
        "token (1.2-1.3x slower per token on CPUs).",
    ),
]
OptimizedOpt = Annotated[
    bool,
    typer.Option(
        "--optimized/--no-optimized",
        help="Run the copy `edgespec models optimize` wrote for the target, where there is one "
        "(its weight type verifies "
        "drafts for less); --no-optimized: the original.",
    ),
]
NCtxOpt = Annotated[Optional[int], typer.Option("--n-ctx", min=16, help="Context size in tokens.")]
ThreadsOpt = Annotated[
    Optional[int],
    typer.Option("--threads", min=1, help="CPU threads for llama.cpp (default: the profile's, one per physical core)."),
]
RpcOpt = Annotated[
    Optional[str],
    typer.Option(
        "--rpc",
        help="Put the target's layers on llama.cpp RPC servers, HOST:PORT[,HOST:PORT...] (start them with "
        "`edgespec rpc-server`); the drafter and sampling stay here.",
    ),
]
TensorSplitOpt = Annotated[
    Optional[str],
    typer.Option(
        "--tensor-split", help="With --rpc: each server's share of the target's layers, e.g. 3,1 (default: by memory)."
    ),
]


@dataclass(frozen=True)
class PlanOptions:
    """The plan options as the command line gave them, each in its one form: ``draft``
    normalised (``costmodel.adaptive.normalize_draft``: None, "none", "ngram", "model", "mtp",
    "assistant" or a name/path), ``k`` None or a number, ``rpc``/``tensor_split`` parsed. None
    (False) leaves the choice to the profile. ``memory``/``memory_cap`` come from the
    memory options (``cli.memory_options.MemoryOptions.apply``)."""

    profile: str = "auto"
    target: str | None = None
    draft: str | None = None
    k: int | None = None
    exact: bool = False
    n_ctx: int | None = None
    threads: int | None = None
    rpc: str | None = None
    tensor_split: str | None = None
    optimized: bool = True
    memory: bool = True
    memory_cap: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "draft", normalize_draft(self.draft))


def make_plan(options: PlanOptions) -> Any:
    """The profile's plan with the command line's options in it (a frozen ``Plan``,
    never patched after)."""
    from edgespec.planning.planner import plan

    o = options
    servers, split = parse_rpc(o.rpc, o.tensor_split)
    return plan(
        o.profile,
        target=o.target,
        draft=o.draft,
        k=o.k,
        n_ctx=o.n_ctx,
        n_threads=o.threads,
        exact=o.exact,
        rpc=servers,
        tensor_split=split,
        memory=o.memory,
        memory_cap=o.memory_cap,
        optimized=o.optimized,
    )


def parse_rpc(rpc: str | None, tensor_split: str | None) -> tuple[tuple[str, ...], tuple[float, ...]]:
    """``--rpc`` and ``--tensor-split`` as the planner takes them."""
    from edgespec.llama.rpc import parse_endpoints

    servers = tuple(str(e) for e in parse_endpoints(rpc)) if rpc is not None else ()
    if tensor_split is None:
        return servers, ()
    if not servers:
        raise InputError("--tensor-split needs --rpc")
    try:
        return servers, tuple(float(x) for x in tensor_split.split(","))
    except ValueError:
        raise InputError(f"--tensor-split: {tensor_split!r} is not a list of numbers such as 3,1") from None
