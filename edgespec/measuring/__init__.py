"""Measuring on the real machine instead of estimating.

``bench`` (decoding configurations side by side against plain decoding, one engine,
interleaved), ``prompts`` (the built-in prompts of bench and tune: two disjoint sets) and
``tune`` (the cost model's figures measured here and saved into the user's profile).

Knows nothing of plans, HTTP or the terminal (the CLI draws the progress).
"""
