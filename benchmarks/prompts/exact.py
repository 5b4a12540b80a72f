"""The three prompts of the ``--exact`` identity check (``benchmarks/exact_identity.py``):
an INI-to-TOML conversion, a Rust off-by-one fix and a step-by-step timetable question.
Written for that check and never used for tuning. ``PROMPTS`` maps a name to the text."""

from __future__ import annotations

PROMPTS = {
    "ini-to-toml": (
        "Convert this INI file to TOML. Keep every key, value and comment, in the same "
        "order, and return only the TOML.\n\n"
        "; mirror settings\n[mirror]\nurl = https://mirror.example.net/pub\nretries = 4\n"
        "timeout_s = 30\n\n[cache]\n; where packages are kept\npath = /var/cache/pkgs\n"
        "max_gb = 12\nprune_after_days = 21\n\n[log]\nlevel = info\nfile = /var/log/mirror.log\n"
    ),
    "rust-off-by-one": (
        "This Rust function should return the last `n` lines of `text`, but it drops one "
        "line. Fix it and explain the bug in one sentence.\n\n"
        "fn tail(text: &str, n: usize) -> Vec<&str> {\n"
        "    let lines: Vec<&str> = text.lines().collect();\n"
        "    let start = lines.len().saturating_sub(n) + 1;\n"
        "    lines[start.min(lines.len())..].to_vec()\n}\n"
    ),
    "train-timetable": (
        "A train leaves Aldgate at 09:40 and runs at 84 km/h. A second train leaves the "
        "same station at 10:05 on the same line at 112 km/h. At what time does the second "
        "train catch up, and how far from Aldgate? Work it out step by step."
    ),
}
