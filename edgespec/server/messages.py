"""The chat message and tool shapes of an OpenAI request body.

A ``Message`` (its text parts, the ``tool_calls`` an assistant made, a tool's result)
and what it becomes for the engine (``Message.to_engine``: a chat template's dict, the
``developer`` role as ``system``), the ``tools`` a chat request declares and a named
``tool_choice``. pydantic in strict mode, as the rest of ``schema``; the request that
holds them is ``schema.ChatRequest``.
"""

from __future__ import annotations

from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, model_validator


class TextPart(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["text"]
    text: str


# OpenAI's rule for function names; it also keeps them safe to write into a grammar
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"


class CalledFunction(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    name: str = Field(pattern=TOOL_NAME)
    arguments: str = "{}"


class ToolCall(BaseModel):
    """A tool call an assistant message made (sent back in the next request)."""

    model_config = ConfigDict(extra="ignore", strict=True)
    id: Optional[str] = None
    type: Literal["function"] = "function"
    function: CalledFunction


class Message(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Optional[Union[str, list[TextPart]]] = None
    tool_calls: Optional[list[ToolCall]] = None
    tool_call_id: Optional[str] = None
    name: Optional[str] = None

    @model_validator(mode="after")
    def _calls_from_assistant(self) -> "Message":
        if self.tool_calls and self.role != "assistant":
            raise ValueError("only an assistant message can carry tool_calls")
        return self

    def to_engine(self) -> dict:
        if self.content is None:
            text = ""
        elif isinstance(self.content, str):
            text = self.content
        else:
            text = "".join(p.text for p in self.content)
        # "developer" is OpenAI's newer name for the system role; chat templates know "system".
        out: dict = {"role": "system" if self.role == "developer" else self.role, "content": text}
        if self.tool_calls:
            out["tool_calls"] = [c.model_dump() for c in self.tool_calls]
        if self.role == "tool":
            out.update({k: v for k, v in (("tool_call_id", self.tool_call_id), ("name", self.name)) if v})
        return out


class FunctionDef(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    name: str = Field(pattern=TOOL_NAME)
    description: Optional[str] = None
    parameters: Optional[dict[str, Any]] = None
    strict: Optional[bool] = None


class Tool(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["function"]
    function: FunctionDef


class ChosenFunction(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    name: str


class NamedToolChoice(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)
    type: Literal["function"]
    function: ChosenFunction
