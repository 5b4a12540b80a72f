"""Held-out tasks for the JSON layout check (``benchmarks/structured_layout.py``).

Written for issue 28 (item 2) on 2026-12-01 and NEVER used to tune anything: the layout
is chosen from what these tasks measure, and nothing else in edgespec may be fitted to
them. They are kept apart from ``prompts/structured.py`` (the structured-output speed
benchmark) and from the five tasks the first layout check used.

Every schema has an array without ``maxItems`` (the shape that looped in issue 28:
enum strings under a support ticket's ``topics``), as users' schemas do: six tasks have
an array of enum strings, two an array of objects, four an array of free strings. Half the prompts show the schema as
text (``json.dumps``, as a user pastes it), half describe the fields in words, so that
neither layout is the one the prompt itself shows every time.

``expected`` holds the facts a right answer states (a leaf per dotted path; a list is
compared as a set of lower-cased strings): the answer-quality score is the share of them
that the parsed answer gets right.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class LayoutTask:
    id: str
    instruction: str
    document: str
    schema: dict
    expected: dict
    show_schema: bool

    @property
    def prompt(self) -> str:
        tail = (
            f"\n\nAnswer with JSON that follows this schema:\n{json.dumps(self.schema)}"
            if self.show_schema
            else "\n\nAnswer with JSON only."
        )
        return f"{self.instruction}\n\n{self.document.strip()}{tail}"


def _obj(props: dict) -> dict:
    return {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}


def _enum_array(values: list[str]) -> dict:
    return {"type": "array", "items": {"type": "string", "enum": values}}


TASKS = [
    LayoutTask(
        "ticket-topics",
        "Triage this customer e-mail for the support queue: the order number, the priority "
        "(low, normal, urgent), every topic it raises (billing, late_delivery, damaged_item, "
        "wrong_item, refund, exchange, account, other) and whether the customer asks for a "
        "call back.",
        """\
Subject: Order 88-41207 - still not sorted

Hello, I ordered the walnut bookshelf and two lamps on 3 November. The shelf arrived
eleven days late and one side panel is cracked straight through. On top of that I was
charged twice for the lamps (see my card statement, two payments of 38.90). I would like
the duplicate charge refunded and a replacement panel sent out. Please ring me on
07700 900412 after 5 pm, I cannot keep chasing this by e-mail.
Regards, Colm Byrne""",
        _obj(
            {
                "order": {"type": "string"},
                "priority": {"enum": ["low", "normal", "urgent"]},
                "topics": _enum_array(
                    ["billing", "late_delivery", "damaged_item", "wrong_item", "refund", "exchange", "account", "other"]
                ),
                "call_back": {"type": "boolean"},
            }
        ),
        {"order": "88-41207", "topics": ["billing", "late_delivery", "damaged_item", "refund"], "call_back": True},
        show_schema=False,
    ),
    LayoutTask(
        "review-aspects",
        "Classify this product review: its overall sentiment, the star rating, and each aspect "
        "of the product it talks about.",
        """\
Three stars. The blender is powerful and crushes ice in seconds, no complaints there.
But it is LOUD, louder than my old one, and the lid leaks if you fill it past the 1 litre
mark. For 129 euros I expected better build quality. Delivery was quick though.""",
        _obj(
            {
                "sentiment": {"enum": ["positive", "mixed", "negative"]},
                "stars": {"type": "integer", "minimum": 1, "maximum": 5},
                "aspects": _enum_array(
                    [
                        "performance",
                        "noise",
                        "build_quality",
                        "price",
                        "delivery",
                        "design",
                        "customer_service",
                        "ease_of_use",
                    ]
                ),
            }
        ),
        {"sentiment": "mixed", "stars": 3, "aspects": ["performance", "noise", "build_quality", "price", "delivery"]},
        show_schema=True,
    ),
    LayoutTask(
        "cv-skills",
        "Read this CV summary and list the candidate's name, years of professional experience, "
        "the technologies they know (from: python, java, go, rust, sql, docker, kubernetes, "
        "terraform, react, aws, gcp) and the languages they speak.",
        """\
Ines Duarte - backend engineer, Porto. Seven years building payment services, first in
Java, for the last three years mostly in Go. Runs her team's PostgreSQL schemas and
writes a lot of SQL. Ships everything in Docker onto Kubernetes clusters on AWS, with the
infrastructure in Terraform. Speaks Portuguese, English and some Spanish.""",
        _obj(
            {
                "name": {"type": "string"},
                "years": {"type": "integer"},
                "skills": _enum_array(
                    ["python", "java", "go", "rust", "sql", "docker", "kubernetes", "terraform", "react", "aws", "gcp"]
                ),
                "languages": {"type": "array", "items": {"type": "string"}},
            }
        ),
        {
            "name": "Ines Duarte",
            "years": 7,
            "skills": ["java", "go", "sql", "docker", "kubernetes", "aws", "terraform"],
            "languages": ["portuguese", "english", "spanish"],
        },
        show_schema=False,
    ),
    LayoutTask(
        "recipe",
        "Turn this recipe note into structured data: the dish, the number of servings and "
        "every ingredient with its quantity and unit.",
        """\
Lemon lentil soup (serves 4): 250 g red lentils, 1 onion, 2 carrots, 3 cloves garlic,
1.2 l vegetable stock, 1 lemon (juice), 2 tbsp olive oil. Fry onion, carrot and garlic in
the oil, add lentils and stock, simmer 25 minutes, blend, finish with the lemon juice.""",
        _obj(
            {
                "dish": {"type": "string"},
                "servings": {"type": "integer"},
                "ingredients": {
                    "type": "array",
                    "items": _obj(
                        {
                            "name": {"type": "string"},
                            "quantity": {"type": "number"},
                            "unit": {"enum": ["g", "kg", "ml", "l", "tbsp", "tsp", "piece", "clove"]},
                        }
                    ),
                },
            }
        ),
        {"servings": 4, "ingredients.count": 7},
        show_schema=True,
    ),
    LayoutTask(
        "bug-report",
        "File this user report as a bug: the affected component (sync, editor, export, login, "
        "notifications), the severity (minor, major, critical), the platforms it happens on "
        "(windows, macos, linux, android, ios, web), the app version and the steps to reproduce.",
        """\
Since updating to 4.12.1 yesterday, exporting a notebook to PDF crashes the app every
single time, on my Windows laptop and on my wife's MacBook. The Android app is fine. To
reproduce: open any notebook with an image in it, choose File > Export > PDF, press Save.
The window freezes and closes after about five seconds. I lost an unsaved page because
of this.""",
        _obj(
            {
                "component": {"enum": ["sync", "editor", "export", "login", "notifications"]},
                "severity": {"enum": ["minor", "major", "critical"]},
                "platforms": _enum_array(["windows", "macos", "linux", "android", "ios", "web"]),
                "version": {"type": "string"},
                "steps": {"type": "array", "items": {"type": "string"}},
            }
        ),
        {"component": "export", "platforms": ["windows", "macos"], "version": "4.12.1"},
        show_schema=False,
    ),
    LayoutTask(
        "paper",
        "Extract the bibliographic record of this paper: title, authors, year, venue and its research areas.",
        """\
"Sparse Routing for Low-Latency Speech Translation" by Amara Nwosu, Kenji Watanabe and
Lucía Ferrer, presented at Interspeech 2024 (Kos, Greece). The paper combines streaming
speech recognition with machine translation and uses a mixture-of-experts router to cut
latency on edge devices by 38%.""",
        _obj(
            {
                "title": {"type": "string"},
                "authors": {"type": "array", "items": {"type": "string"}},
                "year": {"type": "integer"},
                "venue": {"type": "string"},
                "areas": _enum_array(
                    [
                        "speech_recognition",
                        "machine_translation",
                        "computer_vision",
                        "mixture_of_experts",
                        "reinforcement_learning",
                        "edge_computing",
                        "information_retrieval",
                    ]
                ),
            }
        ),
        {
            "year": 2024,
            "venue": "Interspeech 2024",
            "authors": ["amara nwosu", "kenji watanabe", "lucía ferrer"],
            "areas": ["speech_recognition", "machine_translation", "mixture_of_experts", "edge_computing"],
        },
        show_schema=True,
    ),
    LayoutTask(
        "itinerary",
        "Extract the trip from this booking confirmation: the booking reference, every "
        "passenger, and each flight leg with its flight number, origin and destination airport "
        "codes and date.",
        """\
Booking confirmed - reference QX7R2M
Passengers: Mr Tomasz Zielinski, Mrs Agata Zielinska, Miss Zofia Zielinska (child)
Outbound: LO 281, Warsaw (WAW) to Lisbon (LIS), Sat 12 Apr 2025, 06:40
Return:   LO 282, Lisbon (LIS) to Warsaw (WAW), Sat 19 Apr 2025, 13:15
Baggage: 1 x 23 kg per adult.""",
        _obj(
            {
                "reference": {"type": "string"},
                "passengers": {"type": "array", "items": {"type": "string"}},
                "legs": {
                    "type": "array",
                    "items": _obj(
                        {
                            "flight": {"type": "string"},
                            "from": {"type": "string"},
                            "to": {"type": "string"},
                            "date": {"type": "string"},
                        }
                    ),
                },
            }
        ),
        {"reference": "QX7R2M", "passengers.count": 3, "legs.count": 2},
        show_schema=False,
    ),
    LayoutTask(
        "dietary",
        "From this event registration, record the attendee, the sessions they signed up for "
        "and their dietary requirements.",
        """\
Registration #5521 - Dr Fatima Haddad, Leiden University.
Sessions: opening keynote, the workshop on federated learning, the poster session and
the closing panel. She is vegetarian and allergic to tree nuts, and asks for a
gluten-free option at lunch if possible.""",
        _obj(
            {
                "attendee": {"type": "string"},
                "sessions": _enum_array(
                    [
                        "opening_keynote",
                        "federated_learning_workshop",
                        "poster_session",
                        "industry_track",
                        "closing_panel",
                        "social_dinner",
                    ]
                ),
                "diet": _enum_array(
                    ["vegetarian", "vegan", "gluten_free", "nut_allergy", "halal", "kosher", "lactose_free"]
                ),
            }
        ),
        {
            "sessions": ["opening_keynote", "federated_learning_workshop", "poster_session", "closing_panel"],
            "diet": ["vegetarian", "nut_allergy", "gluten_free"],
        },
        show_schema=True,
    ),
]


def _at(value, path: str):
    for key in path.split("."):
        if key == "count" and isinstance(value, list):
            return len(value)
        value = value[key]
    return value


def score(task: LayoutTask, parsed) -> float:
    """The share of ``task.expected`` that ``parsed`` states (0 for no answer)."""
    if not isinstance(parsed, dict):
        return 0.0
    right = 0
    for path, want in task.expected.items():
        try:
            got = _at(parsed, path)
        except (KeyError, TypeError, IndexError):
            continue
        if isinstance(want, list):
            right += isinstance(got, list) and {str(g).lower() for g in got} == set(want)
        elif isinstance(want, str):
            right += isinstance(got, str) and got.strip().lower() == want.lower()
        else:
            right += got == want
    return right / len(task.expected)
