"""The builder of Ollama chat and generate replies (streamed as NDJSON, one
JSON object per line, or collected into one object), and the
``{"error": "..."}`` body.

:class:`ReplyBuilder` is the :class:`~gateway.frontend.answer_driver.AnswerBuilder`
of ``/api/chat`` and ``/api/generate``: it turns one request's
:class:`~shared.protocol.RequestOutput` stream into Ollama objects: every
output with text, reasoning or log-probabilities becomes one
``done: false`` object (``message`` for chat, ``response`` for generate;
reasoning in ``thinking``); tool calls, whose arguments Ollama sends as
JSON objects, are sent whole in one ``done: false`` chat object when the
turn ends; the last object has ``done: true``, ``done_reason``
(``stop``/``length``; a turn ended by tool calls is ``stop``, as in
Ollama) and the counts and durations (nanoseconds) of :class:`Timing`.
The non-streamed answer is the same final object with everything the
stream would have carried merged into it, so both paths agree. A request
that fails after the stream began ends with an ``{"error": "..."}`` line.
Tool calls are assembled by :class:`~gateway.frontend.tool_calls.ToolCallAssembler`
(the worker's ids, none minted). Event loop only; one builder per request.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Callable, Literal

import msgspec

from gateway.core.errors import APIError
from gateway.frontend.answer_driver import TokenTally
from gateway.frontend.error_shapes import ollama_error_body
from gateway.frontend.tool_calls import OLLAMA_CALL_IDS, AssembledCall, ToolCallAssembler
from shared.protocol import RequestOutput, TokenLogprob

log = logging.getLogger("mlxd.gateway.ollama")

NDJSON_MEDIA_TYPE = "application/x-ndjson"
"""Content type of a streamed Ollama reply."""

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


def _call_object(call: AssembledCall, position: int) -> dict[str, Any]:
    """A finished call as Ollama sends it: ``arguments`` parsed to an object
    (an empty one, with a warning, when they are not a JSON object)."""
    try:
        arguments = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        log.warning("tool call %s: arguments are not JSON; sent as an empty object", call.name)
        arguments = {}
    if not isinstance(arguments, dict):
        arguments = {}
    result: dict[str, Any] = {"function": {"index": position, "name": call.name, "arguments": arguments}}
    if call.id:
        result["id"] = call.id
    return result


ErrorOf = Callable[[RequestOutput], APIError]
"""The endpoint's client error for an ``error``/``abort`` output."""


class ReplyBuilder:
    """Builds the Ollama objects of one chat or generate request.

    :meth:`add` returns the ``done: false`` objects of one output;
    :meth:`finish` those that end the reply (tool calls, then the final
    ``done: true`` object) and sets :attr:`final`, the whole non-streamed
    answer; :meth:`fail` the ``{"error": ...}`` object of a failing output
    (``error_of`` gives its error). Not thread-safe; one builder per request
    (event loop only).
    """

    choices = 1

    def __init__(
        self, kind: Kind, model: str, timing: Timing, with_logprobs: bool = False, error_of: ErrorOf | None = None
    ) -> None:
        self.kind = kind
        self.model = model
        self.timing = timing
        self.final: dict[str, Any] | None = None
        self._with_logprobs = with_logprobs
        self._error_of = error_of
        self._text: list[str] = []
        self._thinking: list[str] = []
        self._logprobs: list[dict[str, Any]] = []
        self._calls = ToolCallAssembler(OLLAMA_CALL_IDS)
        self._tally = TokenTally()
        self._reason = "stop"

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

    # --- the AnswerBuilder contract ------------------------------------------------------

    def start(self, first: RequestOutput) -> list[dict[str, Any]]:
        """Nothing opens a reply."""
        return []

    def add(self, output: RequestOutput) -> list[dict[str, Any]]:
        """The objects carrying ``output``'s new text, reasoning and
        log-probabilities (none when it has none); tool-call pieces are
        kept for :meth:`finish`, and so is a choice end's reason."""
        self.timing.mark_output()
        self._tally.add(output)
        if output.ends_choice:
            self._reason = output.finish_reason or "stop"
        for piece in output.tool_calls or ():
            self._calls.add(piece)
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

    def finish(self) -> list[dict[str, Any]]:
        """The objects ending the reply: the tool calls (chat, when any) and
        the ``done: true`` object (``done_reason`` ``length`` or ``stop``).
        Sets :attr:`final`."""
        calls = [_call_object(call, n) for n, call in enumerate(sorted(self._calls.calls(), key=lambda c: c.index))]
        objects: list[dict[str, Any]] = []
        if calls and self.kind == "chat":
            objects.append({**self._head(), **self._body("", "", calls), "done": False})
        tail = {
            "done": True,
            "done_reason": "length" if self._reason == "length" else "stop",
            **self.timing.durations(),
            "prompt_eval_count": self._tally.prompt,
            "eval_count": self._tally.completion,
        }
        objects.append({**self._head(), **self._body("", ""), **tail})
        whole = {**self._head(), **self._body("".join(self._text), "".join(self._thinking), calls), **tail}
        if self._logprobs:
            whole["logprobs"] = self._logprobs
        self.final = whole
        return objects

    def fail(self, output: RequestOutput) -> list[dict[str, Any]]:
        """The ``{"error": message}`` object for the failing ``output``."""
        assert self._error_of is not None, "a ReplyBuilder that may fail needs error_of"
        return [ollama_error_body(self._error_of(output).message)]

    def frames(self, batch: list[dict[str, Any]]) -> bytes:
        """``batch`` as NDJSON lines."""
        return b"".join(line(obj) for obj in batch)


def load_reply(kind: Kind, model: str, timing: Timing, unloaded: bool) -> dict[str, Any]:
    """The answer to a load-only request (no messages / empty prompt):
    ``done_reason`` ``load``, or ``unload`` when ``keep_alive`` 0 unloaded
    the model."""
    return {
        **ReplyBuilder(kind, model, timing).empty(),
        "done": True,
        "done_reason": "unload" if unloaded else "load",
    }
