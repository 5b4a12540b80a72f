"""The ``tests`` workload of ``repeat_workloads.py`` (``prompts/repeat.py`` builds it): 32
small, different Python functions, each to get a pytest test. Held out like the rest of
``prompts/repeat.py``: nothing was tuned on them. The last 8 are the ones answered after the
index was saved.
"""

from __future__ import annotations

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
