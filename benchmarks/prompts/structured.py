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
"""

from __future__ import annotations

import json
from dataclasses import dataclass


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
# Extraction
# --------------------------------------------------------------------------------------

_INVOICE = """\
HARBOUR LANE PRINTWORKS LTD
Unit 7, Harbour Lane Industrial Estate, Falmouth TR11 2SE
VAT reg. GB 448 2193 06

INVOICE No. HLP-20931                         Date of issue: 14 March 2025
Bill to: Oakmoor Community Theatre, 22 Bellevue Road, Truro TR1 3JX
Customer ref: OCT/SPRING-PROG

Qty   Description                                   Unit price     Amount
500   A5 programme, 16pp, full colour, saddle-stitched   1.18      590.00
40    A2 poster, 170gsm silk                              3.25      130.00
2     Pull-up banner 850x2000mm with stand               64.50      129.00
1     Artwork amendments (1.5 h)                         42.00       42.00

                                                     Subtotal      891.00
                                                     VAT 20%       178.20
                                                     TOTAL GBP    1069.20
Payment due within 30 days (by 13 April 2025). Bank: Kernow Savings, sort code 60-91-44,
account 31882057. Please quote the invoice number with your payment."""

_INCIDENT = """\
Post-incident review: checkout latency, 2025-02-06

Summary. Between 09:12 and 10:47 UTC the payments-api service returned HTTP 503 for
about 18% of requests to POST /v2/checkout and POST /v2/refunds. GET /v2/orders was
slow (p99 4.1 s) but did not fail. Customers saw "payment could not be processed" and
roughly 2,300 orders were abandoned.

Timeline. 09:05 a config change raised the connection pool of the ledger client from 50
to 400. 09:12 the ledger database hit its max_connections limit and began refusing new
connections. 09:31 on-call (Priya Raman) paged the database team. 10:20 the change was
identified. 10:38 the change was rolled back. 10:47 error rates returned to baseline.

Root cause. The larger pool let each of the 12 payments-api pods open up to 400
connections, exceeding the database's limit of 2,000.

Follow-ups: add a pre-deploy check of pool size x replica count against max_connections
(owner: Dmitri Volkov); alert on ledger connection refusals (owner: Priya Raman)."""

_JOB_AD = """\
Senior Data Engineer (m/f/d) – Lindqvist Logistics AB, Gothenburg

We move 40,000 pallets a day through six Nordic warehouses and we want our data to keep
up. You will own the pipelines that feed our routing and demand-forecasting models.

What you will do: build and run batch and streaming pipelines (Kafka, Spark), model our
warehouse data in dbt, and mentor two junior engineers.

What we look for: at least 5 years of data engineering, strong Python and SQL,
experience with Kafka or a similar event log, and some Terraform. Swedish is a plus but
not required; our working language is English.

Hybrid: three days a week at the Gothenburg office (Lindholmen), two from home.
Salary: SEK 62,000–71,000 per month, plus pension and a yearly bonus.
Apply by 30 April 2025 at careers.lindqvist-logistics.se, reference DE-2025-14."""

_MINUTES = """\
Minutes – Riverside Allotment Society committee, Tuesday 4 March 2025, 7 pm, Scout hut

Present: Helen Okafor (chair), Tom Brennan (treasurer), Aisha Patel (secretary),
Graham Lowe, Marta Nowak. Apologies: Derek Shaw.

1. Water supply. The main tap by plot 14 leaks again. Graham will get two quotes for a
   new standpipe by 18 March. Budget agreed: up to £450.
2. Rents. Tom reported 61 of 64 plots paid. Aisha will send reminders to the remaining
   three plot holders this week.
3. Open day. Set for Saturday 17 May. Marta will organise the seedling stall and needs
   volunteers; Helen will contact the local paper by 1 April.
4. Shed break-in. Police reference recorded; Tom will claim on the society insurance
   (excess £100) by 11 March.

Next meeting: Tuesday 1 April 2025, 7 pm."""

# --------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------

_TICKET = """\
From: j.whitfield@brightmeadow-vets.co.uk
Subject: Still can't export invoices – third time asking!!

Hello,

Since your update on Monday our practice manager cannot export the month's invoices to
CSV. The button spins and then we get "Error 502 – upstream timed out". We tried Chrome
and Edge, two different PCs, same thing. We have to send these to our accountant by
Friday or we get a late filing penalty. I opened ticket #88213 on Tuesday and #88240 on
Wednesday and nobody has replied.

We pay for the Practice Plus plan and frankly this is not good enough. If this is not
fixed by Thursday we will have to look at other software.

Jane Whitfield
Brightmeadow Veterinary Clinic"""

_REVIEWS = """\
Review 1: "Arrived a day early and the fit is perfect. The fabric is thinner than I
expected for the price, though."
Review 2: "Zip broke the second time I wore it. Returned it, refund took three weeks."
Review 3: "Lovely colour, exactly like the photos, and it washes well."
Review 4: "Sizing runs small, order one up. Customer service swapped it quickly."
Review 5: "Cheap-feeling material and the stitching on the pocket came loose."
Review 6: "Delivery was slow but the jacket itself is warm and well made." """

# --------------------------------------------------------------------------------------
# Tool calls
# --------------------------------------------------------------------------------------

_TOOLS_TRAVEL = """\
Available tools:
- search_trains(origin, destination, date, depart_after, max_changes, railcard): find train
  journeys. date is YYYY-MM-DD, depart_after is HH:MM, railcard may be null.
- book_hotel(city, check_in, nights, guests, max_price_per_night, breakfast): reserve a
  room. check_in is YYYY-MM-DD.
- convert_currency(amount, from_currency, to_currency): convert money at today's rate.

User request: "I need to get from Leeds to Edinburgh on 22 May 2025, leaving no earlier
than half past eight in the morning. I have a 16-25 railcard and I'd rather not change
trains more than once." """

_TOOLS_HOME = """\
Available tools:
- set_thermostat(room, temperature_c, mode, until): mode is one of heat, cool, auto, off;
  until is HH:MM or null for indefinitely.
- create_reminder(title, date, time, repeat, notes): repeat is one of none, daily,
  weekly, monthly; notes may be null.
- play_music(room, query, shuffle, volume): volume 0-100.

User request: "Remind me every week on Thursdays to put the recycling bins out – start
this Thursday, 6 March 2025, at 19:45, and add a note that the green bin goes out only
on odd weeks." """

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
        _INVOICE,
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
        _INCIDENT,
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
        _JOB_AD,
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
        _MINUTES,
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
        _TICKET,
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
        _REVIEWS,
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
        _TOOLS_TRAVEL,
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
        _TOOLS_HOME,
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
