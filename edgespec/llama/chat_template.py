"""Chat templates: render a list of messages with the model's own Jinja template.

The template comes from the GGUF (``tokenizer.chat_template``) and is untrusted text,
so it runs in Jinja's immutable sandbox with only the helpers Hugging Face templates
expect (``raise_exception``, ``strftime_now``, loop controls, and Hugging Face's
``tojson``: plain ``json.dumps``, keys in their order, no HTML escaping, unlike Jinja's
own): the environment of transformers' ``apply_chat_template``. Models that
ship no template get ChatML, the format most instruction-tuned GGUFs were trained on.

Tool calling goes through the template too, as in transformers: ``tools`` (OpenAI's
``[{"type": "function", "function": {...}}]``) is handed to the template, an assistant
message may carry ``tool_calls`` (their ``arguments``, a JSON string in OpenAI's API,
become the object that templates such as Qwen2.5's write with ``tojson``) and a ``tool``
message its ``tool_call_id`` and ``name``. Whether the template can write tool calls at
all is the caller's question (``edgespec.server.tools``).
"""

from __future__ import annotations

import datetime
import json
from functools import lru_cache
from typing import Any, Sequence

from ..errors import InputError

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

    def tojson(
        value: Any,
        indent: int | None = None,
        separators: tuple | None = None,
        sort_keys: bool = False,
        ensure_ascii: bool = False,
    ) -> str:
        # transformers' filter: what the templates were written (and the models trained) with
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    # transformers' environment: also {% break %} and {% continue %}, which some templates use
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.filters["tojson"] = tojson
    try:
        return env.from_string(source)
    except TemplateError as exc:
        raise InputError(f"the model's chat template does not parse: {exc}") from exc


def validate_messages(messages: Sequence[dict]) -> list[dict]:
    """The messages as the template sees them: ``role`` and ``content`` (a string; an
    assistant message that calls tools may have ``None``, rendered as ""), an
    assistant's ``tool_calls`` with their arguments parsed, a tool message's
    ``tool_call_id`` and ``name``. Anything else is dropped."""
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise InputError(f"message {i} must be an object with 'role' and 'content'")
        if m["role"] not in _ROLES:
            raise InputError(f"message {i} has role {m['role']!r}; allowed: {', '.join(sorted(_ROLES))}")
        calls = m.get("tool_calls") or None
        if calls is not None and m["role"] != "assistant":
            raise InputError(f"message {i}: only an assistant message can carry tool_calls")
        content = m["content"]
        if content is None and calls is not None:
            content = ""
        if not isinstance(content, str):
            raise InputError(f"message {i} content must be a string")
        msg: dict[str, Any] = {"role": m["role"], "content": content}
        if calls is not None:
            msg["tool_calls"] = [_template_call(i, c) for c in calls]
        for key in ("tool_call_id", "name"):
            if m.get(key) is not None and m["role"] == "tool":
                msg[key] = str(m[key])
        out.append(msg)
    return out


def _template_call(i: int, call: Any) -> dict:
    """One OpenAI tool call as templates expect it: ``arguments`` an object, not text."""
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise InputError(f"message {i}: each tool call needs a function with a name")
    args = fn.get("arguments", "{}")
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as exc:
            raise InputError(f"message {i}: the arguments of tool call {fn['name']!r} are not JSON ({exc})") from None
    return {"id": call.get("id"), "type": "function", "function": {"name": fn["name"], "arguments": args}}


def render(
    model,
    messages: Sequence[dict],
    *,
    add_generation_prompt: bool = True,
    tools: Sequence[dict] | None = None,
    continue_final: bool = False,
) -> str:
    """``messages`` rendered with ``model``'s template (an ``edgespec.llama.Model``);
    ``tools`` (OpenAI's tool objects) go to the template as its ``tools``.

    ``continue_final``: the last message is an assistant's that the model is to go on
    writing (a prefill). The conversation is rendered without a generation prompt and
    cut just after that message's text, so the turn stays open (transformers'
    ``continue_final_message``); an empty one is the new turn's opening itself."""
    from jinja2.exceptions import TemplateError

    msgs = validate_messages(messages)
    if continue_final:
        return _render_open(model, messages, msgs, tools)
    source = model.chat_template or CHATML
    bos = model.token_text(model.bos) if model.bos >= 0 else ""
    eos = model.token_text(model.eos) if model.eos >= 0 else ""
    try:
        return _compile(source).render(
            messages=msgs,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos,
            eos_token=eos,
            **({"tools": list(tools)} if tools else {}),
        )
    except TemplateError as exc:
        raise InputError(f"the model's chat template failed on these messages: {exc}") from exc


def _render_open(model, messages: Sequence[dict], msgs: list[dict], tools: Sequence[dict] | None) -> str:
    """The conversation with its final assistant message left open (see ``render``)."""
    last = msgs[-1] if msgs else None
    if last is None or last["role"] != "assistant" or last.get("tool_calls"):
        raise InputError("only a final assistant message without tool calls can be continued")
    content = last["content"]
    if not content.strip():
        return render(model, messages[:-1], add_generation_prompt=True, tools=tools)
    text = render(model, messages, add_generation_prompt=False, tools=tools)
    for written in (content, content.strip()):  # templates may strip a message's text
        at = text.rfind(written)
        if at >= 0:
            return text[: at + len(written)]
    raise InputError(
        "the model's chat template does not write the final assistant message as it was sent, so it cannot be continued"
    )


def tokenize_rendered(model, text: str) -> list[int]:
    """The token ids of a rendered conversation. The template usually writes the BOS
    text itself when the model wants one; the tokenizer adds it only if it did not."""
    bos_text = model.token_text(model.bos) if model.bos >= 0 else ""
    add = model.add_bos and not (bos_text and text.startswith(bos_text))
    return model.tokenize(text, add_special=add)


def prompt_ids(model, prompt: str | Sequence[dict] | Sequence[int], *, raw: bool = False) -> list[int]:
    """The token ids ``prompt`` turns into for ``model``: a text through the chat template
    as one user message (or, ``raw``, tokenized as is), a list of chat messages through
    the template, a list of token ids checked against the vocabulary."""
    if isinstance(prompt, str):
        if raw:
            return model.tokenize(prompt, add_special=True, parse_special=True)
        return tokenize_rendered(model, render(model, [{"role": "user", "content": prompt}]))
    items = list(prompt)
    if items and isinstance(items[0], dict):
        return tokenize_rendered(model, render(model, items))
    if not all(isinstance(t, int) and not isinstance(t, bool) for t in items):
        raise InputError("a prompt must be a string, a list of chat messages or a list of token ids")
    bad = [t for t in items if not 0 <= t < model.n_vocab]
    if bad:
        raise InputError(f"token id {bad[0]} is outside the vocabulary (0..{model.n_vocab - 1})")
    return [int(t) for t in items]
