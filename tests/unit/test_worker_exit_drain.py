"""A worker's last frames reach the gateway even when its exit is seen
first (gateway.workers.process._pump): a dying worker sends each request's
error, waits for them to be written, then exits; the gateway must dispatch
those errors rather than replace them with its own, and waits longer for
them after the exit code that says they were sent."""

from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio

from gateway.workers.process import _pump
from shared.codec import gateway_codec, worker_codec
from shared.protocol import EXIT_THREAD_DIED, RequestOutput, StepOutputs


class ExitedProcess:
    """A child process stand-in that has already exited with ``returncode``."""

    pid = 0

    def __init__(self, returncode: int) -> None:
        self.returncode = returncode

    async def wait(self) -> int:
        return self.returncode


async def scenario(tmp_path, returncode: int = EXIT_THREAD_DIED, delay: float = 0.05) -> tuple[str, list]:
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
        await asyncio.sleep(delay)  # the exit is already visible when the frame comes
        await push.send(frame)

    sender = asyncio.ensure_future(late_sender())
    try:
        reason = await _pump(pull, ExitedProcess(returncode), gateway_codec(), received.append, lambda: 30.0, "m")
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


def test_after_a_thread_death_exit_the_gateway_reads_longer(tmp_path):
    """A frame 0.6 s after the exit is read when the worker exited with
    ``EXIT_THREAD_DIED`` (it sent its errors; a busy machine delays them),
    not after another exit (a killed worker sends nothing more)."""
    reason, received = asyncio.run(scenario(tmp_path, EXIT_THREAD_DIED, delay=0.6))
    assert reason == f"worker exited with code {EXIT_THREAD_DIED}"
    assert [o.error for m in received for o in m.outputs] == ["the model worker failed"]
    reason, received = asyncio.run(scenario(tmp_path, -9, delay=0.6))
    assert reason == "worker exited with code -9" and received == []
