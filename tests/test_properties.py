"""Property tests (hypothesis) for the places where state makes bugs easy.

* **Batch input.** Any bytes make a JSONL input: ``read_jobs`` never raises, every
  non-blank line is either a job or a bad line with its number, and every job passes
  the checks the engine and the results file will apply to it.
* **Sampling.** Every setting ``SamplingParams.validate`` accepts, extremes included
  (temperatures down to 5e-324, penalties up to 1e6 and down to 5e-324), turns any
  finite logits row into a distribution that can be sampled and has a residual.
* **Batch resume.** Random inputs, random output files (results, blank lines, foreign
  lines, torn records, whole records missing their newline, duplicate ids) and random
  kill points, some tearing the line in flight. A foreign file is refused and keeps
  every byte; otherwise every id is answered exactly once in the end and the only
  bytes ever lost are edgespec's own torn records.
* **Engine on tiny models.** Random prompts (token ids, repeats for prompt lookup),
  k, drafters (none, n-gram, an agreeing and a noisy model, vocabularies of 320 and
  328 tokens both ways round), ``n_batch``, ``n_ctx`` (reaching the context's edge),
  sampling settings, stop strings and early closes of the stream, on engines reused
  across examples. Nothing the checks accept crashes; the KV memory agrees with the
  token lists; a seeded generation repeats itself on a reused session; and at
  temperature 0 with ``exact=True`` the output is plain greedy decoding's, token for token.

Bounded examples keep the whole file to ~15 s on two cores (engines on one thread: on a
busy machine OpenMP threads spinning for tiny models cost 100x).
"""

from __future__ import annotations

import io
import json
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from edgespec import Engine
from edgespec.batching.jobs import ALLOWED_KEYS, id_key, read_jobs
from edgespec.batching.results import run_batch
from edgespec.batching.writer import ResultWriter
from edgespec.decoding import sampling
from edgespec.decoding.params import SAMPLING_KEYS, SamplingParams
from edgespec.errors import InputError
from edgespec.events import Stats, Token
from tiny_models import make_tiny_model


def fast(max_examples: int):
    return settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


# -- batch input -----------------------------------------------------------------------------------

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=6)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3), max_leaves=6
)
MESSAGES = st.lists(st.fixed_dictionaries({"role": st.text(max_size=6), "content": st.text(max_size=8)}), max_size=3)
PLAUSIBLE = {
    "id": st.integers(-5, 5) | st.text(max_size=4),
    "prompt": st.text(max_size=10),
    "messages": MESSAGES,
    "max_tokens": st.integers(-2, 10) | st.floats(0, 5),
    "temperature": st.floats(-1, 3) | st.just(float("nan")) | st.integers(-1, 3),
    "top_k": st.integers(-3, 100) | st.floats(0, 5),
    "top_p": st.floats(-0.5, 1.5) | st.integers(-1, 2),
    "min_p": st.floats(-0.5, 1.5) | st.just(float("inf")),
    "seed": st.integers(-(2**65), 2**65) | st.floats(-2, 2),
    "stop": st.text(max_size=3) | st.lists(st.text(max_size=3), max_size=2),
    "raw": st.booleans() | st.integers(0, 1),
}
LINE_OBJECTS = st.fixed_dictionaries(
    {}, optional={k: v | JSON_VALUES for k, v in PLAUSIBLE.items()} | {"extra": JSON_VALUES}
)


@st.composite
def input_lines(draw) -> bytes:
    kind = draw(st.sampled_from(["object", "object", "object", "bytes", "text"]))
    if kind == "object":
        obj = draw(LINE_OBJECTS | JSON_VALUES)
        line = json.dumps(obj, ensure_ascii=draw(st.booleans())).encode("utf-8", "surrogatepass")
    elif kind == "bytes":
        line = draw(st.binary(max_size=20))
    else:
        line = draw(st.text(max_size=20)).encode("utf-8", "surrogatepass")
    return line.replace(b"\n", b" ")


@fast(150)
@given(st.lists(input_lines(), max_size=8), st.booleans())
def test_any_input_bytes_make_jobs_or_numbered_bad_lines(lines, final_newline):
    data = b"\n".join(lines) + (b"\n" if final_newline else b"")
    inp = read_jobs(io.BytesIO(data))
    job_lines = [j.line for j in inp.jobs]
    bad_lines = [e.line for e in inp.errors]
    assert not set(job_lines) & set(bad_lines)
    # a UTF-8 byte order mark opening the file is not content (read_jobs drops it)
    bom = b"\xef\xbb\xbf"
    shown = [line[3:] if n == 1 and line.startswith(bom) else line for n, line in enumerate(lines, 1)]
    nonblank = {n for n, line in enumerate(shown, 1) if line.strip()}
    assert set(job_lines) | set(bad_lines) == nonblank
    assert len({j.key for j in inp.jobs}) == len(inp.jobs)
    for job in inp.jobs:
        # everything the engine and the results file will do with the job succeeds
        SamplingParams(**{k: job.options[k] for k in SAMPLING_KEYS if k in job.options}).validate()
        assert set(job.options) <= ALLOWED_KEYS
        if "max_tokens" in job.options:
            assert isinstance(job.options["max_tokens"], int) and job.options["max_tokens"] >= 1
        json.dumps({"id": job.id, "prompt": job.prompt, "stop": job.options.get("stop")}, ensure_ascii=False).encode(
            "utf-8"
        )


# -- sampling -----------------------------------------------------------------------------------------


@st.composite
def accepted_params(draw) -> SamplingParams:
    """Any SamplingParams that SamplingParams.validate accepts (extremes included)."""
    return SamplingParams(
        temperature=draw(st.just(0.0) | st.floats(0, 1e6)),
        top_k=draw(st.integers(0, 2**40)),
        top_p=draw(st.floats(0, 1, exclude_min=True)),
        min_p=draw(st.floats(0, 1)),
        repeat_penalty=draw(st.just(1.0) | st.floats(0, 1e6, exclude_min=True)),
        frequency_penalty=draw(st.floats(-1e6, 1e6)),
        presence_penalty=draw(st.floats(-1e6, 1e6)),
        penalty_last_n=draw(st.integers(-1, 100)),
        seed=draw(st.none() | st.integers(0, 2**128)),
    )


@fast(150)
@given(st.lists(st.floats(-1e4, 1e4, width=32), min_size=1, max_size=40), accepted_params(), st.data())
def test_every_accepted_sampling_setting_gives_a_distribution(logits, params, data):
    params.validate()
    row = np.asarray(logits, dtype=np.float32)
    history = data.draw(st.lists(st.integers(0, len(row) - 1), max_size=20))
    row = sampling.apply_penalties(row, history, params)
    p = sampling.probs_from_logits(row, params)
    assert p.shape == row.shape and np.all(np.isfinite(p)) and np.all(p >= 0)
    assert abs(p.sum() - 1.0) < 1e-9
    t = sampling.sample(p, sampling.make_rng(params.seed))
    assert p[t] > 0
    if params.greedy:
        assert row[t] == row.max()
    q = sampling.probs_from_logits(row[::-1].copy(), params)  # another distribution
    r = sampling.residual(p, q)
    assert np.all(np.isfinite(r)) and abs(r.sum() - 1.0) < 1e-9


# -- batch resume ------------------------------------------------------------------------------------

IDS = st.integers(-3, 40) | st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=4)
FOREIGN_TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\n"), min_size=1, max_size=12
).filter(lambda s: s.strip() and not s.lstrip().startswith("{"))
FOREIGN_JSON = st.dictionaries(
    st.sampled_from(["id", "prompt", "note", "txt"]), st.integers(0, 9) | st.text(max_size=4), max_size=3
).map(json.dumps)


def result_bytes(rec_id, text: str, compact: bool) -> bytes:
    rec = {"id": rec_id, "text": text, "finish_reason": "stop", "stats": {"drafter": "none"}}
    seps = (",", ":") if compact else (", ", ": ")
    return json.dumps(rec, ensure_ascii=False, separators=seps).encode("utf-8")


class KillingEngine:
    """Answers each prompt; raises KeyboardInterrupt (a kill) instead of the n+1st answer."""

    def __init__(self, kill_after: int | None = None):
        self.kill_after = kill_after
        self.calls = 0

    def generate(self, prompt, **options):
        self.calls += 1
        if self.kill_after is not None and self.calls > self.kill_after:
            raise KeyboardInterrupt
        from types import SimpleNamespace

        return SimpleNamespace(text=f"«{prompt}»", finish_reason="length", stats=Stats(drafter="none"))


@st.composite
def resume_cases(draw):
    ids = draw(st.lists(IDS, max_size=8, unique_by=id_key))
    pool = st.sampled_from(ids) | IDS if ids else IDS
    body = []  # (kind, bytes of the line without its newline, id or None)
    for _ in range(draw(st.integers(0, 6))):
        kind = draw(st.sampled_from(["record", "record", "record", "blank", "foreign"]))
        if kind == "record":
            rid = draw(pool)
            body.append((kind, result_bytes(rid, draw(st.text(max_size=5)), draw(st.booleans())), rid))
        elif kind == "blank":
            body.append((kind, draw(st.sampled_from([b"", b" ", b"\t"])), None))
        else:
            body.append((kind, (draw(FOREIGN_TEXT | FOREIGN_JSON)).encode("utf-8"), None))
    tail_kind = draw(st.sampled_from(["none", "none", "torn", "whole", "foreign"]))
    tail, tail_id = b"", None
    if tail_kind in ("torn", "whole"):
        tail_id = draw(pool)
        line = result_bytes(tail_id, draw(st.text(max_size=6)), draw(st.booleans()))
        tail = line if tail_kind == "whole" else line[: draw(st.integers(1, len(line) - 1))]
    elif tail_kind == "foreign":
        tail = draw(FOREIGN_TEXT | FOREIGN_JSON).encode("utf-8")
    kills = draw(st.lists(st.tuples(st.integers(0, 3), st.none() | st.floats(0, 1)), max_size=3))
    return ids, body, tail_kind, tail, tail_id, kills


@fast(120)
@given(resume_cases())
def test_resume_answers_every_id_once_and_loses_only_torn_records(case):
    ids, body, tail_kind, tail, tail_id, kills = case
    original = b"".join(line + b"\n" for _, line, _ in body) + tail
    jobs = read_jobs(
        io.StringIO("".join(json.dumps({"id": i, "prompt": f"p{n}"}) + "\n" for n, i in enumerate(ids)))
    ).jobs
    assert len(jobs) == len(ids)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "out.jsonl"
        out.write_bytes(original)

        if tail_kind == "foreign" or any(kind == "foreign" for kind, _, _ in body):
            with pytest.raises(InputError, match="not a result line"):
                ResultWriter(out).open()
            assert out.read_bytes() == original
            return

        body_ids = Counter(id_key(i) for kind, _, i in body if kind == "record")
        kept = original
        if tail_kind == "torn" or (tail_kind == "whole" and id_key(tail_id) in body_ids):
            kept = original[: len(original) - len(tail)]
        elif tail_kind == "whole":
            kept = original + b"\n"
            body_ids[id_key(tail_id)] += 1

        for kill_after, torn_fraction in kills:
            with ResultWriter(out, fsync=False) as w:
                todo = [j for j in jobs if j.key not in w.done]
                try:
                    run_batch(KillingEngine(kill_after), jobs, w)
                except KeyboardInterrupt:
                    pass
                in_flight = [j for j in todo if j.key not in w.done][:1]
            if in_flight and torn_fraction is not None:
                # a power loss in the middle of the next write leaves part of its line
                line = result_bytes(in_flight[0].id, "«partial»", True) + b"\n"
                with open(out, "ab") as f:
                    f.write(line[: max(1, int(len(line) * torn_fraction))])

        with ResultWriter(out, fsync=False) as w:
            summary = run_batch(KillingEngine(), jobs, w)
        assert not summary.failed
        final = out.read_bytes()
        assert final.startswith(kept)  # nothing that was there is lost or changed
        assert final == b"" or final.endswith(b"\n")
        counts = Counter()
        for line in final.split(b"\n"):
            if line.strip():
                obj = json.loads(line)
                assert "text" in obj
                counts[id_key(obj["id"])] += 1
        for job in jobs:
            assert counts[job.key] == (body_ids[job.key] or 1), job.id
        assert set(counts) <= {j.key for j in jobs} | set(body_ids)


# -- the engine on tiny models --------------------------------------------------------------------------

# (target, drafter): model names from ``models`` below, "ngram", or None (plain)
PAIRS = [
    ("t320", None),
    ("t320", "ngram"),
    ("t320", "same"),
    ("t320", "noisy"),
    ("t320", "t328"),
    ("t328", "t320"),
    ("t328", "ngram"),
]


@pytest.fixture(scope="module")
def models(tiny_models_dir, tiny_target, tiny_same, tiny_noisy) -> dict[str, Path]:
    t328 = make_tiny_model(tiny_models_dir / "target_328.gguf", seed=0, n_vocab=328, name="edgespec-tiny-328")
    return {"t320": tiny_target, "same": tiny_same, "noisy": tiny_noisy, "t328": t328}


@pytest.fixture(scope="module")
def engines(models):
    """Engines kept across examples (so sessions are reused), keyed by their setup."""
    cache: dict[tuple, Engine] = {}

    def get(target: str, draft: str | None, n_batch: int, n_ctx: int) -> Engine:
        key = (target, draft, n_batch, n_ctx)
        if key not in cache:
            d = None if draft is None else draft if draft == "ngram" else models[draft]
            # one thread: a tiny model gains nothing from more, and on a loaded machine
            # OpenMP's spinning threads make each decode hundreds of times slower
            cache[key] = Engine(models[target], d, n_batch=n_batch, n_ctx=n_ctx, n_threads=1, exact=True)
        return cache[key]

    yield get
    for engine in cache.values():
        engine.close()


N_VOCAB = {"t320": 320, "t328": 328}


@st.composite
def engine_cases(draw):
    target, draft = draw(st.sampled_from(PAIRS))
    n_ctx = draw(st.sampled_from([48, 256]))
    n_vocab = N_VOCAB[target]
    seg = draw(st.lists(st.integers(0, n_vocab - 1), min_size=1, max_size=12))
    tail = draw(st.lists(st.integers(0, n_vocab - 1), max_size=6))
    prompt = ([1] if draw(st.booleans()) else []) + seg * draw(st.integers(1, 3)) + tail
    greedy = draw(st.booleans())
    options = dict(
        max_tokens=draw(st.integers(1, 40)),
        temperature=0.0 if greedy else draw(st.floats(0.05, 2.0)),
        top_k=draw(st.sampled_from([0, 1, 5, 40])),
        top_p=draw(st.sampled_from([1.0, 0.9, 0.3])),
        min_p=draw(st.sampled_from([0.0, 0.05, 0.5])),
        repeat_penalty=draw(st.sampled_from([1.0, 1.0, 1.3, 0.8])),
        presence_penalty=draw(st.sampled_from([0.0, 0.0, 0.5])),
        seed=draw(st.integers(0, 2**32)),
        stop=draw(st.sampled_from([(), (), ("e",), ("th", "\n")])),
    )
    return dict(
        target=target,
        draft=draft,
        n_ctx=n_ctx,
        n_batch=draw(st.sampled_from([2, 3, 8, 512])),
        k=draw(st.integers(1, 10)),
        p_min=draw(st.sampled_from([0.0, 0.0, 0.4])),
        # the learned drafting policy, or exactly k per round (which always drafts)
        adaptive=draw(st.booleans()),
        prompt=prompt[: n_ctx - 1],
        options=options,
        close_after=draw(st.none() | st.integers(0, 10)),
    )


def check_kv(engine: Engine) -> None:
    """The KV memory of each context holds exactly the tokens its list says."""
    for ctx in (engine.ctx, engine.draft_ctx):
        if ctx is not None:
            assert ctx.pos_max() == ctx.n_past - 1


@fast(100)
@given(engine_cases())
def test_engine_never_crashes_and_greedy_equals_plain(engines, case):
    engine = engines(case["target"], case["draft"], case["n_batch"], case["n_ctx"])
    engine.set_k(case["k"])
    engine.adaptive_k = case["adaptive"]
    engine.set_p_min(case["p_min"])
    prompt, options = case["prompt"], case["options"]
    n_vocab = N_VOCAB[case["target"]]

    first = engine.generate(prompt, **options)
    check_kv(engine)
    assert 1 <= len(first.token_ids) <= options["max_tokens"] or first.finish_reason == "stop"
    assert all(0 <= t < n_vocab for t in first.token_ids)
    assert first.finish_reason in ("stop", "length")

    if case["close_after"] is not None:  # a reader that stops early, then goes away
        stream = engine.stream(prompt, **options)
        seen = 0
        for ev in stream:
            if isinstance(ev, Token):
                seen += 1
                if seen > case["close_after"]:
                    break
        stream.close()
        check_kv(engine)

    again = engine.generate(prompt, **options)  # the session, reused, changes nothing
    assert again.token_ids == first.token_ids and again.text == first.text
    check_kv(engine)

    if options["temperature"] == 0.0:
        plain = engines(case["target"], None, 512, case["n_ctx"]).generate(prompt, **options)
        assert first.token_ids == plain.token_ids
        assert first.text == plain.text and first.finish_reason == plain.finish_reason
