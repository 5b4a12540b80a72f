"""Every request field this server knows, in ONE table: honoured, refused or ignored.

A client gets what it asked for or a 400 that names the field, never a quiet reply to a
different question. Each known field of OpenAI's and llama-server's completion requests
(``tests/test_server_fields.py`` holds both lists and checks them against this table)
is one of:

* ``HONOURED``: the request models in ``schema`` declare and validate it, and it changes
  the generation as documented (``note``).
* ``REFUSED``: it would change the answer and this server cannot do it, so a request
  that uses it gets a 400 naming it. ``inert`` accepts the values that ask for nothing
  (``n: 1``, ``logprobs: false``, ``null``): a client that sends its defaults works.
* ``IGNORED``: dropped because it cannot change the answer (metadata, caching hints,
  speed knobs the drafting policy decides, options of a refused sampler).

Fields in no table are ignored too, as OpenAI-compatible servers do (clients add vendor
extras); docs/server-safety.md prints the table.

``group="structured"`` marks the structured-output fields (``response_format``,
``tools`` ...; ``edgespec.server.structured`` compiles them).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping

HONOURED, REFUSED, IGNORED = "honoured", "refused", "ignored"
BOTH = frozenset({"chat", "completions"})
CHAT = frozenset({"chat"})
COMPLETIONS = frozenset({"completions"})


def _unset(value: Any, body: Mapping[str, Any]) -> bool:
    return value in (None, False, 0, "", [], {})


def _one(value: Any, body: Mapping[str, Any]) -> bool:
    return value is None or (value == 1 and not isinstance(value, bool))


def _equals(*inert: Any) -> Callable[[Any, Mapping[str, Any]], bool]:
    """Inert: null or one of ``inert`` (a bool never stands for a number, nor the reverse)."""
    return lambda value, body: (
        value is None or any(value == v and isinstance(value, bool) == isinstance(v, bool) for v in inert)
    )


def _continues(body: Mapping[str, Any]) -> bool:
    """The request continues its final assistant message (``ChatRequest.continues``)."""
    messages = body.get("messages") or []
    last = messages[-1] if messages else None
    return getattr(last, "role", None) == "assistant" and body.get("continue_final_message") is not False


@dataclass(frozen=True)
class KnownField:
    """One request field: its status, where it applies, and what it does here."""

    name: str
    status: str
    note: str
    where: frozenset = BOTH
    inert: Callable[[Any, Mapping[str, Any]], bool] = _unset
    group: str | None = None


def _f(
    name: str,
    status: str,
    note: str,
    where: frozenset = BOTH,
    inert: Callable[[Any, Mapping[str, Any]], bool] = _unset,
    group: str | None = None,
) -> KnownField:
    return KnownField(name, status, note, where, inert, group)


S = "structured"
FIELDS: tuple[KnownField, ...] = (
    # -- honoured -------------------------------------------------------------------------
    _f("messages", HONOURED, "the conversation, through the model's chat template", CHAT),
    _f("prompt", HONOURED, "text or token ids, one prompt per request", COMPLETIONS),
    _f("max_tokens", HONOURED, "reply length (default: serve --max-tokens)"),
    _f("max_completion_tokens", HONOURED, "OpenAI's newer name for max_tokens (wins over it)", CHAT),
    _f("n_predict", HONOURED, "llama-server's max_tokens (wins over both); -1: until the context is full"),
    _f("temperature", HONOURED, "0 = greedy"),
    _f("top_p", HONOURED, "1 = off"),
    _f("top_k", HONOURED, "0 or -1 = off"),
    _f("min_p", HONOURED, "0 = off"),
    _f("repeat_penalty", HONOURED, "1 = off (llama.cpp's rule)"),
    _f("repeat_last_n", HONOURED, "tokens the penalties look back over; -1 = all, 0 = penalties off"),
    _f("frequency_penalty", HONOURED, "subtracted per occurrence"),
    _f("presence_penalty", HONOURED, "subtracted once per token present"),
    _f("seed", HONOURED, "reproducible sampling; -1 = random"),
    _f(
        "logit_bias",
        HONOURED,
        "added to the logits: {token id: bias} or llama-server's [[id or text, bias]]; false bans the token",
    ),
    _f("ignore_eos", HONOURED, "never end at an end-of-generation token"),
    _f("min_tokens", HONOURED, "no end-of-generation token or stop string before this many tokens (vLLM)"),
    _f("stop", HONOURED, "up to 16 stop strings"),
    _f("stream", HONOURED, "server-sent events"),
    _f("stream_options", HONOURED, "include_usage adds a usage chunk"),
    _f("return_tokens", HONOURED, "adds the generated token ids (llama-server)"),
    _f(
        "n",
        HONOURED,
        "choices per request, 1 to 16, generated from one prompt (prefix shared); choice i samples with seed + i",
    ),
    _f(
        "logprobs",
        HONOURED,
        "chat: true adds each token's log-probability (choices[].logprobs.content); "
        "completions: N (0 to 20) adds the legacy logprobs object with N alternatives",
    ),
    _f(
        "top_logprobs",
        HONOURED,
        "chat: alternatives per token, 0 to 20 (with logprobs: true); completions: as logprobs: N",
    ),
    _f(
        "response_format",
        HONOURED,
        "text, json_object, json_schema; edgespec's regex and grammar (Lark or GBNF)",
        group=S,
    ),
    _f("json_schema", HONOURED, "llama-server's bare JSON Schema: as response_format json_schema", group=S),
    _f("grammar", HONOURED, "llama-server's GBNF (or a Lark) grammar: as response_format grammar", group=S),
    _f(
        "lenient_schema",
        HONOURED,
        "edgespec: schema keywords the constraint engine lacks are relaxed, not refused",
        group=S,
    ),
    _f(
        "tools",
        HONOURED,
        "function tools, in the model's own tool-call format (Hermes tool_call blocks)",
        CHAT,
        group=S,
    ),
    _f("tool_choice", HONOURED, "none, auto, required or a named function", CHAT, group=S),
    _f("parallel_tool_calls", HONOURED, "false: at most one call per answer", CHAT, group=S),
    _f(
        "continue_final_message",
        HONOURED,
        "a final assistant message is continued (the default, as llama-server); false opens a new turn after it",
        CHAT,
    ),
    # -- refused unless they ask for nothing ---------------------------------------------
    _f(
        "best_of",
        REFUSED,
        "choices are not ranked: use n (best_of: 1 or equal to n is accepted)",
        COMPLETIONS,
        inert=lambda v, b: _one(v, b) or (v == b.get("n") and not isinstance(v, bool)),
    ),
    _f("n_probs", REFUSED, "llama-server's probabilities object is not returned: use logprobs / top_logprobs"),
    _f("post_sampling_probs", REFUSED, "logprobs are of the distribution before temperature and the filters"),
    _f("echo", REFUSED, "the prompt is not echoed", COMPLETIONS),
    _f(
        "suffix",
        HONOURED,
        "fill-in-the-middle: the text after the insertion, through the model's FIM tokens "
        "(as /infill; a model without them: 400)",
        COMPLETIONS,
    ),
    _f("functions", REFUSED, "the legacy function calling is not supported: use tools", CHAT),
    _f(
        "function_call",
        REFUSED,
        "the legacy function calling is not supported: use tool_choice",
        CHAT,
        inert=_equals("none"),
    ),
    _f("typical_p", REFUSED, "locally typical sampling is not implemented", inert=_equals(1.0)),
    _f("dynatemp_range", REFUSED, "dynamic temperature is not implemented"),
    _f("mirostat", REFUSED, "mirostat sampling is not implemented"),
    _f("dry_multiplier", REFUSED, "DRY sampling is not implemented"),
    _f("xtc_probability", REFUSED, "XTC sampling is not implemented"),
    _f("top_n_sigma", REFUSED, "top-n-sigma sampling is not implemented", inert=_equals(-1, -1.0)),
    _f(
        "adaptive_target",
        REFUSED,
        "adaptive sampling is not implemented",
        inert=lambda v, b: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool) and v < 0),
    ),
    _f("min_keep", REFUSED, "the filters keep what llama.cpp's defaults keep (min_keep 0)"),
    _f("samplers", REFUSED, "the sampler order is fixed (top-k, top-p, min-p, temperature)"),
    _f("n_indent", REFUSED, "indentation limits are not implemented"),
    _f("t_max_predict_ms", REFUSED, "time limits are not implemented"),
    _f("t_max_prompt_ms", REFUSED, "time limits are not implemented"),
    _f("n_cmpl", REFUSED, "llama-server's name for n is not read: use n", inert=_one),
    _f("lora", REFUSED, "LoRA adapters are not supported"),
    _f("response_fields", REFUSED, "responses always have their full shape"),
    _f(
        "grammar_lazy",
        REFUSED,
        "a grammar applies from the first token (tools: tool_choice auto is lazy)",
        inert=_equals(False),
        group=S,
    ),
    _f(
        "grammar_triggers", REFUSED, "a grammar applies from the first token (tools: tool_choice auto is lazy)", group=S
    ),
    _f("chat_template_kwargs", REFUSED, "the chat template takes no extra arguments", CHAT),
    _f(
        "add_generation_prompt",
        REFUSED,
        "the template opens a new assistant turn, or continues a final "
        "assistant message (true with continue_final_message: true is a 400)",
        CHAT,
        inert=lambda v, b: (
            v is None or (v is True and b.get("continue_final_message") is not True) or (v is False and _continues(b))
        ),
    ),
    _f("audio", REFUSED, "audio output is not supported", CHAT),
    _f("modalities", REFUSED, "text is the only modality", CHAT, inert=lambda v, b: v in (None, ["text"])),
    _f("web_search_options", REFUSED, "web search is not supported", CHAT),
    _f("reasoning_budget_tokens", REFUSED, "reasoning budgets are not supported", CHAT, inert=_equals(-1)),
    _f("thinking_budget_tokens", REFUSED, "reasoning budgets are not supported", CHAT, inert=_equals(-1)),
    # -- ignored: cannot change the answer -----------------------------------------------
    _f("model", IGNORED, "this server holds one model, whatever the name"),
    _f("user", IGNORED, "metadata"),
    _f("metadata", IGNORED, "metadata"),
    _f("store", IGNORED, "nothing is stored"),
    _f("service_tier", IGNORED, "one tier"),
    _f("safety_identifier", IGNORED, "metadata"),
    _f("prompt_cache_key", IGNORED, "prefix reuse is automatic"),
    _f("prompt_cache_retention", IGNORED, "prefix reuse is automatic"),
    _f("cache_prompt", IGNORED, "prefix reuse is automatic and never changes the answer"),
    _f("n_cache_reuse", HONOURED, "keeps cached runs this long that the prompt holds further back, moved"),
    _f("id_slot", IGNORED, "slots are assigned by the server"),
    _f("n_keep", IGNORED, "no context shift: a prompt that does not fit is refused"),
    _f("n_discard", IGNORED, "no context shift"),
    _f("prediction", IGNORED, "a speed hint; prompt lookup already drafts from the prompt"),
    _f("reasoning_effort", IGNORED, "a hint for reasoning models; the text comes back as generated"),
    _f("reasoning_format", IGNORED, "reasoning comes back inline, as generated (llama-server's 'none')"),
    _f("verbosity", IGNORED, "a hint for reasoning models"),
    _f("timings_per_token", IGNORED, "the last chunk carries the timings"),
    _f("return_progress", IGNORED, "no progress events"),
    _f("sse_ping_interval", IGNORED, "no pings"),
    _f("verbose", IGNORED, "no debug fields"),
    _f("backend_sampling", IGNORED, "sampling runs in edgespec; the result is the same"),
    _f("speculative.n_max", IGNORED, "the drafting policy chooses draft lengths (lossless either way)"),
    _f("speculative.n_min", IGNORED, "the drafting policy chooses draft lengths"),
    _f("speculative.p_min", IGNORED, "the drafting policy chooses draft lengths"),
    _f("speculative.type", IGNORED, "the drafter is chosen when the server starts"),
    _f("speculative.ngram_size_n", IGNORED, "prompt lookup learns its match lengths"),
    _f("speculative.ngram_size_m", IGNORED, "prompt lookup learns its match lengths"),
    _f("speculative.ngram_min_hits", IGNORED, "prompt lookup learns its match lengths"),
    _f("dynatemp_exponent", IGNORED, "acts only with dynatemp_range, which is refused"),
    _f("mirostat_tau", IGNORED, "acts only with mirostat, which is refused"),
    _f("mirostat_eta", IGNORED, "acts only with mirostat, which is refused"),
    _f("dry_base", IGNORED, "acts only with dry_multiplier, which is refused"),
    _f("dry_allowed_length", IGNORED, "acts only with dry_multiplier, which is refused"),
    _f("dry_penalty_last_n", IGNORED, "acts only with dry_multiplier, which is refused"),
    _f("dry_sequence_breakers", IGNORED, "acts only with dry_multiplier, which is refused"),
    _f("xtc_threshold", IGNORED, "acts only with xtc_probability, which is refused"),
    _f("adaptive_decay", IGNORED, "acts only with adaptive_target, which is refused"),
    _f("preserved_tokens", IGNORED, "special tokens come back as text where the model writes them", group=S),
)

BY_NAME: dict[str, KnownField] = {f.name: f for f in FIELDS}


def fields(status: str, endpoint: str) -> list[str]:
    """The names with ``status`` on ``endpoint`` ("chat" or "completions")."""
    return [f.name for f in FIELDS if f.status == status and endpoint in f.where]


def refused_field(body: Mapping[str, Any], endpoint: str, names: Iterable[str] | None = None) -> KnownField | None:
    """The first field of ``body`` (or of ``names`` in it) that this server refuses on
    ``endpoint`` with the value given, else None."""
    for name in body if names is None else names:
        f = BY_NAME.get(name)
        if f is not None and f.status == REFUSED and endpoint in f.where and not f.inert(body[name], body):
            return f
    return None
