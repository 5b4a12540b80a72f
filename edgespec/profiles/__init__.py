"""Device profiles: what a machine can hold and how fast it is.

A profile is one TOML file (schema below) turned into a frozen ``Profile``. The shipped
ones live in the repo's ``profiles/`` folder (installed as a package, read with
importlib.resources); user profiles in ``$XDG_CONFIG_HOME/edgespec/profiles/*.toml``
(default ``~/.config/edgespec/profiles``) add to them. A user file named like a shipped
profile overrides it key by key, and ``extends = "NAME"`` starts a new profile from an
existing one, so ``tune`` can write only what it measured.

Every figure the cost model uses is an inline table saying where it came from::

    decode_gbs = { value = 250, status = "estimated", source = "llama.cpp ...", date = 2026-01-02 }

``status`` is ``measured`` or ``estimated``. Validation errors are one line naming the
file, the key, what was found and what is allowed (``ProfileError``).

The choice made from a profile (pair, drafter, k) is ``edgespec.planning.planner``'s.

Schema (version 1)::

    schema = 1
    name = "m2max"                      # = the file name without .toml
    description = "..."
    backend = "metal"                   # metal | cuda | cpu
    extends = "m2max"                   # optional: start from another profile
    [match]                             # how detection recognises the device
    kind = "apple"                      # apple | nvidia | jetson | raspberry-pi | cpu
    chips = ["Apple M2 Max"]            # apple: sysctl machdep.cpu.brand_string
    gpus = ["RTX 4090"]                 # nvidia: substrings of nvidia-smi's name
    boards = ["Raspberry Pi 5"]         # jetson / raspberry-pi: device-tree model
    cores = [1, 4]                      # cpu: physical core range
    [memory]
    models_gb = FIGURE                  # memory models may use (GPU-addressable / VRAM / RAM)
    bandwidth_gbs = FIGURE              # peak memory bandwidth
    headroom_gb = 0.75                  # compute buffers etc. beyond weights + KV cache
    [run]
    n_threads = "physical"              # or a number
    n_gpu_layers = -1                   # -1 = all layers on the GPU, 0 = CPU only
    n_ctx = 4096
    [choice]
    pairs = ["qwen2.5-coder-7b+0.5b"]   # catalog pairs, most preferred first
    drafters = ["model", "ngram"]       # drafters to consider
    k_min = 1
    k_max = 8
    p_min = 0.75                        # model drafter stops below this draft probability
    min_gain = 0.05                     # below 1 + min_gain predicted: decode plainly
    [cost]
    overhead_ms = FIGURE                # per decode step, beyond reading the weights
    decode_gbs = FIGURE                 # weight bytes read per second while decoding
    verify = { n = [2, 4, 8], c = [1.05, 1.1, 1.2], status = ..., source = ... }  # c(n)
    alpha_model = FIGURE                # acceptance per drafted token, same-family draft
    alpha_ngram = FIGURE                # acceptance per token when the n-gram drafter proposes
    ngram_hit = FIGURE                  # share of rounds in which it proposes
    gamma_ngram = FIGURE                # cost of an n-gram proposal, in target steps
    exact_slowdown = FIGURE             # plain tok/s on llama.cpp's kernels / on batch-invariant ones
    [cost.pair."qwen2.5-coder-1.5b+0.5b"]   # figures for one pair (all optional)
    alpha = FIGURE
    gamma = FIGURE                      # draft step / target step
    target_step_ms = FIGURE
    verify = {...}
    [cost.mtp]                          # a model's own MTP head here (all optional)
    alpha = FIGURE                      # acceptance of its drafts
    gamma = FIGURE                      # one head step / one target step, as reports imply it
    k_max = 2                           # the longest MTP draft worth verifying
    note = "..."                        # the reports in one line (the plan quotes it)
The package: ``schema`` (the dataclasses), ``validate`` (TOML tables to a ``Profile``),
``store`` (files, merging, saving measured figures) and ``match`` (a detected machine to
its closest profile). Import from ``edgespec.profiles``.
"""

from __future__ import annotations

from ..errors import ProfileError
from .match import Detection, detect_profile, match_profile, scale
from .schema import (
    BACKENDS,
    DRAFTERS,
    GB,
    KINDS,
    SCHEMA_VERSION,
    STATUSES,
    Figure,
    Match,
    MtpFigures,
    PairCost,
    Profile,
    VerifyFigure,
)
from .store import (
    DATA_PACKAGE,
    dump_toml,
    list_profiles,
    load_profile,
    profile_names,
    record_measurements,
    user_dir,
)

__all__ = [
    "BACKENDS",
    "DATA_PACKAGE",
    "DRAFTERS",
    "GB",
    "KINDS",
    "SCHEMA_VERSION",
    "STATUSES",
    "Detection",
    "Figure",
    "Match",
    "MtpFigures",
    "PairCost",
    "Profile",
    "ProfileError",
    "VerifyFigure",
    "detect_profile",
    "dump_toml",
    "list_profiles",
    "load_profile",
    "profile_names",
    "record_measurements",
    "match_profile",
    "scale",
    "user_dir",
]
