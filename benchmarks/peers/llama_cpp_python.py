"""llama-cpp-python's high-level ``Llama`` as a peer: what a Python user of llama.cpp runs
today, with its defaults (its fast CPU kernels included), one token per step. With a JSON
Schema it samples under the schema's GBNF grammar (``response_format``).

Its speed is generated tokens over the time from the first sampled token to the last
(prompt processing excluded, like edgespec's figures)."""

from __future__ import annotations

import time
from pathlib import Path


class LlamaCppPython:
    """llama-cpp-python's high-level ``Llama``, greedy, timed per sampled token."""

    def __init__(self, target: Path, threads: int, n_ctx: int) -> None:
        from llama_cpp import Llama

        self.llm = Llama(
            model_path=str(target), n_ctx=n_ctx, n_threads=threads, n_threads_batch=threads, verbose=False, seed=0
        )
        self._times: list[float] = []
        sample = self.llm.sample

        def timed_sample(*args, **kwargs):  # one call per generated token
            token = sample(*args, **kwargs)
            self._times.append(time.perf_counter())
            return token

        self.llm.sample = timed_sample

    def run(self, prompt: str, max_tokens: int, schema: dict | None = None) -> dict:
        """One greedy chat completion of the user message ``prompt``, under ``schema``
        (its GBNF grammar) when one is given: {"text", "finish_reason", "tokens",
        "seconds", "tokens_per_second"}, the time from the first sampled token to the last."""
        self._times.clear()
        fmt = {"response_format": {"type": "json_object", "schema": schema}} if schema is not None else {}
        out = self.llm.create_chat_completion(
            messages=[{"role": "user", "content": prompt}],
            **fmt,
            temperature=0.0,
            top_k=1,
            top_p=1.0,
            min_p=0.0,
            repeat_penalty=1.0,
            max_tokens=max_tokens,
        )
        t = self._times
        secs = t[-1] - t[0] if len(t) > 1 else 0.0
        return {
            "text": out["choices"][0]["message"]["content"] or "",
            "finish_reason": out["choices"][0]["finish_reason"],
            "tokens": out["usage"]["completion_tokens"],
            "seconds": secs,
            "tokens_per_second": (len(t) - 1) / secs if secs > 0 else 0.0,
        }
