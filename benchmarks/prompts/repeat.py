"""Prompt sets for ``repeat_workloads.py``: four workloads, each a sequence of 32 different
requests whose answers share one shape (issue 27 item 8).

Written for this benchmark and never tuned on (held out: no drafter, policy or default
was chosen by looking at them), and not taken from the other benchmark files:

* ``extraction``: support tickets of one fictional product into one JSON schema;
* ``tests``: a pytest test for each of 32 small, different functions;
* ``edits``: an agent-like loop with tools: each request asks for the same kind of edit
  (a guard that raises ``ValueError``) on a different small file, after the agent's
  ``read_file`` call and its result (rendered prompts stay under 600 tokens);
* ``sql``: 32 questions over one SQLite schema given in the system prompt.

A request is a list of chat messages (and, for ``edits``, the tools list the template
renders); ``repeat_workloads.py`` renders them with the target's own chat template.
The first 24 requests of each are the in-process sequence; the last 8 are what the warm
pass (a second process with the saved index) and the in-process run both answer after
the index was saved, so warm and in-process speeds compare on the same requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from benchmarks.prompts.tools import call

N_REQUESTS = 32


@dataclass(frozen=True)
class Request:
    id: str
    messages: list[dict]


@dataclass(frozen=True)
class Workload:
    name: str
    kind: str  # "schema" (constrained by ``schema``) or "free" (free text)
    max_tokens: int
    requests: list[Request]
    schema: dict | None = None
    tools: list[dict] | None = None
    notes: str = ""
    extra: dict = field(default_factory=dict)


# -- 1. extraction under one schema ------------------------------------------------------

TICKET_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"type": "string"},
        "product": {"enum": ["web app", "mobile app", "billing", "api", "desktop sync"]},
        "severity": {"enum": ["low", "medium", "high", "critical"]},
        "category": {"enum": ["bug", "outage", "billing", "account", "how-to", "feature request"]},
        "summary": {"type": "string"},
        "wants_refund": {"type": "boolean"},
        "order_id": {"type": ["string", "null"]},
    },
    "required": ["customer", "product", "severity", "category", "summary", "wants_refund", "order_id"],
    "additionalProperties": False,
}

TICKET_SYSTEM = (
    "You read support tickets for Tallybook, a bookkeeping service with a web app, a mobile app, "
    "a billing portal, a public API and a desktop sync client. Turn each ticket into one JSON record: "
    "customer (the person or company writing), product, severity (critical: data loss or nobody can "
    "work; high: a main feature is broken; medium: a workaround exists; low: cosmetic or a question), "
    "category, summary (one short sentence), wants_refund, and order_id (null when the ticket names none)."
)

TICKETS = [
    "Hi, this is Marta Kowalczyk from Kowalczyk Bakery. Since this morning the mobile app crashes as soon "
    "as I open the invoices tab. I reinstalled it twice. I can still use the website, so it's not urgent.",
    "Our whole accounting team at Fenwick & Daughters cannot log in to the web app: it says 'service "
    "unavailable' on every page. We have a VAT deadline tonight. Please fix this now!",
    "I was charged twice for my annual plan (order TB-20931). Please refund the second charge. - Olu Adeyemi",
    "Hello, how do I export last year's ledger to CSV from the desktop sync client? I can't find the "
    "option anywhere. Thanks, Priya Raman",
    "The API returns 500 for every POST /v2/entries since your release yesterday. Our nightly import at "
    "Greenleaf Logistics failed and 3,000 entries are missing. Dev lead: Tomasz Nowak.",
    "It would be great if the mobile app had a dark mode. My eyes hurt at night. Cheers, Sam Okafor",
    "The desktop sync client deleted two months of receipts from my laptop after an update, and they are "
    "gone from the cloud too. This is a disaster. Jean-Luc Perrin, Perrin Menuiserie.",
    "Hi, the font on the billing portal looks blurry in Firefox. Not a big deal, just letting you know. Ana Lima",
    "Please cancel my subscription and refund this month, order TB-31877. I stopped using Tallybook after "
    "my shop closed. Regards, Hiroshi Tanaka",
    "Our API key stopped working after we rotated it, every call now gets 401 even with the new key. We "
    "can still enter data by hand in the web app. - Nadia Haddad, Haddad Imports",
    "I changed my email address and now I can't reset my password because the link goes to the old one. "
    "Can you update my account? Erik Lindqvist",
    "When I filter transactions by date in the web app, the totals at the bottom don't change. The rows "
    "are filtered correctly though. Grace O'Brien, O'Brien Florists.",
    "The billing portal shows my invoice in dollars but I am billed in euros (order TB-40412). Which one is "
    "right? Matteo Ricci",
    "Push notifications on the mobile app arrive three times for every new payment. Annoying but harmless. "
    "Lena Fischer",
    "Since Monday the desktop sync client uses 100% CPU and never finishes syncing, so my books on the "
    "laptop are a week behind. I can work in the browser meanwhile. Kwame Mensah, Mensah Electric.",
    "Could you add an API endpoint to list attachments of an entry? We'd like to archive them "
    "automatically. Thanks, Isabel Moreno at Moreno Consulting",
    "Everything is down for us: web app, mobile app and the API time out. Twelve people at Baltic Freight "
    "can't work. Contact: Aivars Ozols.",
    "I upgraded to the Pro plan but the billing portal still shows the Basic features, order TB-51230. "
    "Either give me the features or my money back. Chloe Dubois",
    "How do I add a second user to my account so my bookkeeper can see the reports? Yusuf Demir",
    "The receipt scanner in the mobile app reads every amount as 0.00 since the last update, so I have to "
    "type them in myself. Bea Santos, Santos Catering.",
    "The CSV import on the web app skips every row that has an accent in the description, e.g. 'Café'. "
    "We lose about a tenth of our rows each time. Henrik Madsen, Madsen Bikes",
    "I got an invoice for a plan I never ordered (order TB-60018). Please refund it and tell me how this "
    "happened. Fatima Zahra",
    "The API documentation page for webhooks has a broken link to the examples. Small thing. Dev at "
    "Northwind Games, Leo Park",
    "Two-factor codes from the mobile app are always rejected, so I am locked out of my account entirely. Rosa Jimenez",
    # the last 8: answered after the index was saved (the warm pass and the in-process run alike)
    "After I moved my books to a new laptop, the desktop sync client shows every entry twice. The web app "
    "shows them once. Quinn Harper, Harper Studio.",
    "Hello, I'd like a yearly summary PDF in the billing portal for my tax advisor. Is that planned? Dmitri Volkov",
    "Payments we record through the API appear in the web app with yesterday's date, which breaks our "
    "month-end close. Sophie Laurent, Laurent Vins.",
    "My card was charged but the billing portal says my payment failed and locked the account (order "
    "TB-70325). I need access today for payroll. Ahmed Karimi",
    "The mobile app logs me out every few minutes. I can log in again, it's just tiresome. Nora Berg",
    "The web app's report page has been blank for all of us at Castillo Construction since 9am, and our "
    "auditors arrive tomorrow. Miguel Castillo.",
    "How can I change the currency of my company file from pounds to euros? Aoife Byrne",
    "The desktop sync client refuses to start on Windows 11 after your update: it closes right after the "
    "splash screen. Our office uses the web app for now. Pieter de Vries, De Vries Tuin.",
]


# -- 2. test writing -------------------------------------------------------------------------

TEST_SYSTEM = (
    "You write pytest tests. The function lives in the module `helpers`. Reply with one python code block "
    "only: import the function from helpers and write one test function with a few asserts, including an "
    "edge case. No explanation."
)

FUNCTIONS = [
    '''def clamp(value, low, high):
    """Limit value to the range [low, high]."""
    if low > high:
        raise ValueError("low must not exceed high")
    return max(low, min(value, high))''',
    """def count_vowels(text):
    return sum(1 for ch in text.lower() if ch in "aeiou")""",
    '''def chunk(items, size):
    """Split a list into lists of at most size items."""
    if size < 1:
        raise ValueError("size must be positive")
    return [items[i:i + size] for i in range(0, len(items), size)]''',
    """def is_palindrome(text):
    cleaned = "".join(ch.lower() for ch in text if ch.isalnum())
    return cleaned == cleaned[::-1]""",
    """def celsius_to_fahrenheit(celsius):
    return celsius * 9 / 5 + 32""",
    '''def first_duplicate(items):
    """The first item that appears twice, or None."""
    seen = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return None''',
    """def slugify(title):
    words = "".join(ch if ch.isalnum() else " " for ch in title.lower()).split()
    return "-".join(words)""",
    """def median(numbers):
    if not numbers:
        raise ValueError("median of an empty list")
    ordered = sorted(numbers)
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2""",
    '''def parse_duration(text):
    """'1h30m' -> 5400 seconds; units h, m, s."""
    total, number = 0, ""
    for ch in text:
        if ch.isdigit():
            number += ch
        else:
            total += int(number) * {"h": 3600, "m": 60, "s": 1}[ch]
            number = ""
    return total''',
    """def flatten(nested):
    out = []
    for item in nested:
        if isinstance(item, list):
            out.extend(flatten(item))
        else:
            out.append(item)
    return out""",
    """def word_frequencies(text):
    counts = {}
    for word in text.lower().split():
        counts[word] = counts.get(word, 0) + 1
    return counts""",
    '''def rotate(items, steps):
    """Rotate a list to the right by steps."""
    if not items:
        return []
    steps %= len(items)
    return items[-steps:] + items[:-steps]''',
    """def is_leap_year(year):
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)""",
    """def initials(full_name):
    return "".join(part[0].upper() for part in full_name.split())""",
    """def merge_sorted(a, b):
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        if a[i] <= b[j]:
            out.append(a[i]); i += 1
        else:
            out.append(b[j]); j += 1
    return out + a[i:] + b[j:]""",
    """def to_roman(number):
    if not 0 < number < 4000:
        raise ValueError("out of range")
    values = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),
              (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]
    out = ""
    for value, letters in values:
        while number >= value:
            out += letters
            number -= value
    return out""",
    """def truncate(text, width, suffix="..."):
    if len(text) <= width:
        return text
    return text[:max(0, width - len(suffix))] + suffix""",
    """def digits_sum(n):
    return sum(int(d) for d in str(abs(n)))""",
    """def group_by_length(words):
    groups = {}
    for word in words:
        groups.setdefault(len(word), []).append(word)
    return groups""",
    """def safe_divide(a, b, default=0.0):
    try:
        return a / b
    except ZeroDivisionError:
        return default""",
    """def normalize_whitespace(text):
    return " ".join(text.split())""",
    """def running_total(numbers):
    total, out = 0, []
    for n in numbers:
        total += n
        out.append(total)
    return out""",
    '''def hex_to_rgb(color):
    """'#ff8800' -> (255, 136, 0)."""
    color = color.lstrip("#")
    if len(color) != 6:
        raise ValueError("expected six hex digits")
    return tuple(int(color[i:i + 2], 16) for i in (0, 2, 4))''',
    """def unique_in_order(items):
    seen, out = set(), []
    for item in items:
        if item not in seen:
            seen.add(item)
            out.append(item)
    return out""",
    # the last 8
    """def mask_email(email):
    name, _, domain = email.partition("@")
    if not domain:
        raise ValueError("not an email address")
    return name[0] + "***@" + domain""",
    """def pairwise_diff(numbers):
    return [b - a for a, b in zip(numbers, numbers[1:])]""",
    """def title_case(text, small=("a", "an", "the", "of")):
    words = text.lower().split()
    return " ".join(w if i and w in small else w.capitalize() for i, w in enumerate(words))""",
    """def bits_set(n):
    if n < 0:
        raise ValueError("negative")
    return bin(n).count("1")""",
    """def invert_dict(mapping):
    out = {}
    for key, value in mapping.items():
        if value in out:
            raise ValueError(f"duplicate value {value!r}")
        out[value] = key
    return out""",
    """def percent_change(old, new):
    if old == 0:
        raise ZeroDivisionError("old value is zero")
    return round((new - old) / old * 100, 2)""",
    """def caesar(text, shift):
    out = []
    for ch in text:
        if ch.isalpha():
            base = ord("a") if ch.islower() else ord("A")
            out.append(chr((ord(ch) - base + shift) % 26 + base))
        else:
            out.append(ch)
    return "".join(out)""",
    """def nth_weekday_name(n):
    names = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
    return names[n % 7]""",
]


# -- 3. code edits in an agent loop with tools -----------------------------------------------

EDIT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "replace_in_file",
            "description": "Replace the exact text old with new in a file.",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string"}, "old": {"type": "string"}, "new": {"type": "string"}},
                "required": ["path", "old", "new"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "run_tests",
            "description": "Run the tests of one file and return the output.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    },
]

EDIT_SYSTEM = (
    "You are a coding agent in a Python repository. Make the requested edit with replace_in_file, "
    "changing as little as possible; old must be copied exactly from the file. Answer with exactly one tool "
    "call."
)

# (path, the edit asked for, the file's text)
EDITS = [
    (
        "billing/discounts.py",
        "make `apply_discount` raise ValueError when percent is not between 0 and 100",
        '''def apply_discount(price, percent):
    """Price after a percentage discount."""
    return round(price * (1 - percent / 100), 2)


def bulk_price(unit_price, quantity):
    return unit_price * quantity
''',
    ),
    (
        "inventory/stock.py",
        "make `remove_stock` raise ValueError when amount is negative",
        """class Stock:
    def __init__(self):
        self.levels = {}

    def add_stock(self, sku, amount):
        self.levels[sku] = self.levels.get(sku, 0) + amount

    def remove_stock(self, sku, amount):
        self.levels[sku] = self.levels.get(sku, 0) - amount
""",
    ),
    (
        "geo/distance.py",
        "make `haversine_km` raise ValueError when a latitude is outside -90..90",
        """import math


def haversine_km(lat1, lon1, lat2, lon2):
    r = 6371.0
    p1, p2 = math.radians(lat1), math.radians(lat2)
    dp, dl = p2 - p1, math.radians(lon2 - lon1)
    a = math.sin(dp / 2) ** 2 + math.cos(p1) * math.cos(p2) * math.sin(dl / 2) ** 2
    return 2 * r * math.asin(math.sqrt(a))
""",
    ),
    (
        "users/names.py",
        "make `display_name` raise ValueError when first is empty",
        """def display_name(first, last=""):
    if last:
        return f"{first} {last[0]}."
    return first
""",
    ),
    (
        "scheduling/slots.py",
        "make `split_into_slots` raise ValueError when minutes is zero or negative",
        """from datetime import timedelta


def split_into_slots(start, end, minutes):
    slots, current = [], start
    step = timedelta(minutes=minutes)
    while current + step <= end:
        slots.append((current, current + step))
        current += step
    return slots
""",
    ),
    (
        "text/wrap.py",
        "make `wrap_lines` raise ValueError when width is less than 1",
        """def wrap_lines(text, width):
    lines, line = [], ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}".strip()
    return lines + ([line] if line else [])
""",
    ),
    (
        "payments/fees.py",
        "make `card_fee` raise ValueError when amount_cents is negative",
        """FIXED_CENTS = 30
RATE = 0.029


def card_fee(amount_cents):
    return FIXED_CENTS + round(amount_cents * RATE)
""",
    ),
    (
        "stats/moving.py",
        "make `moving_average` raise ValueError when window is larger than the data",
        """def moving_average(values, window):
    out = []
    for i in range(len(values) - window + 1):
        out.append(sum(values[i:i + window]) / window)
    return out
""",
    ),
    (
        "images/resize.py",
        "make `fit_size` raise ValueError when a target dimension is not positive",
        """def fit_size(width, height, max_width, max_height):
    scale = min(max_width / width, max_height / height, 1.0)
    return int(width * scale), int(height * scale)
""",
    ),
    (
        "net/ports.py",
        "make `parse_port` raise ValueError when the port is outside 1..65535",
        """def parse_port(text):
    port = int(text.strip())
    return port


def is_privileged(port):
    return port < 1024
""",
    ),
    (
        "orders/shipping.py",
        "make `shipping_cost` raise ValueError when weight_kg is negative",
        """RATES = [(1, 4.5), (5, 9.0), (20, 18.0)]


def shipping_cost(weight_kg):
    for limit, price in RATES:
        if weight_kg <= limit:
            return price
    return 18.0 + (weight_kg - 20) * 0.8
""",
    ),
    (
        "hr/leave.py",
        "make `days_remaining` raise ValueError when taken is greater than allowance",
        """def days_remaining(allowance, taken):
    return allowance - taken


def carry_over(remaining, cap=5):
    return min(remaining, cap)
""",
    ),
    (
        "audio/volume.py",
        "make `set_volume` raise ValueError when level is not between 0 and 11",
        """class Mixer:
    def __init__(self):
        self.level = 5

    def set_volume(self, level):
        self.level = level
        return self.level
""",
    ),
    (
        "grades/curve.py",
        "make `letter_grade` raise ValueError when score is above 100",
        """def letter_grade(score):
    if score >= 90:
        return "A"
    if score >= 80:
        return "B"
    if score >= 70:
        return "C"
    return "F"
""",
    ),
    (
        "cache/ttl.py",
        "make `TTLCache.__init__` raise ValueError when seconds is not positive",
        """import time


class TTLCache:
    def __init__(self, seconds):
        self.seconds = seconds
        self.items = {}

    def put(self, key, value):
        self.items[key] = (value, time.monotonic() + self.seconds)
""",
    ),
    (
        "colors/mix.py",
        "make `blend` raise ValueError when ratio is outside 0..1",
        '''def blend(a, b, ratio):
    """Mix two RGB tuples."""
    return tuple(round(x * (1 - ratio) + y * ratio) for x, y in zip(a, b))
''',
    ),
    (
        "loans/interest.py",
        "make `monthly_payment` raise ValueError when months is not positive",
        """def monthly_payment(principal, annual_rate, months):
    r = annual_rate / 12
    if r == 0:
        return principal / months
    return principal * r / (1 - (1 + r) ** -months)
""",
    ),
    (
        "files/sizes.py",
        "make `human_size` raise ValueError when size is negative",
        """def human_size(size):
    for unit in ["B", "KB", "MB", "GB"]:
        if size < 1024:
            return f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"
""",
    ),
    (
        "events/tickets.py",
        "make `reserve` raise ValueError when count exceeds the seats left",
        """class Event:
    def __init__(self, seats):
        self.seats_left = seats

    def reserve(self, count):
        self.seats_left -= count
        return self.seats_left
""",
    ),
    (
        "units/speed.py",
        "make `kmh_to_pace` raise ValueError when kmh is zero or negative",
        '''def kmh_to_pace(kmh):
    """Minutes per kilometre as 'm:ss'."""
    total = 60 / kmh
    minutes = int(total)
    return f"{minutes}:{round((total - minutes) * 60):02d}"
''',
    ),
    (
        "queue/retry.py",
        "make `backoff_delays` raise ValueError when attempts is negative",
        """def backoff_delays(attempts, base=0.5, cap=30.0):
    return [min(cap, base * 2 ** i) for i in range(attempts)]
""",
    ),
    (
        "library/loans.py",
        "make `renew` raise ValueError when the loan was already renewed twice",
        """from datetime import timedelta


class Loan:
    def __init__(self, due):
        self.due = due
        self.renewals = 0

    def renew(self):
        self.due += timedelta(days=14)
        self.renewals += 1
""",
    ),
    (
        "metrics/ratio.py",
        "make `conversion_rate` raise ValueError when visits is zero",
        """def conversion_rate(orders, visits):
    return round(100 * orders / visits, 1)
""",
    ),
    (
        "farm/feed.py",
        "make `feed_needed` raise ValueError when animals is negative",
        """DAILY_KG = {"cow": 12.0, "goat": 2.5, "hen": 0.12}


def feed_needed(kind, animals, days=7):
    return DAILY_KG[kind] * animals * days
""",
    ),
    # the last 8
    (
        "travel/fares.py",
        "make `child_fare` raise ValueError when age is negative",
        """def child_fare(adult_fare, age):
    if age < 4:
        return 0.0
    if age < 16:
        return round(adult_fare * 0.5, 2)
    return adult_fare
""",
    ),
    (
        "ml/split.py",
        "make `train_test_split` raise ValueError when fraction is not strictly between 0 and 1",
        """import random


def train_test_split(rows, fraction, seed=0):
    rows = rows[:]
    random.Random(seed).shuffle(rows)
    cut = int(len(rows) * fraction)
    return rows[:cut], rows[cut:]
""",
    ),
    (
        "kitchen/scale.py",
        "make `scale_recipe` raise ValueError when servings is not positive",
        """def scale_recipe(ingredients, base_servings, servings):
    factor = servings / base_servings
    return {name: round(qty * factor, 1) for name, qty in ingredients.items()}
""",
    ),
    (
        "parking/meter.py",
        "make `Meter.pay` raise ValueError when coins_cents is not a multiple of 10",
        """class Meter:
    CENTS_PER_MINUTE = 5

    def __init__(self):
        self.minutes = 0

    def pay(self, coins_cents):
        self.minutes += coins_cents // self.CENTS_PER_MINUTE
        return self.minutes
""",
    ),
    (
        "sensors/battery.py",
        "make `battery_percent` raise ValueError when volts is below empty_v",
        """def battery_percent(volts, empty_v=3.0, full_v=4.2):
    ratio = (volts - empty_v) / (full_v - empty_v)
    return round(min(ratio, 1.0) * 100)
""",
    ),
    (
        "chess/board.py",
        "make `square_name` raise ValueError when file or rank is outside 0..7",
        """FILES = "abcdefgh"


def square_name(file, rank):
    return f"{FILES[file]}{rank + 1}"
""",
    ),
    (
        "weather/wind.py",
        "make `beaufort` raise ValueError when speed_ms is negative",
        """LIMITS = [0.5, 1.5, 3.3, 5.5, 7.9, 10.7, 13.8, 17.1, 20.7, 24.4, 28.4, 32.6]


def beaufort(speed_ms):
    for force, limit in enumerate(LIMITS):
        if speed_ms < limit:
            return force
    return 12
""",
    ),
    (
        "shop/coupons.py",
        "make `redeem` raise ValueError when the coupon has no uses left",
        """class Coupon:
    def __init__(self, code, uses):
        self.code = code
        self.uses = uses

    def redeem(self):
        self.uses -= 1
        return self.uses
""",
    ),
]


def _edit_messages(i: int, path: str, ask: str, text: str) -> list[dict]:
    return [
        {"role": "system", "content": EDIT_SYSTEM},
        {"role": "user", "content": f"In `{path}`, {ask}."},
        {"role": "assistant", "content": None, "tool_calls": [call(f"call_{i}_read", "read_file", {"path": path})]},
        {"role": "tool", "tool_call_id": f"call_{i}_read", "content": text},
    ]


# -- 4. SQL over one schema ------------------------------------------------------------------

SQL_SCHEMA = (
    "CREATE TABLE stations (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, capacity INTEGER);\n"
    """CREATE TABLE bikes (id INTEGER PRIMARY KEY, model TEXT NOT NULL, electric INTEGER NOT NULL,
  home_station_id INTEGER REFERENCES stations(id), bought_on DATE);
CREATE TABLE members (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE, joined_on DATE,
  plan TEXT CHECK (plan IN ('monthly', 'annual', 'pay-as-you-go')));
CREATE TABLE rides (id INTEGER PRIMARY KEY, bike_id INTEGER REFERENCES bikes(id),
  member_id INTEGER REFERENCES members(id), start_station_id INTEGER REFERENCES stations(id),
  end_station_id INTEGER REFERENCES stations(id), started_at TIMESTAMP, ended_at TIMESTAMP,
  distance_km REAL, price_cents INTEGER);
CREATE TABLE repairs (id INTEGER PRIMARY KEY, bike_id INTEGER REFERENCES bikes(id), reported_at TIMESTAMP,
  fixed_at TIMESTAMP, issue TEXT, cost_cents INTEGER);"""
)

SQL_SYSTEM = (
    "You write SQLite queries for a city bike-sharing database with this schema:\n\n"
    + SQL_SCHEMA
    + "\n\nAnswer every question with one SQL query in a ```sql code block and nothing else."
)

QUESTIONS = [
    "How many stations are there in each city?",
    "List the names of members who joined in 2024, newest first.",
    "What is the average ride distance for electric bikes?",
    "Which five stations had the most rides starting there?",
    "Total revenue in euros from rides in March 2025.",
    "Find bikes that have never been repaired.",
    "Which members on the annual plan took more than 50 rides?",
    "The longest ride ever, with the member's name and its duration in minutes.",
    "How many repairs are still open (not fixed yet)?",
    "Average repair cost per bike model.",
    "Stations where more rides end than start.",
    "For each month of 2025, the number of rides.",
    "Members who have an email at example.org.",
    "The bike with the highest total distance ridden.",
    "How many rides started and ended at the same station?",
    "Cities ranked by the total capacity of their stations.",
    "Members who never took a ride.",
    "The average price of a ride per plan.",
    "Bikes bought before 2022 that are electric.",
    "The busiest hour of the day for ride starts.",
    "For each station, the number of bikes whose home it is.",
    "Repairs that took more than 7 days to fix, with the bike model.",
    "The top three members by money spent on rides.",
    "How many distinct bikes did member 42 ride?",
    # the last 8
    "Rides longer than 20 km that cost less than 2 euros.",
    "The most common repair issue.",
    "Stations in Lyon with a capacity over 30, by name.",
    "Each member's first ride date.",
    "The share of rides taken on electric bikes, as a percentage.",
    "Bikes repaired more than three times in 2025.",
    "Average number of rides per member on each plan.",
    "The station pair (start, end) used most often.",
]


# -- the workloads ---------------------------------------------------------------------------


def _user(system: str, content: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": content}]


def workloads() -> dict[str, Workload]:
    return {
        "extraction": Workload(
            "extraction",
            "schema",
            96,
            [Request(f"ticket-{i + 1:02d}", _user(TICKET_SYSTEM, f"Ticket:\n{t}")) for i, t in enumerate(TICKETS)],
            schema=TICKET_SCHEMA,
            notes="support tickets into one JSON schema (response_format json_schema)",
        ),
        "tests": Workload(
            "tests",
            "free",
            128,
            [
                Request(
                    f"test-{i + 1:02d}",
                    _user(TEST_SYSTEM, f"Write a pytest test for this function:\n```python\n{f}\n```"),
                )
                for i, f in enumerate(FUNCTIONS)
            ],
            notes="a pytest test for each of 32 small functions",
        ),
        "edits": Workload(
            "edits",
            "free",
            128,
            [Request(f"edit-{i + 1:02d}", _edit_messages(i + 1, p, a, t)) for i, (p, a, t) in enumerate(EDITS)],
            tools=EDIT_TOOLS,
            notes="agent loop: read_file called and answered, the edit is the next tool call",
        ),
        "sql": Workload(
            "sql",
            "free",
            80,
            [Request(f"sql-{i + 1:02d}", _user(SQL_SYSTEM, q)) for i, q in enumerate(QUESTIONS)],
            notes="32 questions over one SQLite schema in the system prompt",
        ),
    }


WORKLOADS = tuple(workloads())
