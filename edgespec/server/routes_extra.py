"""The routes beside OpenAI's: llama-server's ``/tokenize`` and ``/detokenize``, and the
server's ``system_fingerprint``.

``Api`` is what ``app.create_app`` hands to the modules that add routes (this one and
``responses_api``): the engine, the model id, and the app's own key check, body reader
and chat handler, so that every route sits behind the same key, body limit and guard.

* ``POST /tokenize`` ``{"content": text, "add_special": false, "parse_special": true,
  "with_pieces": false}`` -> ``{"tokens": [id, ...]}``, or with ``with_pieces``
  ``{"tokens": [{"id": id, "piece": text}, ...]}`` (a piece that is not whole UTF-8,
  part of a character, is its list of byte values), as llama-server answers. The
  target's tokenizer: the ids the model sees (``add_special`` adds BOS where the model
  wants one; ``parse_special`` reads ``<|im_start|>`` as its control token).
* ``POST /detokenize`` ``{"tokens": [id, ...]}`` -> ``{"content": text}``, special
  tokens written as their text (llama-server's way); an id outside the vocabulary is a 400.

``system_fingerprint(engine)``: OpenAI's field that says which backend configuration
answered, so that a client comparing seeded answers can tell when it changed: a hash of
edgespec's version, llama-cpp-python's version and llama.cpp's backends (the kernels),
the target and draft files (name and size), the drafter and whether the kernels are
batch-invariant. The same server, restarted, gives the same string.
"""

from __future__ import annotations

import asyncio
import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict

from edgespec import __version__

from .bodies import parse_request
from .schema import ApiError

ROUTES = ("/tokenize", "/detokenize")


@dataclass(frozen=True)
class Api:
    """The app's pieces that other route modules use (see the module docstring)."""

    engine: Any
    model_id: str
    check_key: Callable[[Request], None]
    read_body: Callable[[Request], Awaitable[bytes]]
    chat: Callable[[Request, bytes], Awaitable[Response]]
    # for routes that generate on their own (``infill``): the worker, the app's submit
    # (503 when full), a request's options (sampling, limits, stops, the key's memory),
    # and the hang-up watcher
    worker: Any = None
    submit: Callable[[list], None] | None = None
    options_for: Callable[[Any, Request], dict] | None = None
    watch: Callable[[Request, Any], Awaitable[None]] | None = None


def _file_identity(path: Any) -> str:
    if path is None:
        return ""
    p = Path(str(path))
    try:
        return f"{p.name}:{p.stat().st_size}"
    except OSError:
        return p.name


def system_fingerprint(engine: Any) -> str:
    """``edgespec-<version>-<10 hex digits>``: stable for one configuration (see above)."""
    from edgespec.llama import LLAMA_CPP_PYTHON_VERSION, system_info

    parts = [
        __version__,
        LLAMA_CPP_PYTHON_VERSION,
        system_info(),
        _file_identity(engine.target_path),
        _file_identity(getattr(engine, "draft_path", None)),
        str(engine.drafter_name),
        "exact" if engine.exact_kernels else "fast",
    ]
    digest = hashlib.sha256("\0".join(parts).encode("utf-8", errors="replace")).hexdigest()
    return f"edgespec-{__version__}-{digest[:10]}"


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    tokens: list[int]


def _piece(model: Any, token: int) -> str | list[int]:
    raw = model.token_to_bytes(token, special=True)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:  # part of a character: its bytes, as llama-server gives them
        return list(raw)


def tokenize(model: Any, req: TokenizeRequest) -> dict:
    ids = model.tokenize(req.content, add_special=req.add_special, parse_special=req.parse_special)
    if not req.with_pieces:
        return {"tokens": ids}
    return {"tokens": [{"id": t, "piece": _piece(model, t)} for t in ids]}


def detokenize(model: Any, req: DetokenizeRequest) -> dict:
    bad = [t for t in req.tokens if not 0 <= t < model.n_vocab]
    if bad:
        raise ApiError(
            400, f"tokens: token id {bad[0]} is outside the vocabulary (0..{model.n_vocab - 1})", param="tokens"
        )
    return {"content": model.detokenize(req.tokens, special=True)}


def add_routes(app: FastAPI, api: Api) -> None:
    """``/tokenize`` and ``/detokenize`` on the target's vocabulary. The vocabulary is
    read-only, so they run beside a generation (off the event loop, in a thread)."""

    @app.post("/tokenize")
    async def tokenize_route(request: Request) -> JSONResponse:
        api.check_key(request)
        req = parse_request(TokenizeRequest, await api.read_body(request))
        return JSONResponse(await asyncio.to_thread(tokenize, api.engine.target_model, req))

    @app.post("/detokenize")
    async def detokenize_route(request: Request) -> JSONResponse:
        api.check_key(request)
        req = parse_request(DetokenizeRequest, await api.read_body(request))
        return JSONResponse(await asyncio.to_thread(detokenize, api.engine.target_model, req))
