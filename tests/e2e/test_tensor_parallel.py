"""One model over an MLX distributed group (``tensor_parallel``), end to end.

Real gateways start real groups with ``mlx.launch`` (ring backend, every
rank on 127.0.0.1). The tiny random-weight llama (4 heads, 2 KV heads)
runs on 2 ranks next to the same weights in one process: greedy and seeded
outputs must be identical, with several concurrent streams, cancellation
in between, and after a rank was killed and the group restarted. A hung
rank gets its group replaced; no rank outlives its gateway. Families mlx-lm
cannot shard, and sizes that do not divide, fail to load with a message
naming the cause.
"""

from __future__ import annotations

import os
import re
import select
import signal
import time
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest

from shared.config import DEFAULT_MODEL_SOURCE
from tests.conftest import REAL, start_server
from tests.tiny_model import build_tiny_model
from worker.loading.loader import resolve_source
from worker.tensor_parallel.launch import quiet_stdin_polls

TP = "tiny-tp"
SINGLE = "tiny-one"
PROMPTS = ["The quick brown fox", "Once upon a time", "def add(a, b):", "Paris is the capital of"]

STALL_SECONDS = 2.0
"""``MLXD_TP_STALL_SECONDS`` of the hung-rank test: rank 0 stops
heartbeating once one plan exchange has waited this long. The longest
exchange of a healthy group was 0.9 s (2 cores, load average 8, streams
running); a longer one only pauses the heartbeats, so a healthy group is
replaced only by an exchange of :data:`STALL_SECONDS` +
:data:`HEARTBEAT_TIMEOUT` (10 s, 11x that)."""

HEARTBEAT_TIMEOUT = 8.0
"""The hung-rank test's heartbeat timeout: heartbeats are sent every 0.5 s;
the longest gap the gateway saw from a healthy group's rank 0 was 1.0 s (2
cores, load average 8, streams running): 8 s holds with that machine 4x
slower again. A hung rank is found within about 10 s."""


def children(pid: int) -> list[int]:
    """The direct children of process ``pid`` (Linux /proc)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        text = (task / "children").read_text().split()
        found += [int(p) for p in text]
    return found


def rank_pids(launcher: int) -> dict[int, int]:
    """``{rank: pid}`` of the group started by the launcher ``launcher``."""
    ranks: dict[int, int] = {}
    for pid in children(launcher):
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        for entry in env:
            if entry.startswith(b"MLX_RANK="):
                ranks[int(entry.split(b"=", 1)[1])] = pid
    return ranks


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


def wait_exited(pids, what: str, timeout: float = 60) -> None:
    """Wait until none of ``pids`` runs any more; fail with ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while any(alive(p) for p in pids):
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def kill_left(pids) -> None:
    """SIGKILL whichever of ``pids`` still runs (a test that failed midway
    must leave no rank behind)."""
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def sdk(url: str, timeout: float = 300) -> openai.OpenAI:
    """The openai SDK on the gateway at ``url`` (no retries; an explicit
    timeout, generous for a loaded machine, instead of the SDK's 10 minutes)."""
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=timeout)


def complete(client: openai.OpenAI, model: str, prompt: str, **kwargs) -> str:
    """The streamed text of one completion of ``prompt``."""
    stream = client.completions.create(model=model, prompt=prompt, max_tokens=10, stream=True, **kwargs)
    return "".join(chunk.choices[0].text for chunk in stream if chunk.choices)


def complete_all(client: openai.OpenAI, model: str, **kwargs) -> list[str]:
    """Every prompt of :data:`PROMPTS` at once, as concurrent streams."""
    with ThreadPoolExecutor(len(PROMPTS)) as pool:
        return list(pool.map(lambda p: complete(client, model, p, **kwargs), PROMPTS))


@pytest.fixture(scope="module")
def tp_server(tiny_model_dir, tmp_path_factory):
    """A gateway with the tiny model twice: on a 2-rank group and in one process."""
    srv = start_server(
        tmp_path_factory.mktemp("tp-gw"),
        [
            {"name": TP, "source": str(tiny_model_dir), "tensor_parallel": 2, "max_batch_size": 8},
            {"name": SINGLE, "source": str(tiny_model_dir), "max_batch_size": 8},
        ],
        api_key=None,
    )
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def client(tp_server):
    return sdk(tp_server.url)


def test_greedy_and_seeded_outputs_match_one_process(client):
    """Concurrent greedy streams, then seeded sampled ones, equal the
    single-process model's (all ranks step, sample and cache alike)."""
    expected = complete_all(client, SINGLE, temperature=0)
    assert complete_all(client, TP, temperature=0) == expected
    assert all(expected)
    sampled = complete_all(client, SINGLE, temperature=1.0, seed=7)
    assert complete_all(client, TP, temperature=1.0, seed=7) == sampled
    # unseeded sampling: rank 0 picks the seed for every rank; the group stays in step
    assert all(complete_all(client, TP, temperature=1.0))
    assert complete_all(client, TP, temperature=0) == expected


HOLDS = re.compile(r"model (\S+) rank (\d+) holds (\d+) bytes of weights \((\d+) in its decoder layers\)")


def test_each_rank_holds_only_its_shard(tp_server):
    """What each process reports holding after loading: each of the two
    ranks keeps half of every decoder layer's sharded weights (all of them
    but the norms), and exactly what the single process keeps outside the
    layers (embeddings, final norm: replicated)."""
    held = {(m[1], int(m[2])): (int(m[3]), int(m[4])) for m in HOLDS.finditer(tp_server.log_path.read_text())}
    assert {(TP, 0), (TP, 1), (SINGLE, 0)} <= set(held), held
    total, layers = held[(SINGLE, 0)]
    ranks = [held[(TP, 0)], held[(TP, 1)]]
    assert ranks[0] == ranks[1], ranks
    rank_total, rank_layers = ranks[0]
    assert layers > 0 and layers / 2 <= rank_layers < 0.55 * layers, (rank_layers, layers)
    assert rank_total - rank_layers == total - layers  # the rest is the same on every process


def test_cancelled_stream_leaves_the_group_in_step(client, tp_server):
    """A stream closed mid-way is aborted on every rank; the next requests
    (reusing the prefix cache) still match the single process."""
    aborted = tp_server.worker(TP)["stats"]["requests_aborted"]
    # far more tokens than the group makes before the close reaches it (200 took it about a second)
    stream = client.completions.create(model=TP, prompt=PROMPTS[0], max_tokens=2000, stream=True, temperature=0)
    for i, _ in enumerate(stream):
        if i == 2:
            break
    stream.close()
    deadline = time.monotonic() + 120
    while tp_server.worker(TP)["stats"]["requests_aborted"] <= aborted:
        assert time.monotonic() < deadline, tp_server.worker(TP)["stats"]
        time.sleep(0.2)
    assert complete_all(client, TP, temperature=0) == complete_all(client, SINGLE, temperature=0)


def test_killed_rank_fails_the_stream_and_the_group_restarts(client, tp_server):
    """SIGKILL of rank 1 mid-stream: the stream ends with an error, every
    rank of the old group exits, the gateway starts a new group that
    serves the same answers."""
    status = tp_server.worker(TP)
    launcher, restarts = status["pid"], status["restarts"]
    ranks = rank_pids(launcher)
    assert sorted(ranks) == [0, 1]
    expected = complete(client, SINGLE, PROMPTS[1], temperature=0)
    stream = client.completions.create(model=TP, prompt=PROMPTS[1], max_tokens=2000, stream=True, temperature=0)
    try:
        with pytest.raises(openai.APIError):
            for i, _ in enumerate(stream):
                if i == 1:
                    os.kill(ranks[1], signal.SIGKILL)
        wait_exited((launcher, *ranks.values()), "a rank of the broken group is still running", timeout=120)
    except BaseException:
        kill_left(ranks.values())  # a failed test leaves no rank of the broken group behind
        raise
    finally:
        stream.close()
    tp_server.wait_ready(TP, timeout=120, after_restarts=restarts + 1)
    assert complete(client, TP, PROMPTS[1], temperature=0) == expected


def test_hung_rank_stops_the_heartbeats_and_the_group_is_replaced(tiny_model_dir, tmp_path):
    """A rank that hangs (SIGSTOP) leaves rank 0 waiting in a plan exchange:
    rank 0 stops heartbeating, the gateway kills the group (the request
    ends with an error, the launcher and rank 0 exit) and starts a new one
    that serves. The gateway's graceful stop then ends the new group: rank
    0 shares the stop with rank 1, and the launcher and every rank exit."""
    srv = start_server(
        tmp_path,
        [{"name": TP, "source": str(tiny_model_dir), "tensor_parallel": 2}],
        api_key=None,
        env={"MLXD_TP_STALL_SECONDS": str(STALL_SECONDS)},
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
    )
    hung, pids = None, []
    pool = ThreadPoolExecutor(1)
    try:
        client = sdk(srv.url, timeout=120)
        launcher = srv.worker(TP)["pid"]
        ranks = rank_pids(launcher)
        pids = [launcher, *ranks.values()]
        hung = ranks[1]
        os.kill(hung, signal.SIGSTOP)
        # the request that meets the hung rank ends once the gateway gives up on the group (about
        # 10 s); a deadline of its own, as the stream's keep-alive comments would outlast any read timeout
        doomed = pool.submit(complete, client, TP, PROMPTS[0], temperature=0)
        with pytest.raises(openai.APIError):
            doomed.result(timeout=120)
        srv.wait_ready(TP, timeout=120, after_restarts=1)
        wait_exited((launcher, ranks[0]), "the launcher or rank 0 of the hung group is still running")
        assert complete(client, TP, PROMPTS[0], temperature=0)
        launcher = srv.worker(TP)["pid"]
        ranks = rank_pids(launcher)
        assert sorted(ranks) == [0, 1]
        pids += [launcher, *ranks.values()]
        srv.stop()
        assert f"rank 1 of model {TP} stopped with rank 0" in srv.log_path.read_text()  # the hung rank 1 logs nothing
        wait_exited((launcher, *ranks.values()), "a rank outlived the stopped gateway")
    except BaseException:
        kill_left(pids)  # a failed test leaves no rank behind
        raise
    finally:
        try:
            if hung is not None:
                kill_left([hung])
        finally:
            srv.stop()  # ends a request still waiting on the hung group
            pool.shutdown(wait=False)


def test_no_rank_outlives_a_killed_gateway(tiny_model_dir, tmp_path):
    """SIGKILL of the gateway (no cleanup): the launcher and every rank
    exit. (The graceful stop: see the hung-rank test.)"""
    srv = start_server(tmp_path, [{"name": TP, "source": str(tiny_model_dir), "tensor_parallel": 2}], api_key=None)
    launcher, ranks = None, []
    try:
        launcher = srv.worker(TP)["pid"]
        ranks = list(rank_pids(launcher).values())
        assert len(ranks) == 2
        srv.proc.kill()
        srv.proc.wait(timeout=60)
        wait_exited((launcher, *ranks), "a rank outlived the gateway")
    except BaseException:
        kill_left([p for p in (launcher, *ranks) if p is not None])  # a failed test leaves no rank behind
        raise
    finally:
        srv.stop()  # a no-op once the gateway is gone (it closes its response record)


def test_unshardable_models_fail_with_the_cause(tmp_path):
    """A family without ``Model.shard`` (gemma3_text) and a head count
    that does not divide over the ranks (the default model on 2 ranks): the
    model fails to load, requests get a 503 naming the model type or the
    size. The size is read from the model directory's ``config.json``
    before any rank starts: no rank of that group ever runs (nor loads the
    weights)."""
    gemma = build_tiny_model(tmp_path / "gemma", family="gemma3_text")
    srv = start_server(
        tmp_path,
        [
            {"name": "gemma-tp", "source": str(gemma), "tensor_parallel": 2},
            # SmolLM2-135M has 9 attention heads and 3 KV heads: 3 ranks, not 2 (its converted
            # mlx-lm directory, whose config.json the launcher reads; a GGUF file is the ranks' to read)
            {"name": "smollm2-tp", "source": str(resolve_source(DEFAULT_MODEL_SOURCE)), "tensor_parallel": 2},
        ],
        api_key=None,
        wait=False,
    )
    try:
        for name, cause in (
            ("smollm2-tp", "num_attention_heads = 9"),
            ("gemma-tp", "cannot shard model type 'gemma3_text'"),
        ):
            deadline = time.monotonic() + 120
            while (status := srv.worker(name))["state"] != "failed":
                assert time.monotonic() < deadline, status
                time.sleep(0.3)
            assert cause in status["last_error"]
            r = httpx.post(
                f"{srv.url}/v1/completions", json={"model": name, "prompt": "hi", "max_tokens": 2}, timeout=120
            )
            assert r.status_code == 503 and cause in r.json()["error"]["message"]
        assert "[worker:smollm2-tp-" not in srv.log_path.read_text()  # no rank of it logged a line
    finally:
        srv.stop()


def test_the_launcher_does_not_spin_on_its_ranks_stdin():
    """``mlx.launch`` waits for each rank's output with ``select``, also
    polling the rank's stdin pipe for writability (always true: a busy
    loop, about a core per group). The launcher gives it a ``select``
    without the write set: the installed ``mlx.launch`` still calls
    ``select`` by that name, and the replacement never reports a writable
    pipe but does report a readable one."""
    import mlx._distributed_utils.launch as mlx_launch

    assert mlx_launch.select is select.select  # what quiet_stdin_polls replaces
    module = types.SimpleNamespace(select=select.select)
    quiet_stdin_polls(module)
    read_end, write_end = os.pipe()
    try:
        assert module.select([read_end], [write_end], [], 0) == ([], [], [])
        os.write(write_end, b"x")
        assert module.select([read_end], [write_end], [], 0) == ([read_end], [], [])
    finally:
        os.close(read_end)
        os.close(write_end)


@pytest.mark.slow
def test_default_model_on_three_ranks_matches_one_process(real_server, tmp_path):
    """SmolLM2-135M (9 heads, 3 KV heads, so 3 ranks) sharded with mlx-lm's
    ``Model.shard``: concurrent greedy streams through a real gateway equal
    the single-process model's (``real_server``)."""
    srv = start_server(tmp_path, [{"name": REAL, "source": DEFAULT_MODEL_SOURCE, "tensor_parallel": 3}], api_key=None)
    try:
        prompts = ["The capital of France is", "def fib(n):", "Water boils at"]
        expected, got = [], []
        for url, out in ((real_server.url, expected), (srv.url, got)):
            client = sdk(url)
            with ThreadPoolExecutor(len(prompts)) as pool:
                out += pool.map(
                    lambda p, c=client: (
                        c.completions.create(model=REAL, prompt=p, max_tokens=6, temperature=0).choices[0].text
                    ),
                    prompts,
                )
        assert got == expected and all(expected)
    finally:
        srv.stop()
