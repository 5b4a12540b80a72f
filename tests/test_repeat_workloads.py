"""benchmarks/repeat_workloads.py (its summary, memory and batch modules) without a model:
the prompt sets' invariants (32 different requests per workload, well-formed tool
conversations, a valid schema), the summary and the goals from synthetic records, and
the warm pass's loading of a saved index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import repeat_batch as rb
from benchmarks import repeat_memory as rm
from benchmarks import repeat_summary as rs
from benchmarks.prompts import repeat as rp
from edgespec.llama.chat_template import validate_messages

WL = rp.workloads()


@pytest.mark.parametrize("name", rp.WORKLOADS)
def test_each_workload_has_32_different_requests(name):
    wl = WL[name]
    assert len(wl.requests) == rp.N_REQUESTS >= 24
    assert len({r.id for r in wl.requests}) == rp.N_REQUESTS
    assert len({json.dumps(r.messages) for r in wl.requests}) == rp.N_REQUESTS
    # the shape is shared: every request has the workload's system prompt
    assert len({r.messages[0]["content"] for r in wl.requests}) == 1
    for r in wl.requests:
        assert validate_messages(r.messages)


def test_the_other_benchmarks_prompts_are_not_reused():
    from benchmarks.prompts import heldout as heldout_prompts
    from benchmarks.prompts import structured as structured_prompts
    from benchmarks.prompts import structured_documents

    others = "".join(Path(m.__file__).read_text() for m in (heldout_prompts, structured_prompts, structured_documents))
    for name in ("TICKETS", "FUNCTIONS", "QUESTIONS"):
        for text in getattr(rp, name):
            assert text[:60] not in others


def test_edits_are_a_tool_loop_with_modest_prompts():
    wl = WL["edits"]
    assert wl.tools and {t["function"]["name"] for t in wl.tools} >= {"read_file", "replace_in_file"}
    for r in wl.requests:
        roles = [m["role"] for m in r.messages]
        assert roles == ["system", "user", "assistant", "tool"]
        call = r.messages[2]["tool_calls"][0]
        assert call["function"]["name"] == "read_file"
        assert r.messages[3]["tool_call_id"] == call["id"]
        # ~4 characters a token: the rendered prompt (with ~330 tokens of tools) stays < 600
        assert sum(len(m["content"] or "") for m in r.messages) < 1000


def test_the_ticket_schema_is_valid_and_strict():
    jsonschema = pytest.importorskip("jsonschema")
    jsonschema.Draft202012Validator.check_schema(rp.TICKET_SCHEMA)
    record = {
        "customer": "Ana Lima",
        "product": "billing",
        "severity": "low",
        "category": "bug",
        "summary": "Blurry font in Firefox.",
        "wants_refund": False,
        "order_id": None,
    }
    assert rb.valid_json(json.dumps(record), rp.TICKET_SCHEMA)
    assert not rb.valid_json(json.dumps({**record, "extra": 1}), rp.TICKET_SCHEMA)
    assert not rb.valid_json('{"customer": ', rp.TICKET_SCHEMA)
    assert rb.valid_json("anything", None) is None


def _rec(tps, text="x", tokens=64, **extra):
    return {
        "text": text,
        "tokens": tokens,
        "seconds": tokens / tps,
        "tokens_per_second": tps,
        "drafted": 10,
        "accepted": 8,
        "t_total": tokens / tps + 1,
        "valid": None,
        **extra,
    }


def _engine(tps, **extra):
    return _rec(
        tps,
        t_draft=0.001 * 64 / tps,
        drafted_by_source={"prompt": 4, "memory": 6},
        accepted_by_source={"prompt": 3, "memory": 5},
        **extra,
    )


def test_summary_and_goals_from_synthetic_runs():
    n, split = 32, 24
    runs = {
        "plain": [_rec(10.0) for _ in range(n)],
        "lookup": [_engine(11.0) for _ in range(n)],
        "suffix": [_engine(10.0 if i < 8 else 16.0) for i in range(n)],
        "ngram-mod": [_rec(12.0, text="y", prompt_seconds=1.0) for _ in range(n)],
    }
    warm = {
        "loaded_tokens": 1000,
        "t_load": 0.01,
        "memory_after": None,
        "runs": {"plain": [_rec(9.0) for _ in range(n - split)], "warm": [_engine(14.0) for _ in range(n - split)]},
    }
    summary = {
        "workloads": {
            "extraction": rs.summarize_workload(WL["extraction"], runs, warm, split),
            "tests": rs.summarize_workload(WL["tests"], runs, None, split),
        },
        "memory": {
            "tests": {"tokens": 900, "cap": 1000, "bytes": 1, "proposals": 0, "hits": 0, "proposed": 0, "accepted": 0}
        },
    }
    ex = summary["workloads"]["extraction"]
    assert ex["windows"]["1-8"]["suffix"]["x_plain"] == 1.0
    assert ex["windows"]["9+"]["suffix"]["x_plain"] == 1.6
    assert ex["windows"]["9+"]["suffix"]["accepted_by_source"] == {"prompt": 72, "memory": 120}
    assert ex["windows"]["all"]["lookup"]["same_text_as_plain"] == n
    assert ex["windows"]["all"]["ngram-mod"]["same_text_as_plain"] == 0
    assert ex["suffix_vs_peer"]["ngram-mod"]["9+"] == round(16 / 12, 3)
    # prompt processing + generation on both sides (1 s of prompt each)
    assert ex["suffix_vs_peer"]["ngram-mod"]["9+ answer time"] == round((64 / 12 + 1) / (64 / 16 + 1), 3)
    assert ex["suffix_vs_peer"]["ngram-mod"]["9+ plain"] == round(10 / 12, 3)
    assert ex["warm"]["warm process"]["x_plain"] == round(14 / 9, 3)
    goals = rs.conclude(summary, n)
    assert goals["requests 9+, under one schema: >= 1.5x the schema without drafting"]["extraction"]["met"]
    assert goals["requests 9+, free text: >= 1.4x plain"]["tests"]["met"]
    assert goals["the first requests (1-8): never below 0.97x (geomean; min in note)"]["tests"]["met"]
    warm_goal = next(v for k, v in goals.items() if k.startswith("warm start"))
    assert warm_goal["extraction"]["value"] == round(round(14 / 9, 3) / 1.6, 3)
    assert warm_goal["extraction"]["met"]  # 1.556 / 1.6 = 0.972 >= 0.9
    assert goals["memory: bounded by the cap in tokens"]["tests"]["met"]
    md = rs.markdown(
        {
            "summary": summary,
            "goals": goals,
            "date": "2026-12-02",
            "git": {"commit": "abc"},
            "machine": {"cpu_count": 2},
            "settings": {"target_name": "t.gguf", "threads": 2},
        }
    )
    assert "| extraction | suffix |" in md and "warm (2nd process" in md and "**met**" in md


def test_against_the_peer_the_end_of_generation_token_counts():
    # llama-server's predicted_per_second counts its end-of-generation token and no step
    # for the first token; ours, taken alike, counts the sampled tokens over t_generate
    ours = _rec(10.0, tokens=40, sampled=41)  # 40 tokens + end-of-generation in 4 s
    assert rs.decode_rate(ours) == pytest.approx(41 / 4.0)
    assert rs.decode_rate(_rec(10.0, tokens=40)) == pytest.approx(10.0)  # a record without it
    peer = _rec(10.25, tokens=41, prompt_seconds=0.5)
    rate, answer = rs.vs_peer([ours], [peer])
    assert rate == 1.0
    assert answer == round((41 / 10.25 + 0.5) / (4.0 + 1), 3)


def test_goals_are_not_judged_on_a_short_run():
    runs = {"plain": [_rec(10.0)] * 3, "suffix": [_engine(20.0)] * 3}
    summary = {"workloads": {"sql": rs.summarize_workload(WL["sql"], runs, None, None)}}
    goals = rs.conclude(summary, 3)
    assert "note" in goals
    assert all(g["met"] is None for k, per in goals.items() if k != "note" for g in per.values())


def test_the_warm_pass_loads_a_saved_index_by_its_file(tmp_path):
    from edgespec.decoding import suffix_store
    from edgespec.decoding.suffix import SuffixIndex

    index = SuffixIndex(1000)
    for doc_tokens in ([1, 2, 3, 4, 5, 6, 7], [8, 9, 10]):
        doc = index.open()
        index.extend(doc, doc_tokens)
        index.close(doc)
    path = suffix_store.save(index, rm.store_identity(Path("m.gguf"), "sql"), tmp_path)
    suffix_store.save(index, "another identity", tmp_path)  # a neighbour in the same directory
    loaded = rm.load_saved(path, 1000, rm.index_options(index))
    assert len(loaded) == len(index) == 10
    path.write_bytes(path.read_bytes()[:-3])  # truncated: a loud failure, not a cold start
    with pytest.raises(SystemExit):
        rm.load_saved(path, 1000, {})


def test_the_batch_table_reads_its_passes():
    runs = {"plain": [_rec(10.0)] * 3, "suffix": [_engine(20.0)] * 3}
    summary = {
        "workloads": {"sql": rs.summarize_workload(WL["sql"], runs, None, None)},
        "batch": {
            "workload": "extraction",
            "requests": 3,
            "parallel": 4,
            "passes": 2,
            "one_at_a_time": {},
            "runs": {
                "plain": {
                    "tokens_per_second": 10.0,
                    "accepted": 0,
                    "drafted": 0,
                    "errors": [],
                    "batch_cost": [1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5],
                },
                "suffix": {
                    "tokens_per_second": 11.0,
                    "x_plain": 1.1,
                    "accepted": 9,
                    "drafted": 10,
                    "errors": [],
                    "accepted_by_source": {"grammar": 9},
                    "drafted_by_source": {"grammar": 10},
                    "batch_cost": [1.0, 1.2, 1.4, 1.9, 2.2, 3.0, 3.9, 4.3],
                },
            },
        },
    }
    md = rs.markdown(
        {
            "summary": summary,
            "goals": rs.conclude(summary, 3),
            "date": "2026-12-02",
            "git": {"commit": "abc"},
            "machine": {"cpu_count": 2},
            "settings": {"target_name": "t.gguf", "threads": 2},
        }
    )
    assert "2 passes per engine" in md
    assert "| suffix | 11.00 | 1.10× | - | 9/10 | grammar 9/10 | 1.20 1.40 1.90 2.20 3.00 3.90 4.30 | 0 |" in md
    assert "| plain | 10.00 | 1.00× |" in md
