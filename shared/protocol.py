"""The whole wire contract between the gateway and its worker processes.

Every message that crosses a ZeroMQ socket is one of the msgspec Structs in
this module, encoded with MessagePack by :mod:`shared.codec`. Nothing else is
ever sent and nothing is ever pickled. Each message type carries a ``type``
tag so a decoder can reject anything it does not know.

Direction gateway -> worker (``GatewayMessage``):
    :class:`GenerateRequest`, :class:`AbortRequest`, :class:`Shutdown`.
Direction worker -> gateway (``WorkerMessage``):
    :class:`Hello`, :class:`Loaded`, :class:`Ready`, :class:`Heartbeat`,
    :class:`StepOutputs`, :class:`Failed`.

Lifecycle: a worker sends ``Hello`` as soon as its sockets are up, ``Loaded``
once the model and tokenizer are in memory, ``Ready`` after warm-up, then
``Heartbeat`` periodically and one ``StepOutputs`` per scheduler step that
produced anything. ``Failed`` reports a fatal start-up error just before the
worker exits.

Request lifecycle: every ``GenerateRequest`` the worker receives is answered
by one or more :class:`RequestOutput` entries, exactly one of which has a
non-null ``finish_reason`` (the terminal one). New fields are appended last
with defaults so older peers keep decoding.
"""

from __future__ import annotations

from typing import Literal, Union

import msgspec

FinishReason = Literal["stop", "length", "abort", "error"]
"""Why a request ended: a stop token or string, the token limit, an abort
(client gone, shutdown), or an error (see ``RequestOutput.error``)."""

ErrorKind = Literal[
    "invalid_request", "context_length_exceeded", "overloaded", "unavailable", "internal"
]
"""Class of a request error; the gateway maps it to an HTTP status
(400, 400, 503, 503, 500). ``unavailable`` is what the gateway itself
reports when a worker dies or stops answering mid-request."""


class SamplingParams(msgspec.Struct, frozen=True, kw_only=True):
    """Per-request decoding settings, already validated by the gateway.

    ``max_tokens`` is the hard cap on generated tokens (None: up to the
    context limit). ``temperature`` 0 means greedy. ``top_k`` 0 and
    ``top_p`` 1 disable those filters. ``seed`` makes sampling reproducible
    for this request regardless of what else shares its batch.
    ``logit_bias`` maps token id to an additive bias. ``stop`` holds stop
    strings; the matched string is not part of the output.
    """

    max_tokens: int | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: dict[int, float] = {}
    stop: list[str] = []


class ChatMessage(msgspec.Struct, frozen=True, kw_only=True):
    """One chat turn with its content flattened to text by the gateway."""

    role: str
    content: str
    name: str | None = None


class GenerateRequest(msgspec.Struct, frozen=True, kw_only=True, tag="generate"):
    """Admit one generation request.

    Exactly one of ``messages`` (rendered with the model's chat template and
    a generation prompt), ``prompt`` (raw text) or ``prompt_token_ids`` is set.
    ``request_id`` is unique among the gateway's in-flight requests.
    """

    request_id: str
    sampling: SamplingParams
    messages: list[ChatMessage] | None = None
    prompt: str | None = None
    prompt_token_ids: list[int] | None = None


class AbortRequest(msgspec.Struct, frozen=True, tag="abort"):
    """Abort these requests (unknown ids are ignored). Each still gets its
    terminal ``RequestOutput`` with ``finish_reason="abort"``."""

    request_ids: list[str]


class Shutdown(msgspec.Struct, frozen=True, tag="shutdown"):
    """Ask the worker to exit: abort everything in flight, then exit 0."""


class WorkerStats(msgspec.Struct, frozen=True, kw_only=True):
    """Counters a worker reports with every heartbeat (monotonic since start
    except ``running`` and ``waiting``, which are current values)."""

    running: int = 0
    waiting: int = 0
    steps: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    requests_finished: int = 0
    requests_aborted: int = 0
    max_batch_seen: int = 0


class Hello(msgspec.Struct, frozen=True, kw_only=True, tag="hello"):
    """First message of a worker incarnation: its sockets are connected."""

    worker_id: str
    pid: int
    model: str


class Loaded(msgspec.Struct, frozen=True, kw_only=True, tag="loaded"):
    """The model and tokenizer are in memory.

    ``context_length`` is the most tokens (prompt + completion) a request may
    use; ``load_seconds`` is the wall time of resolving and loading.
    """

    worker_id: str
    context_length: int
    load_seconds: float
    model_path: str
    blas: str = ""


class Ready(msgspec.Struct, frozen=True, kw_only=True, tag="ready"):
    """Warm-up finished; the worker accepts ``GenerateRequest`` from now on."""

    worker_id: str


class Failed(msgspec.Struct, frozen=True, kw_only=True, tag="failed"):
    """A fatal start-up error (for example the model could not be loaded);
    the worker exits right after sending it."""

    worker_id: str
    message: str


class Heartbeat(msgspec.Struct, frozen=True, kw_only=True, tag="heartbeat"):
    """Periodic liveness signal with the worker's current counters."""

    worker_id: str
    stats: WorkerStats


class RequestOutput(msgspec.Struct, frozen=True, kw_only=True):
    """New output of one request in one scheduler step.

    ``text`` is the newly decoded text (may be empty while a multi-byte
    character or a possible stop string is held back). ``prompt_tokens`` and
    ``completion_tokens`` are running totals. When ``finish_reason`` is set
    this is the request's last output; with ``"error"``, ``error`` holds a
    message safe to show the client and ``error_kind`` its class.
    """

    request_id: str
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    finish_reason: FinishReason | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None


class StepOutputs(msgspec.Struct, frozen=True, kw_only=True, tag="step"):
    """Every request's new output from one scheduler step, in one message."""

    step: int
    outputs: list[RequestOutput]


GatewayMessage = Union[GenerateRequest, AbortRequest, Shutdown]
"""Any message the gateway sends to a worker."""

WorkerMessage = Union[Hello, Loaded, Ready, Failed, Heartbeat, StepOutputs]
"""Any message a worker sends to the gateway."""
