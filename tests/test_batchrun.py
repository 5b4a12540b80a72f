"""How many sequences a batch may hold (edgespec.batchrun.check_parallel): llama.cpp's
limit on sequences per context and the memory their KV cache takes, on a tiny model."""

from __future__ import annotations

import pytest

from edgespec import Engine
from edgespec.batchrun import check_parallel, kv_room
from edgespec.detect import LocalProbe
from edgespec.errors import InputError
from edgespec.llama import LLAMA_MAX_SEQ, max_parallel_sequences
from edgespec.multiseq import BatchRunner


@pytest.fixture(scope="module")
def engine(tiny_target):
    with Engine(tiny_target, draft=None, n_ctx=512, n_threads=1) as e:
        yield e


def test_llama_cpp_s_limit_comes_from_the_build():
    assert max_parallel_sequences() == LLAMA_MAX_SEQ == 256


def test_more_sequences_than_llama_cpp_holds_are_refused(engine):
    check_parallel(engine, 4, engine.n_ctx)
    with pytest.raises(InputError, match=r"--parallel 257 is more sequences than llama.cpp holds .*\(256\)"):
        check_parallel(engine, 257, engine.n_ctx)
    # the runner the server builds refuses them too, instead of a context without a reason
    with pytest.raises(InputError, match="lower --parallel"):
        BatchRunner(engine, 300, n_ctx_seq=64)


def test_a_kv_cache_beyond_the_memory_is_refused(engine, monkeypatch):
    per_seq = engine.n_ctx * engine.target_model.kv_bytes_per_token
    monkeypatch.setattr(LocalProbe, "memory", lambda self: (64 << 30, 10 * per_seq))
    assert kv_room(engine, engine.n_ctx) == 5  # half the free memory
    check_parallel(engine, 5, engine.n_ctx)
    with pytest.raises(InputError, match=r"--parallel 6 needs .* KV cache \(6 sequences of 512 tokens\).* holds 5"):
        check_parallel(engine, 6, engine.n_ctx)
    # where the free memory cannot be read, only llama.cpp's limit is checked
    monkeypatch.setattr(LocalProbe, "memory", lambda self: (None, None))
    check_parallel(engine, 200, engine.n_ctx)
