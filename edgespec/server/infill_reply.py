"""The answer of one ``/infill`` request, in llama-server's shape, from the engine's events.

llama-server answers ``/infill`` as it answers ``/completion`` (not OpenAI's shape)::

    {"index": 0, "content": "...", "tokens": [], "id_slot": 0, "stop": true, "model": ...,
     "tokens_predicted": N, "tokens_evaluated": M, "generation_settings": {...},
     "prompt": "...", "has_new_line": bool, "truncated": bool,
     "stop_type": "eos" | "word" | "limit", "stopping_word": "...", "tokens_cached": N,
     "timings": {"cache_n", "prompt_n", "prompt_ms", ..., "predicted_per_second", "draft_n", ...}}

streamed as ``data:`` events of ``{"index", "content", "tokens", "stop": false,
"id_slot": -1, "tokens_predicted", "tokens_evaluated"}``, then the whole object above with
an empty ``content`` (no ``[DONE]``: llama-server ends its own streams so). ``response_fields``
keeps only the paths it lists (``"timings/prompt_n"``, flat, as llama-server's
``json_get_nested_values``).

``InfillReply`` also holds llama-server's two rules that end an infill early, which the
engine does not know: ``t_max_predict_ms`` (once that long has passed since the first
token, the reply ends at the next token that holds a newline, that token included) and
``n_indent`` (a new line indented less than that ends the reply, cut where its text
starts). Such a cut ends the request (``cut`` turns true; the app cancels the job), and
its figures are the reply's own: the tokens it received, its clock from the first token,
and the prompt tokens processed as the worker saw the KV cache when the job started
(``Started.cached``). ``truncated`` is llama-server's: the context filled up before the
reply ended. A middle that stopped at the suffix's first line (``fim.suffix_stop``) keeps
the newline before it (``tail``). Knows nothing of routes or of the worker's thread.
"""

from __future__ import annotations

import time
from typing import Any

from edgespec.events import Done, Round, Token
from edgespec.llama.fim import keeps_newline


class InfillReply:
    """Builds the responses of one infill generation; ``feed`` each event."""

    def __init__(
        self,
        *,
        req: Any,
        ids: list[int],
        model_id: str,
        engine: Any,
        max_tokens: int,
        cached: int | None,
        options: dict,
    ) -> None:
        self.req = req
        self.ids = ids
        self.model_id = model_id
        self.engine = engine
        self.max_tokens = max_tokens
        self.options = options
        self.cached = cached
        self.t_start = time.perf_counter()
        self.t_first: float | None = None
        self.text = ""
        self.tokens: list[int] = []
        self.drafted = self.accepted = 0
        self.done: Done | None = None
        self.cut = False  # ended by t_max_predict_ms or n_indent, not by the engine
        self._nl_pos = 0  # where the line being checked for n_indent starts (0: none yet)
        self._pending_ids: list[int] = []

    # -- events ---------------------------------------------------------------------
    def feed(self, event: Any) -> str:
        """Take one event; the new text it adds (what a stream sends now)."""
        if isinstance(event, Round):
            self.drafted += event.drafted
            self.accepted += event.accepted
            return ""
        if isinstance(event, Done):
            self.done = event
            return ""
        if not isinstance(event, Token) or self.cut:
            return ""
        now = time.perf_counter()
        if self.t_first is None:
            self.t_first = now
        if event.id >= 0:
            self.tokens.append(event.id)
            self._pending_ids.append(event.id)
        before = len(self.text)
        self.text += event.text
        self._check_indent()
        limit = self.req.t_max_predict_ms
        if not self.cut and limit and "\n" in event.text and (now - self.t_first) * 1000 > limit:
            self.cut = True
        return self.text[before:]

    def _check_indent(self) -> None:
        """llama-server's ``n_indent``: each line after the first newline must be indented
        at least that much once its text begins; the first that is not is cut off."""
        need = self.req.n_indent or 0
        if need <= 0:
            return
        while True:
            if self._nl_pos > 0:
                pos = self._nl_pos
                while pos < len(self.text) and self.text[pos] in " \t":
                    pos += 1
                if pos < len(self.text) and pos - self._nl_pos < need:
                    self.text = self.text[:pos]
                    self.cut = True
                    return
            nl = self.text.find("\n", self._nl_pos)
            if nl < 0:
                return
            self._nl_pos = nl + 1

    def tail(self) -> str:
        """The newline a middle cut at the suffix's first line keeps (``fim.keeps_newline``:
        the stop string took it, but it ends the middle), else ""."""
        stop_type, word = self._stop()
        return "\n" if stop_type == "word" and keeps_newline(self.req.input_suffix, word) else ""

    def take_ids(self) -> list[int]:
        ids, self._pending_ids = self._pending_ids, []
        return ids

    # -- how it ended -----------------------------------------------------------------
    def _stop(self) -> tuple[str, str]:
        """llama-server's ``stop_type`` and ``stopping_word``."""
        done = self.done
        if self.cut or done is None:
            return "limit", ""
        if done.finish_reason != "stop":
            return "limit", ""
        written = self.engine.target_model.detokenize(done.token_ids)
        if len(written) > len(done.text) and written.startswith(done.text):
            rest = written[len(done.text) :]
            for stop in self.options.get("stop") or ():
                if rest.startswith(stop):
                    return "word", stop
            return "word", ""
        return "eos", ""

    def timings(self) -> dict:
        done = self.done
        if done is not None and not self.cut:
            st = done.stats
            n_prompt, t_prompt = st.prompt_tokens_processed, st.t_prompt
            n_gen, t_gen = st.generated_tokens, st.t_generate
            drafted, accepted = st.drafted, st.accepted
        else:  # cut here: the reply's own clock and counts
            now = time.perf_counter()
            first = self.t_first or now
            n_prompt = len(self.ids) - (self.cached or 0)
            t_prompt, t_gen = first - self.t_start, now - first
            n_gen, drafted, accepted = len(self.tokens), self.drafted, self.accepted
        out = {
            "cache_n": len(self.ids) - n_prompt,
            "prompt_n": n_prompt,
            "prompt_ms": round(t_prompt * 1000, 3),
            "prompt_per_token_ms": round(t_prompt * 1000 / n_prompt, 3) if n_prompt else 0.0,
            "prompt_per_second": round(n_prompt / t_prompt, 3) if t_prompt > 0 else 0.0,
            "predicted_n": n_gen,
            "predicted_ms": round(t_gen * 1000, 3),
            "predicted_per_token_ms": round(t_gen * 1000 / n_gen, 3) if n_gen else 0.0,
            "predicted_per_second": round(n_gen / t_gen, 3) if t_gen > 0 else 0.0,
        }
        if drafted:
            out.update(draft_n=drafted, draft_n_accepted=accepted)
        return out

    def _truncated(self) -> bool:
        """The context filled up before the reply ended (llama-server's ``truncated``)."""
        done = self.done
        return (
            done is not None
            and not self.cut
            and done.finish_reason == "length"
            and len(done.token_ids) < self.max_tokens
        )

    def settings(self) -> dict:
        opts = self.options
        return {
            "n_ctx": self.engine.n_ctx,
            "n_predict": self.max_tokens,
            "temperature": opts.get("temperature"),
            "top_k": opts.get("top_k"),
            "top_p": opts.get("top_p"),
            "min_p": opts.get("min_p"),
            "seed": opts.get("seed"),
            "stop": list(opts.get("stop") or ()),
            "n_indent": self.req.n_indent or 0,
            "t_max_predict_ms": self.req.t_max_predict_ms or -1,
            "stream": self.req.stream,
            "model": self.model_id,
        }

    # -- bodies -----------------------------------------------------------------------
    def chunk(self, text: str) -> dict:
        """A streamed piece."""
        return {
            "index": 0,
            "content": text,
            "tokens": self.take_ids() if self.req.return_tokens else [],
            "stop": False,
            "id_slot": -1,
            "tokens_predicted": len(self.tokens),
            "tokens_evaluated": len(self.ids),
        }

    def final(self, *, streamed: bool) -> dict:
        """The last object: the whole answer (its text empty when it was streamed)."""
        text = self.text if self.cut or self.done is None else self.done.text
        stop_type, word = self._stop()
        if not streamed:
            text += self.tail()
        n_gen = len(self.tokens) if self.cut or self.done is None else len(self.done.token_ids)
        body = {
            "index": 0,
            "content": "" if streamed else text,
            "tokens": list(self.tokens) if self.req.return_tokens and not streamed else [],
            "id_slot": 0,
            "stop": True,
            "model": self.model_id,
            "tokens_predicted": n_gen,
            "tokens_evaluated": len(self.ids),
            "generation_settings": self.settings(),
            "prompt": self.engine.target_model.detokenize(self.ids, special=True),
            "has_new_line": "\n" in text,
            "truncated": self._truncated(),
            "stop_type": stop_type,
            "stopping_word": word,
            "tokens_cached": len(self.ids) + n_gen,
            "timings": self.timings(),
        }
        return nested_values(self.req.response_fields, body) if self.req.response_fields else body


def nested_values(paths: list[str], body: dict) -> dict:
    """llama-server's ``response_fields``: each path (``a/b``) that exists, flat."""
    out: dict = {}
    for path in paths:
        value: Any = body
        for key in path.split("/"):
            if not isinstance(value, dict) or key not in value:
                break
            value = value[key]
        else:
            out[path] = value
    return out
