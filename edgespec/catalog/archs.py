"""Architectures whose memory is a recurrent state, and which of them can roll it back.

A model of these architectures (``general.architecture`` in its GGUF header) keeps a
recurrent state (Mamba, RWKV, Gated DeltaNet, short convolutions) in all or some of its
layers. llama.cpp can undo the last few tokens of such a state only where it keeps
snapshots of it, for the architectures ``llm_arch_supports_rs_rollback`` lists in the
llama.cpp that llama-cpp-python 0.3.36 vendors (src/llama-arch.cpp); a draft verified on
any other recurrent architecture could not be taken back, so edgespec decodes those
plainly (the engine itself finds out too: llama.cpp gives such a context no snapshots).

Also here: the Gemma 4 assistant (``gemma4-assistant``), a drafter only for its own Gemma 4
target (``assists``).
"""

from __future__ import annotations

# llm_arch_supports_rs_rollback: recurrent-state snapshots, so drafts can be undone
ROLLBACK_ARCHS = frozenset(
    {
        "qwen35",
        "qwen35moe",
        "qwen4exp",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "deepseek4",
        "glm5-next",
        "kimi-k3",
        "bailingmoe3",
    }
)
# llm_arch_is_recurrent and llm_arch_is_hybrid, less the above: no snapshots
NO_ROLLBACK_ARCHS = frozenset(
    {
        "mamba",
        "mamba2",
        "rwkv6",
        "rwkv6qwen2",
        "rwkv7",
        "arwkv7",
        "jamba",
        "falcon-h1",
        "plamo2",
        "granitehybrid",
        "qwen3next",
        "kimi-linear",
        "minimax-01",
    }
)


def recurrent(arch: str) -> bool:
    """Whether ``arch`` keeps a recurrent state in some of its layers."""
    return arch in ROLLBACK_ARCHS or arch in NO_ROLLBACK_ARCHS


def speculation(arch: str) -> str | None:
    """Why drafts cannot be verified on ``arch`` (None: they can)."""
    if arch in NO_ROLLBACK_ARCHS:
        return (
            f"{arch} keeps a recurrent state that this llama.cpp cannot roll back (no snapshots "
            "for this architecture), so a rejected draft could not be undone"
        )
    return None


# a Gemma 4 assistant (llama.cpp's gemma4-assistant): a drafter whose context reads its
# target's KV cache and embedding, made for one gemma4 target (the width of the hidden rows
# it reads, embedding_length_out, is that target's embedding_length); never a target
ASSISTANT_ARCH = "gemma4-assistant"
ASSISTANT_TARGET_ARCH = "gemma4"


def assists(target_arch: str, target_width: int, draft_arch: str, draft_reads: int) -> str | None:
    """Why a model of ``draft_arch`` cannot draft for one of ``target_arch`` as far as
    their architectures go (a Gemma 4 assistant, and a target that is one), None when it
    can; the widths (0: unknown) tell an assistant of another Gemma 4 size apart."""
    if target_arch == ASSISTANT_ARCH:
        return "a Gemma 4 assistant drafts for its Gemma 4 target; it does not generate on its own"
    if draft_arch != ASSISTANT_ARCH:
        return None
    if target_arch != ASSISTANT_TARGET_ARCH:
        return f"a Gemma 4 assistant drafts only for a Gemma 4 target, not for {target_arch}"
    if target_width and draft_reads and target_width != draft_reads:
        return f"the assistant of a Gemma 4 of width {draft_reads}, not of this one ({target_width})"
    return None


def how(arch: str) -> str:
    """How drafts are undone on ``arch``, in a few words (``models list``)."""
    if arch == ASSISTANT_ARCH:
        return "drafts for gemma4"
    if arch in ROLLBACK_ARCHS:
        return "hybrid: snapshots"
    if arch in NO_ROLLBACK_ARCHS:
        return "recurrent: plain only"
    return "kv cache"
