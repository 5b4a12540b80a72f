"""Chat templates: render a list of messages with the model's own Jinja template.

The template comes from the GGUF (``tokenizer.chat_template``) and is untrusted text,
so it runs in Jinja's immutable sandbox with only the helpers Hugging Face templates
expect (``raise_exception``, ``strftime_now``, ``tojson``). Models that ship no template
get ChatML, the format most instruction-tuned GGUFs were trained on.
"""

from __future__ import annotations

import datetime
from functools import lru_cache
from typing import Sequence

from .errors import InputError

CHATML = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_ROLES = {"system", "user", "assistant", "tool"}


@lru_cache(maxsize=8)
def _compile(source: str):
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def strftime_now(fmt: str) -> str:
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        return env.from_string(source)
    except TemplateError as exc:
        raise InputError(f"the model's chat template does not parse: {exc}") from exc


def validate_messages(messages: Sequence[dict]) -> list[dict]:
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise InputError(f"message {i} must be an object with 'role' and 'content'")
        if m["role"] not in _ROLES:
            raise InputError(f"message {i} has role {m['role']!r}; allowed: {', '.join(sorted(_ROLES))}")
        if not isinstance(m["content"], str):
            raise InputError(f"message {i} content must be a string")
        out.append({"role": m["role"], "content": m["content"]})
    return out


def render(model, messages: Sequence[dict], *, add_generation_prompt: bool = True) -> str:
    """``messages`` rendered with ``model``'s template (an ``edgespec.llama.Model``)."""
    from jinja2.exceptions import TemplateError

    msgs = validate_messages(messages)
    source = model.chat_template or CHATML
    bos = model.token_text(model.bos) if model.bos >= 0 else ""
    eos = model.token_text(model.eos) if model.eos >= 0 else ""
    try:
        return _compile(source).render(
            messages=msgs,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos,
            eos_token=eos,
        )
    except TemplateError as exc:
        raise InputError(f"the model's chat template failed on these messages: {exc}") from exc
