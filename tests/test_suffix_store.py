"""The suffix memory on disk (edgespec.decoding.suffix_store): a round trip that answers
exactly as the saved index did (after any history, evictions and taken-back drafts
included), one file per tokenizer identity under edgespec's cache, a rebuild by replay
where the saved arrays cannot be used as they are, an unusable file is one warning and a
cold start, and a save killed with SIGKILL at any point leaves the previous file whole."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgespec.decoding import suffix_store
from edgespec.decoding.suffix import SuffixIndex
from edgespec.decoding.suffix_store import SuffixStoreWarning, clear, load, save, stats, store_path
from test_suffix import canonical, ops, run_history

IDENT = "gpt2/151936/0123456789"


def sample(cap=1000, docs=((1, 2, 3, 4, 5), (1, 2, 3, 9), (7, 7, 1, 2))):
    ix = SuffixIndex(cap)
    for toks in docs:
        d = ix.open()
        ix.extend(d, toks)
        ix.close(d)
    return ix


def texts(ix):
    return [toks for _, toks, _ in ix.documents()]


def test_a_saved_index_loads_warm_with_its_counters(tmp_path):
    ix = sample()
    ix.propose([1, 2], 2)
    ix.proposed, ix.accepted_ids = 2, 1  # (the drafter counts what the loop verified)
    path = save(ix, IDENT, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = load(IDENT, directory=tmp_path)
    assert path.parent == tmp_path and path.suffix == ".essuffix"
    assert texts(back) == texts(ix) and back.cap == ix.cap
    assert back.propose([1, 2], 2).ids == ix.propose([1, 2], 2).ids
    assert (back.proposals, back.hits, back.proposed, back.accepted_ids) == (1 + 1, 1 + 1, 2, 1)


@pytest.mark.parametrize("cap", [None, 500])  # as saved, and rebuilt by replay at another cap
def test_what_the_drafts_proved_worth_comes_back_with_the_index(tmp_path, cap):
    ix = sample()
    b = ix.rates.bucket(8, 0.9)
    for _ in range(30):
        ix.rates.beta.record(b, False)
    save(ix, IDENT, tmp_path)
    back = load(IDENT, cap=cap, directory=tmp_path)
    assert back.rates.beta.acc.tolist() == ix.rates.beta.acc.tolist()
    assert back.rates.beta.rej.tolist() == ix.rates.beta.rej.tolist()
    assert back.rates.beta.mean()[b] < 0.1


@pytest.mark.parametrize(
    "saved",
    [None, {"acc": [1.0, 2.0], "rej": [1.0, 1.0]}, {"acc": "x"}, "nan", {"acc": [-1.0] * 24, "rej": [1.0] * 24}],
)
def test_rates_a_file_lacks_or_cannot_use_leave_the_prior(tmp_path, monkeypatch, saved):
    ix = sample()
    for _ in range(30):
        ix.rates.beta.record(0, False)
    real_dumps = suffix_store.json.dumps

    def dumps(meta, **kw):  # the file as an older (or another) edgespec wrote it
        if saved is None:
            meta.pop("rates")
        else:
            meta["rates"] = {"acc": [float("nan")] * 24, "rej": [1.0] * 24} if saved == "nan" else saved
        return real_dumps(meta, **kw)

    monkeypatch.setattr(suffix_store.json, "dumps", dumps)
    save(ix, IDENT, tmp_path)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = load(IDENT, directory=tmp_path)
    assert texts(back) == texts(ix)
    assert back.rates.beta.mean().tolist() == SuffixIndex(10).rates.beta.mean().tolist()


def answers(ix, contexts, k=8):
    return [(p.ids, p.match_len, p.probs) for p in (ix.propose(c, k) for c in contexts)]


def close_all(ix):
    for d in list(ix._docs):
        ix.close(d)
    return ix


def busy_index(cap=3000, tokens=9000, seed=5):
    """Answers of a small vocabulary written the way a batch writes them: documents
    interleaved, drafts taken back, the cap passed (evictions), one still open."""
    rng = random.Random(seed)
    ix, docs = SuffixIndex(cap), []
    phrases = [[rng.randrange(40) for _ in range(rng.randint(3, 12))] for _ in range(30)]
    while len(ix) < cap or ix._next < tokens:
        if not docs or rng.random() < 0.02:
            docs.append(ix.open())
        d = rng.choice(docs)
        ix.extend(d, rng.choice(phrases) if rng.random() < 0.7 else [rng.randrange(40)])
        if rng.random() < 0.1:
            try:
                ix.pop(d, rng.randint(1, 3))
            except ValueError:
                pass
        if len(docs) > 3 and rng.random() < 0.05:
            ix.close(docs.pop(0))
    return ix, rng


def test_a_loaded_index_answers_exactly_like_the_saved_one(tmp_path):
    ix, rng = busy_index()
    assert ix.start > 0 and ix._docs  # evicted, and a document still open
    close_all(ix)
    window = [t for _, toks, _ in ix.documents() for t in toks]
    contexts = [window[i - rng.randint(1, 12) : i] for i in (rng.randrange(12, len(window)) for _ in range(400))]
    contexts += [[rng.randrange(40) for _ in range(rng.randint(1, 8))] for _ in range(100)]
    save(ix, IDENT, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = load(IDENT, directory=tmp_path)
    assert (back.cap, back.start, len(back), back.chain_heads()) == (ix.cap, ix.start, len(ix), ix.chain_heads())
    assert canonical(back) == canonical(ix)
    assert answers(back, contexts) == answers(ix, contexts)
    # and it goes on as the saved one would: the same tokens written, the same evictions
    for target in (ix, back):
        d = target.open()
        target.extend(d, window[:2500])
        target.close(d)
    assert canonical(back) == canonical(ix) and answers(back, contexts) == answers(ix, contexts)


@settings(max_examples=150, deadline=None)
@given(st.integers(1, 12), ops, ops, st.lists(st.lists(st.integers(0, 3), min_size=1, max_size=6), max_size=12))
def test_after_any_history_the_loaded_index_is_the_saved_one(cap, history, more, contexts):
    import tempfile

    kw = dict(key_lens=(3, 1), max_match=6)
    ix = close_all(run_history(cap, history, **kw))
    with tempfile.TemporaryDirectory() as d:
        save(ix, IDENT, Path(d))
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            back = load(IDENT, directory=Path(d), **kw)
    assert canonical(back) == canonical(ix) and answers(back, contexts, 4) == answers(ix, contexts, 4)
    for target in (ix, back):  # the same writes after the load: the same index still
        doc = target.open()
        for op in more:
            if op[0] == "append":
                target.append(doc, op[2])
            elif op[0] == "pop":
                try:
                    target.pop(doc, op[2])
                except ValueError:
                    pass
    assert canonical(back) == canonical(ix) and answers(back, contexts, 4) == answers(ix, contexts, 4)


def test_an_empty_index_round_trips(tmp_path):
    save(SuffixIndex(50), IDENT, tmp_path)
    back = load(IDENT, directory=tmp_path)
    assert (len(back), back.cap, back.propose([1, 2], 3).ids) == (0, 50, [])


def test_another_cap_or_python_hash_rebuilds_by_replay(tmp_path, monkeypatch):
    ix = sample()
    save(ix, IDENT, tmp_path)
    bigger = load(IDENT, cap=2000, directory=tmp_path)
    assert bigger.cap == 2000 and texts(bigger) == texts(ix)
    monkeypatch.setattr(suffix_store, "hash_probe", lambda key_lens: [0 for _ in key_lens])
    replayed = load(IDENT, directory=tmp_path)  # the chain keys are another Python's: not used
    assert texts(replayed) == texts(ix) and replayed.propose([1, 2], 2).ids == ix.propose([1, 2], 2).ids
    assert load(IDENT, directory=tmp_path, key_lens=(3,)).key_lens == (3,)


def test_an_older_versions_file_is_a_warning_naming_it(tmp_path):
    path = store_path(IDENT, tmp_path)
    path.write_bytes(suffix_store._HEAD.pack(suffix_store.MAGIC, 1, 2, 0, bytes(32)) + b"{}")
    with pytest.warns(SuffixStoreWarning, match="format version 1, this edgespec reads 2 .an older edgespec"):
        assert len(load(IDENT, directory=tmp_path)) == 0


def test_the_file_is_its_owners_only(tmp_path):
    assert save(sample(), IDENT, tmp_path).stat().st_mode & 0o777 == 0o600


def test_an_open_document_is_saved_as_a_closed_one(tmp_path):
    ix = SuffixIndex(100)
    d = ix.open()
    ix.extend(d, [1, 2, 3])
    back = load(IDENT, directory=save(ix, IDENT, tmp_path).parent)
    assert back.documents() == [([0, 1, 2], [1, 2, 3], True)]


def test_a_smaller_cap_on_load_keeps_the_newest_tokens(tmp_path):
    save(sample(), IDENT, tmp_path)
    back = load(IDENT, cap=5, directory=tmp_path)
    assert len(back) == 5 and back.cap == 5
    assert [t for toks in texts(back) for t in toks] == [9, 7, 7, 1, 2]


def test_no_file_is_a_silent_cold_start(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert len(load(IDENT, directory=tmp_path)) == 0


def test_one_file_per_tokenizer_identity_under_the_edgespec_cache(tmp_path, monkeypatch):
    """Beside the models in edgespec's XDG cache; EDGESPEC_MEMORY_DIR moves it."""
    monkeypatch.delenv("EDGESPEC_MEMORY_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    a = save(sample(), IDENT)
    b = save(sample(docs=((5, 6, 7),)), "llama/32000/abcdef")
    assert a != b and a.parent == b.parent == tmp_path / "edgespec" / "suffix-memory"
    assert "/" not in a.name and a == store_path(IDENT)
    assert texts(load("llama/32000/abcdef")) == [[5, 6, 7]]
    monkeypatch.setenv("EDGESPEC_MEMORY_DIR", str(tmp_path / "elsewhere"))
    assert store_path(IDENT).parent == tmp_path / "elsewhere"


def damaged(path, how):
    data = path.read_bytes()
    if how == "flipped":
        data = data[:-3] + bytes([data[-3] ^ 0xFF]) + data[-2:]
    elif how == "truncated":
        data = data[: len(data) - 7]
    elif how == "header only":
        data = data[:20]
    elif how == "empty":
        data = b""
    elif how == "garbage":
        data = b"\x00not a suffix memory at all" * 10
    elif how == "version":  # an older edgespec's (a newer one's is never replaced: test_memory_hostile.py)
        data = data[:8] + (1).to_bytes(4, "little") + data[12:]
    path.write_bytes(data)


@pytest.mark.parametrize(
    "how, why",
    [
        ("flipped", "checksum"),
        ("truncated", "truncated"),
        ("header only", "truncated"),
        ("empty", "truncated"),
        ("garbage", "not an edgespec suffix memory"),
        ("version", "version 1,"),
    ],
)
def test_a_damaged_file_is_one_warning_and_a_cold_start(tmp_path, how, why):
    path = save(sample(), IDENT, tmp_path)
    damaged(path, how)
    with pytest.warns(SuffixStoreWarning) as record:
        ix = load(IDENT, directory=tmp_path)
    assert len(ix) == 0 and ix.propose([1, 2], 2).ids == []
    (w,) = record
    msg = str(w.message)
    assert "\n" not in msg and str(path) in msg and why in msg and "edgespec memory clear" in msg
    save(sample(), IDENT, tmp_path)  # and the next save replaces it
    assert len(load(IDENT, directory=tmp_path)) == 13


def test_a_foreign_tokenizers_file_is_a_warning_and_a_cold_start(tmp_path):
    other = save(sample(), "llama/32000/abcdef", tmp_path)
    os.replace(other, store_path(IDENT, tmp_path))
    with pytest.warns(SuffixStoreWarning, match="another tokenizer"):
        assert len(load(IDENT, directory=tmp_path)) == 0


def test_a_header_that_lies_about_its_sizes_is_a_warning(tmp_path, monkeypatch):
    real = suffix_store.json.dumps

    def lying(obj, *a, **k):
        return real({**obj, "tokens": obj["tokens"] + 1}, *a, **k)

    monkeypatch.setattr(suffix_store.json, "dumps", lying)
    save(sample(), IDENT, tmp_path)  # a valid checksum over a wrong header
    monkeypatch.undo()
    with pytest.warns(SuffixStoreWarning, match="sizes disagree"):
        assert len(load(IDENT, directory=tmp_path)) == 0


def test_a_header_with_an_impossible_cap_is_a_warning(tmp_path, monkeypatch):
    real = suffix_store.json.dumps
    monkeypatch.setattr(suffix_store.json, "dumps", lambda obj, *a, **k: real({**obj, "cap": 0}, *a, **k))
    save(sample(), IDENT, tmp_path)
    monkeypatch.undo()
    with pytest.warns(SuffixStoreWarning, match="cap under one"):
        assert len(load(IDENT, directory=tmp_path)) == 0


@pytest.mark.parametrize(
    "array, value, why",
    [
        ("fwd", 0, "document links"),
        ("back", 11, "document links"),
        ("prev2", 9, "chain links"),
        ("headpos2", 99, "chain links"),
        ("tok", -3, "document links"),
    ],
)
def test_arrays_that_disagree_with_a_valid_checksum_are_a_warning(tmp_path, monkeypatch, array, value, why):
    real = suffix_store._encode

    def broken(snap):
        arrays, docs = real(snap)
        for name, a in arrays:
            if name == array:
                a[len(a) // 2] = value
        return arrays, docs

    monkeypatch.setattr(suffix_store, "_encode", broken)
    save(sample(), IDENT, tmp_path)
    monkeypatch.undo()
    with pytest.warns(SuffixStoreWarning, match=why):
        assert len(load(IDENT, directory=tmp_path)) == 0


def test_the_file_names_the_models_that_wrote_it(tmp_path):
    save(sample(), IDENT, tmp_path, model="qwen-0.5b")
    save(sample(), IDENT, tmp_path, model="qwen-1.5b")
    save(sample(), IDENT, tmp_path)
    (s,) = stats(tmp_path)
    assert s.models == ("qwen-1.5b", "qwen-0.5b") and s.cap == 1000 and s.problem == ""


def test_stats_and_clear(tmp_path):
    ix = sample()
    for _ in range(4):
        ix.propose([1, 2], 2)
    ix.propose([8, 8], 2)
    ix.proposed, ix.accepted_ids = 8, 6  # (the drafter counts what the loop verified)
    save(ix, IDENT, tmp_path)
    save(sample(docs=((5, 6, 7),)), "other", tmp_path)
    (bad := tmp_path / "x.essuffix").write_bytes(b"junk")
    rows = {s.identity: s for s in stats(tmp_path)}
    s = rows[IDENT]
    assert (s.documents, s.tokens, s.proposals, s.hits, s.proposed) == (3, 13, 5, 4, 8)
    assert s.hit_rate == pytest.approx(4 / 5) and s.acceptance == pytest.approx(6 / 8)
    assert s.file_bytes == store_path(IDENT, tmp_path).stat().st_size and s.saved_at > 0
    assert rows["?"].path == bad and rows["?"].file_bytes == 4  # unreadable, still listed
    assert "no magic" in rows["?"].problem
    assert clear(IDENT, tmp_path) == [store_path(IDENT, tmp_path)]
    assert {s.identity for s in stats(tmp_path)} == {"other", "?"}
    assert len(clear(directory=tmp_path)) == 2 and stats(tmp_path) == []
    assert clear(directory=tmp_path / "nowhere") == [] and stats(tmp_path / "nowhere") == []


# -- kill -9 while saving --------------------------------------------------------------
SAVER = textwrap.dedent("""
    import os, sys, time
    from edgespec.decoding import suffix_store
    from edgespec.decoding.suffix import SuffixIndex
    directory, where = sys.argv[1], sys.argv[2]

    def index(tokens):
        ix = SuffixIndex(1 << 20)
        d = ix.open()
        ix.extend(d, tokens)
        ix.close(d)
        return ix

    suffix_store.save(index([1, 2, 3, 4]), "ident", __import__("pathlib").Path(directory))
    real_fdopen = os.fdopen

    class Stalling:  # writes half of what it is given, then waits to be killed
        def __init__(self, f): self.f = f
        def __enter__(self): return self
        def __exit__(self, *a): return self.f.__exit__(*a)
        def write(self, b):
            self.f.write(b[: len(b) // 2]); self.f.flush()
            print("stalled", flush=True); time.sleep(60)
        def __getattr__(self, name): return getattr(self.f, name)

    if where == "write":
        suffix_store.os.fdopen = lambda *a, **k: Stalling(real_fdopen(*a, **k))
    else:
        def stalling_fsync(fd):
            print("stalled", flush=True); time.sleep(60)
        suffix_store.os.fsync = stalling_fsync
    suffix_store.save(index(list(range(5, 50000))), "ident", __import__("pathlib").Path(directory))
    print("not killed", flush=True)
""")


@pytest.mark.parametrize("where", ["write", "fsync"])
def test_kill_9_while_saving_leaves_the_previous_file_whole(tmp_path, where):
    proc = subprocess.Popen(
        [sys.executable, "-c", SAVER, str(tmp_path), where], stdout=subprocess.PIPE, text=True, env=os.environ.copy()
    )
    try:
        assert proc.stdout.readline().strip() == "stalled"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    assert list(tmp_path.glob("*.tmp-*")), "the kill came before the temporary file was written"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ix = load("ident", directory=tmp_path)
    assert texts(ix) == [[1, 2, 3, 4]]  # the last session is lost, nothing else
    save(ix, "ident", tmp_path)
    assert not list(tmp_path.glob("*.tmp-*"))  # the killed save's leftovers are gone
