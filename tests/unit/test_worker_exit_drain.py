"""A worker's last frames reach the gateway even when its exit is seen
first (gateway.workers.process._pump): a dying worker sends each request's
error, lingers, then exits; the gateway must dispatch those errors rather
than replace them with its own."""

from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio

from gateway.workers.process import _pump
from shared.codec import gateway_codec, worker_codec
from shared.protocol import RequestOutput, StepOutputs


class ExitedProcess:
    """An asyncio process stand-in that has already exited with code 3."""

    pid = 0
    returncode = 3

    async def wait(self) -> int:
        return 3


async def scenario(tmp_path) -> tuple[str, list]:
    ctx = zmq.asyncio.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"ipc://{tmp_path}/out")
    push = ctx.socket(zmq.PUSH)
    push.connect(f"ipc://{tmp_path}/out")
    received: list = []
    frame = worker_codec().encode(
        StepOutputs(
            step=1, outputs=[RequestOutput(request_id="r", finish_reason="error", error="the model worker failed")]
        )
    )

    async def late_sender() -> None:
        await asyncio.sleep(0.05)  # the exit is already visible when the frame comes
        await push.send(frame)

    sender = asyncio.ensure_future(late_sender())
    try:
        reason = await _pump(pull, ExitedProcess(), gateway_codec(), received.append, lambda: 30.0, "m")
    finally:
        await sender
        push.close(0)
        pull.close(0)
        ctx.term()
    return reason, received


def test_frames_sent_just_before_the_exit_are_dispatched(tmp_path):
    reason, received = asyncio.run(scenario(tmp_path))
    assert reason == "worker exited with code 3"
    assert [o.error for m in received for o in m.outputs] == ["the model worker failed"]
