"""64 held-out prompts for the batch-throughput benchmark (benchmarks/batch_throughput.py).

Written for this check and never tuned on: nothing in edgespec (the auto choice of N,
the batch cost prior, the drafting policy) was fitted to them. Four kinds, 16 each, of
mixed lengths: short questions, code tasks, questions over a given text (the longest,
~150-400 tokens), and open writing. ``PROMPTS`` is a list of (id, kind, prompt).
"""

from __future__ import annotations

QUESTIONS = [
    "What is the boiling point of water at sea level in Fahrenheit?",
    "Why do cats purr?",
    "Name the largest moon of Saturn.",
    "How many bytes are in a kibibyte?",
    "What does the Unix command `tee` do?",
    "Is a tomato a fruit or a vegetable, botanically?",
    "Which planet has the shortest day?",
    "What is the difference between TCP and UDP, in two sentences?",
    "Who wrote the novel 'The Left Hand of Darkness'?",
    "What is a monad, explained to a Python programmer?",
    "Why is the sky darker at the zenith than near the horizon?",
    "What does HTTP status 418 mean?",
    "How does a bloom filter answer 'maybe'?",
    "What is the capital of Mongolia?",
    "Why does ice float?",
    "What is the time complexity of heapify?",
]

CODE = [
    "Write a Python function that merges two sorted lists into one sorted list.",
    "Write a Bash one-liner that counts the lines of every .py file under the current directory.",
    "Implement a thread-safe counter class in Python.",
    "Write a SQL query that returns the second-highest salary from a table `employees(salary)`.",
    "Write a Rust function that checks whether a string is a palindrome, ignoring case.",
    "Write a JavaScript debounce function with a leading-edge option.",
    "Write a Python generator that yields the Collatz sequence starting from n.",
    "Write a C function that reverses a singly linked list in place.",
    "Convert this loop to a list comprehension:\n\n"
    "result = []\nfor w in words:\n    if len(w) > 3:\n        result.append(w.upper())\n",
    "Add type hints to this function:\n\n"
    "def scale(values, factor, clip=None):\n    out = [v * factor for v in values]\n"
    "    if clip is not None:\n        out = [min(v, clip) for v in out]\n    return out\n",
    "Write a Go HTTP handler that returns the current time as JSON.",
    "Write a Python function that parses 'key=value;key2=value2' into a dict, tolerating spaces.",
    "Write a regular expression that matches ISO 8601 dates like 2026-11-30 and explain it.",
    "Write a Python dataclass for a 2D vector with addition and a length method.",
    "Find the bug:\n\ndef mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n"
    "    return total / len(xs) if xs else total / 1\n\nprint(mean([]))\n",
    "Write a Makefile rule that rebuilds `app` when any file in src/ changes.",
]

_DOC_A = (
    "The Harbor Street community garden opened in 2019 on a former parking lot. It has 42 raised "
    "beds, rented yearly for 35 dollars each; 6 beds are reserved for the primary school next door. "
    "Water comes from two rain tanks of 5,000 liters and, in dry months, from a city hydrant that "
    "volunteers open on Tuesdays and Saturdays. Compost is collected in three bins behind the tool "
    "shed; only plant scraps are accepted, never meat or dairy. The garden is open from 7 am to 8 pm "
    "between April and October and from 9 am to 5 pm the rest of the year. Conflicts over beds go to "
    "the garden committee, which meets on the first Monday of each month in the school library."
)
_DOC_B = (
    "Release notes, version 3.2. The `sync` command now resumes interrupted transfers instead of "
    "starting over; partial files are kept in `.sync-partial/` and removed once complete. The "
    "`--dry-run` flag prints the files that would change without touching them. Configuration moved "
    "from `~/.synctool` to `~/.config/synctool/config.toml`; the old file is read once and migrated. "
    "Deprecated: the `--fast` flag, which skipped checksums, is now a no-op and will be removed in "
    "4.0. Fixed: symbolic links pointing outside the source tree were followed; they are now copied "
    "as links. Fixed: a crash when the destination disk filled up mid-transfer. Known issue: on "
    "network filesystems, modification times may differ by up to two seconds, so use `--checksum`."
)
_DOC_C = (
    "def load_users(path):\n"
    "    users = []\n"
    "    with open(path) as f:\n"
    "        for line in f:\n"
    "            name, age, email = line.strip().split(',')\n"
    "            users.append({'name': name, 'age': int(age), 'email': email})\n"
    "    return users\n\n"
    "def adults(users):\n"
    "    return [u for u in users if u['age'] >= 18]\n\n"
    "def emails(users):\n"
    "    return sorted(u['email'] for u in users)\n"
)
_DOC_D = (
    "Minutes of the March board meeting. Present: Okafor (chair), Lindqvist, Tanaka, Moreau. "
    "1. Budget: the maintenance reserve stands at 18,400 euros after the roof repair (6,100 euros). "
    "2. The proposal to replace the lobby lighting with LED fittings was approved, 3 votes to 1; "
    "Moreau voted against, preferring to wait for the energy subsidy decision in June. 3. Bicycle "
    "storage: a second rack for 12 bicycles will be installed in the courtyard; residents will be "
    "asked by letter whether they want lockers. 4. Next meeting: 14 May, 7 pm, in the community room."
)

GROUNDED = [
    _DOC_A + "\n\nHow much does a bed cost per year, and how many beds can residents rent?",
    _DOC_A + "\n\nWhen can I water my plants with hydrant water? Quote the relevant sentence.",
    _DOC_A + "\n\nSummarize the garden's rules in three bullet points.",
    _DOC_A + "\n\nCan I put leftover chicken in the compost? Answer from the text.",
    _DOC_B + "\n\nWhat happens to my old configuration file when I upgrade?",
    _DOC_B + "\n\nList every fix in this release, quoting the notes.",
    _DOC_B + "\n\nShould I still use --fast? Explain using the notes.",
    _DOC_B + "\n\nWrite a two-sentence announcement of this release for users.",
    "Here is a module:\n\n" + _DOC_C + "\nReturn the whole module with type hints added to every function.",
    "Here is a module:\n\n" + _DOC_C + "\nReturn the whole module with `adults` renamed to `grown_ups`.",
    "Here is a module:\n\n" + _DOC_C + "\nWhat happens if a line has four comma-separated fields?",
    "Here is a module:\n\n" + _DOC_C + "\nReturn the whole module, changed so that load_users skips blank lines.",
    _DOC_D + "\n\nWho voted against the lighting proposal and why?",
    _DOC_D + "\n\nWhat is the maintenance reserve now, and what did the roof cost?",
    _DOC_D + "\n\nRewrite these minutes as a short email to residents.",
    _DOC_D + "\n\nList the decisions taken, one line each, quoting the minutes.",
]

OPEN = [
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Write a limerick about a forgetful robot.",
    "Describe a rainy afternoon in a small mountain village.",
    "Write a persuasive paragraph on why cities should plant more trees.",
    "Invent a new board game and explain its rules briefly.",
    "Write a dialogue between a cat and a vacuum cleaner.",
    "Give five tips for someone learning to cook for the first time.",
    "Write a product description for a solar-powered backpack.",
    "Write the opening paragraph of a mystery novel set on a train.",
    "Explain how a rainbow forms, as if to a seven-year-old.",
    "Write a motivational message for a team that just missed a deadline.",
    "Describe the taste of a lemon to someone who has never had one.",
    "Write a haiku sequence about the four seasons.",
    "Plan a one-day itinerary for a first visit to a city of your choice.",
    "Write a letter from a tree to the person who planted it.",
    "Compose a short speech for the opening of a public library.",
]

PROMPTS: list[tuple[str, str, str]] = [
    (f"{kind}-{i:02d}", kind, text)
    for kind, texts in (("question", QUESTIONS), ("code", CODE), ("grounded", GROUNDED), ("open", OPEN))
    for i, text in enumerate(texts)
]
assert len(PROMPTS) == 64 and len({p for _, _, p in PROMPTS}) == 64
