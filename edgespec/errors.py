"""Typed errors for everything a user can get wrong or run into.

The library raises these and never prints or exits; ``edgespec.cli`` turns each into one line
on stderr and the exit code named on the class. Every message says what was wrong and
what to do about it. This module knows nothing about llama.cpp or the terminal.
"""

from __future__ import annotations


class EdgespecError(Exception):
    """Base class: a problem the user can act on. ``exit_code`` is used by the CLI."""

    exit_code = 1


class ModelFileError(EdgespecError):
    """A model file is missing, unreadable, truncated or not GGUF."""

    exit_code = 3


class ModelLoadError(ModelFileError):
    """llama.cpp refused to load a model or create a context for it."""


class IncompatibleVocabError(EdgespecError):
    """The draft model's vocabulary cannot be used to draft for the target."""

    exit_code = 4


class ContextOverflowError(EdgespecError):
    """The prompt does not fit in the context window."""

    exit_code = 5


class RollbackError(EdgespecError):
    """The model's memory cannot remove part of a sequence (recurrent / hybrid models)."""

    exit_code = 6


class DecodeError(EdgespecError):
    """llama_decode failed (out of KV slots, compute error)."""

    exit_code = 6


class ProfileError(EdgespecError):
    """An unknown profile name or a malformed profile file."""

    exit_code = 7


class CatalogError(EdgespecError):
    """An unknown model name, a source that cannot be reached, or a bad download."""

    exit_code = 8


class AmbiguousModelError(CatalogError):
    """A model name that matches several models on this machine (the message lists them)."""


class OutputError(EdgespecError):
    """A file edgespec was asked to write could not be written: not enough disk space, or
    no folder it may write in (``edgespec models optimize``)."""


class InputError(EdgespecError):
    """Bad user input: an unreadable prompt file, a malformed JSONL line, a bad option."""

    exit_code = 2


class ConstraintError(InputError):
    """A ``response_format``, JSON Schema, grammar or regex that cannot be compiled, or a
    schema keyword the constraint engine does not implement (unless lenient). ``param``
    names the offending field the way an OpenAI-style API does (``"response_format"``,
    ``"response_format.json_schema.schema"``), for an HTTP 400's ``param``."""

    def __init__(self, message: str, *, param: str = "response_format") -> None:
        super().__init__(message)
        self.param = param


class ConstraintStateError(EdgespecError):
    """The grammar matcher entered its error state during generation (a token it should
    have allowed was refused, or no token is allowed): the request ends with this error
    rather than going on unconstrained."""

    exit_code = 6


class IncompleteStructureError(EdgespecError):
    """A structured answer ended before its structure was complete (``max_tokens`` ran
    out, the context filled up, a stop string cut it). The library reports it on the
    result (``structured_complete`` False, ``structure_error``); the command line raises
    this after writing the partial text, so that its exit code says so."""

    exit_code = 10


class RpcError(EdgespecError):
    """An RPC server (``--rpc HOST:PORT``) that cannot be reached, is not one, speaks
    another protocol version, or is missing from this llama.cpp build."""

    exit_code = 9


class RpcServerLost(RpcError):
    """An RPC server went away mid-generation. llama.cpp cannot continue, so this error
    is handed to ``edgespec.llama.rpc.on_server_lost``'s handler instead of raised."""

    def __init__(self, message: str, *, endpoint: str = "") -> None:
        super().__init__(message)
        self.endpoint = endpoint


class MemoryStoreError(EdgespecError):
    """The memory store on disk (``--remember``, ``edgespec memory``) that cannot be
    saved, listed or cleared: the message names the path and what to do."""


class IllegalInstructionError(EdgespecError):
    """The llama.cpp library cannot run on this CPU: decoding a few tokens in a child
    process ended it with SIGILL (a build for another CPU, or Intel AMX listed but not
    enabled by a virtual machine). The message gives the command that rebuilds it."""

    exit_code = 6
