"""The infill replay benchmark's logic (``benchmarks/infill_replay.py``, issue 35 item 5) on the
tiny FIM model served in-process: llama.vim's request at a session's stop, two requests
replayed over HTTP, and the report's per-request rows, medians and ratios. No timing is
asserted; the figures' meaning is (prompt tokens reused, a cut only under a time limit).
"""

from __future__ import annotations

import pytest

from benchmarks.infill_replay import replay, request_at, session_requests
from benchmarks.infill_report import MIN_QUIET, compare, goal, markdown, summarize
from benchmarks.prompts.infill_sessions import MARK, SESSIONS, Session
from edgespec import Engine
from edgespec.server import create_app
from serve_support import LiveServer
from tiny_models import build_vocab, make_tiny_model

N_BASE = build_vocab("base").n_vocab
SESSION = Session(
    name="t",
    filename="a.py",
    typed="def f(x):\n    return x‸\n\n\ndef g(y):\n‸",
    below="\nprint(f(1))",
    extra=[{"filename": "b.py", "text": "def h():\n    pass\n"}],
)


def test_the_request_is_llama_vims_local_context():
    first, second = session_requests(SESSION)
    assert first["input_prefix"] == "def f(x):\n" and first["prompt"] == "    return x"
    assert first["n_indent"] == 4 and first["input_suffix"] == "\n\nprint(f(1))\n"
    # a blank line starts from its beginning, indent 0
    assert second["prompt"] == "" and second["n_indent"] == 0
    assert second["input_prefix"] == "def f(x):\n    return x\n\n\ndef g(y):\n"
    assert first["input_extra"] == [{"text": "def h():\n    pass\n", "filename": "b.py"}]
    assert first["cache_prompt"] is True and first["temperature"] == 0.0 and "infill" not in first["samplers"]
    assert request_at(SESSION, 0, t_max_predict_ms=0)["t_max_predict_ms"] == 0


def test_the_held_out_sessions_are_whole():
    for s in SESSIONS.values():
        assert 10 <= len(s.stops()) <= 15 and MARK not in s.text() and s.extra
        bodies = session_requests(s)
        for k, (pos, body) in enumerate(zip(s.stops(), bodies)):
            typed = s.text()[:pos]
            # prefix + the cursor's line up to the cursor is what was typed (the blank line aside)
            assert typed.endswith(body["input_prefix"] + body["prompt"]) or not typed.split("\n")[-1].strip(), (s, k)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model = make_tiny_model(
        tmp_path_factory.mktemp("fim") / "fim.gguf", seed=0, n_vocab=N_BASE + 5, fim=True, name="edgespec-tiny-fim"
    )
    with Engine(model, draft="ngram", n_ctx=1024, exact=True, n_threads=1) as engine:
        with LiveServer(create_app(engine, max_tokens=24, defaults={"temperature": 0.0})) as live:
            yield live


def test_two_requests_replayed_give_the_reports_fields(server):
    reqs = session_requests(SESSION, n_predict=12, t_max_predict_ms=0)
    rows = replay(server.url, reqs, log=None)
    assert [r["request"] for r in rows] == [0, 1]
    for r in rows:
        assert {
            "prompt_tokens",
            "prompt_n",
            "cache_n",
            "ttft_s",
            "t_total_s",
            "gen_tps",
            "tokens",
            "stop_type",
            "cut",
            "truncated",
            "content",
        } <= set(r)
        assert r["prompt_n"] + r["cache_n"] == r["prompt_tokens"] > 0
        assert 0 < r["ttft_s"] <= r["t_total_s"] and 0 < r["tokens"] <= 12
        assert r["cut"] is False and r["stop_type"] in ("eos", "word", "limit")
        assert r["tokens"] == 0 or r["gen_tps"] > 0
    # the second request shares the extra file and the prefix: they are not processed again
    assert rows[1]["cache_n"] > 0 and rows[1]["prompt_n"] < rows[1]["prompt_tokens"]
    again = replay(server.url, reqs, log=None)
    assert [r["content"] for r in again] == [r["content"] for r in rows]  # greedy: the same middles
    s = summarize(rows)
    assert s["requests"] == 2 and s["cut"] == 0 and s["after_first"]["prompt_n"] == rows[1]["prompt_n"]
    assert s["all"]["t_total_s"] == pytest.approx((rows[0]["t_total_s"] + rows[1]["t_total_s"]) / 2, abs=1e-3)
    c = compare(rows, again)
    assert c["all"]["pairs"] == 2 and c["all"]["same_middle"] == 2 and c["after_first"]["pairs"] == 1
    assert c["all"]["t_total_median_ratio"] == pytest.approx(
        s["all"]["t_total_s"] / summarize(again)["all"]["t_total_s"], rel=1e-2
    )

    assert 0 <= c["quiet"]["pairs"] <= 2 and goal(c).startswith("not judged") and MIN_QUIET > 2
    settings = {
        "requests": 2,
        "sessions": ["t"],
        "passes": 1,
        "target_name": "tiny",
        "t_max_predict_ms": 0,
        "n_predict": 12,
    }
    md = markdown(
        {
            "date": "d",
            "git": {"commit": "c"},
            "settings": settings,
            "goal": "g",
            "summary": {"edgespec": s, "llama-server": summarize(again)},
            "compare": c,
        }
    )
    assert f"**{c['all']['t_total_median_ratio']}×**" in md and "| edgespec | 2 |" in md


def test_a_time_limit_cut_is_reported(server):
    body = {
        **request_at(SESSION, 0, n_predict=24, t_max_predict_ms=1),
        "logit_bias": {"15": 10},
        "ignore_eos": True,
    }  # "\n" is id 15: the tiny model writes lines, the first newline ends it
    row = replay(server.url, [body], log=None)[0]
    assert row["stop_type"] == "limit" and row["cut"] is True and row["tokens"] < 24


def test_the_order_check_builds_both_orders_and_spreads_its_cursors():
    # benchmarks/infill_order: PSM and SPM carry the same prefix and suffix in the model's
    # FIM tokens, the suffix first in SPM; cursors are lines with text, after the first 20
    from benchmarks.infill_order import cursor_lines, prompts
    from edgespec.llama.fim import FimTokens

    both = prompts(FimTokens(pre=1, suf=2, mid=3), [10, 11], [20])
    assert both["psm"] == [1, 10, 11, 2, 20, 3]
    assert both["spm"] == [2, 20, 1, 10, 11, 3]
    lines = [f"x_{i:03d} = compute({i})" if i % 3 else "" for i in range(200)]
    picked = cursor_lines(lines)
    assert picked and len(picked) <= 18 and min(picked) >= 20
    assert all(lines[i].strip() for i in picked) and picked == sorted(set(picked))
