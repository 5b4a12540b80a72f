"""How many sequences a batch may hold (edgespec.batching.run.check_parallel): llama.cpp's
limit on sequences per context and the memory their KV cache takes, on a tiny model."""

from __future__ import annotations

import pytest

from edgespec import Engine
from edgespec.batching.run import check_parallel, kv_room
from edgespec.batching.runner import BatchRunner
from edgespec.detect import LocalProbe
from edgespec.errors import InputError
from edgespec.llama import LLAMA_MAX_SEQ, max_parallel_sequences


@pytest.fixture(scope="module")
def engine(tiny_target, engines):
    return engines(tiny_target, exact=False)


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


class _Offloaded:
    """An engine whose target keeps ``share`` of its KV cache on a GPU with ``free`` bytes
    free (this machine has no GPU: the model's two figures stand in for llama.cpp's)."""

    def __init__(self, engine, share: float, free: int | None):
        model = engine.target_model
        self.target_model = type(
            "M",
            (),
            {
                "kv_bytes_per_token": model.kv_bytes_per_token,
                "kv_device_share": share,
                "device_free_bytes": lambda s: free,
            },
        )()


def test_the_kv_memory_rule_applies_where_the_kv_cache_lives(engine, monkeypatch):
    # issue 28 item 6: an explicit --parallel was held to half the free RAM with the KV cache on a GPU
    per_seq = engine.n_ctx * engine.target_model.kv_bytes_per_token
    monkeypatch.setattr(LocalProbe, "memory", lambda self: (64 << 30, 2 * per_seq))  # RAM: room for 1
    on_gpu = _Offloaded(engine, 1.0, 100 * per_seq)  # the GPU: room for 50
    check_parallel(on_gpu, 50, engine.n_ctx)
    assert kv_room(on_gpu, engine.n_ctx) == 50
    with pytest.raises(InputError, match=r"--parallel 51 needs .* of the GPU's free memory .* holds 50"):
        check_parallel(on_gpu, 51, engine.n_ctx)
    # RAM to spare does not make room on a small GPU
    monkeypatch.setattr(LocalProbe, "memory", lambda self: (64 << 30, 1000 * per_seq))
    small = _Offloaded(engine, 1.0, 4 * per_seq)
    with pytest.raises(InputError, match="GPU's free memory"):
        check_parallel(small, 3, engine.n_ctx)
    # half the layers offloaded: half of each sequence's KV cache on each side
    half = _Offloaded(engine, 0.5, 4 * per_seq)
    check_parallel(half, 4, engine.n_ctx)
    with pytest.raises(InputError, match=r"needs .* \(5 sequences.*GPU's free memory"):
        check_parallel(half, 5, engine.n_ctx)
    # a GPU that does not say what is free: only RAM's share is checked
    check_parallel(_Offloaded(engine, 1.0, None), 200, engine.n_ctx)


def test_a_model_says_where_its_kv_cache_lives(tiny_target, monkeypatch):
    from edgespec.llama import Model
    from edgespec.llama import model as model_module

    with Engine(tiny_target, draft=None, n_ctx=64, n_threads=1) as cpu:
        assert cpu.target_model.kv_device_share == 0.0  # n_gpu_layers 0: all in RAM
    monkeypatch.setattr(model_module, "_supports_gpu_offload", lambda: True)
    every, none = Model(tiny_target, n_gpu_layers=-1), Model(tiny_target, n_gpu_layers=0)
    try:
        assert every.kv_device_share == 1.0 and none.kv_device_share == 0.0
        if every.n_layer >= 2:
            part = Model(tiny_target, n_gpu_layers=1)
            assert part.kv_device_share == pytest.approx(1 / every.n_layer)
            part.close()
    finally:
        every.close()
        none.close()
    monkeypatch.setattr(model_module, "_supports_gpu_offload", lambda: False)
    m = Model(tiny_target, n_gpu_layers=-1)
    try:
        assert m.kv_device_share == 0.0  # a CPU build keeps every layer here
        assert m.device_free_bytes() is None or m.device_free_bytes() > 0
    finally:
        m.close()


def test_the_batch_cost_is_the_engine_s_across_its_batches(engine):
    # issue 27: each generate_many began again from the prior, so a job's batches never
    # learned from each other (and a short one learned from its own few steps alone)
    cost = engine.batch_cost()
    assert cost is engine.batch_cost()
    assert cost(4) == pytest.approx(engine.batch_cost_prior()(4))
    prompts = [f"Count to {n}:" for n in range(3, 9)]
    list(engine.generate_many(prompts, parallel=3, max_tokens=6, temperature=0.0))
    seen = cost.count
    assert seen > 0  # the steps of the first batch were timed into it
    list(engine.generate_many(prompts, parallel=2, max_tokens=6, temperature=0.0))
    assert engine.batch_cost() is cost and cost.count > seen
    runner = BatchRunner(engine, 2, n_ctx_seq=64)
    try:
        assert runner.cost is cost
    finally:
        runner.close()
