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

While the group runs this process sleeps: ``mlx.launch``'s wait for its
ranks' output would otherwise spin (:func:`quiet_stdin_polls`).

Before starting any rank, this process reads the model's ``config.json``
when the source names a local model directory or a downloaded Hugging Face
repo (:func:`model_directory`): a sharded size that does not divide over the
ranks (:func:`size_problem`) is reported to the gateway as a worker's failed
load is (:func:`report_failure`), and no rank starts, so no host loads the
weights just to find it out. Everything else (a family without
``Model.shard``, a GGUF source) is found by the ranks as they load.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import socket
import sys
from pathlib import Path
from typing import Any, Mapping

from shared.config import ModelConfig, decode_model_config
from shared.sockets import Endpoints
from worker.parent_watch import watch_parent

BACKEND_ENV = "MLXD_TP_BACKEND"
"""The environment variable telling each rank which backend to join."""

WAKE_ENV = "MLXD_TP_WAKE"
"""The environment variable holding the group's wake-up endpoint
(``tcp://rank0-address:port``, see :func:`shared.sockets.open_wake_link`)."""

SHARDED_SIZES = ("num_attention_heads", "num_key_value_heads", "intermediate_size", "hidden_size")
"""Model arguments that mlx-lm's ``shard`` splits evenly over the ranks."""

FAILURE_LINGER_SECONDS = 5.0
"""Longest :func:`report_failure` waits for its messages to reach the gateway."""

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


def model_directory(source: str) -> Path | None:
    """The local mlx-lm directory that ``source`` names, found without
    converting or downloading anything: an existing directory with a
    ``config.json``, or the local snapshot of a Hugging Face repo id
    (``org/name[@revision]``, see :func:`shared.hub_snapshots.local_snapshot`)
    that has one. None for anything else (a GGUF file, a ``package:``
    source, a source that does not resolve); the ranks resolve those."""
    text = source.strip()
    if not text or text.startswith("package:"):
        return None
    path = Path(text).expanduser()
    if not path.exists():
        from shared.hub_snapshots import local_snapshot

        repo_id, _, revision = text.partition("@")
        try:
            path = local_snapshot(repo_id, revision or "main")
        except Exception:  # not a repo id, not in the cache, not servable: the ranks say why
            return None
    return path if (path / "config.json").is_file() else None


def size_mismatch(sizes: Mapping[str, Any], ranks: int, name: str, model_type: str) -> str | None:
    """The first of :data:`SHARDED_SIZES` that ``sizes`` (the model's
    arguments, or its ``config.json``) holds as an integer that does not
    divide over ``ranks``, as one line naming model ``name``, its
    ``model_type``, the size and ``ranks``; None when they all divide
    (other keys and values are ignored)."""
    for key in SHARDED_SIZES:
        value = sizes.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value % ranks:
            return f"model {name!r} ({model_type}): {key} = {value} does not divide over tensor_parallel = {ranks}"
    return None


def size_problem(model: ModelConfig) -> str | None:
    """Why ``model`` cannot be sharded over its ``tensor_parallel`` ranks,
    as far as its ``config.json`` tells before any rank starts: a sharded
    size that does not divide (:func:`size_mismatch`), worded as a rank
    reports it when it finds it while loading
    (:func:`worker.tensor_parallel.lockstep.shard_model`). None when the
    sizes divide or the config cannot be read here (see
    :func:`model_directory`)."""
    directory = model_directory(model.source)
    if directory is None:
        return None
    try:
        values = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(values, dict):
        return None
    problem = size_mismatch(values, model.tensor_parallel, model.name, str(values.get("model_type", "unknown")))
    return None if problem is None else f"TensorParallelError: {problem}"


def report_failure(worker_id: str, model: str, endpoints: Endpoints, message: str) -> None:
    """Tell the gateway that the model failed to load, as a worker would:
    ``Hello`` then ``Failed`` with ``message`` on the incarnation's output
    socket (the gateway marks the model failed with that message). Waits at
    most :data:`FAILURE_LINGER_SECONDS` for delivery."""
    import zmq

    from shared.codec import worker_codec
    from shared.protocol import PROTOCOL_VERSION, Failed, Hello
    from shared.sockets import flush_and_close, open_worker_link

    ctx = zmq.Context()
    send, receive = open_worker_link(ctx, endpoints, "worker")
    codec = worker_codec()
    try:
        send.send(codec.encode(Hello(worker_id=worker_id, pid=os.getpid(), model=model, protocol=PROTOCOL_VERSION)))
        send.send(codec.encode(Failed(worker_id=worker_id, message=message)))
    finally:
        receive.close(0)
        flush_and_close(send, FAILURE_LINGER_SECONDS)


def main(argv: list[str] | None = None) -> int:
    """Run the group until ``mlx.launch`` returns; the exit code is 0 (the
    gateway treats any exit it did not ask for as a dead worker), or 1 when
    the model was refused before any rank started (:func:`size_problem`)."""
    parser = argparse.ArgumentParser(prog="python -m worker.tensor_parallel.launch")
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("worker_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    worker_args = args.worker_args[1:] if args.worker_args[:1] == ["--"] else args.worker_args
    config = decode_model_config(worker_args[worker_args.index("--model-config") + 1])
    option = worker_args.index
    endpoints = Endpoints(requests=worker_args[option("--requests") + 1], outputs=worker_args[option("--outputs") + 1])
    watch_parent(args.parent_pid, endpoints)
    problem = size_problem(config)
    if problem is not None:
        report_failure(worker_args[option("--worker-id") + 1], config.name, endpoints, problem)
        return 1
    # mlx.launch forwards its stdin to the ranks and polls it: give it a pipe
    # that stays open and silent (end of file would make it spin)
    read_end, _write_end = os.pipe()
    os.dup2(read_end, 0)
    import mlx._distributed_utils.launch as mlx_launch

    quiet_stdin_polls(mlx_launch)
    sys.argv = ["mlx.launch", *launch_arguments(config, worker_args)]
    mlx_launch.main()
    return 0


def quiet_stdin_polls(module: Any) -> None:
    """Stop ``mlx.launch`` (``module``) from busy-waiting on its ranks'
    stdin pipes. Its thread for each rank waits in ``select`` for the
    rank's output or for the rank's stdin to be writable, to forward this
    process's stdin; an empty pipe is always writable, so each of those
    threads spins (about one core per group, for the group's whole life).
    This process's stdin is a silent pipe (:func:`main`): there is never
    anything to forward, so ``select`` is given no write set and the
    threads sleep until a rank writes, exits, or a second passes. A
    ``module`` that does not call :func:`select.select` by that name is
    left alone."""
    if getattr(module, "select", None) is not select.select:
        return

    def select_readable(rlist: list, wlist: list, xlist: list, timeout: float | None = None) -> tuple:
        readable, _, exceptional = select.select(rlist, [], xlist, timeout)
        return readable, [], exceptional

    module.select = select_readable


if __name__ == "__main__":
    sys.exit(main())
