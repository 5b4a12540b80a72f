"""Held-out prompts and JSON Schemas for the structured-output benchmark
(``benchmarks/structured.py``).

Written for that benchmark, and NEVER used to tune anything: no layout choice, drafting
policy prior, draft length or cost figure of edgespec may be chosen by looking at these
prompts or at edgespec's outputs on them. Calibration for structured output belongs in
other prompts (as ``edgespec.measuring.prompts.CALIBRATION`` is kept apart from
``HELD_OUT`` and ``prompts/heldout.py`` from the tuning prompts in ``prompts/tuning.py``).

Three kinds, as issue 20 asks:

* ``extraction``      a record pulled out of a document (much of it copies the input);
* ``classification``  labels from fixed sets, with a short justification;
* ``tool call``       a function call chosen from several tools, arguments filled in
                      from a user's request.

Each prompt is a single user message that states the task, the document and the
schema (as users of every engine are told to do), so the unconstrained run (c) knows
what to write. The schemas follow OpenAI's strict mode: every object lists all its
properties as required and forbids others; optional values are nullable instead. They
use only keywords that all three constraint engines compared here implement
(llguidance, llama.cpp's json-schema-to-grammar and llama-cpp-python's Python port of
it): type (also as a list, for null), properties, required, additionalProperties,
items, minItems, maxItems, enum, const, anyOf, and anchored patterns.

The documents the prompts are drawn from are in ``prompts/structured_documents.py``; this module
knows the tasks, the schemas and how a prompt is worded.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from benchmarks.prompts import structured_documents as docs


@dataclass(frozen=True)
class StructuredPrompt:
    id: str
    kind: str  # "extraction", "classification" or "tool call"
    instruction: str  # the task, before the document
    document: str  # the input the answer is drawn from
    schema: dict

    @property
    def prompt(self) -> str:
        """The user message: task, document, and the schema the answer must follow."""
        return (
            f"{self.instruction}\n\n{self.document.strip()}\n\n"
            f"Answer with one JSON object and nothing else. It must follow this JSON Schema:\n"
            f"{json.dumps(self.schema)}"
        )


def _obj(props: dict, required: list[str] | None = None) -> dict:
    """An object in OpenAI's strict style: all properties required, nothing else."""
    return {
        "type": "object",
        "properties": props,
        "required": list(props) if required is None else required,
        "additionalProperties": False,
    }


_DATE = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
_TIME = {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"}
_NULL_STR = {"type": ["string", "null"]}

# --------------------------------------------------------------------------------------
# Tool-call arguments
# --------------------------------------------------------------------------------------

_TRAIN_ARGS = _obj(
    {
        "origin": {"type": "string"},
        "destination": {"type": "string"},
        "date": _DATE,
        "depart_after": _TIME,
        "max_changes": {"type": "integer", "minimum": 0},
        "railcard": _NULL_STR,
    }
)
_HOTEL_ARGS = _obj(
    {
        "city": {"type": "string"},
        "check_in": _DATE,
        "nights": {"type": "integer", "minimum": 1},
        "guests": {"type": "integer", "minimum": 1},
        "max_price_per_night": {"type": ["number", "null"]},
        "breakfast": {"type": "boolean"},
    }
)
_CURRENCY_ARGS = _obj(
    {
        "amount": {"type": "number"},
        "from_currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
        "to_currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
    }
)
_THERMO_ARGS = _obj(
    {
        "room": {"type": "string"},
        "temperature_c": {"type": "number"},
        "mode": {"enum": ["heat", "cool", "auto", "off"]},
        "until": {"anyOf": [_TIME, {"type": "null"}]},
    }
)
_REMINDER_ARGS = _obj(
    {
        "title": {"type": "string"},
        "date": _DATE,
        "time": _TIME,
        "repeat": {"enum": ["none", "daily", "weekly", "monthly"]},
        "notes": _NULL_STR,
    }
)
_MUSIC_ARGS = _obj(
    {
        "room": {"type": "string"},
        "query": {"type": "string"},
        "shuffle": {"type": "boolean"},
        "volume": {"type": "integer", "minimum": 0, "maximum": 100},
    }
)


def _call(name: str, args: dict) -> dict:
    return _obj({"name": {"const": name}, "arguments": args})


PROMPTS: tuple[StructuredPrompt, ...] = (
    StructuredPrompt(
        "extract-invoice",
        "extraction",
        "Extract the invoice below into a record: the seller, the invoice number, the issue "
        "and due dates (YYYY-MM-DD), every line item, and the totals.",
        docs.INVOICE,
        _obj(
            {
                "seller": {"type": "string"},
                "invoice_number": {"type": "string"},
                "issue_date": _DATE,
                "due_date": _DATE,
                "currency": {"enum": ["GBP", "EUR", "USD"]},
                "line_items": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {
                            "description": {"type": "string"},
                            "quantity": {"type": "integer", "minimum": 1},
                            "unit_price": {"type": "number"},
                            "amount": {"type": "number"},
                        }
                    ),
                },
                "subtotal": {"type": "number"},
                "vat": {"type": "number"},
                "total": {"type": "number"},
            }
        ),
    ),
    StructuredPrompt(
        "extract-incident",
        "extraction",
        "Turn this post-incident review into a structured record for our incident database.",
        docs.INCIDENT,
        _obj(
            {
                "service": {"type": "string"},
                "date": _DATE,
                "severity": {"enum": ["sev1", "sev2", "sev3"]},
                "start_utc": _TIME,
                "end_utc": _TIME,
                "failed_endpoints": {"type": "array", "items": {"type": "string"}},
                "degraded_endpoints": {"type": "array", "items": {"type": "string"}},
                "root_cause": {"type": "string"},
                "timeline": {"type": "array", "items": _obj({"time": _TIME, "event": {"type": "string"}})},
                "follow_ups": {
                    "type": "array",
                    "items": _obj({"action": {"type": "string"}, "owner": {"type": "string"}}),
                },
            }
        ),
    ),
    StructuredPrompt(
        "extract-job-ad",
        "extraction",
        "Extract the key facts of this job advertisement.",
        docs.JOB_AD,
        _obj(
            {
                "title": {"type": "string"},
                "company": {"type": "string"},
                "city": {"type": "string"},
                "work_mode": {"enum": ["onsite", "hybrid", "remote"]},
                "office_days_per_week": {"type": ["integer", "null"]},
                "min_years_experience": {"type": ["integer", "null"]},
                "skills": {"type": "array", "items": {"type": "string"}},
                "salary": _obj(
                    {
                        "currency": {"type": "string", "pattern": "^[A-Z]{3}$"},
                        "min": {"type": "number"},
                        "max": {"type": "number"},
                        "period": {"enum": ["hour", "month", "year"]},
                    }
                ),
                "apply_by": _DATE,
                "reference": _NULL_STR,
            }
        ),
    ),
    StructuredPrompt(
        "extract-minutes",
        "extraction",
        "From these meeting minutes, list who attended and every action item with its owner "
        "and deadline (YYYY-MM-DD, or null if none was set).",
        docs.MINUTES,
        _obj(
            {
                "organisation": {"type": "string"},
                "meeting_date": _DATE,
                "chair": {"type": "string"},
                "present": {"type": "array", "items": {"type": "string"}},
                "apologies": {"type": "array", "items": {"type": "string"}},
                "actions": {
                    "type": "array",
                    "items": _obj(
                        {
                            "owner": {"type": "string"},
                            "task": {"type": "string"},
                            "deadline": {"anyOf": [_DATE, {"type": "null"}]},
                        }
                    ),
                },
                "next_meeting": _DATE,
            }
        ),
    ),
    StructuredPrompt(
        "classify-ticket",
        "classification",
        "Triage this support email for our helpdesk.",
        docs.TICKET,
        _obj(
            {
                "category": {"enum": ["billing", "bug", "feature_request", "account_access", "how_to", "outage"]},
                "product_area": {
                    "enum": ["invoicing", "appointments", "inventory", "reports", "integrations", "other"]
                },
                "priority": {"enum": ["low", "normal", "high", "urgent"]},
                "sentiment": {"enum": ["positive", "neutral", "frustrated", "angry"]},
                "churn_risk": {"type": "boolean"},
                "previous_tickets": {"type": "array", "items": {"type": "string", "pattern": "^#[0-9]+$"}},
                "reason": {"type": "string"},
            }
        ),
    ),
    StructuredPrompt(
        "classify-reviews",
        "classification",
        "Label each product review below: its overall sentiment and the aspects it mentions.",
        docs.REVIEWS,
        _obj(
            {
                "reviews": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {
                            "review": {"type": "integer", "minimum": 1},
                            "sentiment": {"enum": ["positive", "negative", "mixed"]},
                            "aspects": {
                                "type": "array",
                                "items": {
                                    "enum": [
                                        "delivery",
                                        "fit",
                                        "material",
                                        "quality",
                                        "appearance",
                                        "returns",
                                        "customer_service",
                                        "price",
                                    ]
                                },
                            },
                        }
                    ),
                },
            }
        ),
    ),
    StructuredPrompt(
        "tool-travel",
        "tool call",
        "Choose the one tool that serves the user's request and give its arguments.",
        docs.TOOLS_TRAVEL,
        {
            "anyOf": [
                _call("search_trains", _TRAIN_ARGS),
                _call("book_hotel", _HOTEL_ARGS),
                _call("convert_currency", _CURRENCY_ARGS),
            ]
        },
    ),
    StructuredPrompt(
        "tool-home",
        "tool call",
        "Choose the one tool that serves the user's request and give its arguments.",
        docs.TOOLS_HOME,
        {
            "anyOf": [
                _call("set_thermostat", _THERMO_ARGS),
                _call("create_reminder", _REMINDER_ARGS),
                _call("play_music", _MUSIC_ARGS),
            ]
        },
    ),
)

KINDS = ("extraction", "classification", "tool call")
