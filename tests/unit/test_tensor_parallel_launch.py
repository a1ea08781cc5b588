"""The pieces of a tensor-parallel worker that need no MLX: the step plan's
encoding and the ``mlx.launch`` command line built from a model's config."""

from __future__ import annotations

import socket

import msgspec
import pytest

from shared.config import ModelConfig
from shared.protocol import GenerateRequest, SamplingParams
from worker.engine.step_plan import (
    Admit,
    ClearCache,
    Drop,
    Expire,
    Halt,
    ReleaseChoice,
    StepPlan,
    decode_plan,
    encode_plan,
)
from worker.tensor_parallel.launch import BACKEND_ENV, WAKE_ENV, free_ports, launch_arguments, resolve_backend


def test_a_plan_round_trips_in_order():
    request = GenerateRequest(request_id="r1", prompt="hi", sampling=SamplingParams(max_tokens=3))
    plan = StepPlan(
        [Admit(request, [1, 2, 3], seed=9), Drop(["r0"]), ReleaseChoice("r1", 0), Expire(["r2"]), ClearCache(), Halt()],
        True,
    )
    assert decode_plan(encode_plan(plan)) == plan


def test_garbage_is_not_a_plan():
    with pytest.raises(msgspec.DecodeError):
        decode_plan(b"\x81\xa5items\x07")


def test_local_group_command_line():
    model = ModelConfig(name="m", tensor_parallel=2, tensor_parallel_port=41000)
    argv = launch_arguments(model, ["--worker-id", "w"], python="/venv/bin/python")
    assert argv == [
        "--backend",
        "ring",
        "--hosts",
        "127.0.0.1",
        "-n",
        "2",
        "--starting-port",
        "41000",
        "--python",
        "/venv/bin/python",
        "--env",
        f"{BACKEND_ENV}=ring",
        "--env",
        f"{WAKE_ENV}=tcp://127.0.0.1:41002",
        "--",
        "-m",
        "worker",
        "--worker-id",
        "w",
    ]


def test_hosts_and_hostfile_reach_mlx_launch(tmp_path):
    hosts = ModelConfig(
        name="m", tensor_parallel=2, tensor_parallel_hosts=["10.0.0.1", "10.0.0.2"], tensor_parallel_port=5000
    )
    argv = launch_arguments(hosts, [])
    assert argv[2:4] == ["--hosts", "10.0.0.1,10.0.0.2"]
    assert f"{WAKE_ENV}=tcp://10.0.0.1:5002" in argv  # rank 0's address, after the ring's ports
    hostfile = tmp_path / "hosts.json"
    hostfile.write_text('[{"ssh": "mac1", "ips": ["10.0.0.7"]}, {"ssh": "mac2", "ips": ["10.0.0.8"]}]')
    model = ModelConfig(name="m", tensor_parallel=2, tensor_parallel_hostfile=str(hostfile), tensor_parallel_port=1)
    argv = launch_arguments(model, [])
    assert argv[2:4] == ["--hostfile", str(hostfile)]
    assert f"{WAKE_ENV}=tcp://10.0.0.7:3" in argv


@pytest.mark.parametrize(
    ("backend", "hostfile", "platform", "expected"),
    [
        ("auto", "", "darwin", "ring"),
        ("auto", "h.json", "darwin", "jaccl"),
        ("auto", "h.json", "linux", "ring"),
        ("jaccl", "", "linux", "jaccl"),
        ("ring", "h.json", "darwin", "ring"),
    ],
)
def test_backend_resolution(backend, hostfile, platform, expected):
    model = ModelConfig(name="m", tensor_parallel=2, tensor_parallel_backend=backend, tensor_parallel_hostfile=hostfile)
    assert resolve_backend(model, platform) == expected


def test_free_ports_skip_a_taken_one():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        port = taken.getsockname()[1]
        first = free_ports(2, start=port)
        assert first > port
        for p in (first, first + 1):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", p))
