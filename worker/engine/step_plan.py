"""The step plan rank 0 of a tensor-parallel group shares with the others.

Every rank of a group (see :mod:`worker.tensor_parallel.lockstep`) runs the same
scheduler over its shard of the model. Only rank 0 hears the gateway, reads
the clock and decides; each loop turn it records the commands it applied, in
order, and whether the engine steps, as one :class:`StepPlan`. The other
ranks apply exactly that plan, so their batches, prefix caches and sampled
tokens stay identical to rank 0's.

Plans are msgspec-encoded (never pickled). This module does not import MLX;
the bytes travel over ``mx.distributed`` (:class:`worker.tensor_parallel.lockstep.Lockstep`).
"""

from __future__ import annotations

from typing import Protocol

import msgspec

from shared.protocol import GenerateRequest


class Admit(msgspec.Struct, tag="admit", frozen=True):
    """Admit ``request`` with rank 0's ``prompt`` tokens and the sampling
    ``seed`` rank 0 chose (None: greedy, or the request's own seed)."""

    request: GenerateRequest
    prompt: list[int]
    seed: int | None = None


class Drop(msgspec.Struct, tag="abort", frozen=True):
    """Abort these requests (a client's cancellation)."""

    request_ids: list[str]


class Expire(msgspec.Struct, tag="expire", frozen=True):
    """End these requests: rank 0's clock passed their deadline."""

    request_ids: list[str]


class ReleaseChoice(msgspec.Struct, tag="release", frozen=True):
    """Take choice ``index`` of ``request_id`` out of the batch (its stop
    string matched on rank 0's output thread)."""

    request_id: str
    index: int


class ClearCache(msgspec.Struct, tag="clear_cache", frozen=True):
    """Empty the prefix cache (every rank holds its shard of each entry,
    so all clear together)."""


class Halt(msgspec.Struct, tag="stop", frozen=True):
    """The worker stops: abort everything and leave the loop."""


PlanItem = Admit | Drop | Expire | ReleaseChoice | ClearCache | Halt


class StepPlan(msgspec.Struct, frozen=True):
    """One scheduler loop turn: ``items`` applied in order, then one engine
    step when ``step``."""

    items: list[PlanItem] = []
    step: bool = False


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(StepPlan)


def encode_plan(plan: StepPlan) -> bytes:
    """The plan as msgpack bytes."""
    return _encoder.encode(plan)


def decode_plan(data: bytes) -> StepPlan:
    """The plan in ``data``.

    Raises:
        msgspec.DecodeError: not a plan (a rank out of step; fatal).
    """
    return _decoder.decode(data)


class PlanLink(Protocol):
    """What the scheduler needs of its tensor-parallel group, one rank's end
    (:class:`worker.tensor_parallel.lockstep.Lockstep` is the one
    implementation). The leader (rank 0) :meth:`record`\\ s each command it
    applies and :meth:`publish`\\ es the turn's plan; a follower
    :meth:`receive`\\ s plans and turns their items into commands."""

    def record(self, item: object) -> object:
        """Leader: note ``item`` for this turn's plan; return the command to apply."""
        ...

    def record_expired(self, request_ids: list[str]) -> None:
        """Leader: these requests passed their deadline in this turn."""
        ...

    def publish(self, step: bool) -> None:
        """Leader: send this turn's plan to every rank."""
        ...

    def receive(self) -> StepPlan:
        """Follower: wait for rank 0's next plan."""
        ...

    def command(self, item: PlanItem) -> object:
        """Follower: the scheduler command for plan ``item``."""
        ...
