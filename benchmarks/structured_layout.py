"""Which JSON layout leaves the model the fewest tokens to choose?

For five extraction answers (written for this check; schemas below) we render each
answer in three layouts, tokenize it with the target's tokenizer, walk it through
llguidance's matcher and count, at every step, the tokens ``compute_ff_tokens`` forces
(they are drafted for free). What is left is what the model must produce itself.

    python benchmarks/structured_layout.py [--target PATH_OR_NAME]

Only the tokenizer is loaded (vocab_only): no generation, no timing.
"""

from __future__ import annotations

import argparse
import json

from llguidance import LLMatcher

from edgespec.catalog import resolve_model
from edgespec.constraints import tokenizer_for
from edgespec.llama import Model

ANSWERS = [
    ({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                       "city": {"type": "string"}, "email": {"type": "string"}},
      "required": ["name", "age", "city", "email"], "additionalProperties": False},
     {"name": "Maria Lopez", "age": 34, "city": "Valencia", "email": "maria.lopez@example.org"}),
    ({"type": "object", "properties": {"invoice": {"type": "string"}, "total": {"type": "number"},
                                       "currency": {"enum": ["EUR", "USD", "GBP"]},
                                       "paid": {"type": "boolean"}},
      "required": ["invoice", "total", "currency", "paid"], "additionalProperties": False},
     {"invoice": "INV-2024-0117", "total": 1249.5, "currency": "EUR", "paid": False}),
    ({"type": "object", "properties": {"sentiment": {"enum": ["positive", "negative", "neutral"]},
                                       "confidence": {"type": "number"},
                                       "topics": {"type": "array", "items": {"type": "string"}}},
      "required": ["sentiment", "confidence", "topics"], "additionalProperties": False},
     {"sentiment": "negative", "confidence": 0.82, "topics": ["delivery", "refund", "support"]}),
    ({"type": "object", "properties": {"events": {"type": "array", "items": {
        "type": "object", "properties": {"date": {"type": "string"}, "title": {"type": "string"}},
        "required": ["date", "title"], "additionalProperties": False}}},
      "required": ["events"], "additionalProperties": False},
     {"events": [{"date": "2025-03-14", "title": "Kick-off"}, {"date": "2025-04-02", "title": "Design review"},
                 {"date": "2025-05-20", "title": "Release"}]}),
    ({"type": "object", "properties": {"function": {"enum": ["get_weather", "get_time"]},
                                       "arguments": {"type": "object", "properties": {
                                           "location": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]}},
                                           "required": ["location", "unit"], "additionalProperties": False}},
      "required": ["function", "arguments"], "additionalProperties": False},
     {"function": "get_weather", "arguments": {"location": "Lyon, France", "unit": "celsius"}}),
]

LAYOUTS = {
    "compact , :  (edgespec)": ({"item_separator": ",", "key_separator": ":", "whitespace_flexible": False},
                                (",", ":")),
    "spaced , :": ({"item_separator": ", ", "key_separator": ": ", "whitespace_flexible": False},
                   (", ", ": ")),
    "flexible whitespace": ({"whitespace_flexible": True}, (", ", ": ")),
}


def walk(tok, grammar: str, ids: list[int]) -> int:
    """Tokens of ``ids`` that the matcher forced (compute_ff_tokens agreed with them)."""
    m = LLMatcher(tok, grammar, log_level=0)
    forced = i = 0
    while i < len(ids):
        ff = m.compute_ff_tokens()
        n = 0
        while n < len(ff) and i + n < len(ids) and ff[n] == ids[i + n]:
            n += 1
        if n:
            assert m.consume_tokens(ids[i:i + n])
            forced += n
            i += n
            continue
        assert m.consume_token(ids[i]), (tok.dbg_tokens(ids[:i + 1]), m.get_error())
        i += 1
    return forced


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-0.5b")
    args = ap.parse_args()
    model = Model(resolve_model(args.target), vocab_only=True)
    tok = tokenizer_for(model)
    print(f"{'layout':26} {'tokens':>7} {'forced':>7} {'model-chosen':>13}")
    for name, (options, (item, key)) in LAYOUTS.items():
        total = forced = 0
        for schema, answer in ANSWERS:
            grammar = LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=options)
            ids = model.tokenize(json.dumps(answer, separators=(item, key)), add_special=False)
            total += len(ids)
            forced += walk(tok, grammar, ids)
        print(f"{name:26} {total:7d} {forced:7d} {total - forced:13d}")


if __name__ == "__main__":
    main()
