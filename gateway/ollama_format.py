"""Ollama answer objects: the chat and generate replies (streamed as NDJSON,
one JSON object per line, or collected into one object), the model
listings and the ``{"error": "..."}`` body.

:class:`ReplyBuilder` turns one request's
:class:`~shared.protocol.RequestOutput` stream into Ollama objects: every
output with text, reasoning or log-probabilities becomes one
``done: false`` object (``message`` for chat, ``response`` for generate;
reasoning in ``thinking``); tool calls, whose arguments Ollama sends as
JSON objects, are sent whole in one ``done: false`` chat object when the
turn ends; the last object has ``done: true``, ``done_reason``
(``stop``/``length``; a turn ended by tool calls is ``stop``, as in
Ollama) and the counts and durations (nanoseconds) of :class:`Timing`.
The non-streamed answer is the same final object with everything the
stream would have carried merged into it, so both paths agree.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import msgspec

from shared.protocol import RequestOutput, TokenLogprob

log = logging.getLogger("mlxd.gateway.ollama")

NDJSON_MEDIA_TYPE = "application/x-ndjson"
"""Content type of a streamed Ollama reply."""

OLLAMA_VERSION = "0.12.0"
"""The Ollama API version mlxd reports on ``GET /api/version``: clients
gate features on it, and mlxd speaks that version's chat and generate
fields (tools, thinking, structured outputs)."""

Kind = Literal["chat", "generate"]
"""Which endpoint a reply answers."""

_encoder = msgspec.json.Encoder()


def line(obj: Any) -> bytes:
    """``obj`` as one NDJSON line (compact JSON and ``\\n``)."""
    return _encoder.encode(obj) + b"\n"


def encode(obj: Any) -> bytes:
    """``obj`` as JSON (one non-streamed answer)."""
    return _encoder.encode(obj)


def timestamp(seconds: float | None = None) -> str:
    """``seconds`` (default now) as Ollama's RFC 3339 UTC time with
    microseconds and ``Z``."""
    moment = datetime.fromtimestamp(time.time() if seconds is None else seconds, tz=UTC)
    return moment.isoformat().replace("+00:00", "Z")


@dataclass
class Timing:
    """Monotonic nanosecond marks of one request: ``start`` when the body
    arrived, ``submitted`` when the worker took it (the wait before is the
    ``load_duration``: starting the model if it was not loaded),
    ``first`` the first output (prefill ends), ``end`` the last."""

    start: int = field(default_factory=time.perf_counter_ns)
    submitted: int = 0
    first: int = 0
    end: int = 0

    def mark_submitted(self) -> None:
        """The worker accepted the request now."""
        self.submitted = time.perf_counter_ns()

    def mark_output(self) -> None:
        """An output arrived now (the first one sets ``first``)."""
        now = time.perf_counter_ns()
        if not self.first:
            self.first = now
        self.end = now

    def durations(self) -> dict[str, int]:
        """``total_duration``, ``load_duration``, ``prompt_eval_duration``
        and ``eval_duration`` in nanoseconds."""
        submitted = self.submitted or self.start
        first = self.first or submitted
        end = self.end or first
        return {
            "total_duration": max(end - self.start, 0),
            "load_duration": max(submitted - self.start, 0),
            "prompt_eval_duration": max(first - submitted, 0),
            "eval_duration": max(end - first, 0),
        }


def _logprobs(tokens: list[TokenLogprob]) -> list[dict[str, Any]]:
    """Ollama ``logprobs`` entries for sampled tokens."""
    return [
        {
            "token": t.token,
            "logprob": t.logprob,
            "top_logprobs": [{"token": alt.token, "logprob": alt.logprob} for alt in t.top],
        }
        for t in tokens
    ]


class _CallPieces:
    """One tool call assembled from its deltas."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.name = ""
        self.arguments = ""

    def as_object(self, index: int) -> dict[str, Any]:
        """The call as Ollama sends it: ``arguments`` parsed to an object."""
        try:
            arguments = json.loads(self.arguments) if self.arguments.strip() else {}
        except ValueError:
            log.warning("tool call %s: arguments are not JSON; sent as an empty object", self.name)
            arguments = {}
        if not isinstance(arguments, dict):
            arguments = {}
        call: dict[str, Any] = {"function": {"index": index, "name": self.name, "arguments": arguments}}
        if self.id:
            call["id"] = self.id
        return call


class ReplyBuilder:
    """Builds the Ollama objects of one chat or generate request.

    :meth:`add` returns the ``done: false`` objects of one output;
    :meth:`finish` those that end the reply (tool calls, then the final
    ``done: true`` object) and sets :attr:`final`, the whole non-streamed
    answer. Not thread-safe; one builder per request (event loop only).
    """

    def __init__(self, kind: Kind, model: str, timing: Timing, with_logprobs: bool = False) -> None:
        self.kind = kind
        self.model = model
        self.timing = timing
        self.final: dict[str, Any] | None = None
        self._with_logprobs = with_logprobs
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._logprobs: list[dict[str, Any]] = []
        self._calls: dict[int, _CallPieces] = {}
        self._prompt_tokens = 0
        self._completion_tokens = 0

    def _head(self) -> dict[str, Any]:
        return {"model": self.model, "created_at": timestamp()}

    def _body(self, text: str, reasoning: str, calls: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The content fields of one object (``message`` or ``response``)."""
        if self.kind == "chat":
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if reasoning:
                message["thinking"] = reasoning
            if calls:
                message["tool_calls"] = calls
            return {"message": message}
        body: dict[str, Any] = {"response": text}
        if reasoning:
            body["thinking"] = reasoning
        return body

    def empty(self) -> dict[str, Any]:
        """A ``done: false`` object with no content (sent while a long
        prompt is prefilled, so idle timeouts do not fire)."""
        return {**self._head(), **self._body("", ""), "done": False}

    def add(self, output: RequestOutput) -> list[dict[str, Any]]:
        """The objects carrying ``output``'s new text, reasoning and
        log-probabilities (none when it has none); tool-call pieces are
        kept for :meth:`finish`."""
        self.timing.mark_output()
        if output.prompt_tokens:
            self._prompt_tokens = output.prompt_tokens
        self._completion_tokens = max(self._completion_tokens, output.completion_tokens)
        for delta in output.tool_calls or ():
            call = self._calls.setdefault(delta.index, _CallPieces())
            call.id = call.id or delta.id
            call.name = call.name or delta.name or ""
            call.arguments += delta.arguments
        logprobs = _logprobs(output.logprobs) if self._with_logprobs and output.logprobs else []
        if not (output.text or output.reasoning or logprobs):
            return []
        self._text.append(output.text)
        self._thinking.append(output.reasoning)
        self._logprobs += logprobs
        obj = {**self._head(), **self._body(output.text, output.reasoning), "done": False}
        if logprobs:
            obj["logprobs"] = logprobs
        return [obj]

    def _calls_list(self) -> list[dict[str, Any]]:
        return [self._calls[i].as_object(n) for n, i in enumerate(sorted(self._calls))]

    def finish(self, reason: str) -> list[dict[str, Any]]:
        """The objects ending the reply for finish reason ``reason``: the
        tool calls (chat, when any) and the ``done: true`` object. Sets
        :attr:`final`."""
        calls = self._calls_list()
        objects: list[dict[str, Any]] = []
        if calls and self.kind == "chat":
            objects.append({**self._head(), **self._body("", "", calls), "done": False})
        tail = {
            "done": True,
            "done_reason": "length" if reason == "length" else "stop",
            **self.timing.durations(),
            "prompt_eval_count": self._prompt_tokens,
            "eval_count": self._completion_tokens,
        }
        objects.append({**self._head(), **self._body("", ""), **tail})
        whole = {**self._head(), **self._body("".join(self._text), "".join(self._thinking), calls), **tail}
        if self._logprobs:
            whole["logprobs"] = self._logprobs
        self.final = whole
        return objects


def load_reply(kind: Kind, model: str, timing: Timing, unloaded: bool) -> dict[str, Any]:
    """The answer to a load-only request (no messages / empty prompt):
    ``done_reason`` ``load``, or ``unload`` when ``keep_alive`` 0 unloaded
    the model."""
    return {
        **ReplyBuilder(kind, model, timing).empty(),
        "done": True,
        "done_reason": "unload" if unloaded else "load",
    }


# --- model listings -----------------------------------------------------------------------


def digest(name: str, source: str) -> str:
    """A stable sha256 hex digest naming a configured model (Ollama lists
    one per model; mlxd has no blobs, so it hashes the name and source)."""
    return hashlib.sha256(f"{name}\0{source}".encode()).hexdigest()


def details(config: dict[str, Any], source: str) -> dict[str, Any]:
    """Ollama's ``details`` of a model from its ``config.json`` contents
    (``{}`` when unknown): family from ``model_type``, quantization from
    MLX's ``quantization.bits``, format ``gguf`` or ``safetensors``."""
    family = str(config.get("model_type") or "")
    quant = config.get("quantization") or config.get("quantization_config") or {}
    bits = quant.get("bits") if isinstance(quant, dict) else None
    return {
        "parent_model": "",
        "format": "gguf" if source.lower().endswith(".gguf") else "safetensors",
        "family": family,
        "families": [family] if family else None,
        "parameter_size": "",
        "quantization_level": f"Q{bits}" if bits else "",
    }


def model_entry(
    name: str, source: str, created: float, size: int, config: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    """One model of ``/api/tags`` (and, with ``extra``, of ``/api/ps``)."""
    return {
        "name": name,
        "model": name,
        "modified_at": timestamp(created),
        "size": size,
        "digest": digest(name, source),
        "details": details(config, source),
        **extra,
    }


NEVER = "2318-01-01T00:00:00Z"
"""``expires_at`` of a model that is never unloaded for idleness (Ollama
shows a far-future time too)."""


def expiry(expires_at: float | None) -> str:
    """``expires_at`` for ``/api/ps``."""
    return NEVER if expires_at is None else timestamp(expires_at)


def sampling_parameters(defaults: dict[str, float] | None) -> str:
    """``/api/show``'s ``parameters``: the model's sampling defaults, one
    ``name value`` per line in Ollama's option names."""
    if not defaults:
        return ""
    names = {"repetition_penalty": "repeat_penalty"}
    return "\n".join(f"{names.get(k, k)} {v}" for k, v in defaults.items())
