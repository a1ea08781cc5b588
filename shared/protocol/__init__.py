"""The whole wire contract between the gateway and its worker processes.

Every message that crosses a ZeroMQ socket is one of the msgspec Structs of
this package, encoded with MessagePack by :mod:`shared.codec`. Nothing else is
ever sent and nothing is ever pickled. Each message type carries a ``type``
tag so a decoder can reject anything it does not know.

Declarative: only message shapes and the few rules that read them (when an
output ends a choice or the request, :class:`OpenChoices`), no I/O and no
threads. One package, one module per part of the conversation, every name
imported from here (``from shared.protocol import ...``):

- :mod:`~shared.protocol.generation`: a generation request and its abort;
- :mod:`~shared.protocol.kinds`: the requests of the kinds that do not
  generate (embed, rerank, speech, transcribe);
- :mod:`~shared.protocol.outputs`: what every request produces, and the
  rules of when an output ends a choice or the request;
- :mod:`~shared.protocol.lifecycle`: the version, the worker's handshake,
  heartbeats, shutdown and cache clearing;
- :mod:`~shared.protocol.node`: the transport messages between machines.

The contract is versioned as a whole by :data:`PROTOCOL_VERSION`: a change
to any shape in any of these modules may need to bump it (below).

Direction gateway -> worker (``GatewayMessage``):
    :class:`GenerateRequest`, :class:`AbortRequest`, :class:`Shutdown`,
    :class:`EmbedRequest` (embedding workers), :class:`RerankRequest`
    (rerank workers), :class:`SpeechRequest` (speech workers),
    :class:`TranscribeRequest` (transcription workers),
    :class:`ClearCache`.
Direction worker -> gateway (``WorkerMessage``):
    :class:`Hello`, :class:`Loaded`, :class:`Ready`, :class:`Heartbeat`,
    :class:`StepOutputs`, :class:`Failed`, :class:`CacheCleared`.

Lifecycle: a worker sends ``Hello`` as soon as its sockets are up, ``Loaded``
once the model and tokenizer are in memory, ``Ready`` after warm-up, then
``Heartbeat`` periodically and one ``StepOutputs`` per scheduler step that
produced anything. ``Failed`` reports a fatal start-up error just before the
worker exits.

Versioning: :data:`PROTOCOL_VERSION` names this contract. A worker reports
the version it was built with in its ``Hello``; a gateway refuses (and
stops) a worker whose version differs from its own, since the two may no
longer agree on any other message. ``Hello`` itself never changes
incompatibly, so that check always works. Bump the version whenever a
change is not one of: a new field appended last with a default, or a new
optional message type the other side may ignore.

Between machines (gateway <-> ``mlxd node``, see :mod:`gateway.workers.node_link`
and :mod:`gateway.node_main`) the same messages travel over CURVE-encrypted
tcp, plus a few transport messages: the gateway opens one session per
worker incarnation with :class:`NodeStart` and may end it with
:class:`NodeKill`; the node answers :class:`NodeStarted` once the worker
process exists and :class:`NodeExited` when it ends; both sides send
:class:`NodeAlive` every :data:`NODE_ALIVE_INTERVAL` seconds so either
notices when the other has gone (``NodeInbound`` / ``NodeOutbound``).

Request lifecycle: every ``GenerateRequest`` the worker receives is answered
by :class:`RequestOutput` entries; each of its ``n`` choices ends with exactly
one output whose ``finish_reason`` is ``stop``, ``length`` or ``tool_calls``, unless the
request ends early with one ``error`` or ``abort`` output, which ends every
choice at once. These rules live here once: :attr:`RequestOutput.ends_choice`,
:attr:`RequestOutput.ends_request` and :class:`OpenChoices` (the count of a
request's choices still open); every reader uses them. New fields are appended last
with defaults so older peers keep decoding.
"""

from __future__ import annotations

from typing import Union

from shared.protocol.generation import (
    AbortRequest,
    ChatMessage,
    GenerateRequest,
    ImagePart,
    ResponseFormat,
    SamplingDefaults,
    SamplingParams,
    Tool,
    ToolCall,
    ToolChoice,
)
from shared.protocol.kinds import EmbedRequest, RerankRequest, SpeechRequest, TranscribeRequest
from shared.protocol.lifecycle import (
    EXIT_THREAD_DIED,
    PROTOCOL_VERSION,
    CacheCleared,
    ClearCache,
    Failed,
    Heartbeat,
    Hello,
    Loaded,
    Ready,
    Shutdown,
    WorkerStats,
)
from shared.protocol.node import (
    NODE_ALIVE_INTERVAL,
    NodeAlive,
    NodeExited,
    NodeInbound,
    NodeKill,
    NodeOutbound,
    NodeStart,
    NodeStarted,
)
from shared.protocol.outputs import (
    CHOICE_END_REASONS,
    REQUEST_END_REASONS,
    ErrorKind,
    FinishReason,
    OpenChoices,
    RequestOutput,
    StepOutputs,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    Transcript,
    TranscriptSegment,
    TranscriptWord,
)

GatewayMessage = Union[
    GenerateRequest,
    AbortRequest,
    Shutdown,
    EmbedRequest,
    RerankRequest,
    SpeechRequest,
    TranscribeRequest,
    ClearCache,
]
"""Any message the gateway sends to a worker."""

WorkerMessage = Union[Hello, Loaded, Ready, Failed, Heartbeat, StepOutputs, CacheCleared]
"""Any message a worker sends to the gateway."""

__all__ = [
    "CHOICE_END_REASONS",
    "EXIT_THREAD_DIED",
    "NODE_ALIVE_INTERVAL",
    "PROTOCOL_VERSION",
    "REQUEST_END_REASONS",
    "AbortRequest",
    "CacheCleared",
    "ChatMessage",
    "ClearCache",
    "EmbedRequest",
    "ErrorKind",
    "Failed",
    "FinishReason",
    "GatewayMessage",
    "GenerateRequest",
    "Heartbeat",
    "Hello",
    "ImagePart",
    "Loaded",
    "NodeAlive",
    "NodeExited",
    "NodeInbound",
    "NodeKill",
    "NodeOutbound",
    "NodeStart",
    "NodeStarted",
    "OpenChoices",
    "Ready",
    "RequestOutput",
    "RerankRequest",
    "ResponseFormat",
    "SamplingDefaults",
    "SamplingParams",
    "Shutdown",
    "SpeechRequest",
    "StepOutputs",
    "TokenLogprob",
    "Tool",
    "ToolCall",
    "ToolCallDelta",
    "ToolChoice",
    "TopLogprob",
    "TranscribeRequest",
    "Transcript",
    "TranscriptSegment",
    "TranscriptWord",
    "WorkerMessage",
    "WorkerStats",
]
"""Every name of the contract."""
