"""The memory store against the second hostile review (issue 46): a symbolic link another
user plants on the store folder's path (in a sticky shared folder like /tmp) or a folder
on that path that is not the user's or root's alone; a lock file that is a hard or
symbolic link to another file, refused at the run's start and never written; ``memory
show`` printing a crafted file's names and reasons with their control characters as
escapes, and counters that contradict each other as a corrupt file; a newer edgespec's
file that says on every run how to remove it; a ``--memory-cap`` below what the store
holds, said at the start. The first review's cases are tests/test_memory_hostile.py."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import uuid
import warnings
from pathlib import Path

import pytest
from rich.console import Console

from edgespec.decoding import store_files, suffix_store
from edgespec.decoding.suffix import SuffixIndex
from edgespec.decoding.suffix_store import clear, load, save, stats, store_path
from edgespec.errors import MemoryStoreError
from test_memory_hostile import ROOT, add, craft, edgespec, no_traceback, one_warning, saved_parts
from test_suffix_store import IDENT, sample, texts


@pytest.fixture()
def shared(tmp_path):
    """``shared(name)``: a path in a sticky folder every user may write, root's (as /tmp):
    a folder of the test's own where the test runs as root, else /tmp itself (the name
    made unique there, and removed after)."""
    if ROOT:
        folder = tmp_path / "shared"
        folder.mkdir()
        os.chmod(folder, 0o1777)
        yield lambda name: folder / name
        return
    st = os.stat("/tmp")
    if not (st.st_mode & stat.S_ISVTX and st.st_mode & 0o002 and st.st_uid == 0):
        pytest.skip("needs a sticky world-writable /tmp of root's")
    made: list[Path] = []
    yield lambda name: made.append(Path("/tmp") / f"{name}-{uuid.uuid4().hex[:12]}") or made[-1]
    for p in made:
        if p.is_symlink():
            p.unlink()
        elif p.is_dir():
            shutil.rmtree(p)


def victim_folder(tmp_path: Path) -> tuple[Path, bytes]:
    """A 0700 folder of the user's with a store and an unrelated ``.essuffix`` file."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700, parents=True)
    save(sample(), IDENT, victim)
    (victim / "notes.essuffix").write_text("not a store")
    return victim, store_path(IDENT, victim).read_bytes()


def untouched(victim: Path, before: bytes) -> bool:
    return store_path(IDENT, victim).read_bytes() == before and (victim / "notes.essuffix").exists()


# -- 1. the folder's path ------------------------------------------------------------------------
@pytest.mark.parametrize("where", ["the folder", "a folder on its path"])
def test_a_link_planted_in_a_sticky_shared_folder_is_never_followed(tmp_path, shared, where):
    victim, before = victim_folder(tmp_path)
    link = shared("edgespec-memory")
    if where == "the folder":
        link.symlink_to(victim)
        directory = link
    else:
        link.symlink_to(tmp_path)
        directory = link / "victim"
    ix, msg = one_warning(directory)
    assert len(ix) == 0 and str(link) in msg and "symbolic link" in msg and "EDGESPEC_MEMORY_DIR" in msg
    assert save(add(ix, [1, 2]), IDENT, directory) is None  # the load said it, once
    with pytest.raises(MemoryStoreError, match="symbolic link"):
        save(sample(docs=((9, 9, 9),)), IDENT, directory)
    with pytest.raises(MemoryStoreError, match="symbolic link"):
        stats(directory)
    with pytest.raises(MemoryStoreError, match="symbolic link"):
        clear(directory=directory)
    for command in (["memory", "show"], ["memory", "clear", "--yes"]):
        r = edgespec(directory, *command)
        no_traceback(r)
        assert r.returncode == 1 and str(link) in r.stderr and len(r.stderr.strip().splitlines()) == 1
        assert "removed" not in r.stdout
    assert untouched(victim, before) and sorted(p.name for p in victim.glob("*.essuffix*")) == sorted(
        [store_path(IDENT, victim).name, store_path(IDENT, victim).name + ".lock", "notes.essuffix"]
    )


def test_a_folder_of_its_own_in_a_sticky_shared_folder_is_used(shared):
    mine = shared("edgespec-mine")
    assert save(sample(), IDENT, mine) == store_path(IDENT, mine)  # created 0700, then used
    assert oct(mine.stat().st_mode & 0o777) == "0o700" and texts(load(IDENT, directory=mine)) == texts(sample())
    assert clear(directory=mine) == [store_path(IDENT, mine)]


def test_a_link_in_a_folder_nobody_else_may_write_is_followed(tmp_path):
    """(~/.cache kept elsewhere: a link of the user's own is checked where it leads.)"""
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        save(sample(), IDENT, tmp_path / "alias")
        assert texts(load(IDENT, directory=tmp_path / "alias/../alias")) == texts(sample())
    assert store_path(IDENT, tmp_path / "real").exists()


def test_a_parent_others_may_write_is_refused(tmp_path):
    victim, before = victim_folder(tmp_path / "open")
    os.chmod(tmp_path / "open", 0o777)  # not sticky: anyone may rename "victim" away and put another in
    _, msg = one_warning(victim)
    assert f"{tmp_path / 'open'} is writable by others" in msg and "chmod go-w" in msg
    with pytest.raises(MemoryStoreError, match="writable by others"):
        clear(directory=victim)
    assert untouched(victim, before)


@pytest.mark.skipif(not ROOT, reason="giving a folder to another user needs root")
def test_a_parent_another_user_owns_is_refused(tmp_path):
    victim, before = victim_folder(tmp_path / "theirs")
    os.chown(tmp_path / "theirs", 12345, 12345)
    _, msg = one_warning(victim)
    assert f"{tmp_path / 'theirs'} is owned by another user (uid 12345)" in msg
    with pytest.raises(MemoryStoreError, match="owned by another user"):
        save(sample(), IDENT, victim)
    assert untouched(victim, before)


# -- 2. the lock file -------------------------------------------------------------------------------
@pytest.mark.parametrize("how", ["hard link", "symbolic link"])
def test_a_lock_that_links_to_another_file_is_refused_at_the_start_and_never_written(tmp_path, how):
    save(sample(), IDENT, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("IMPORTANT DATA")
    lock = store_path(IDENT, tmp_path).with_name(store_path(IDENT, tmp_path).name + store_files.LOCK_SUFFIX)
    lock.unlink()
    if how == "hard link":
        os.link(victim, lock)
    else:
        lock.symlink_to(victim)
    ix, msg = one_warning(tmp_path)  # at the load: the run's start, before its work
    assert str(lock) in msg and how in msg and "not saved" in msg
    assert save(add(ix, [1, 2]), IDENT, tmp_path) is None  # said once
    with pytest.raises(MemoryStoreError, match=how):
        clear(IDENT, tmp_path)
    r = edgespec(tmp_path, "memory", "clear", "--yes")
    no_traceback(r)
    assert r.returncode == 1 and str(lock) in r.stderr and how in r.stderr
    assert victim.read_text() == "IMPORTANT DATA" and store_path(IDENT, tmp_path).exists()


# -- 3. memory show -----------------------------------------------------------------------------------
ESCAPES = "\x1b]0;TITLE\x07\x1b[2J\x9b31m\u202e"
CONTROLS = set("\x1b\x07\x9b\u202e")


def test_memory_show_prints_a_crafted_files_control_characters_as_escapes(tmp_path):
    meta, payload = saved_parts(tmp_path)
    craft(store_path(IDENT, tmp_path), {**meta, "models": [f"qwen{ESCAPES}"]}, payload)
    craft(store_path("other", tmp_path), {**meta, "identity": "other", "cap": f"big{ESCAPES}"}, payload)
    r = edgespec(tmp_path, "memory", "show")
    no_traceback(r)
    assert r.returncode == 0 and "qwen\\x1b]0;TITLE\\x07\\x1b[2J\\x9b31m\\u202e" in r.stdout
    assert "cap is big\\x1b]0;TITLE" in r.stdout
    assert not set(r.stdout + r.stderr) & CONTROLS, repr(r.stdout)
    r = edgespec(tmp_path, "memory", "show", "--json")
    assert r.returncode == 0 and not set(r.stdout) & CONTROLS, repr(r.stdout)
    rows = json.loads(r.stdout)["stores"]
    assert [f"qwen{ESCAPES}"] in [row["models"] for row in rows]  # JSON escapes: nothing lost


@pytest.mark.parametrize(
    "counters", [{"proposals": 3, "hits": 1_000_000}, {"proposed": 2, "accepted": 5}], ids=["hits", "kept"]
)
def test_counters_that_contradict_each_other_are_a_corrupt_file(tmp_path, counters):
    meta, payload = saved_parts(tmp_path)
    path = store_path(IDENT, tmp_path)
    craft(path, {**meta, **counters}, payload)
    ix, msg = one_warning(tmp_path)
    assert len(ix) == 0 and str(path) in msg and "counters that contradict each other" in msg
    (row,) = stats(tmp_path)
    assert "contradict" in row.problem and row.proposals == 0
    r = edgespec(tmp_path, "memory", "show")
    assert r.returncode == 0 and "%" not in r.stdout.split("hit rate:")[0]  # no "33333333% of 3"
    assert save(ix, IDENT, tmp_path) == path and stats(tmp_path)[0].problem == ""  # the save replaces it


def test_a_save_never_writes_counters_its_load_would_refuse(tmp_path):
    ix = sample()
    ix.proposals, ix.hits, ix.proposed, ix.accepted_ids = 2, 5, 1, 3  # (merged counters of unrelated files)
    save(ix, IDENT, tmp_path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = load(IDENT, directory=tmp_path)
    assert (back.proposals, back.hits, back.proposed, back.accepted_ids) == (2, 2, 1, 1)


# -- 4. smaller: a newer file, a cap below the store ----------------------------------------------------
def test_a_newer_file_says_on_every_run_that_saves_are_off_and_how_to_remove_it(tmp_path):
    meta, payload = saved_parts(tmp_path)
    path = store_path(IDENT, tmp_path)
    craft(path, meta, payload, version=suffix_store.FORMAT_VERSION + (1 << 24))  # one flipped byte
    for _ in range(2):
        _, msg = one_warning(tmp_path)
        assert "not saved" in msg and "`edgespec memory clear`" in msg
    assert clear(directory=tmp_path) == [path]


class Engine:
    target_path = "model.gguf"

    def __init__(self) -> None:
        self.memory = SuffixIndex(1000)


@pytest.mark.parametrize("cap, warned", [(100, True), (500, False), (None, False)])
def test_a_memory_cap_below_the_store_says_the_store_will_shrink(tmp_path, monkeypatch, cap, warned):
    from edgespec.cli import memory_options

    save(add(SuffixIndex(1000), range(500)), "ident", tmp_path)
    monkeypatch.setenv("EDGESPEC_MEMORY_DIR", str(tmp_path))
    monkeypatch.setattr(memory_options, "tokenizer_identity", lambda path: "ident")
    err = io.StringIO()
    options = memory_options.MemoryOptions(cap=cap, remember=True)
    with memory_options.remembering(Engine(), options, err=Console(file=err, width=400)):
        said_at_start = err.getvalue()
    lines = [line for line in said_at_start.splitlines() if line.startswith("warning:")]
    if warned:
        assert len(lines) == 1 and "--memory-cap 100 is below the 500 tokens" in lines[0]
        assert "shrinks the store" in lines[0] and str(store_path("ident", tmp_path)) in lines[0]
        assert len(load("ident", directory=tmp_path)) == 100
    else:
        assert lines == [] and len(load("ident", directory=tmp_path)) == 500
