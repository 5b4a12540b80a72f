"""The one door to llguidance: structured output as constraints on the next token.

Every ``llguidance`` import in edgespec lives in this package (as ``llama_cpp`` lives in
``edgespec.llama``). It turns a request's ``response_format`` (JSON object, JSON Schema,
regex, Lark or GBNF grammar) or a Lark grammar with a lazy trigger into a
``Constraint`` bound to a model's tokenizer, and gives each generation a ``Matcher``:
the token masks, the forced tokens, draft validation, and a state that rolls back with
the KV cache. It knows nothing about speculation, sampling or text on screen; the loop
(``decoding/speculative.py``) decides what to do with a mask.

- ``formats``: request shapes -> checked llguidance grammars (no model needed:
  ``grammar_spec`` fails fast on a bad schema, regex or grammar).
- ``tokenizer``: llguidance's tokenizer over a model's vocabulary, cached per model.
- ``matcher``: ``Constraint`` and ``Matcher``.
- ``batch``: the masks of a batch step's rows, all sequences in one parallel call.
"""

from __future__ import annotations

from ..errors import ConstraintError, ConstraintStateError
from ..llama import Model
from .batch import batch_masks
from .formats import (
    DEFAULT_LAYOUT,
    JSON_LAYOUT,
    JSON_LAYOUTS,
    GrammarSpec,
    grammar_spec,
    json_schema_grammar,
    lark_grammar,
    lark_json,
    regex_grammar,
    with_layout,
)
from .matcher import Constraint, Matcher, allowed_array, apply_mask, mask_logits, probe
from .tokenizer import tokenizer_for


def bind(spec: GrammarSpec, model: Model) -> Constraint:
    """A checked spec bound to ``model``'s tokenizer, checked again with it before any
    generation (``matcher.probe``): a special token the model lacks, or a grammar that
    allows no first token or forces tokens without end, is a ``ConstraintError``."""
    constraint = Constraint(spec, tokenizer_for(model), model.n_vocab)
    probe(constraint)
    return constraint


def compile_constraint(response_format: dict | None, model: Model, *, lenient: bool = False) -> Constraint | None:
    """An OpenAI-style ``response_format`` compiled for ``model`` (None for
    ``{"type": "text"}`` or None). Raises ``ConstraintError`` (with ``param``) on
    anything that does not compile, and on a schema keyword llguidance does not
    implement unless ``lenient`` (what lenient relaxed is in ``Constraint.warnings``)."""
    spec = grammar_spec(response_format, lenient=lenient)
    return None if spec is None else bind(spec, model)


def compile_lark(grammar: str, model: Model, trigger: str | None = None, *, lenient: bool = False) -> Constraint:
    """A Lark grammar (llguidance's dialect: ``%json{...}`` embeds a JSON schema, see
    ``lark_json``; a special token is ``<tool_call>``) compiled for ``model``. With
    ``trigger`` the grammar is lazy: free text until the trigger appears, the grammar
    from its first byte on (so the grammar must itself start with the trigger text).
    A JSON keyword llguidance does not implement is an error unless ``lenient``."""
    return bind(lark_grammar(grammar, trigger=trigger, param="grammar", lenient=lenient), model)


__all__ = [
    "DEFAULT_LAYOUT",
    "JSON_LAYOUT",
    "JSON_LAYOUTS",
    "Constraint",
    "ConstraintError",
    "ConstraintStateError",
    "GrammarSpec",
    "Matcher",
    "allowed_array",
    "apply_mask",
    "batch_masks",
    "bind",
    "compile_constraint",
    "compile_lark",
    "grammar_spec",
    "json_schema_grammar",
    "lark_grammar",
    "lark_json",
    "mask_logits",
    "probe",
    "regex_grammar",
    "tokenizer_for",
    "with_layout",
]
