"""MessagePack codec for the wire contract in :mod:`shared.protocol`.

Decoding is typed: a frame that is not valid MessagePack, carries an unknown
``type`` tag or has a field of the wrong type raises :class:`DecodeError` and
is never acted on. Encoders and decoders are not thread-safe; each thread or
event loop keeps its own :class:`Codec`.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import msgspec

from shared.protocol import GatewayMessage, NodeInbound, NodeOutbound, WorkerMessage

T = TypeVar("T")

MAX_FRAME_BYTES = 64 * 1024 * 1024
"""Largest frame either side accepts; bigger frames are dropped by ZeroMQ."""


class DecodeError(ValueError):
    """A frame could not be decoded into a known message."""


class Codec(Generic[T]):
    """Encodes any contract message and decodes frames of type ``T``.

    ``decode_type`` is the union of messages this side expects to receive.
    """

    def __init__(self, decode_type: type[T]) -> None:
        self._encoder = msgspec.msgpack.Encoder()
        self._decoder = msgspec.msgpack.Decoder(decode_type)

    def encode(self, message: msgspec.Struct) -> bytes:
        """Return the MessagePack bytes of ``message``."""
        return self._encoder.encode(message)

    def decode(self, frame: bytes | memoryview) -> T:
        """Return the message in ``frame``.

        Raises:
            DecodeError: the frame is malformed or not of the expected type.
        """
        try:
            return self._decoder.decode(frame)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise DecodeError(str(exc)) from exc


def gateway_codec() -> Codec[WorkerMessage]:
    """A codec for the gateway side: decodes what workers send."""
    return Codec(WorkerMessage)  # type: ignore[arg-type]


def worker_codec() -> Codec[GatewayMessage]:
    """A codec for the worker side: decodes what the gateway sends."""
    return Codec(GatewayMessage)  # type: ignore[arg-type]


def link_codec() -> Codec[NodeOutbound]:
    """A codec for the gateway's end of a node session: decodes what a node sends."""
    return Codec(NodeOutbound)  # type: ignore[arg-type]


def node_codec() -> Codec[NodeInbound]:
    """A codec for a node: decodes what a gateway sends."""
    return Codec(NodeInbound)  # type: ignore[arg-type]
