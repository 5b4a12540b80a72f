"""Which JSON layout costs the model the fewest steps?

Five extraction tasks (written for this check; schemas below), each generated greedily
under its schema in three layouts with the real target and prompt lookup, as a user runs
it. Reported per layout: tokens, rounds (target decodes: the cost), the tokens the
grammar drafted and that were accepted, every draft accepted, and the share of the
generation time spent computing masks and forced tokens. Also, for reference,
the canonical tokenization of each answer walked through the matcher, counting the tokens
``compute_ff_tokens`` forces (what a layout would force if the model tokenized its output
canonically; it does not always, see docs/structured-output.md).

    flock /tmp/edgespec-bench.lock python benchmarks/structured_layout.py [--target NAME]
"""

from __future__ import annotations

import argparse
import json

from llguidance import LLMatcher

from edgespec.catalog import resolve_model
from edgespec.constraints import tokenizer_for

SOURCES = [
    "Maria Lopez (maria.lopez@example.org), 34, moved to Valencia last year.",
    "Invoice INV-2024-0117: total 1249.50 EUR, still unpaid.",
    "Review: the parcel came two weeks late, the refund took a month and support never answered. "
    "Topics: delivery, refund, support.",
    "Timeline: 2025-03-14 Kick-off; 2025-04-02 Design review; 2025-05-20 Release.",
    "User: what's the weather like in Lyon, France? Answer in celsius. Pick the function to call.",
]

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


def canonical(model, options: dict, item: str, key: str) -> tuple[int, int]:
    tok = tokenizer_for(model)
    total = forced = 0
    for schema, answer in ANSWERS:
        grammar = LLMatcher.grammar_from_json_schema(json.dumps(schema), defaults=options)
        ids = model.tokenize(json.dumps(answer, separators=(item, key)), add_special=False)
        total += len(ids)
        forced += walk(tok, grammar, ids)
    return total, forced


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-0.5b")
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    from edgespec import Engine
    from edgespec.constraints import formats

    path = resolve_model(args.target)
    print(f"{'layout':26} {'tokens':>6} {'rounds':>6} {'forced':>6} {'accepted':>8} {'valid':>5} "
          f"{'mask %':>7} | canonical: {'tokens':>6} {'forced':>6}")
    with Engine(path, draft="ngram", n_ctx=1024, n_threads=args.threads) as e:
        for name, (options, (item, key)) in LAYOUTS.items():
            formats.JSON_LAYOUT.clear()
            formats.JSON_LAYOUT.update(options)
            tokens = rounds = forced = accepted = valid = 0
            t_mask = t_gen = 0.0
            for (schema, _), source in zip(ANSWERS, SOURCES):
                rf = {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}
                r = e.generate(f"Extract the data as JSON.\n\n{source}", max_tokens=160, response_format=rf)
                s = r.stats
                tokens, rounds = tokens + s.generated_tokens, rounds + s.rounds
                forced, accepted = forced + s.forced_accepted, accepted + s.accepted
                valid += r.finish_reason == "stop" and bool(r.structured_complete)
                t_mask += s.t_mask
                t_gen += s.t_generate
            c_total, c_forced = canonical(e.target_model, options, item, key)
            print(f"{name:26} {tokens:6d} {rounds:6d} {forced:6d} {accepted:8d} {valid:3d}/{len(ANSWERS)} "
                  f"{100 * t_mask / t_gen:6.2f}% | {c_total:17d} {c_forced:6d}")


if __name__ == "__main__":
    main()
