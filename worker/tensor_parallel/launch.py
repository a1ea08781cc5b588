"""Start a tensor-parallel worker: ``mlx.launch`` running one rank per host.

``python -m worker.tensor_parallel.launch --parent-pid PID -- <worker arguments>`` is
what the gateway runs instead of ``python -m worker`` for a model with
``tensor_parallel`` > 1. It runs MLX's own launcher (``mlx.launch``,
in-process) with the model's hosts, backend and ports, each rank running
``python -m worker <worker arguments>``; rank 0 opens the worker's usual
sockets, so rank 0 must run on this machine.

Lifetime: this process ends when the gateway does (:func:`watch_parent`,
removing the worker's socket files as a worker would); the local ranks
watch this process in turn (``worker.main``), so no rank outlives the
gateway, and a rank orphaned by a launcher the gateway killed leaves the
gateway's socket directory alone. ``mlx.launch`` stops every rank when one exits with
an error, then returns; this process then exits, and the gateway sees a
dead worker and restarts it. Remote ranks are started over ``ssh`` by
``mlx.launch`` and end when their ssh session or the group breaks.
"""

from __future__ import annotations

import argparse
import os
import random
import socket
import sys

from shared.config import ModelConfig, decode_model_config
from shared.sockets import Endpoints
from worker.parent_watch import watch_parent

BACKEND_ENV = "MLXD_TP_BACKEND"
"""The environment variable telling each rank which backend to join."""

WAKE_ENV = "MLXD_TP_WAKE"
"""The environment variable holding the group's wake-up endpoint
(``tcp://rank0-address:port``, see :func:`shared.sockets.open_wake_link`)."""

FREE_PORT_RANGE = (40000, 60000)
"""Where free loopback ports are looked for (``tensor_parallel_port = 0``):
from a random start in this range, so two groups starting at the same
moment (two models preloading) are unlikely to pick the same ports."""


def resolve_backend(model: ModelConfig, platform: str = sys.platform) -> str:
    """``ring`` or ``jaccl`` for ``model``: ``auto`` is ``jaccl`` on macOS
    when a hostfile (which names the RDMA devices) is configured, ``ring``
    otherwise."""
    if model.tensor_parallel_backend != "auto":
        return model.tensor_parallel_backend
    return "jaccl" if platform == "darwin" and model.tensor_parallel_hostfile else "ring"


def free_ports(count: int, start: int | None = None) -> int:
    """The first of ``count`` consecutive TCP ports free on 127.0.0.1 now
    (the ring's ranks listen on ``port + rank``), searching up from
    ``start`` (None: a random port of :data:`FREE_PORT_RANGE`).

    Raises:
        OSError: no such run below 65536.
    """
    port = random.randrange(*FREE_PORT_RANGE) if start is None else start
    while port + count <= 65536:
        for offset in range(count):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
                try:
                    probe.bind(("127.0.0.1", port + offset))
                except OSError:
                    port += offset + 1
                    break
        else:
            return port
    raise OSError("no free loopback ports for the tensor-parallel group")


def rank0_address(model: ModelConfig) -> str:
    """The address the other ranks reach rank 0 at: the first of
    ``tensor_parallel_hosts``, the first IP of the hostfile's first host
    (read with MLX's own hostfile parser), or 127.0.0.1."""
    if model.tensor_parallel_hostfile:
        from mlx._distributed_utils.common import Hostfile

        first = Hostfile.from_file(model.tensor_parallel_hostfile).hosts[0]
        return first.ips[0] if first.ips else first.ssh_hostname
    return model.tensor_parallel_hosts[0] if model.tensor_parallel_hosts else "127.0.0.1"


def launch_arguments(model: ModelConfig, worker_args: list[str], python: str = sys.executable) -> list[str]:
    """The ``mlx.launch`` command line (without the program name) that runs
    ``python -m worker <worker_args>`` on every rank of ``model``'s group.
    The ring uses ports ``port`` … ``port + N - 1`` and the wake-up link
    ``port + N``."""
    backend = resolve_backend(model)
    if model.tensor_parallel_hostfile:
        where = ["--hostfile", model.tensor_parallel_hostfile]
    elif model.tensor_parallel_hosts:
        where = ["--hosts", ",".join(model.tensor_parallel_hosts)]
    else:
        where = ["--hosts", "127.0.0.1", "-n", str(model.tensor_parallel)]
    ranks = model.tensor_parallel
    port = model.tensor_parallel_port or free_ports(ranks + 1)
    return [
        "--backend",
        backend,
        *where,
        "--starting-port",
        str(port),
        "--python",
        python,
        "--env",
        f"{BACKEND_ENV}={backend}",
        "--env",
        f"{WAKE_ENV}=tcp://{rank0_address(model)}:{port + ranks}",
        "--",
        "-m",
        "worker",
        *worker_args,
    ]


def main(argv: list[str] | None = None) -> int:
    """Run the group until ``mlx.launch`` returns; the exit code is 0 (the
    gateway treats any exit it did not ask for as a dead worker)."""
    parser = argparse.ArgumentParser(prog="python -m worker.tensor_parallel.launch")
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("worker_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    worker_args = args.worker_args[1:] if args.worker_args[:1] == ["--"] else args.worker_args
    config = decode_model_config(worker_args[worker_args.index("--model-config") + 1])
    option = worker_args.index
    watch_parent(
        args.parent_pid,
        Endpoints(requests=worker_args[option("--requests") + 1], outputs=worker_args[option("--outputs") + 1]),
    )
    # mlx.launch forwards its stdin to the ranks and polls it: give it a pipe
    # that stays open and silent (end of file would make it spin)
    read_end, _write_end = os.pipe()
    os.dup2(read_end, 0)
    from mlx._distributed_utils.launch import main as mlx_launch

    sys.argv = ["mlx.launch", *launch_arguments(config, worker_args)]
    mlx_launch()
    return 0


if __name__ == "__main__":
    sys.exit(main())
