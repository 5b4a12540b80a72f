"""The memory store when runs meet (issue 34, "the memory store" items 6, 7 and 12): two runs
on one store keep both runs' answers, concurrent saves neither fail nor lose each other's, a save
waits for the lock and never hangs, a clear during a run wins over the run's save, and SIGTERM
saves the memory as Ctrl-C does. The hostile folder and files are tests/test_memory_hostile.py."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import warnings

import pytest

from edgespec.decoding import store_files, suffix_merge, suffix_store
from edgespec.decoding.suffix import SuffixIndex
from edgespec.decoding.suffix_store import clear, load, save, stats, store_path
from edgespec.errors import MemoryStoreError
from test_memory_hostile import add
from test_suffix_store import IDENT, sample, texts


# -- 6. two runs on one store ---------------------------------------------------------------
def test_two_runs_on_one_store_keep_both_runs_answers(tmp_path):
    save(sample(), IDENT, tmp_path)
    a, b = load(IDENT, directory=tmp_path), load(IDENT, directory=tmp_path)
    add(a, [40, 41, 42])
    add(b, [50, 51, 52])
    a.proposals += 3
    b.proposals += 5
    save(b, IDENT, tmp_path)
    save(a, IDENT, tmp_path)
    back = load(IDENT, directory=tmp_path)
    assert texts(back) == [*texts(sample()), [40, 41, 42], [50, 51, 52]]  # nothing twice, nothing lost
    assert back.proposals == 8
    c = load(IDENT, directory=tmp_path)  # a third run, and one that started cold, merge by content
    cold = add(SuffixIndex(1000), [60, 61])
    suffix_merge.ORIGINS[cold] = suffix_merge.Origin(generation=0)
    add(c, [70])
    save(cold, IDENT, tmp_path)
    save(c, IDENT, tmp_path)
    assert sorted(map(tuple, texts(load(IDENT, directory=tmp_path)))) == sorted(
        map(tuple, [*texts(sample()), [40, 41, 42], [50, 51, 52], [60, 61], [70]])
    )


def test_a_run_alone_saves_exactly_its_index_even_from_a_file_without_a_lineage(tmp_path, monkeypatch):
    """A file an earlier edgespec wrote has no lineage: saved back by the one run that
    loaded it, the answers that run dropped at its cap do not come back from the file."""
    real = suffix_store.json.dumps
    monkeypatch.setattr(
        suffix_store.json,
        "dumps",
        lambda o, *a, **k: real({n: v for n, v in o.items() if n != "lineage"} if isinstance(o, dict) else o, *a, **k),
    )
    save(sample(cap=14), IDENT, tmp_path)
    monkeypatch.undo()
    run = add(load(IDENT, directory=tmp_path), [30, 31, 32, 33, 34])  # drops the oldest document
    held = texts(run)
    save(run, IDENT, tmp_path)
    assert texts(load(IDENT, directory=tmp_path)) == held and [1, 2, 3, 4, 5] not in held


SAVER = textwrap.dedent("""
    import sys, pathlib
    from edgespec.decoding import suffix_store
    d, mark = pathlib.Path(sys.argv[1]), int(sys.argv[2])
    for i in range(15):
        ix = suffix_store.load("ident", directory=d)
        doc = ix.open(); ix.extend(doc, [mark, i, mark]); ix.close(doc)
        suffix_store.save(ix, "ident", d)
    print("done", flush=True)
""")


def test_concurrent_saves_neither_fail_nor_lose_each_others_answers(tmp_path):
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", SAVER, str(tmp_path), str(mark)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for mark in (100, 200)
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    assert all(p.returncode == 0 for p in procs), [err for _, err in outs]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        held = {tuple(t) for t in texts(load("ident", directory=tmp_path))}
    assert held == {(mark, i, mark) for mark in (100, 200) for i in range(15)}
    assert not list(tmp_path.glob("*.tmp-*"))


def test_a_save_waits_for_the_lock_and_never_hangs(tmp_path, monkeypatch):
    path = store_path(IDENT, tmp_path)
    save(sample(), IDENT, tmp_path)
    done = []
    with store_files.StoreLock(path, exclusive=True):
        t = threading.Thread(target=lambda: done.append(save(sample(), IDENT, tmp_path)))
        t.start()
        time.sleep(0.5)
        assert not done  # waiting for the lock
    t.join(timeout=30)
    assert done == [path]
    monkeypatch.setattr(store_files, "LOCK_WAIT", 0.2)
    with store_files.StoreLock(path, exclusive=True):
        t0 = time.monotonic()
        with pytest.raises(MemoryStoreError, match=r"\.lock is held by another process"):
            save(sample(), IDENT, tmp_path)
    assert time.monotonic() - t0 < 10


# -- 7. clear during a run --------------------------------------------------------------------
def test_clear_during_a_run_wins_over_the_runs_save(tmp_path):
    save(sample(), IDENT, tmp_path)
    run = add(load(IDENT, directory=tmp_path), [9, 9, 9])
    assert clear(IDENT, tmp_path) == [store_path(IDENT, tmp_path)]
    with pytest.raises(MemoryStoreError, match="cleared .* while this run went on") as e:
        save(run, IDENT, tmp_path)
    assert str(store_path(IDENT, tmp_path)) in str(e.value)
    assert not store_path(IDENT, tmp_path).exists() and stats(tmp_path) == []
    fresh = add(load(IDENT, directory=tmp_path), [1])  # a run that starts after the clear saves
    assert save(fresh, IDENT, tmp_path) and texts(load(IDENT, directory=tmp_path)) == [[1]]


# -- 12. SIGTERM ---------------------------------------------------------------------------------------
RUN = textwrap.dedent("""
    import sys, time
    from rich.console import Console
    from edgespec.cli import memory_options
    from edgespec.decoding.suffix import SuffixIndex

    class Engine:
        memory = SuffixIndex(1000)
        target_path = "model.gguf"

    memory_options.tokenizer_identity = lambda path: "ident"
    engine = Engine()
    with memory_options.remembering(engine, memory_options.MemoryOptions(remember=True), err=Console(stderr=True)):
        doc = engine.memory.open(); engine.memory.extend(doc, [5, 6, 7]); engine.memory.close(doc)
        print("ready", flush=True)
        time.sleep(60)
""")


def test_sigterm_saves_the_memory_as_ctrl_c_does(tmp_path):
    env = {**os.environ, "EDGESPEC_MEMORY_DIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 143, err
    assert "memory: saved 3 tokens" in err and "Traceback" not in err
    assert texts(load("ident", directory=tmp_path)) == [[5, 6, 7]]
