"""Request bodies into request objects, and the error that says what was wrong.

``ApiError`` is an HTTP error answered with an OpenAI-style error object (every route's
400s and the others); ``edgespec.server.schema`` re-exports it beside the request shapes.

pydantic reads the body (``model_validate_json``); its first complaint becomes a message
naming the field, and valid JSON that is only too deep for its parser says so
(``JSON_DEPTH_LIMIT``) instead of calling the body invalid. Every route reads its body
here (chat, completions, the Responses API, /tokenize and /detokenize).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError


class ApiError(Exception):
    """An HTTP error answered with an OpenAI-style error object."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code
        self.headers = headers or {}

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


JSON_DEPTH_LIMIT = 200
"""The deepest nesting of arrays and objects, the body's own object included, that the
request parser (pydantic-core's) reads; one level more is its "recursion limit exceeded"
(tests/test_server_structured.py checks the boundary)."""


def describe_validation_error(e: ValidationError) -> tuple[str, str | None]:
    """One message for the first problem pydantic found, and the field it concerns."""
    err = e.errors(include_url=False)[0]
    kind = err.get("type", "")
    if kind == "json_invalid":
        detail = err.get("ctx", {}).get("error", "")
        if detail.startswith("recursion limit exceeded"):  # valid JSON, only too deep for the parser
            return (
                f"the request body nests arrays and objects more than {JSON_DEPTH_LIMIT} levels deep, the "
                "limit of the server's JSON parser (pydantic's); a schema that deep can be written with "
                "$defs and $ref"
            ), None
        return (
            f"the request body is not valid JSON ({detail})" if detail else "the request body is not valid JSON",
            None,
        )
    if kind == "model_type" or (kind.endswith("_type") and not err.get("loc")):
        return "the request body must be a JSON object", None
    loc = [str(p) for p in err.get("loc", ())]
    # drop pydantic's union-branch names ("str", "list[str]") from the location
    loc = [p for p in loc if not (p in ("str", "int", "float", "bool") or p.startswith(("list[", "function-")))]
    param = ".".join(loc) or None
    msg = err.get("msg", "invalid value")
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "missing":
        msg = "this field is required"
    return (f"{param}: {msg}" if param else msg), param


def parse_request(model: type[BaseModel], body: bytes) -> Any:
    """A request body as ``model``, or the 400 that says what is wrong: a parse or
    validation error, then (for the generation requests, which have ``refusal()``) a
    field the server refuses."""
    try:
        req = model.model_validate_json(body)
    except ValidationError as e:
        message, param = describe_validation_error(e)
        raise ApiError(400, message, param=param) from None
    refused = req.refusal() if hasattr(req, "refusal") else None
    if refused is not None:
        raise refused
    return req
