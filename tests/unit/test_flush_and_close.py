"""A process that exits right after sending still delivers what it sent
(``shared.sockets.flush_and_close``): a dying worker's last errors reach
the gateway. A plain close followed by ``os._exit`` loses the frames
ZeroMQ's I/O thread has not written yet (seen in about one run in three
with three small frames on a quiet machine, and in every run with the
frames below)."""

from __future__ import annotations

import subprocess
import sys

import zmq

FRAMES = 20
FRAME_BYTES = 256 * 1024

SENDER = f"""
import os, sys, zmq
from shared.sockets import configure, flush_and_close
requests = zmq.Context().socket(zmq.PULL)  # another open socket, in another context, as in a worker
outputs = configure(zmq.Context().socket(zmq.PUSH))
outputs.connect(sys.argv[1])
for i in range({FRAMES}):
    outputs.send(bytes([i % 256]) * {FRAME_BYTES})
flush_and_close(outputs, 10.0)
os._exit(3)
"""


def test_frames_sent_before_an_immediate_exit_arrive(tmp_path):
    ctx = zmq.Context()
    pull = ctx.socket(zmq.PULL)
    pull.bind(f"ipc://{tmp_path}/out")
    try:
        for _ in range(3):
            sender = subprocess.run([sys.executable, "-c", SENDER, f"ipc://{tmp_path}/out"], timeout=60)
            assert sender.returncode == 3
            received = []
            while pull.poll(1000):  # everything was written before the sender exited
                received.append(pull.recv())
            assert [len(f) for f in received] == [FRAME_BYTES] * FRAMES
            assert [f[0] for f in received] == [i % 256 for i in range(FRAMES)]
    finally:
        pull.close(0)
        ctx.term()
