"""The prompt of a fill-in-the-middle request, on the engine's target: ``/infill``'s
(``infill_ids``: prefix, suffix, ``prompt`` and the extra files) and ``/v1/completions``'
``suffix`` (``suffix_prompt``), each a 400 naming the field when the model has no FIM
tokens (``infill_not_supported``), and the stop string where a middle reaches the
suffix's text (``with_suffix_stop``). The layout is ``edgespec.llama.fim``'s.
"""

from __future__ import annotations

from typing import Any

from edgespec.llama.fim import ExtraChunk, NoFimTokens, fim_tokens, infill_prompt, suffix_stop

from .bodies import ApiError


def _fim(model: Any, param: str) -> Any:
    try:
        return fim_tokens(model)
    except NoFimTokens as e:
        raise ApiError(400, str(e), param=param, code="infill_not_supported") from None


def infill_ids(engine: Any, req: Any, max_tokens: int) -> list[int]:
    """The prompt ids of ``req`` on ``engine``'s target (off the event loop: it tokenizes)."""
    model = engine.target_model
    extra = [ExtraChunk(text=c.text, filename=c.filename) for c in req.input_extra]
    return infill_prompt(
        model,
        _fim(model, "input_prefix"),
        prefix=req.input_prefix,
        suffix=req.input_suffix,
        prompt=req.prompt,
        extra=extra,
        n_ctx=engine.n_ctx,
        n_predict=max_tokens,
    )


def suffix_prompt(engine: Any, prompt: Any, suffix: str, max_tokens: int) -> list[int]:
    """OpenAI's ``suffix`` on ``/v1/completions``: the prompt is the text before the
    insertion, ``suffix`` the text after it, in the model's FIM format."""
    if not isinstance(prompt, str):
        raise ApiError(400, "suffix needs the prompt as text (not token ids)", param="prompt")
    model = engine.target_model
    return infill_prompt(
        model, _fim(model, "suffix"), prefix=prompt, suffix=suffix, n_ctx=engine.n_ctx, n_predict=max_tokens
    )


def with_suffix_stop(stops: list[str], suffix: str) -> list[str]:
    """The request's stop strings and the suffix's (``fim.suffix_stop``)."""
    at = suffix_stop(suffix)
    return [*stops, at] if at is not None and at not in stops else list(stops)
