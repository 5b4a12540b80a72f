"""The four prompts of the CPU hog check (``benchmarks/cpu_hog.py``): a story, a CSV, a
code edit and a summary. Written for that check on 2026-12-02 and never tuned on.
``PROMPTS`` maps a name to the prompt text."""

from __future__ import annotations

LEDGER = """date,item,amount_eur,paid_by
2026-03-02,groceries,41.20,Ana
2026-03-03,train tickets,18.00,Ben
2026-03-05,pharmacy,9.75,Ana
2026-03-07,dinner out,63.40,Chloe
2026-03-08,internet bill,29.99,Ben
"""

RETRY = """def fetch_with_retry(client, url, attempts=3):
    last_error = None
    for attempt in range(attempts):
        try:
            response = client.get(url, timeout=5)
            response.raise_for_status()
            return response.json()
        except Exception as error:
            last_error = error
    raise last_error
"""

NOTICE = (
    "The municipal library will close its east wing from 4 to 18 May while the "
    "heating system is replaced. The reading room, the children's corner and the "
    "computer desks move to the ground floor of the west wing for those two weeks. "
    "Opening hours do not change, but the late opening on Thursdays is cancelled on "
    "8 and 15 May. Books can still be returned through the outside drop box at any "
    "time, and reservations made online will be held for ten days instead of seven."
)

PROMPTS = {
    "story": "Write the opening of a short story about a lighthouse keeper who finds a "
    "message in a bottle that is addressed to her. Keep it plain and vivid.",
    "csv": "Here is a small ledger:\n\n" + LEDGER + "\nAdd a column share_eur that splits "
    "each amount equally between three people (two decimals) and return the whole "
    "table as CSV, nothing else.",
    "code-edit": "Here is a Python function:\n\n```python\n" + RETRY + "```\n\nMake it wait "
    "0.5 * 2**attempt seconds between attempts (import time) and return the "
    "whole function with that change.",
    "summary": "Summarize this notice in three short bullet points for a newsletter:\n\n" + NOTICE,
}
