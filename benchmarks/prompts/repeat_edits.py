"""The ``edits`` workload of ``repeat_workloads.py`` (``prompts/repeat.py`` builds it): an
agent-like loop with tools, where each request asks for the same kind of edit (a guard that
raises ``ValueError``) on a different small file, after the agent's ``read_file`` call and its
result. Held out like the rest of ``prompts/repeat.py``. Knows the tools, the files and the
messages of one request; not how they are rendered (the target's chat template does that).
"""

from __future__ import annotations

from benchmarks.prompts.tools import call

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


def edit_messages(i: int, path: str, ask: str, text: str) -> list[dict]:
    return [
        {"role": "system", "content": EDIT_SYSTEM},
        {"role": "user", "content": f"In `{path}`, {ask}."},
        {"role": "assistant", "content": None, "tool_calls": [call(f"call_{i}_read", "read_file", {"path": path})]},
        {"role": "tool", "tool_call_id": f"call_{i}_read", "content": text},
    ]
