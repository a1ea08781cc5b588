"""Load-generation helpers shared by the bench scripts.

An async streaming client that records time to first token and counts
completion tokens from the server's usage chunk (or, for a server that sends
none, its content chunks), context managers that run an mlxd gateway, an
``mlx_lm.server`` or a vllm-mlx server for a model on a free loopback port,
and small statistics helpers. Nothing here asserts: scripts print measured ratios.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import Server, start_server  # noqa: E402


@dataclass
class Result:
    """One streamed request: seconds to the first content byte, total
    seconds, completion tokens and cached prompt tokens.

    ``tokens`` comes from the usage chunk when the server sent one
    (``counted_by == "usage"``), else it is the number of content chunks
    (``"chunks"``). ``prompt_tokens`` is from usage (0 without). ``error``
    names what went wrong when the request failed (then the counts are what
    arrived before the failure)."""

    ttft: float
    total: float
    tokens: int
    cached: int
    prompt_tokens: int = 0
    chunks: int = 0
    counted_by: str = "usage"
    error: str | None = None

    @property
    def stream_rate(self) -> float:
        """Tokens per second this stream saw after its first token (its
        decode rate as the client sees it); 0 when it cannot be told."""
        span = self.total - self.ttft
        return (self.tokens - 1) / span if self.tokens > 1 and span > 0 else 0.0


async def stream_chat(client: httpx.AsyncClient, url: str, body: dict) -> Result:
    """Send one streaming chat request and measure it; never raises for a
    failed request (the :class:`Result` carries the error instead).

    JSON is parsed only until the first content and for frames that carry
    ``usage``, so the client spends little CPU on a 2-core machine that it
    shares with the server under test."""
    body = body | {"stream": True, "stream_options": {"include_usage": True}}
    started = time.perf_counter()
    ttft = None
    usage: dict = {}
    chunks = 0
    error = None
    try:
        async with client.stream("POST", url, json=body) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:200]}")
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                if ttft is not None and '"usage"' not in line:
                    chunks += 1 if '"content"' in line else 0
                    continue
                frame = json.loads(line[6:])
                if frame.get("usage"):
                    usage = frame["usage"]
                choices = frame.get("choices") or []
                if choices and (choices[0].get("delta") or {}).get("content"):
                    chunks += 1
                    if ttft is None:
                        ttft = time.perf_counter() - started
    except (httpx.HTTPError, RuntimeError, ValueError) as exc:
        error = f"{type(exc).__name__}: {exc}"[:200]
    total = time.perf_counter() - started
    details = usage.get("prompt_tokens_details") or {}
    counted_by = "usage" if "completion_tokens" in usage else "chunks"
    tokens = usage["completion_tokens"] if counted_by == "usage" else chunks
    return Result(
        ttft or total,
        total,
        tokens,
        details.get("cached_tokens", 0) or 0,
        usage.get("prompt_tokens", 0),
        chunks,
        counted_by,
        error,
    )


async def concurrent(url: str, bodies: list[dict], send=None, timeout: float = 600) -> tuple[list, float]:
    """Run every body at once; return the results (in body order) and the
    wall time. ``send(client, url, body)`` makes one request and never
    raises (default :func:`stream_chat`); ``timeout``: each request's, in
    seconds."""
    send = send or stream_chat
    limits = httpx.Limits(max_connections=len(bodies) + 4, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as client:
        started = time.perf_counter()
        results = await asyncio.gather(*(send(client, url, b) for b in bodies))
        return list(results), time.perf_counter() - started


async def spread(url: str, bodies: list[dict], gap: float) -> tuple[list[Result], float]:
    """Start body ``i`` ``i * gap`` seconds after the first (each on its own
    connection, whether or not earlier ones finished); return the results in
    body order and the wall time from the first start to the last finish.
    Each result's TTFT counts from its own start."""
    limits = httpx.Limits(max_connections=len(bodies) + 4, max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=600, limits=limits) as client:
        started = time.perf_counter()

        async def one(i: int, b: dict) -> Result:
            await asyncio.sleep(max(0.0, started + i * gap - time.perf_counter()))
            return await stream_chat(client, url, b)

        results = await asyncio.gather(*(one(i, b) for i, b in enumerate(bodies)))
        return list(results), time.perf_counter() - started


def aggregate(results: list[Result], wall: float) -> float:
    """Completion tokens per second over the whole run."""
    return sum(r.tokens for r in results) / wall


def median(values: list[float]) -> float:
    """The median (0 for no values)."""
    return statistics.median(values) if values else 0.0


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by nearest rank (0 for no values);
    with fewer than 100 values p99 is the largest."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def blas_environment() -> dict[str, str]:
    """The environment mlxd gives its workers (OpenBLAS preloaded on Linux),
    for every other contender's process so all run on the same BLAS."""
    from gateway.workers.process import worker_environment

    return worker_environment()


def wait_http(url: str, proc: subprocess.Popen, log_path: Path, timeout: float = 300) -> None:
    """Wait until ``url`` answers 200, failing early if ``proc`` exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited:\n{log_path.read_text()[-4000:]}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{url} not ready:\n{log_path.read_text()[-4000:]}")


@dataclass
class PeerServer:
    """A running ``mlx_lm.server``: its base URL, process and log file."""

    url: str
    proc: subprocess.Popen
    log_path: Path

    def stop(self) -> None:
        """SIGTERM (then SIGKILL) the server and wait for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


MLX_LM_SERVER_FLAGS = (
    "--decode-concurrency",
    "32",
    "--prompt-concurrency",
    "32",
    "--prefill-step-size",
    "2048",
    "--prompt-cache-size",
    "64",
    "--log-level",
    "WARNING",
)
"""The ``mlx_lm.server`` 0.32.2 settings the comparison uses (its best
throughput here; bench/NOTES.md says why): 32 sequences decoded together,
every waiting prompt prefilled in one batch, 2,048-token prefill chunks, a
prompt cache of 64 entries, warnings-only logging."""


@contextlib.contextmanager
def peer_server(tmp: Path, argv: list[str], log_name: str, env: dict[str, str] | None = None) -> Iterator[PeerServer]:
    """Run ``argv`` (a server command line without ``--host``/``--port``;
    those are appended: 127.0.0.1 and a free port) with OpenBLAS preloaded
    as mlxd does and ``env`` added; wait until its ``/health`` answers 200;
    SIGTERM it (SIGKILL after 15 s) on exit. Output goes to ``tmp/log_name``."""
    from tests.conftest import free_port

    tmp.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = tmp / log_name
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [*argv, "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env={**blas_environment(), "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    server = PeerServer(f"http://127.0.0.1:{port}", proc, log_path)
    try:
        wait_http(f"{server.url}/health", proc, log_path)
        yield server
    finally:
        server.stop()
        log.close()


@contextlib.contextmanager
def mlx_lm_server(tmp: Path, model_dir: Path, flags: tuple[str, ...] = MLX_LM_SERVER_FLAGS) -> Iterator[PeerServer]:
    """Run ``python -m mlx_lm.server --model model_dir`` (mlxd's venv) with
    OpenBLAS preloaded as mlxd does; wait until it answers; stop it on exit."""
    argv = [sys.executable, "-m", "mlx_lm.server", "--model", str(model_dir), *flags]
    with peer_server(tmp, argv, "mlx_lm_server.log") as server:
        yield server


VLLM_MLX_FLAGS = ("--continuous-batching",)
"""The vllm-mlx 0.6.0 settings the comparison uses: its continuous-batching
engine (mlx-lm's BatchGenerator underneath) with every other setting at its
default (``--max-num-seqs 256``, ``--prefill-batch-size 8``,
``--completion-batch-size 32``, prefix cache on, ``--stream-interval 1``),
as issue #21 measured it."""


@contextlib.contextmanager
def vllm_mlx_server(
    tmp: Path, model_dir: Path, python: Path, served_name: str, flags: tuple[str, ...] = VLLM_MLX_FLAGS
) -> Iterator[PeerServer]:
    """Run ``vllm-mlx serve model_dir`` from the venv of ``python`` (see
    bench/peers.py) with OpenBLAS preloaded as mlxd does, serving the model
    as ``served_name``; wait until it answers; stop it on exit. ``HOME`` is
    pointed at ``tmp/home`` because vllm-mlx saves its prefix cache under
    ``~/.cache/vllm-mlx`` at shutdown and loads it at start: a later run
    must not start with this run's prompts cached."""
    home = tmp / "home"
    home.mkdir(parents=True, exist_ok=True)
    argv = [
        str(python.parent / "vllm-mlx"),
        "serve",
        str(model_dir),
        "--served-model-name",
        served_name,
        *flags,
    ]
    with peer_server(tmp, argv, "vllm_mlx.log", env={"HOME": str(home)}) as server:
        yield server


class InProcessEngine:
    """bench/inprocess.py running in its own process (OpenBLAS preloaded
    as mlxd does): load once, then :meth:`run` measurements on demand."""

    def __init__(self, model_dir: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / "inprocess.py"), str(model_dir)],
            cwd=ROOT / "bench",
            env=blas_environment(),
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        ready = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not ready:
            raise RuntimeError(f"bench/inprocess.py exited with code {self.proc.wait()}")

    @property
    def pid(self) -> int:
        """The engine process's id."""
        return self.proc.pid

    def run(self, chats: list[list[dict]], tokens: int, prefill_batch_size: int = 8) -> dict:
        """Generate ``tokens`` tokens for every chat at once; return the
        measurement (see bench/inprocess.py)."""
        command = {"prompts": chats, "tokens": tokens, "prefill_batch_size": prefill_batch_size}
        self.proc.stdin.write(json.dumps(command) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        line = self.proc.stdout.readline()  # type: ignore[union-attr]
        if not line:
            raise RuntimeError(f"bench/inprocess.py exited with code {self.proc.wait()}")
        return json.loads(line)

    def close(self) -> None:
        """End the engine process (end of input, then kill if it lingers)."""
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds used so far by process ``pid`` alone (not
    its children)."""
    import psutil

    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


QUIET_WAITED = [0.0]
"""Seconds :func:`wait_for_quiet` has waited in this process so far."""

QUIET_BUDGET = 90.0
"""Once this many seconds were spent waiting in a process, stop waiting
(a machine that stays busy must not stretch the bench without end)."""


def wait_for_quiet(limit: float = 0.3, max_wait: float = 8.0, window: float = 0.5) -> float:
    """Wait (at most ``max_wait`` seconds, and only while the process-wide
    :data:`QUIET_BUDGET` lasts) until the whole machine uses less than
    ``limit`` cores over a ``window``; return the seconds waited.

    Other work on this 2-core machine (a test run in another session) would
    skew the next measurement; this lets a burst of it pass first.
    Contenders are idle when this is called, so their own share is
    negligible."""
    import psutil

    started = time.monotonic()
    cores = os.cpu_count() or 1
    max_wait = min(max_wait, max(0.0, QUIET_BUDGET - QUIET_WAITED[0]))
    while time.monotonic() - started < max_wait:
        if psutil.cpu_percent(interval=window) / 100 * cores < limit:
            break
    waited = time.monotonic() - started
    QUIET_WAITED[0] += waited
    return waited


class CpuWatch:
    """How busy the machine was while a block ran, split between ``pids``
    (and their descendants) and everything else.

    Other work on a 2-core machine (another test run, say) skews any
    throughput number; ``foreign`` (in cores, 0 to the core count) says how
    much of that there was. Use as ``with CpuWatch([pid, ...]) as watch:``,
    then read ``watch.ours`` and ``watch.foreign``.
    """

    def __init__(self, pids: list[int]) -> None:
        import psutil

        found: dict[int, psutil.Process] = {}
        for pid in pids:
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                for p in (proc, *proc.children(recursive=True)):
                    found.setdefault(p.pid, p)
        self._procs = list(found.values())
        self.ours = 0.0
        self.foreign = 0.0

    def _busy(self) -> float:
        import psutil

        t = psutil.cpu_times()
        return sum(t) - t.idle - getattr(t, "iowait", 0.0)

    def _ours(self) -> float:
        import psutil

        total = 0.0
        for proc in self._procs:
            with contextlib.suppress(psutil.Error):
                times = proc.cpu_times()
                total += times.user + times.system
        return total

    def __enter__(self) -> CpuWatch:
        self._start = (time.perf_counter(), self._busy(), self._ours())
        return self

    def __exit__(self, *_: object) -> None:
        wall = time.perf_counter() - self._start[0]
        busy = self._busy() - self._start[1]
        ours = self._ours() - self._start[2]
        self.ours = ours / wall if wall > 0 else 0.0
        self.foreign = max(0.0, (busy - ours) / wall) if wall > 0 else 0.0


@contextlib.contextmanager
def mlxd(tmp: Path, model: dict, env: dict[str, str] | None = None) -> Iterator[Server]:
    """Run an mlxd gateway serving ``model`` (a ``[[models]]`` table) without
    API keys, with ``env`` added to its environment; stop it on exit."""
    tmp.mkdir(parents=True, exist_ok=True)
    server = start_server(tmp, [model], api_key=None, env=env)
    try:
        yield server
    finally:
        server.stop()


def ratio_line(name: str, num: float | None, den: float | None, target: float, at_most: bool = False) -> str:
    """``name  value  (target)  PASS/MISS``; MISS when not measurable."""
    bound = f"(target {'<=' if at_most else '>='} {target:.2f})"
    if num is None or den is None or den == 0:
        return f"{name:<70} {'n/a':>7}   {bound}  MISS"
    value = num / den
    ok = value <= target if at_most else value >= target
    return f"{name:<70} {value:>7.3f}x  {bound}  {'PASS' if ok else 'MISS'}"
