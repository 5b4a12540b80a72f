"""Structured tasks for issue 43 (part 3): do the defaults under a JSON Schema keep up with
constrained plain decoding on invoice-like extractions? (``benchmarks/structured_tasks.py``)

Written for that check on 2026-12-06. Two sets, kept apart:

* ``DEV``: two invoice-like tasks the diagnosis was made on and the fix was checked
  against while it was written. Tuning material: never reported as a result.
* ``TASKS``: the held-out set the benchmark reports, NEVER used to tune anything (no
  constant, prior or rule of edgespec may be chosen by looking at these prompts or at
  edgespec's outputs on them). Five resemble an invoice extraction (``kind``
  "invoice-like": an invoice, a receipt, a purchase order, a utility bill and a hotel
  folio, each with a schema of nested objects, an array of line items, numbers, dates
  and optional fields) and three do not ("other": meeting minutes to action items, a
  review to labels, a request to a tool call).

The schemas mix the two ways users write optional values: nullable and required (OpenAI's
strict style), and simply not required. They use only keywords llguidance implements.
Each prompt is one user message: the task, the document, then the schema as text.
"""

from __future__ import annotations

import json
from dataclasses import dataclass


@dataclass(frozen=True)
class StructuredTask:
    id: str
    kind: str  # "invoice-like" or "other"
    instruction: str
    document: str
    schema: dict

    @property
    def prompt(self) -> str:
        return (
            f"{self.instruction}\n\n{self.document.strip()}\n\n"
            f"Answer with one JSON object and nothing else. It must follow this JSON Schema:\n"
            f"{json.dumps(self.schema)}"
        )

    @property
    def response_format(self) -> dict:
        return {
            "type": "json_schema",
            "json_schema": {"name": self.id.replace("-", "_"), "schema": self.schema, "strict": True},
        }


def _obj(props: dict, optional: tuple[str, ...] = ()) -> dict:
    """An object of ``props``, all required but ``optional``, nothing else allowed."""
    return {
        "type": "object",
        "properties": props,
        "required": [k for k in props if k not in optional],
        "additionalProperties": False,
    }


_STR = {"type": "string"}
_NUM = {"type": "number"}
_INT = {"type": "integer"}
_DATE = {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"}
_NULL_STR = {"type": ["string", "null"]}
_NULL_NUM = {"type": ["number", "null"]}
_CURRENCY = {"type": "string", "pattern": "^[A-Z]{3}$"}
_PARTY = _obj({"name": _STR, "address": _STR, "tax_id": _NULL_STR})

# ======================================================================================
# DEV: the diagnosis and the fix were worked out on these two. Not reported.
# ======================================================================================

_DEV_INVOICE = """\
NORTHFIELD TIMBER & FIXINGS
14 Mill Road, Ely CB7 4DF · VAT GB 301 7755 21

Invoice 2025/0418                                   Dated 2 May 2025
Customer: Fenland Joinery Co., 9 Station Yard, March PE15 8NH
Account no. FJ-0077      Your order: PO 5521

Item    Description                          Qty   Unit     Price    Net
TB-220  Sawn softwood 47x100mm, 4.8m          60   length    9.40   564.00
TB-315  Oak board 25x150mm, 2.4m              12   length   31.75   381.00
FX-010  Wood screws 5x70mm (box of 200)        8   box      14.20   113.60
FX-044  Hinges, brass, 100mm (pair)           10   pair      6.85    68.50

Net total 1127.10     VAT @ 20% 225.42     Amount due GBP 1352.52
Terms: 30 days net, due 1 June 2025. Delivery charge waived on this order."""

_DEV_RECEIPT = """\
CAFÉ BRUNNEN · Brunnenstraße 41 · 10119 Berlin · St.-Nr. 30/245/66012
Beleg 88127   06.05.2025  12:41   Tisch 7   Bedienung: Jonas

2 x Flat White                 à 3,60      7,20
1 x Croissant                  à 2,90      2,90
1 x Avocado Toast              à 9,50      9,50
1 x Orangensaft 0,3l           à 3,80      3,80

Summe EUR                                 23,40
darin MwSt 19% (Getränke)                  2,35
darin MwSt 7% (Speisen)                    0,81
Gegeben Karte (Visa **** 4412)            23,40
Trinkgeld                                  2,00"""

DEV: tuple[StructuredTask, ...] = (
    StructuredTask(
        "dev-timber-invoice",
        "invoice-like",
        "Extract this invoice into a record: the seller and customer, the invoice number and "
        "dates (YYYY-MM-DD), every line item and the totals.",
        _DEV_INVOICE,
        _obj(
            {
                "seller": _PARTY,
                "customer": _obj({"name": _STR, "address": _STR, "account": _NULL_STR}),
                "invoice_number": _STR,
                "purchase_order": _NULL_STR,
                "issue_date": _DATE,
                "due_date": _DATE,
                "currency": _CURRENCY,
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {"sku": _STR, "description": _STR, "quantity": _INT, "unit_price": _NUM, "net": _NUM}
                    ),
                },
                "net_total": _NUM,
                "vat": _NUM,
                "total": _NUM,
                "notes": _STR,
            },
            optional=("notes",),
        ),
    ),
    StructuredTask(
        "dev-cafe-receipt",
        "invoice-like",
        "Turn this receipt into an expense record. Dates as YYYY-MM-DD, amounts as numbers.",
        _DEV_RECEIPT,
        _obj(
            {
                "merchant": _obj({"name": _STR, "city": _STR, "tax_number": _NULL_STR}),
                "date": _DATE,
                "currency": _CURRENCY,
                "items": {
                    "type": "array",
                    "items": _obj({"name": _STR, "quantity": _INT, "unit_price": _NUM, "total": _NUM}),
                },
                "taxes": {"type": "array", "items": _obj({"rate_percent": _NUM, "amount": _NUM})},
                "total": _NUM,
                "tip": _NULL_NUM,
                "payment": _obj({"method": {"enum": ["cash", "card", "other"]}, "card_last4": _NULL_STR}),
            }
        ),
    ),
)

# ======================================================================================
# HELD OUT: what the benchmark reports. Never tune on these.
# ======================================================================================

_IT_INVOICE = """\
Kovač & Lindgren Consulting d.o.o.
Ilica 212, 10000 Zagreb, Croatia — OIB/VAT HR 58120934471
IBAN HR12 2360 0001 1025 7743 9

INVOICE                      No. KL-2025-0093
Issue date: 28 February 2025         Service period: 1–28 February 2025
Due date: 30 March 2025

Client: Brightwater Analytics GmbH, Sendlinger Str. 7, 80331 München, Germany
Client VAT: DE 318 447 902          Client PO: BW-PO-7781

 #  Service                                      Hours   Rate (EUR)   Amount (EUR)
 1  Data pipeline review and recommendations      16.0     95.00        1,520.00
 2  Airflow migration (DAGs 1–14)                 42.5     95.00        4,037.50
 3  On-call support, weekend 22–23 Feb             8.0    120.00          960.00
 4  Travel Zagreb–Munich (fixed fee)                 –        –            380.00

Subtotal                                                               6,897.50
Discount 5% (framework agreement)                                       -344.88
Net amount                                                             6,552.62
VAT: reverse charge (Art. 196 Directive 2006/112/EC)                       0.00
TOTAL DUE (EUR)                                                        6,552.62"""

_HARDWARE_RECEIPT = """\
BUILDRIGHT DIY · Store 0412 Leeds Kirkstall
Kirkstall Retail Park, LS5 3BT   Tel 0113 496 0112
VAT No. 774 2201 93

SALE     11/04/2025  16:52    Till 03   Op 118   Trans 5520981

5060123 Masonry drill bit set 5pc     1 @  12.99     12.99
5060871 Wall plugs brown 100pk        2 @   3.49      6.98
5011290 Exterior paint Sage 2.5L      3 @  24.00     72.00
5011299 Paint tray & roller kit       1 @   8.50      8.50
        MULTIBUY paint 3 for 60             -12.00
5090014 Dust sheets 3pk               1 @   6.75      6.75

ITEMS 8                             TOTAL    95.22
VISA CONTACTLESS ************7731           95.22
VAT @20% included                            15.87
Club card 6330 0091 2284: points earned 95"""

_PURCHASE_ORDER = """\
PURCHASE ORDER PO-24-1187
From: The Copper Kettle Bistro, 3 Quay Street, Galway H91 C2KP, Ireland
      Contact: Niamh Breathnach, niamh@copperkettle.ie
To:   Atlantic Fresh Produce Ltd, Unit 4 Ballybrit Business Park, Galway
Order date: 19 November 2024      Requested delivery: 21 November 2024, before 09:00
Deliver to: rear kitchen door (Quay Lane)

Line  Supplier code  Item                          Qty  Unit   Unit price (EUR)
1     VEG-102        Rooster potatoes              50   kg           0.95
2     VEG-215        Carrots, washed               20   kg           1.10
3     HRB-007        Flat-leaf parsley             10   bunch        0.80
4     FSH-330        Hake fillets, skin on         12   kg          16.40
5     DRY-041        Pearl barley                   5   kg           2.25

Order value (ex VAT): 328.55 EUR. Payment terms: 14 days from delivery.
Note: please substitute curly parsley if flat-leaf is unavailable."""

_UTILITY_BILL = """\
SOLSTRAND ENERGI AS — Electricity bill
Customer: Ingrid Haugen, Fjellveien 18B, 5019 Bergen
Customer no. 4410 2281   Meter no. 7093315   Bill no. 2025-03-118842
Bill date: 4 April 2025   Due date: 25 April 2025

Billing period 1 March 2025 – 31 March 2025
Meter reading 1 March: 48 112 kWh (actual)   31 March: 49 046 kWh (actual)
Consumption: 934 kWh

Charges                                   Quantity     Rate        NOK
Energy (spot price + markup)              934 kWh      0.812     758.41
Grid rent, energy part                    934 kWh      0.396     369.86
Grid rent, fixed part                       1 month  345.00      345.00
Electricity tax                           934 kWh      0.0951     88.82
Government electricity support                                  -112.08
Total before VAT                                                1450.01
VAT 25%                                                          362.50
TOTAL TO PAY                                                    1812.51

Paid by e-invoice/AvtaleGiro on the due date. Previous bill (NOK 2 104.77) paid 24 March."""

_HOTEL_FOLIO = """\
HOTEL MIRADOURO — Rua das Flores 64, 1200-195 Lisboa, Portugal — NIF 508 771 230
Guest folio / invoice FT 2025/3316

Guest: Mr. Samuel Adeyemi            Room 512 (Superior Double, river view)
Company: Lumen Health Partners Ltd, 40 Fenchurch St, London EC3M 3BY, VAT GB 912 4453 07
Arrival 12/05/2025   Departure 15/05/2025   Nights 3   Adults 1

Date        Description                          Qty    Unit (EUR)   Total (EUR)
12/05/2025  Accommodation, bed & breakfast        1      185.00       185.00
13/05/2025  Accommodation, bed & breakfast        1      185.00       185.00
13/05/2025  Restaurant — dinner                   1       48.50        48.50
14/05/2025  Accommodation, bed & breakfast        1      185.00       185.00
14/05/2025  Laundry service                       2        9.00        18.00
15/05/2025  Lisbon tourist tax (per night)        3        4.00        12.00

Total                                                                633.50
of which VAT 6% (accommodation 555.00)                                31.42
of which VAT 13% (restaurant 48.50)                                    5.58
of which VAT 23% (laundry 18.00)                                       3.37
Paid: Mastercard ending 0926, 15/05/2025"""

_MINUTES = """\
Product sync — Wednesday 9 April 2025 — attendees: Chen Wei, Lucía Romero, Tomasz Kaczmarek, Ade Okonjo

We agreed to move the mobile release from 17 April to 24 April because the payment SDK
update is not certified yet. Lucía will ask the SDK vendor for a certification date by
Friday. Tomasz owns the regression run on Android once the SDK lands; he needs two days.
Ade raised that the onboarding survey still shows the old logo: Chen will fix it in the
web app this week and Ade will update the screenshots in the store listing before the
release. No decision yet on dark mode: revisit at the next sync. Chen asked everyone to
file release-blocking bugs with the label "r24" so they show on the board."""

_REVIEW = """\
Bought the TrailLite 2 tent for a week in the Dolomites. Setup really is five minutes and
it weighs next to nothing in the pack, which is what I paid for. But the rain fly pooled
water on the second night and a seam above the door dripped onto my sleeping bag. The
zips are fiddly with cold hands. Customer service answered within a day and offered a
replacement fly, which was decent of them. For the price (€389) I expected it to be
waterproof out of the box. Three stars, would not buy again for alpine trips."""

_TOOL_REQUEST = """\
Tools:
- create_event(title, date, start, end, location, attendees[], reminder_minutes|null, video_call)
- send_email(to[], subject, body)
- set_timer(minutes, label)

User: Put a planning session with Hannah Schulz and Rob Ferreira in my calendar for the
20th of May 2025, 14:30 to 16:00, in the Atlas meeting room. Add a video link too, and
remind me 15 minutes before."""

TASKS: tuple[StructuredTask, ...] = (
    StructuredTask(
        "it-services-invoice",
        "invoice-like",
        "Extract this invoice into our accounts-payable record. Dates as YYYY-MM-DD, amounts "
        "as plain numbers (no thousands separators).",
        _IT_INVOICE,
        _obj(
            {
                "supplier": _obj({"name": _STR, "address": _STR, "vat_id": _NULL_STR, "iban": _NULL_STR}),
                "client": _obj({"name": _STR, "address": _STR, "vat_id": _NULL_STR}),
                "invoice_number": _STR,
                "purchase_order": _STR,
                "issue_date": _DATE,
                "due_date": _DATE,
                "service_period": _obj({"start": _DATE, "end": _DATE}),
                "currency": _CURRENCY,
                "lines": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {"description": _STR, "hours": _NULL_NUM, "rate": _NULL_NUM, "amount": _NUM},
                    ),
                },
                "discount": _NULL_NUM,
                "net_amount": _NUM,
                "vat_amount": _NUM,
                "total_due": _NUM,
                "vat_note": _STR,
            },
            optional=("purchase_order", "vat_note"),
        ),
    ),
    StructuredTask(
        "hardware-receipt",
        "invoice-like",
        "Extract this till receipt as an expense record: the store, the date (YYYY-MM-DD), "
        "every item with its product code, the discounts, the totals and the payment.",
        _HARDWARE_RECEIPT,
        _obj(
            {
                "store": _obj({"name": _STR, "branch": _STR, "postcode": _STR, "vat_number": _NULL_STR}),
                "date": _DATE,
                "transaction": _STR,
                "items": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {"code": _STR, "description": _STR, "quantity": _INT, "unit_price": _NUM, "total": _NUM}
                    ),
                },
                "discounts": {"type": "array", "items": _obj({"description": _STR, "amount": _NUM})},
                "total": _NUM,
                "vat_included": _NUM,
                "payment": _obj({"method": {"enum": ["cash", "card", "voucher"]}, "card_last4": _NULL_STR}),
                "loyalty_points": {"type": "integer"},
            },
            optional=("loyalty_points",),
        ),
    ),
    StructuredTask(
        "purchase-order",
        "invoice-like",
        "Convert this purchase order into a structured order for the supplier's system. Dates as YYYY-MM-DD.",
        _PURCHASE_ORDER,
        _obj(
            {
                "po_number": _STR,
                "buyer": _obj({"name": _STR, "address": _STR, "contact": _obj({"name": _STR, "email": _STR})}),
                "supplier": _obj({"name": _STR, "address": _STR}),
                "order_date": _DATE,
                "delivery": _obj({"date": _DATE, "before": _NULL_STR, "instructions": _NULL_STR}),
                "lines": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {
                            "line": _INT,
                            "code": _STR,
                            "item": _STR,
                            "quantity": _NUM,
                            "unit": {"enum": ["kg", "bunch", "box", "each", "litre"]},
                            "unit_price": _NUM,
                        }
                    ),
                },
                "order_value": _NUM,
                "currency": _CURRENCY,
                "payment_terms_days": _INT,
                "notes": _STR,
            },
            optional=("notes",),
        ),
    ),
    StructuredTask(
        "utility-bill",
        "invoice-like",
        "Extract this electricity bill for our household-budget app. Dates as YYYY-MM-DD, amounts as numbers.",
        _UTILITY_BILL,
        _obj(
            {
                "supplier": _STR,
                "customer": _obj({"name": _STR, "address": _STR, "customer_number": _STR}),
                "bill_number": _STR,
                "bill_date": _DATE,
                "due_date": _DATE,
                "period": _obj({"start": _DATE, "end": _DATE}),
                "meter": _obj(
                    {
                        "number": _STR,
                        "start_kwh": _NUM,
                        "end_kwh": _NUM,
                        "consumption_kwh": _NUM,
                        "estimated": {"type": "boolean"},
                    }
                ),
                "charges": {
                    "type": "array",
                    "items": _obj({"description": _STR, "quantity": _NULL_NUM, "rate": _NULL_NUM, "amount": _NUM}),
                },
                "total_before_vat": _NUM,
                "vat": _NUM,
                "total": _NUM,
                "currency": _CURRENCY,
                "payment_method": _NULL_STR,
            }
        ),
    ),
    StructuredTask(
        "hotel-folio",
        "invoice-like",
        "Extract this hotel invoice for the travel-expense claim. Dates as YYYY-MM-DD.",
        _HOTEL_FOLIO,
        _obj(
            {
                "hotel": _PARTY,
                "invoice_number": _STR,
                "guest": _STR,
                "company": _obj({"name": _STR, "address": _STR, "vat_id": _NULL_STR}),
                "room": _STR,
                "arrival": _DATE,
                "departure": _DATE,
                "nights": _INT,
                "charges": {
                    "type": "array",
                    "minItems": 1,
                    "items": _obj(
                        {"date": _DATE, "description": _STR, "quantity": _INT, "unit_price": _NUM, "total": _NUM}
                    ),
                },
                "total": _NUM,
                "vat": {"type": "array", "items": _obj({"rate_percent": _NUM, "base": _NULL_NUM, "amount": _NUM})},
                "currency": _CURRENCY,
                "paid_with": _NULL_STR,
            }
        ),
    ),
    StructuredTask(
        "meeting-actions",
        "other",
        "List the decisions and action items of this meeting.",
        _MINUTES,
        _obj(
            {
                "date": _DATE,
                "decisions": {"type": "array", "items": _STR},
                "actions": {
                    "type": "array",
                    "items": _obj({"owner": _STR, "task": _STR, "due": _NULL_STR}),
                },
                "open_questions": {"type": "array", "items": _STR},
            }
        ),
    ),
    StructuredTask(
        "review-labels",
        "other",
        "Label this product review for our feedback dashboard.",
        _REVIEW,
        _obj(
            {
                "product": _STR,
                "rating": {"type": "integer", "minimum": 1, "maximum": 5},
                "sentiment": {"enum": ["positive", "mixed", "negative"]},
                "praised": {
                    "type": "array",
                    "items": {"enum": ["weight", "setup", "price", "durability", "waterproofing", "service", "zips"]},
                },
                "criticised": {
                    "type": "array",
                    "items": {"enum": ["weight", "setup", "price", "durability", "waterproofing", "service", "zips"]},
                },
                "would_buy_again": {"type": "boolean"},
                "summary": _STR,
            }
        ),
    ),
    StructuredTask(
        "calendar-tool-call",
        "other",
        "Choose the one tool that does what the user asks and fill in its arguments.",
        _TOOL_REQUEST,
        _obj(
            {
                "name": {"enum": ["create_event", "send_email", "set_timer"]},
                "arguments": _obj(
                    {
                        "title": _STR,
                        "date": _DATE,
                        "start": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"},
                        "end": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"},
                        "location": _STR,
                        "attendees": {"type": "array", "items": _STR},
                        "reminder_minutes": {"type": ["integer", "null"]},
                        "video_call": {"type": "boolean"},
                    }
                ),
            }
        ),
    ),
)

BY_ID = {t.id: t for t in (*DEV, *TASKS)}
