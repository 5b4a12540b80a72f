"""Held-out workloads for the never-slower check (benchmarks/never_slower.py, issue 37).

Written for that check on 2026-12-04, after the stop-loss, and never used to tune
anything: not the workloads of ``prompts/repeat.py`` that the memory of earlier answers
was measured on (the check runs the first 16 of its ``tests`` workload too, the one the
issue found losing). Each workload is 16 requests of one kind, as a script sends them:

* ``docstrings``: add a docstring to a function and return it (copies its input);
* ``commits``: a commit message for a small diff (copies a few names, writes the rest);
* ``shell``: explain a shell command (copies nothing: answers alike in form only).
"""

from __future__ import annotations

DOC_SYSTEM = "Add a concise Google-style docstring to the function. Reply with the whole function in one code block."

FUNCTIONS = [
    """def exponential_buckets(start, factor, count):
    if start <= 0 or factor <= 1:
        raise ValueError("start must be positive and factor above 1")
    edges, edge = [], start
    for _ in range(count):
        edges.append(edge)
        edge *= factor
    return edges""",
    """def interleave(*iterables):
    iterators = [iter(it) for it in iterables]
    while iterators:
        for it in list(iterators):
            try:
                yield next(it)
            except StopIteration:
                iterators.remove(it)""",
    """def acronym(phrase):
    words = phrase.replace("-", " ").split()
    return "".join(w[0].upper() for w in words if w.lower() not in {"of", "and", "the"})""",
    """def parse_semver(version):
    core, _, pre = version.partition("-")
    major, minor, patch = (int(p) for p in core.split("."))
    return major, minor, patch, pre or None""",
    """def bucketize(values, edges):
    counts = [0] * (len(edges) + 1)
    for v in values:
        counts[bisect.bisect_right(edges, v)] += 1
    return counts""",
    """def redact_digits(text, keep_last=4):
    digits = [i for i, ch in enumerate(text) if ch.isdigit()]
    hide = set(digits[:-keep_last] if keep_last else digits)
    return "".join("#" if i in hide else ch for i, ch in enumerate(text))""",
    """def partition(items, predicate):
    yes, no = [], []
    for item in items:
        (yes if predicate(item) else no).append(item)
    return yes, no""",
    """def parse_bytes(text):
    units = {"KB": 1024, "MB": 1024 ** 2, "GB": 1024 ** 3, "B": 1}
    text = text.strip().upper()
    for unit, factor in units.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(text)""",
    """def cumulative_max(values):
    out, best = [], float("-inf")
    for v in values:
        best = max(best, v)
        out.append(best)
    return out""",
    """def read_env_file(path):
    env = {}
    with open(path) as fh:
        for line in fh:
            line = line.strip()
            if line and not line.startswith("#") and "=" in line:
                k, v = line.split("=", 1)
                env[k.strip()] = v.strip().strip('"')
    return env""",
    """def business_days(start, end):
    days = 0
    current = start
    while current < end:
        if current.weekday() < 5:
            days += 1
        current += timedelta(days=1)
    return days""",
    """def weighted_average(values, weights):
    if len(values) != len(weights):
        raise ValueError("values and weights differ in length")
    total = sum(weights)
    if total == 0:
        raise ZeroDivisionError("weights sum to zero")
    return sum(v * w for v, w in zip(values, weights)) / total""",
    """def longest_streak(days):
    best = run = 0
    previous = None
    for day in sorted(set(days)):
        run = run + 1 if previous is not None and day - previous == 1 else 1
        best = max(best, run)
        previous = day
    return best""",
    """def center_text(text, width, fill="."):
    if len(text) >= width:
        return text
    left = (width - len(text)) // 2
    return fill * left + text + fill * (width - len(text) - left)""",
    """def luminance(r, g, b):
    def channel(c):
        c /= 255
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4
    return 0.2126 * channel(r) + 0.7152 * channel(g) + 0.0722 * channel(b)""",
    """def quarter_of(day):
    quarter = (day.month - 1) // 3 + 1
    return f"{day.year}-Q{quarter}\"""",
]

COMMIT_SYSTEM = (
    "Write a git commit message for the diff: a subject line under 60 characters, a blank line, "
    "then two or three sentences saying what changed and why. Nothing else."
)

DIFFS = [
    "--- a/app/auth.py\n+++ b/app/auth.py\n@@ def login(user, password):\n-    if user.password == password:\n"
    "+    if hmac.compare_digest(user.password_hash, hash_password(password, user.salt)):\n"
    "         return issue_token(user)",
    "--- a/src/cache.js\n+++ b/src/cache.js\n@@ class Cache {\n-  constructor() { this.map = new Map(); }\n"
    "+  constructor(maxEntries = 1000) { this.map = new Map(); this.maxEntries = maxEntries; }\n"
    "   set(key, value) {\n"
    "+    if (this.map.size >= this.maxEntries) this.map.delete(this.map.keys().next().value);\n"
    "     this.map.set(key, value);",
    "--- a/Makefile\n+++ b/Makefile\n@@ test:\n-\tpytest\n+\tpytest -q --maxfail=1 --cov=pkg\n"
    "+\n+lint:\n+\truff check pkg tests",
    "--- a/api/orders.go\n+++ b/api/orders.go\n@@ func ListOrders(w http.ResponseWriter, r *http.Request) {\n"
    '-\trows, err := db.Query("SELECT * FROM orders")\n'
    '+\tlimit := parseLimit(r.URL.Query().Get("limit"), 100)\n'
    '+\trows, err := db.Query("SELECT * FROM orders ORDER BY id LIMIT $1", limit)',
    "--- a/README.md\n+++ b/README.md\n@@ ## Install\n-pip install tool\n+pip install tool  # Python 3.10 or newer\n"
    "+\n+On Windows, run the command in PowerShell, not cmd.exe.",
    "--- a/worker/queue.py\n+++ b/worker/queue.py\n@@ def consume(self):\n         msg = self.channel.get()\n"
    "-        self.handle(msg)\n+        try:\n+            self.handle(msg)\n+        except Exception:\n"
    '+            log.exception("message %s failed", msg.id)\n+            self.channel.nack(msg, requeue=False)\n'
    "+            return\n         self.channel.ack(msg)",
    "--- a/config/settings.py\n+++ b/config/settings.py\n@@\n-DEBUG = True\n"
    '+DEBUG = os.environ.get("APP_DEBUG", "0") == "1"\n-ALLOWED_HOSTS = ["*"]\n'
    '+ALLOWED_HOSTS = os.environ.get("APP_HOSTS", "localhost").split(",")',
    "--- a/ui/Button.tsx\n+++ b/ui/Button.tsx\n@@ export function Button({ label, onClick }: Props) {\n"
    "-  return <div onClick={onClick}>{label}</div>;\n"
    '+  return <button type="button" onClick={onClick}>{label}</button>;',
    "--- a/scripts/backup.sh\n+++ b/scripts/backup.sh\n@@\n-tar czf backup.tgz /var/data\n"
    '+set -euo pipefail\n+stamp=$(date +%F)\n+tar czf "backup-$stamp.tgz" /var/data\n'
    '+find . -name "backup-*.tgz" -mtime +14 -delete',
    "--- a/lib/money.rb\n+++ b/lib/money.rb\n@@ def to_s\n-    format('%.2f', @cents / 100)\n"
    "+    format('%.2f', @cents / 100.0)",
    "--- a/src/parser.rs\n+++ b/src/parser.rs\n@@ fn parse_header(line: &str) -> Option<(String, String)> {\n"
    "-    let parts: Vec<&str> = line.split(':').collect();\n-    Some((parts[0].to_string(), parts[1].to_string()))\n"
    "+    let (name, value) = line.split_once(':')?;\n"
    "+    Some((name.trim().to_lowercase(), value.trim().to_string()))",
    "--- a/db/migrations/0042_add_index.sql\n+++ b/db/migrations/0042_add_index.sql\n@@\n"
    "+CREATE INDEX CONCURRENTLY IF NOT EXISTS idx_events_user_created\n+    ON events (user_id, created_at DESC);",
    "--- a/app/emails.py\n+++ b/app/emails.py\n@@ def send_welcome(user):\n"
    '-    send(user.email, "Welcome!", render("welcome.html", user=user))\n'
    "+    if not user.email_verified:\n+        return False\n"
    '+    send(user.email, "Welcome!", render("welcome.html", user=user))\n+    return True',
    "--- a/.github/workflows/ci.yml\n+++ b/.github/workflows/ci.yml\n@@ jobs:\n   test:\n"
    "-    runs-on: ubuntu-20.04\n+    runs-on: ubuntu-24.04\n+    strategy:\n+      matrix:\n"
    '+        python: ["3.10", "3.12"]',
    "--- a/src/date_utils.py\n+++ b/src/date_utils.py\n@@ def parse_day(text):\n"
    '-    return datetime.strptime(text, "%d/%m/%Y")\n'
    '+    for fmt in ("%d/%m/%Y", "%Y-%m-%d"):\n+        try:\n+            return datetime.strptime(text, fmt)\n'
    '+        except ValueError:\n+            continue\n+    raise ValueError(f"unknown date format: {text}")',
    "--- a/server/limits.conf\n+++ b/server/limits.conf\n@@\n-client_max_body_size 1m;\n"
    "+client_max_body_size 25m;\n+client_body_timeout 30s;",
]

SHELL_SYSTEM = "Explain what the shell command does, step by step, in a short paragraph. Mention any risk."

COMMANDS = [
    "find . -name '*.log' -mtime +7 -exec gzip {} \\;",
    "du -sh * | sort -h | tail -5",
    "grep -rn --include='*.py' 'TODO' src/ | wc -l",
    "tar -xzf release.tar.gz -C /opt/app --strip-components=1",
    "ps aux --sort=-%mem | head -n 6",
    "rsync -avz --delete ./site/ deploy@web1:/var/www/site/",
    "awk -F, 'NR > 1 { total += $3 } END { print total }' sales.csv",
    "chmod -R go-w ~/.ssh && chmod 600 ~/.ssh/id_ed25519",
    "curl -fsSL https://example.com/install.sh | sh",
    "git log --since='2 weeks ago' --author=maria --oneline | wc -l",
    "sed -i.bak 's/localhost:5432/db.internal:5432/g' config/*.ini",
    "docker system prune -af --volumes",
    "xargs -a urls.txt -n 1 -P 4 wget -q",
    "ssh -L 8888:localhost:8888 user@gpu-box",
    "journalctl -u nginx --since today --no-pager | grep -c ' 502 '",
    "openssl x509 -in cert.pem -noout -enddate",
]


def _messages(system: str, user: str) -> list[dict]:
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def workloads() -> dict[str, list[list[dict]]]:
    """The three held-out workloads: name -> 16 requests, each a list of chat messages."""
    return {
        "docstrings": [_messages(DOC_SYSTEM, f"```python\n{f}\n```") for f in FUNCTIONS],
        "commits": [_messages(COMMIT_SYSTEM, f"```diff\n{d}\n```") for d in DIFFS],
        "shell": [_messages(SHELL_SYSTEM, f"`{c}`") for c in COMMANDS],
    }
