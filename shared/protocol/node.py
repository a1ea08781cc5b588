"""Between machines (part of the wire contract, :mod:`shared.protocol`):
the transport messages of a session between a gateway and ``mlxd node``
(see :mod:`gateway.workers.node_link` and :mod:`gateway.node_main`), and
what each side may send on one (:data:`NodeInbound`, :data:`NodeOutbound`).
"""

from __future__ import annotations

from typing import Union

import msgspec

from shared.protocol.generation import AbortRequest, GenerateRequest
from shared.protocol.kinds import EmbedRequest, RerankRequest, SpeechRequest, TranscribeRequest
from shared.protocol.lifecycle import (
    PROTOCOL_VERSION,
    CacheCleared,
    ClearCache,
    Failed,
    Heartbeat,
    Hello,
    Loaded,
    Ready,
    Shutdown,
)
from shared.protocol.outputs import StepOutputs

NODE_ALIVE_INTERVAL = 1.0
"""Seconds between :class:`NodeAlive` messages on a node session."""


class NodeStart(msgspec.Struct, frozen=True, kw_only=True, tag="node_start"):
    """Gateway -> node, first message of a session: start incarnation
    ``incarnation`` of the node's model ``model`` with these MLX limits
    (bytes; 0 and None: MLX's defaults). ``protocol`` is the gateway's
    :data:`PROTOCOL_VERSION`; a node with another one refuses the session."""

    model: str
    incarnation: int
    memory_limit: int = 0
    cache_limit: int | None = None
    protocol: int = PROTOCOL_VERSION


class NodeKill(msgspec.Struct, frozen=True, tag="node_kill"):
    """Gateway -> node: kill the session's worker at once (SIGKILL)."""


class NodeAlive(msgspec.Struct, frozen=True, tag="node_alive"):
    """Either direction: the sender is still there (sent every
    :data:`NODE_ALIVE_INTERVAL` seconds)."""


class NodeStarted(msgspec.Struct, frozen=True, kw_only=True, tag="node_started"):
    """Node -> gateway: the session's worker process exists (its pid on
    the node's machine)."""

    pid: int


class NodeExited(msgspec.Struct, frozen=True, kw_only=True, tag="node_exited"):
    """Node -> gateway, last message of a session: why it ended (the
    worker exited, was killed, or the session was refused)."""

    reason: str


NodeInbound = Union[
    NodeStart,
    NodeKill,
    NodeAlive,
    GenerateRequest,
    AbortRequest,
    Shutdown,
    EmbedRequest,
    RerankRequest,
    SpeechRequest,
    TranscribeRequest,
    ClearCache,
]
"""Any message a gateway sends to a node."""

NodeOutbound = Union[
    NodeStarted, NodeExited, NodeAlive, Hello, Loaded, Ready, Failed, Heartbeat, StepOutputs, CacheCleared
]
"""Any message a node sends to a gateway."""
