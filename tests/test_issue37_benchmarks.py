"""benchmarks/weight_types.py, never_slower.py, wrong_prior.py and same_outputs.py without a
model: their held-out prompts are new (not another benchmark's, not the calibration set's),
well formed, and the never-slower summary reads its records as documented."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import never_slower as ns
from benchmarks import same_outputs as so
from benchmarks import wrong_prior as wp
from benchmarks.prompts import never_slower as nsp
from benchmarks.prompts import weights as wtp
from edgespec.costmodel import priors
from edgespec.llama.chat_template import validate_messages

PROMPTS_DIR = Path(nsp.__file__).parent


def _other_prompt_text() -> str:
    """Every other prompt set's text, and the calibration prompts edgespec ships."""
    from edgespec.measuring import prompts as shipped

    mine = {Path(nsp.__file__).name, Path(wtp.__file__).name, "__init__.py"}
    texts = [p.read_text() for p in sorted(PROMPTS_DIR.glob("*.py")) if p.name not in mine]
    return "".join(texts) + Path(shipped.__file__).read_text()


def test_the_held_out_prompts_are_not_another_sets():
    others = _other_prompt_text()
    pieces = [*nsp.FUNCTIONS, *nsp.DIFFS, *nsp.COMMANDS]
    pieces += [wtp.GRADEBOOK, wtp.CALLBACKS, wtp.SERVICE_YAML, wtp.OUTAGE_REPORT, wtp.CHANGELOG, wtp.SPANS_PY]
    for text in pieces:
        longest = max((line.strip() for line in text.splitlines()), key=len)
        assert longest not in others, longest
    for name in ("def " + f.split("def ", 1)[1].split("(", 1)[0] + "(" for f in nsp.FUNCTIONS):
        assert name not in others, name  # no function of the same name either


def test_the_weight_type_prompts_copy_their_input_or_do_not():
    names = [p[0] for p in wtp.PROMPTS]
    assert len(set(names)) == len(names) == 9
    grounded = [p for p in wtp.PROMPTS if p[2]]
    assert len(grounded) == 6 and all(len(p[3]) > 400 for p in grounded)
    assert all(len(p[3]) < 300 for p in wtp.PROMPTS if not p[2])


@pytest.mark.parametrize("name", ["docstrings", "commits", "shell"])
def test_each_held_out_workload_is_16_different_requests_of_one_kind(name):
    reqs = nsp.workloads()[name]
    assert len(reqs) == 16 and len({json.dumps(r) for r in reqs}) == 16
    assert len({r[0]["content"] for r in reqs}) == 1  # one system prompt: one kind of request
    assert all(validate_messages(r) for r in reqs)


def test_the_never_slower_check_runs_the_issues_test_writing_workload_first():
    loads = ns.all_workloads()
    assert list(loads) == ["tests", "docstrings", "commits", "shell"]
    assert len(loads["tests"]) == 16 and "pytest" in loads["tests"][0][0]["content"]


def _record(i: int, tokens: int, seconds: float, drafted: dict | None = None, kept: dict | None = None) -> dict:
    stats = {"generated_tokens": tokens, "t_generate": seconds}
    stats.update(drafted_by_source=drafted or {}, accepted_by_source=kept or {})
    return {"id": i, "stats": stats}


def test_a_half_is_its_tokens_over_its_seconds_and_sources_sum():
    recs = [_record(0, 10, 1.0, {"prompt": 4}, {"prompt": 3}), _record(1, 30, 1.0, {"memory": 5, "prompt": 2})]
    assert ns.half_rate(recs, 0, 2) == 20.0 and ns.half_rate(recs, 1, 2) == 30.0
    assert ns.half_rate([], 0, 8) == 0.0
    assert ns.sources(recs, 0, 2) == {"prompt": [6, 3], "memory": [5, 0]}


def test_the_step_ratio_charges_each_round_its_verify_size():
    # 10 rounds: 6 verified no draft, 2 verified 1, 2 verified 3 (drafted at least 1: 4,
    # at least 2: 2, at least 3: 2); 6 + 2*2 + 2*4 = 18 tokens
    rec = {"id": 0, "stats": {"rounds": 10, "generated_tokens": 18, "drafted_by_position": [4, 2, 2]}}
    cost = 6 + 2 * priors.CPU_Q4_K_M(2) + 2 * priors.CPU_Q4_K_M(4)
    assert ns.step_ratio([rec], 0, 1, priors.CPU_Q4_K_M) == pytest.approx(18 / cost)
    plain = {"id": 1, "stats": {"rounds": 7, "generated_tokens": 7, "drafted_by_position": []}}
    assert ns.step_ratio([plain], 0, 1, priors.CPU_Q4_K_M) == 1.0
    assert ns.step_ratio([], 0, 8, priors.CPU_Q4_K_M) == 0.0


def test_the_time_outside_decode_is_per_committed_token():
    recs = [{"id": i, "stats": {"generated_tokens": 50, "t_generate": 2.0, "t_verify": 1.9}} for i in range(2)]
    assert ns.outside_ms(recs, 0, 2) == pytest.approx(2.0)  # 0.2 s over 100 tokens
    assert ns.outside_ms([], 0, 8) == 0.0


def test_the_wrong_priors_are_wrong_and_the_right_one_is_the_tables():
    q4km, q4_0 = wp.curves("Q4_K_M"), wp.curves("Q4_0")
    assert q4km["right"] == priors.CPU_Q4_K_M and q4_0["right"] == priors.CPU_Q4_0
    assert q4km["plain"] is None and "q4km-on-q4_0" not in q4km
    assert q4_0["q4km-on-q4_0"] == priors.CPU_Q4_K_M
    for c in (q4km, q4_0):  # a GPU's curve calls drafts of 2-8 cheap on this CPU
        assert sum(c["gpu"](n) for n in range(2, 9)) < 0.7 * sum(c["right"](n) for n in range(2, 9))


def test_same_outputs_compares_token_for_token(tmp_path, capsys):
    a = {"runs": {"plain": {"x": "one", "y": "two"}}}
    b = {"runs": {"plain": {"x": "one", "y": "TWO"}}}
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    assert so.compare(str(pa), str(pa)) == 0 and "the same outputs" in capsys.readouterr().out
    assert so.compare(str(pa), str(pb)) == 1 and "differ: y" in capsys.readouterr().out
    assert set(so.configs("draft.gguf")) >= {"plain", "ngram-k4", "model-k3", "sampled-model-k3"}
