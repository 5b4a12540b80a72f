"""The suffix memory on disk (edgespec.decoding.suffix_store): a round trip, one file per
tokenizer identity under edgespec's cache, an unusable file is one warning and a cold
start, and a save killed with SIGKILL at any point leaves the previous file whole."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest

from edgespec.decoding import suffix_store
from edgespec.decoding.suffix import SuffixIndex
from edgespec.decoding.suffix_store import SuffixStoreWarning, clear, load, save, stats, store_path

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
    ix.accepted_ids = 1
    path = save(ix, IDENT, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = load(IDENT, directory=tmp_path)
    assert path.parent == tmp_path and path.suffix == ".essuffix"
    assert texts(back) == texts(ix) and back.cap == ix.cap
    assert back.propose([1, 2], 2).ids == ix.propose([1, 2], 2).ids
    assert (back.proposals, back.hits, back.proposed, back.accepted_ids) == (1 + 1, 1 + 1, 2 + 2, 1)


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
    elif how == "version":
        data = data[:8] + (99).to_bytes(4, "little") + data[12:]
    path.write_bytes(data)


@pytest.mark.parametrize("how, why", [
    ("flipped", "checksum"), ("truncated", "truncated"), ("header only", "truncated"),
    ("empty", "truncated"), ("garbage", "not an edgespec suffix memory"), ("version", "version 99"),
])
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


def test_stats_and_clear(tmp_path):
    ix = sample()
    for _ in range(4):
        ix.propose([1, 2], 2)
    ix.propose([8, 8], 2)
    ix.accepted_ids = 6
    save(ix, IDENT, tmp_path)
    save(sample(docs=((5, 6, 7),)), "other", tmp_path)
    (bad := tmp_path / "x.essuffix").write_bytes(b"junk")
    rows = {s.identity: s for s in stats(tmp_path)}
    s = rows[IDENT]
    assert (s.documents, s.tokens, s.proposals, s.hits, s.proposed) == (3, 13, 5, 4, 8)
    assert s.hit_rate == pytest.approx(4 / 5) and s.acceptance == pytest.approx(6 / 8)
    assert s.file_bytes == store_path(IDENT, tmp_path).stat().st_size and s.saved_at > 0
    assert rows["?"].path == bad and rows["?"].file_bytes == 4  # unreadable, still listed
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
    proc = subprocess.Popen([sys.executable, "-c", SAVER, str(tmp_path), where],
                            stdout=subprocess.PIPE, text=True, env=os.environ.copy())
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
