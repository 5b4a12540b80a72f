"""The memory store against a hostile folder (issue 34, "the memory store" items 1-5, 8-11 and
13-15): a FIFO, a huge file, crafted files with a valid checksum, a hijacked temporary file, a
folder that is not the user's own, a folder at the store's name, a newer edgespec's file, a foreign
file's model names, links at the store, and what the docs say. Each ends as one warning line naming
the path and a cold start (or a save refused in one line), never a traceback, a hang or a store
silently lost or overwritten. The library is driven directly; the commands through ``python -m
edgespec`` in a subprocess with a timeout where a regression would hang. Runs that meet (two at
once, a clear during a run, SIGTERM) are tests/test_memory_hostile_runs.py."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
import tracemalloc
import warnings
from pathlib import Path

import pytest

from edgespec.decoding import store_files, suffix_store
from edgespec.decoding.suffix import SuffixIndex
from edgespec.decoding.suffix_store import SuffixStoreWarning, clear, load, save, stats, store_path
from edgespec.errors import MemoryStoreError
from test_suffix_store import IDENT, sample, texts

ROOT = os.geteuid() == 0 if hasattr(os, "geteuid") else False


def one_warning(directory: Path, **kw) -> tuple[SuffixIndex, str]:
    """load(), which must warn exactly once, in one line; the index and the message."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        ix = load(IDENT, directory=directory, **kw)
    assert len(record) == 1, [str(w.message) for w in record]
    assert record[0].category is SuffixStoreWarning
    msg = str(record[0].message)
    assert "\n" not in msg and "starting cold" in msg
    return ix, msg


def edgespec(directory: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``python -m edgespec ARGS`` on the store folder ``directory``, killed after ``timeout``."""
    env = {**os.environ, "EDGESPEC_MEMORY_DIR": str(directory), "HF_HUB_OFFLINE": "1", "COLUMNS": "400"}
    return subprocess.run(
        [sys.executable, "-m", "edgespec", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def no_traceback(r: subprocess.CompletedProcess) -> None:
    assert "Traceback" not in r.stdout + r.stderr, r.stderr


def craft(path: Path, meta: bytes | dict, payload: bytes = b"", version: int = suffix_store.FORMAT_VERSION) -> None:
    """A file with a valid checksum over whatever meta and payload it is given."""
    raw = meta if isinstance(meta, bytes) else json.dumps(meta).encode()
    digest = hashlib.sha256(raw + payload).digest()
    path.write_bytes(
        suffix_store._HEAD.pack(suffix_store.MAGIC, version, len(raw), len(payload), digest) + raw + payload
    )
    os.chmod(path, 0o600)


def saved_parts(tmp_path: Path) -> tuple[dict, bytes]:
    """The meta and payload of a real saved file (to alter and re-sign)."""
    path = save(sample(), IDENT, tmp_path)
    data = path.read_bytes()
    _, _, meta_len, _, _ = suffix_store._HEAD.unpack_from(data)
    body = data[suffix_store._HEAD.size :]
    return json.loads(body[:meta_len]), bytes(body[meta_len:])


def add(ix: SuffixIndex, tokens) -> SuffixIndex:
    """``tokens`` added to ``ix`` as one more text (returns ``ix``)."""
    d = ix.open()
    ix.extend(d, list(tokens))
    ix.close(d)
    return ix


# -- 1. a FIFO ---------------------------------------------------------------------------
def test_a_fifo_at_the_store_is_one_warning_not_a_hang(tmp_path):
    path = store_path(IDENT, tmp_path)
    os.mkfifo(path, 0o600)
    script = textwrap.dedent(f"""
        import warnings, pathlib
        from edgespec.decoding import suffix_store
        from edgespec.errors import MemoryStoreError
        d = pathlib.Path({str(tmp_path)!r})
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            ix = suffix_store.load({IDENT!r}, directory=d)
        print(len(w), len(ix), str(w[0].message))
        print("saved:", suffix_store.save(ix, {IDENT!r}, d))
        try:
            suffix_store.save(suffix_store.SuffixIndex(10), {IDENT!r}, d)
        except MemoryStoreError as e:
            print("refused:", e)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    first, second, third = r.stdout.splitlines()
    assert first.startswith("1 0 ") and str(path) in first and "FIFO" in first
    assert second == "saved: None"  # the load said it: no second line
    assert third.startswith("refused: ") and str(path) in third
    r = edgespec(tmp_path, "memory", "show", timeout=60)
    no_traceback(r)
    assert r.returncode == 0 and path.name in r.stdout and "unusable: is a FIFO" in r.stdout
    assert path.is_fifo()  # never written into
    r = edgespec(tmp_path, "memory", "clear", "--yes", timeout=60)  # a FIFO is removed (unlinked, never opened)
    no_traceback(r)
    assert r.returncode == 0 and f"removed {path}" in r.stdout and not os.path.lexists(path)


# -- 2. a huge file ------------------------------------------------------------------------
def test_a_huge_file_is_refused_from_its_header_without_reading_it(tmp_path):
    path = store_path(IDENT, tmp_path)
    with open(path, "wb") as f:
        f.truncate(10 << 30)  # sparse: 10 GB of zeros
    os.chmod(path, 0o600)
    tracemalloc.start()
    _, msg = one_warning(tmp_path)
    (row,) = stats(tmp_path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "no magic" in msg and "no magic" in row.problem and peak < 50 << 20
    assert clear(IDENT, tmp_path) == [path]


def test_a_header_claiming_more_than_its_cap_holds_is_not_read(tmp_path):
    meta, _ = saved_parts(tmp_path)
    path = store_path(IDENT, tmp_path)
    raw = json.dumps(meta).encode()
    with open(path, "wb") as f:  # a valid header over 2 GB of arrays, for a cap of 1000 tokens
        f.write(suffix_store._HEAD.pack(suffix_store.MAGIC, 2, len(raw), 2 << 30, bytes(32)) + raw)
        f.truncate(suffix_store._HEAD.size + len(raw) + (2 << 30))
    tracemalloc.start()
    _, msg = one_warning(tmp_path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert "more than a cap of 1,000 can hold" in msg and peak < 50 << 20


# -- 3. crafted files with a valid checksum -------------------------------------------------
@pytest.mark.parametrize(
    "change, why",
    [
        (lambda m: b"[" * 200_000, "unreadable header"),
        (lambda m: {**m, "key_lens": [30, 2]}, "key lengths"),
        (lambda m: {**m, "key_lens": [2, 6]}, "key lengths"),
        (lambda m: {**m, "saved_at": 1e300}, "save time"),
        (lambda m: json.dumps({**m, "saved_at": float("nan")}).encode(), "save time"),
        (lambda m: json.dumps(m).replace('"proposals": 0', '"proposals": 1e400').encode(), "proposals"),
        (lambda m: {**m, "cap": 1 << 40}, "cap"),
        (lambda m: {**m, "models": [{"x": 1}]}, "model names"),
        (lambda m: {**m, "hits": -1}, "hits"),
        (lambda m: {**m, "arrays": [["tok", "<i4", "many"]]}, "array layout"),
    ],
)
def test_a_crafted_file_with_a_valid_checksum_is_one_warning_everywhere(tmp_path, change, why):
    meta, payload = saved_parts(tmp_path)
    assert meta["proposals"] == 0
    path = store_path(IDENT, tmp_path)
    craft(path, change(meta), payload)
    ix, msg = one_warning(tmp_path)
    assert len(ix) == 0 and str(path) in msg and why in msg
    (row,) = stats(tmp_path)  # memory show
    assert why in row.problem and row.tokens == 0
    assert save(ix, IDENT, tmp_path) == path  # the run's save replaces it
    assert len(load(IDENT, directory=tmp_path)) == 0 and stats(tmp_path)[0].problem == ""
    craft(path, change(meta), payload)
    assert clear(directory=tmp_path) == [path]  # memory clear


# -- 4. the temporary file ----------------------------------------------------------------
PLANTER = textwrap.dedent("""
    import os, sys
    store, victim, pid = sys.argv[1], sys.argv[2], sys.argv[3]
    names = [os.path.join(os.path.dirname(store), os.path.basename(store) + ".tmp-" + pid)]
    print("planting", flush=True)
    while True:  # re-plant the link the moment a save removes it
        for name in names:
            try:
                os.symlink(victim, name)
            except FileExistsError:
                pass
""")


def test_a_link_planted_at_a_temporary_name_is_never_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep me")
    store = tmp_path / "store"
    store.mkdir(mode=0o700)
    path = store_path(IDENT, store)
    planter = subprocess.Popen(
        [sys.executable, "-c", PLANTER, str(path), str(victim), str(os.getpid())], stdout=subprocess.PIPE, text=True
    )
    try:
        assert planter.stdout.readline().strip() == "planting"
        for _ in range(300):
            try:
                save(sample(), IDENT, store)
            except (OSError, MemoryStoreError):
                pass  # (the old save could trip over the link; what matters is the victim)
            assert victim.read_text() == "keep me"
    finally:
        planter.kill()
        planter.wait(timeout=30)
    assert texts(load(IDENT, directory=store)) == texts(sample())
    assert not path.is_symlink() and path.stat().st_mode & 0o777 == 0o600


def test_the_temporary_file_is_created_exclusively_with_a_unique_name(tmp_path, monkeypatch):
    made = []
    real = store_files.tempfile.mkstemp

    def mkstemp(*a, **k):
        made.append(real(*a, **k))
        return made[-1]

    monkeypatch.setattr(store_files.tempfile, "mkstemp", mkstemp)
    save(sample(), IDENT, tmp_path)
    save(sample(), IDENT, tmp_path)
    names = [Path(name).name for _, name in made]
    assert len(set(names)) == 2 and all(n.startswith(store_path(IDENT, tmp_path).name + ".tmp-") for n in names)
    assert not list(tmp_path.glob("*.tmp-*"))


# -- 5. the folder and the owner ------------------------------------------------------------
def test_a_folder_others_may_write_is_refused_in_one_line(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    save(sample(), IDENT, shared)
    os.chmod(shared, 0o1777)  # like /tmp
    ix, msg = one_warning(shared)
    assert len(ix) == 0 and str(shared) in msg and "writable by others" in msg
    assert save(ix, IDENT, shared) is None  # said once, at the load
    with pytest.raises(MemoryStoreError, match="writable by others"):
        save(sample(), IDENT, shared)
    for command in (["memory", "show"], ["memory", "clear", "--yes"]):
        r = edgespec(shared, *command)
        no_traceback(r)
        assert r.returncode == 1 and "writable by others" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert store_path(IDENT, shared).exists()  # nothing written, nothing removed


@pytest.mark.skipif(not ROOT, reason="giving a file to another user needs root")
def test_a_store_or_folder_another_user_owns_is_refused(tmp_path):
    save(sample(), IDENT, tmp_path)
    os.chown(store_path(IDENT, tmp_path), 12345, 12345)
    _, msg = one_warning(tmp_path)
    assert "owned by another user (uid 12345)" in msg
    os.chown(tmp_path, 12345, 12345)
    _, msg = one_warning(tmp_path)
    assert str(tmp_path) in msg and "owned by another user" in msg


def test_folders_are_created_0700_under_any_umask(tmp_path):
    old = os.umask(0)
    try:
        save(sample(), IDENT, tmp_path / "a" / "b")
    finally:
        os.umask(old)
    assert [oct(p.stat().st_mode & 0o777) for p in (tmp_path / "a", tmp_path / "a" / "b")] == ["0o700"] * 2
    assert store_path(IDENT, tmp_path / "a" / "b").stat().st_mode & 0o777 == 0o600


# -- 8. a folder at the store's name, a read-only folder -------------------------------------------
def test_a_folder_at_the_store_is_one_warning_and_clear_says_it(tmp_path):
    path = store_path(IDENT, tmp_path)
    path.mkdir()
    ix, msg = one_warning(tmp_path)
    assert "is a folder" in msg and "not saved" in msg and "previous one is kept" not in msg
    assert save(add(ix, [1, 2]), IDENT, tmp_path) is None
    assert not list(tmp_path.glob("*.tmp-*")) and path.is_dir()
    (row,) = stats(tmp_path)
    assert "a folder" in row.problem
    with pytest.raises(MemoryStoreError, match="is a folder, not removed"):
        clear(directory=tmp_path)
    r = edgespec(tmp_path, "memory", "clear", "--yes")
    no_traceback(r)
    assert r.returncode == 1 and "is a folder" in r.stderr


def test_a_folder_at_a_temporary_name_does_not_block_saves(tmp_path):
    path = store_path(IDENT, tmp_path)
    (tmp_path / f"{path.name}.tmp-1").mkdir()
    (tmp_path / f"{path.name}.tmp-{os.getpid()}").mkdir()
    assert save(sample(), IDENT, tmp_path) == path and texts(load(IDENT, directory=tmp_path)) == texts(sample())


def test_clear_on_a_folder_it_cannot_write_is_one_line(tmp_path, monkeypatch):
    save(sample(), IDENT, tmp_path)

    def read_only(path, *a, **k):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(suffix_store.os, "unlink", read_only)
    with pytest.raises(MemoryStoreError, match="could not be removed .Read-only file system"):
        clear(directory=tmp_path)


# -- 9. the cap ---------------------------------------------------------------------------------
def test_a_cap_beyond_the_store_is_refused_at_save_not_an_overflow(tmp_path):
    from edgespec.cli.memory_options import MAX_CAP, MemoryOptions
    from edgespec.errors import InputError

    assert MAX_CAP == suffix_store.MAX_CAP
    with pytest.raises(MemoryStoreError, match="cannot hold a cap of"):
        save(SuffixIndex(suffix_store.MAX_CAP + 1), IDENT, tmp_path)
    with pytest.raises(InputError, match="--memory-cap must be from 1"):
        MemoryOptions(cap=10_000_000_000_000_000_000)


# -- 10. a newer edgespec's file ---------------------------------------------------------------------
def test_a_newer_editions_file_is_never_replaced(tmp_path):
    meta, payload = saved_parts(tmp_path)
    path = store_path(IDENT, tmp_path)
    craft(path, meta, payload, version=suffix_store.FORMAT_VERSION + 1)
    before = path.read_bytes()
    ix, msg = one_warning(tmp_path)
    assert "newer edgespec" in msg and "not saved" in msg
    assert save(add(ix, [1, 2, 3]), IDENT, tmp_path) is None  # the load's line said it
    with pytest.raises(MemoryStoreError, match="newer edgespec"):
        save(sample(), IDENT, tmp_path)
    assert path.read_bytes() == before


# -- 11. a foreign file's model names ------------------------------------------------------------------
def test_a_foreign_files_model_names_do_not_carry_over(tmp_path):
    other = save(sample(), "other-tokenizer", tmp_path, model="other-model")
    os.replace(other, store_path(IDENT, tmp_path))
    (row,) = stats(tmp_path)
    assert "another tokenizer" in row.problem and row.models == ()  # not offered to clear --model other-model
    ix, _ = one_warning(tmp_path)
    save(ix, IDENT, tmp_path, model="qwen")
    (row,) = stats(tmp_path)
    assert row.models == ("qwen",) and row.identity == IDENT


# -- 15. messages ----------------------------------------------------------------------------------------
def test_a_memory_dir_that_is_a_file_says_so(tmp_path):
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    _, msg = one_warning(not_a_folder)
    assert f"{not_a_folder} is a file, not a folder" in msg and "File exists" not in msg
    with pytest.raises(MemoryStoreError, match="is a file, not a folder"):
        save(sample(), IDENT, not_a_folder)
    r = edgespec(not_a_folder, "memory", "show")
    no_traceback(r)
    assert r.returncode == 1 and "is a file, not a folder" in r.stderr


def test_a_dangling_link_at_the_store_is_shown_and_cleared(tmp_path):
    path = store_path(IDENT, tmp_path)
    path.symlink_to(tmp_path / "nowhere")
    (row,) = stats(tmp_path)
    assert row.path == path and "symbolic link" in row.problem
    _, msg = one_warning(tmp_path)
    assert "symbolic link" in msg
    assert clear(directory=tmp_path) == [path] and not os.path.lexists(path)


def test_a_link_at_the_store_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.essuffix.real"
    save(sample(docs=((8, 8, 8),)), IDENT, tmp_path / "elsewhere")
    os.replace(store_path(IDENT, tmp_path / "elsewhere"), victim)
    before = victim.read_bytes()
    store_path(IDENT, tmp_path).symlink_to(victim)
    ix, msg = one_warning(tmp_path)
    assert len(ix) == 0 and "symbolic link" in msg
    save(add(ix, [1, 2]), IDENT, tmp_path)
    assert victim.read_bytes() == before and not store_path(IDENT, tmp_path).is_symlink()
    assert texts(load(IDENT, directory=tmp_path)) == [[1, 2]]


# -- 13, 14. what the docs say of the keys' memories and of /metrics ---------------------------------------
DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_the_docs_agree_that_each_keys_memory_learns_its_own_rates():
    """server-safety.md said the memory's worth "is learned from every request, across
    keys"; memory.md (and the code: SuffixIndex.rates, tests/test_memory.py) say each key's
    memory learns its own."""
    safety = " ".join((DOCS / "server-safety.md").read_text().split())
    memory = " ".join((DOCS / "memory.md").read_text().split())
    assert "is learned from every request, across keys" not in safety
    assert "belongs to each key's memory" in safety and "each API key's memory in `serve` learns its own" in memory


def test_the_metrics_that_show_the_memories_are_documented_as_shared():
    """Every /metrics series that moves with a memory's activity, any key's, is listed in
    docs/memory.md as shared (and server-safety.md says /metrics is shared)."""
    from edgespec.events import Stats
    from edgespec.server.metrics import Metrics

    metrics = Metrics()
    before = metrics.render()
    metrics.memories = lambda: (2, 50)
    st = Stats(drafter="ngram", rounds=1, drafted=4, accepted=3, generated_tokens=4)
    st.drafted_by_source, st.accepted_by_source = {"memory": 4}, {"memory": 3}
    metrics.observe_generation(st)
    after = metrics.render()

    def values(text):
        return {
            line.rsplit(" ", 1)[0]: line.rsplit(" ", 1)[1]
            for line in text.splitlines()
            if line and not line.startswith("#")
        }

    moved = {name for name, v in values(after).items() if values(before).get(name) != v}
    memory_series = {name for name in moved if "memory" in name}
    assert {
        'edgespec_draft_tokens_by_source_total{source="memory"}',
        "edgespec_memory_keys",
        "edgespec_memory_tokens",
    } <= memory_series
    doc = (DOCS / "memory.md").read_text()
    shared = doc[doc.index("**`/metrics` is shared**") : doc.index("A memory shared by several users")]
    for name in memory_series | {n for n in moved if n.startswith("edgespec_draft")}:
        assert f"`{name.split('{')[0]}" in shared, name
    assert "**`/metrics` is shared.**" in (DOCS / "server-safety.md").read_text()
