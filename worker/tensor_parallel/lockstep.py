"""One model over several processes: an MLX distributed group in lockstep.

A model with ``tensor_parallel = N`` is served by N worker processes (ranks)
started together by ``mlx.launch`` (see :mod:`worker.tensor_parallel.launch`). Each rank
joins the group (:func:`join_group`), loads the model and keeps its shard
of every layer with mlx-lm's own ``Model.shard`` (:func:`shard_model`);
each forward pass then sums the partial results over the group.

Only rank 0 talks to the gateway. Every rank runs the same scheduler; rank
0 decides (admissions, aborts, releases, deadlines, sampling seeds) and
shares each loop turn's decisions as one :class:`~worker.engine.step_plan.StepPlan`
through :class:`Lockstep`, so all ranks insert, step and evict identically.

Failure: a collective with a dead rank raises (``[ring] connection to a peer
was lost``) on the scheduler thread, which ends that worker like any engine
failure (``worker.main``); ``mlx.launch`` then stops the other ranks.

Threads: everything here runs on the worker's scheduler thread (MLX work).
"""

from __future__ import annotations

import os
import random
import time
from typing import Any, Callable

import mlx.core as mx
import msgspec
import numpy as np

from worker.engine.step_plan import (
    Admit,
    ClearCache,
    Drop,
    Expire,
    Halt,
    PlanItem,
    ReleaseChoice,
    StepPlan,
    decode_plan,
    encode_plan,
)
from worker.messages import Abort, Admission, ClearPrefixCache, Release, Stop
from worker.tensor_parallel.launch import BACKEND_ENV, SHARDED_SIZES, WAKE_ENV, size_mismatch

STALL_SECONDS = float(os.environ.get("MLXD_TP_STALL_SECONDS", "30"))
"""Longest rank 0 may wait in one plan exchange before its group counts as
stalled (``MLXD_TP_STALL_SECONDS`` overrides the 30 s, for tests). The other ranks do the same work in step with rank 0, so an
exchange normally takes milliseconds; a rank that hangs (not dies) keeps
rank 0 waiting here, and rank 0 then stops heartbeating so the gateway
replaces the group."""

WAKE_TIMEOUT = 120.0
"""Seconds rank 0 waits for every other rank to connect its wake-up link."""


class TensorParallelError(RuntimeError):
    """The model cannot be served by this group (family without ``shard``,
    sizes that do not divide, a group of the wrong size)."""


def join_group(backend: str, size: int) -> Any:
    """Join this process's MLX distributed group (``mlx.launch`` set the
    environment) over ``backend`` (``ring`` or ``jaccl``).

    Raises:
        TensorParallelError: the group has not ``size`` ranks.
        RuntimeError: MLX could not initialise the backend.
    """
    group = mx.distributed.init(strict=True, backend=backend)
    if group.size() != size:
        raise TensorParallelError(f"the distributed group has {group.size()} ranks, tensor_parallel asks for {size}")
    return group


def shard_model(model: Any, group: Any, name: str) -> None:
    """Keep this rank's shard of ``model`` (mlx-lm's ``model.shard(group)``)
    and evaluate it, freeing the rest of each weight.

    Raises:
        TensorParallelError: the model's family has no ``shard`` in the
            installed mlx-lm, or a sharded size does not divide by the
            group size (the message names the model type and the size).
    """
    args = getattr(model, "args", None)
    model_type = getattr(model, "model_type", None) or getattr(args, "model_type", type(model).__module__)
    if not callable(getattr(model, "shard", None)):
        raise TensorParallelError(
            f"model {name!r}: mlx-lm cannot shard model type {model_type!r} for tensor parallelism; "
            "remove tensor_parallel or serve a family that implements Model.shard (llama, qwen2, qwen3, ...)"
        )
    sizes = {key: getattr(args, key, None) for key in SHARDED_SIZES}
    problem = size_mismatch(sizes, group.size(), name, model_type)
    if problem is not None:
        raise TensorParallelError(problem)
    model.shard(group)
    mx.eval(model.parameters())


def join_lockstep(size: int, prompts: Callable[[], Any]) -> Lockstep:
    """Join the group of ``size`` ranks over the backend ``mlx.launch`` was
    told to use (:data:`worker.tensor_parallel.launch.BACKEND_ENV`) and return its
    :class:`Lockstep`; ``prompts`` gives this rank's prompt builder (once
    loaded) for rebuilding rank 0's admissions.

    Raises:
        TensorParallelError, RuntimeError: see :func:`join_group`.
    """
    import zmq

    from shared.sockets import open_wake_link

    group = join_group(os.environ.get(BACKEND_ENV, "ring"), size)
    side = "leader" if group.rank() == 0 else "follower"
    wake = open_wake_link(zmq.Context.instance(), os.environ[WAKE_ENV], side)
    lockstep = Lockstep(group, wake, rebuild=lambda item: rebuild_admission(prompts(), item))
    if lockstep.leader:
        lockstep.await_followers(WAKE_TIMEOUT)
    return lockstep


def rebuild_admission(prompts: Any, item: Admit) -> Admission:
    """Follower: the admission rank 0 admitted, built by this rank's own
    prompt builder (same template, tokenizer, grammars) with rank 0's
    tokens and seed, and no deadline (rank 0's clock decides, see
    :class:`~worker.engine.step_plan.Expire`).

    Raises:
        worker.prompting.builder.PromptError: this rank cannot build it (the group is
            out of step; fatal).
    """
    admission = prompts.build(item.request)
    admission.prompt = list(item.prompt)
    admission.deadline = None
    if item.seed is not None:
        admission.params = msgspec.structs.replace(admission.params, seed=item.seed)
    return admission


class Lockstep:
    """Shares rank 0's loop turns with the other ranks of ``group``.

    Rank 0 (the leader) calls :meth:`record` for each command it applies
    and :meth:`publish` once per loop turn; each other rank calls
    :meth:`receive` once per turn and applies the plan with
    :meth:`command`. ``wake`` is this rank's end of the group's wake-up
    link (:func:`shared.sockets.open_wake_link`): rank 0 sends one empty
    frame before each exchange, and the others sleep on it instead of
    spinning in MLX's collective while the group is idle. ``rebuild`` (followers) turns an :class:`Admit` back
    into an :class:`Admission` (the follower's own prompt builder, same
    template and tokenizer). Scheduler thread only.
    """

    def __init__(self, group: Any, wake: Any, rebuild: Callable[[Admit], Admission] | None = None) -> None:
        self.group = group
        self._wake = wake
        self.leader = group.rank() == 0
        self._rebuild = rebuild
        self._items: list[PlanItem] = []
        self._waiting_since: float | None = None

    def await_followers(self, timeout: float) -> None:
        """Leader: wait until every other rank has subscribed to the
        wake-up link (so no wake-up frame is lost to a late subscriber).

        Raises:
            TensorParallelError: not all of them within ``timeout`` seconds.
        """
        import zmq

        missing = self.group.size() - 1
        deadline = time.monotonic() + timeout
        while missing:
            left = deadline - time.monotonic()
            if left <= 0 or not self._wake.poll(int(left * 1000), zmq.POLLIN):
                raise TensorParallelError(f"{missing} rank(s) did not connect to rank 0's wake-up link")
            if self._wake.recv()[:1] == b"\x01":
                missing -= 1

    def stalled(self, now: float, limit: float = STALL_SECONDS) -> bool:
        """True when this rank has waited in one exchange for more than
        ``limit`` seconds (any thread may ask; a plain read)."""
        since = self._waiting_since
        return since is not None and now - since > limit

    def record(self, item: object) -> object:
        """Leader: note ``item`` (an Admission, Abort, Release, ClearPrefixCache or Stop) for
        this turn's plan; return the command to apply. A sampled admission
        without a seed gets one here, shared with every rank, so all ranks
        draw the same tokens."""
        if isinstance(item, Admission):
            params = item.params
            if params.temperature != 0.0 and params.seed is None:
                params = msgspec.structs.replace(params, seed=random.getrandbits(63))
                item.params = params
            self._items.append(Admit(item.request, list(item.prompt), params.seed))
        elif isinstance(item, Abort):
            self._items.append(Drop(list(item.request_ids)))
        elif isinstance(item, Release):
            self._items.append(ReleaseChoice(item.request_id, item.index))
        elif isinstance(item, ClearPrefixCache):
            self._items.append(ClearCache())
        elif isinstance(item, Stop):
            self._items.append(Halt())
        return item

    def record_expired(self, request_ids: list[str]) -> None:
        """Leader: these requests passed their deadline in this turn."""
        self._items.append(Expire(list(request_ids)))

    def publish(self, step: bool) -> None:
        """Leader: send this turn's plan to every rank (a collective; the
        followers are waiting in :meth:`receive`). An idle turn with nothing
        to say sends nothing."""
        if not self._items and not step:
            return
        plan = StepPlan(self._items, step)
        self._items = []
        self._wake.send(b"")
        self._share(encode_plan(plan))

    def receive(self) -> StepPlan:
        """Follower: wait for rank 0's next plan.

        Raises:
            RuntimeError: a rank died (the group is broken).
            msgspec.DecodeError: the bytes are not a plan.
        """
        self._wake.recv()
        return decode_plan(self._share(b""))

    def command(self, item: PlanItem) -> object:
        """Follower: the scheduler command for plan ``item`` (an Expire
        stays an Expire; the scheduler handles it)."""
        if isinstance(item, Admit):
            assert self._rebuild is not None
            return self._rebuild(item)
        if isinstance(item, Drop):
            return Abort(list(item.request_ids))
        if isinstance(item, ReleaseChoice):
            return Release(item.request_id, item.index)
        if isinstance(item, Halt):
            return Stop()
        if isinstance(item, ClearCache):
            return ClearPrefixCache("")
        return item

    def _share(self, data: bytes) -> bytes:
        """Broadcast ``data`` from rank 0: every rank sums its bytes (zeros
        on the others), first the length, then the payload. Collectives
        pair up by order, so this must run on the stream the engine's steps
        use (mlx-lm evaluates the next decode step asynchronously)."""
        from worker.engine.batch_engine import engine_stream

        group = self.group
        # on the engine's stream: after the collectives of any step the
        # engine queued asynchronously, in the same order on every rank
        self._waiting_since = time.monotonic()
        with mx.stream(engine_stream()):
            length = mx.distributed.all_sum(mx.array([len(data)], dtype=mx.int32), group=group)
            size = int(length.item())
            payload = np.frombuffer(data, dtype=np.uint8) if self.leader else np.zeros(size, dtype=np.uint8)
            summed = mx.distributed.all_sum(mx.array(payload), group=group)
            data = bytes(np.array(summed, copy=False))
        self._waiting_since = None
        return data
