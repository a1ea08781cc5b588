"""Shared fixtures: real gateway processes with real worker processes.

``tiny_server`` serves a tiny random-weight model (fast); ``real_server``
serves the default SmolLM2 model as ``make run`` does. Each starts
``python -m gateway serve`` (through :mod:`tests.shapes.serve`, which records
every response) on a free loopback port with its own config and waits until
every worker is ready.

Every response a test gateway sends, in any test, is checked against the
official response types of its protocol after the test
(:func:`official_response_types`, :mod:`tests.shapes`).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import httpx
import pytest

from shared.config import DEFAULT_MODEL_SOURCE
from tests.shapes import plugin as shapes
from tests.shapes.serve import RECORD_ENV

pytest_plugins = ["tests.loop_stalls"]
"""Every test fails when a gateway's event loop stalls while it runs (see
``tests/loop_stalls.py``)."""

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "sk-test-key"
TINY = "tiny"
REAL = "smollm2"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    """A running gateway: its base URL, process, key, log file and the file
    its responses are recorded in (for the official-type checks)."""

    url: str
    proc: subprocess.Popen
    api_key: str | None
    log_path: Path
    record_path: Path | None = None
    http: httpx.Client = field(init=False, repr=False, compare=False)
    """The client for the polls of ``/health`` (one for all: a new httpx client builds a TLS context,
    ~25 ms of CPU, and the waits poll several times a second); :meth:`stop` closes its connections."""

    def __post_init__(self) -> None:
        self.http = httpx.Client(timeout=10)

    @property
    def headers(self) -> dict[str, str]:
        """Auth headers for raw HTTP requests."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def health(self) -> dict:
        """The parsed ``GET /health`` body."""
        return self.http.get(f"{self.url}/health").json()

    def worker(self, model: str) -> dict:
        """The worker status of ``model`` from /health."""
        return self.health()["models"][model]

    def wait_ready(self, model: str, timeout: float = 300, after_restarts: int = 0) -> dict:
        """Wait until ``model``'s worker is ready (with at least
        ``after_restarts`` restarts); return its status."""
        deadline = time.monotonic() + timeout
        last: dict = {}
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited:\n{self.log_path.read_text()[-4000:]}")
            try:
                last = self.worker(model)
                if last["state"] == "ready" and last["restarts"] >= after_restarts:
                    return last
            except (httpx.HTTPError, KeyError):  # not answering yet, or not configured yet (a reload)
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{model} not ready: {last}\n{self.log_path.read_text()[-4000:]}")

    def wait_listening(self, timeout: float = 60) -> None:
        """Wait until the gateway answers ``/health``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"gateway exited:\n{self.log_path.read_text()[-4000:]}")
            try:
                self.http.get(f"{self.url}/health", timeout=2)
                return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise TimeoutError(f"gateway not listening:\n{self.log_path.read_text()[-4000:]}")

    def stop(self) -> None:
        """SIGTERM the gateway and wait for it (and its workers) to exit."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.http.close()
        self.http = httpx.Client(timeout=10)  # holds no connection; a later poll sees the gateway gone
        if self.record_path is not None:
            shapes.close_file(self.record_path)


def toml_value(value: object) -> str:
    """``value`` as TOML: a dict becomes an inline table, anything else is
    written as JSON (which TOML reads the same for strings, numbers,
    booleans and lists)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return json.dumps(value)


def _beat_mark(status: dict) -> tuple[int, int]:
    """Which heartbeat a worker status shows: (incarnation, heartbeat_seq)."""
    return status["incarnation"], status["stats"]["heartbeat_seq"]


def _same_counters(a: dict, b: dict) -> bool:
    """Whether two heartbeats' counters agree (their numbers aside)."""
    return {k: v for k, v in a.items() if k != "heartbeat_seq"} == {k: v for k, v in b.items() if k != "heartbeat_seq"}


def settled_stats(
    server: Server,
    model: str = TINY,
    timeout: float = 120.0,
    until: Callable[[dict], bool] | None = None,
) -> dict:
    """``model``'s worker counters once they have settled: the first
    heartbeat sent after this call such that nothing runs or waits, its
    counters equal those of the heartbeat just before it, and ``until``
    (when given: the event the caller waits for, e.g. an abort counted)
    holds for them.

    Heartbeats are told apart by the worker's own sequence number
    (``heartbeat_seq``), never by wall time, and the worker sends every
    output before the heartbeats that follow it: whatever a client has
    already seen finish is counted in the returned snapshot, however slow
    the machine. ``timeout`` only bounds a wait that would never end
    (TimeoutError with the last counters).
    """
    deadline = time.monotonic() + timeout
    status = server.worker(model)
    mark = _beat_mark(status)
    seen, previous = mark, status["stats"]
    while time.monotonic() < deadline:
        status = server.worker(model)
        stats, beat = status["stats"], _beat_mark(status)
        if beat != seen:
            fresh = beat[0] != mark[0] or beat[1] > mark[1]
            idle = stats["running"] == 0 and stats["waiting"] == 0
            if fresh and idle and _same_counters(stats, previous) and (until is None or until(stats)):
                return stats
            seen, previous = beat, stats
        time.sleep(0.05)
    raise TimeoutError(f"{model}'s counters did not settle within {timeout}s; last: {previous}")


def wait_for_stats(server: Server, model: str, until: Callable[[dict], bool], timeout: float = 120.0) -> dict:
    """The first heartbeat counters of ``model``'s worker for which
    ``until`` holds (running or not): an event to wait on instead of a
    sleep. TimeoutError (with the last counters) after ``timeout``."""
    deadline = time.monotonic() + timeout
    stats: dict = {}
    while time.monotonic() < deadline:
        stats = server.worker(model)["stats"]
        if until(stats):
            return stats
        time.sleep(0.05)
    raise TimeoutError(f"{model}'s counters never met the condition within {timeout}s; last: {stats}")


def mean_batch(before: dict, after: dict) -> float:
    """Tokens generated per engine step between two counter snapshots: the
    mean decode batch of just that window (independent of any earlier
    high-water mark)."""
    steps = after["steps"] - before["steps"]
    return (after["generated_tokens"] - before["generated_tokens"]) / steps if steps else 0.0


def write_config(
    path: Path,
    port: int,
    models: list[dict],
    api_keys: list[str | dict] | None = None,
    mcp_servers: list[dict] | None = None,
    extra: str = "",
    **server,
) -> Path:
    """Write a TOML config for a test gateway (``api_keys``: strings or
    tables; ``mcp_servers``: the ``[[mcp_servers]]`` tables; ``extra``:
    TOML appended as is). The pid file is ``mlxd.pid`` beside the config
    unless ``server`` names one."""
    server = {"pid_file": str(path.parent / "mlxd.pid"), **server}  # never in the user's cache directory
    lines = ["[server]", 'host = "127.0.0.1"', f"port = {port}", f"api_keys = {toml_value(api_keys or [])}"]
    lines += [f"{k} = {toml_value(v)}" for k, v in server.items()]
    for model in models:
        lines.append("[[models]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in model.items()]
    for entry in mcp_servers or []:
        lines.append("[[mcp_servers]]")
        lines += [f"{k} = {toml_value(v)}" for k, v in entry.items()]
    path.write_text("\n".join(lines) + "\n" + extra)
    return path


def start_server(
    tmp: Path,
    models: list[dict],
    api_key: str | None = API_KEY,
    env: dict[str, str] | None = None,
    mcp_servers: list[dict] | None = None,
    extra: str = "",
    wait: bool = True,
    api_keys: list[str | dict] | None = None,
    **server,
) -> Server:
    """Start a gateway for ``models`` and wait for every worker to be ready.

    ``env`` adds variables to the gateway's environment (its workers
    inherit them); ``mcp_servers`` are its ``[[mcp_servers]]`` tables;
    ``server`` adds ``[server]`` keys to its config and ``extra`` raw TOML
    after the models (e.g. ``[[nodes]]``); with ``wait`` False it returns
    once the gateway listens; ``api_keys`` (strings or tables) replaces
    ``[api_key]`` in the config.
    """
    port = free_port()
    models = [{"preload": True, **m} for m in models]
    keys = api_keys if api_keys is not None else ([api_key] if api_key else [])
    config = write_config(tmp / "mlxd.toml", port, models, keys, mcp_servers, extra, **server)
    log_path = tmp / "gateway.log"
    log = open(log_path, "w")
    record_path = shapes.record_file(tmp)
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.shapes.serve", "serve", "--config", str(config)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", RECORD_ENV: str(record_path), **(env or {})},
    )
    srv = Server(f"http://127.0.0.1:{port}", proc, api_key, log_path, record_path)
    STARTED.append(srv)
    try:
        srv.wait_listening()
        for model in models:
            if model["preload"] and wait:
                srv.wait_ready(model["name"])
    except BaseException:
        srv.stop()
        raise
    return srv


STARTED: list[Server] = []
"""Every gateway :func:`start_server` started in this process, for the log
tails of a failed test (:func:`pytest_runtest_makereport`)."""

LOG_TAIL = 60
"""Lines of a gateway's log (its workers write to it too) shown with a
failed test."""


def _log_tail(path: Path, lines: int = LOG_TAIL) -> str:
    """The last ``lines`` lines of the file at ``path``."""
    try:
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 200 * lines))
            text = f.read().decode(errors="replace")
    except OSError as e:
        return f"(unreadable: {e})"
    return "\n".join(text.splitlines()[-lines:])


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    """Note which gateways were running or started while ``item`` ran."""
    item.stash[_SEEN] = len(STARTED)
    item.stash[_ALIVE] = [s for s in STARTED if s.proc.poll() is None]
    yield


_SEEN = pytest.StashKey[int]()
_ALIVE = pytest.StashKey[list]()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    """A failed test (or setup, or teardown) shows the log tails of the
    gateways it used: those among its fixtures and those it started; when
    there are none, every gateway running when it began."""
    outcome = yield
    report: pytest.TestReport = outcome.get_result()
    if not report.failed or _SEEN not in item.stash:
        return
    fixtures = [v for v in getattr(item, "funcargs", {}).values() if isinstance(v, Server)]
    started = [s for s in STARTED[item.stash[_SEEN] :] if s not in fixtures]
    used = fixtures + started or item.stash[_ALIVE]
    for srv in used:
        state = "running" if srv.proc.poll() is None else f"exited {srv.proc.returncode}"
        report.sections.append(
            (
                f"gateway {srv.url} (pid {srv.proc.pid}, {state}): last {LOG_TAIL} lines of {srv.log_path}",
                _log_tail(srv.log_path),
            )
        )


def pytest_unconfigure(config: pytest.Config) -> None:
    """A test process that has not exited a minute after it began to (a
    thread that never ends, which the interpreter waits for) prints every
    thread's stack and exits with status 1.

    The clock starts when the interpreter shuts down, before it waits for
    the threads (``threading._register_atexit``), not at this hook: an
    xdist worker that has run its last test waits here for the other
    workers before it is told to exit."""
    import faulthandler
    import threading

    def guard() -> None:
        faulthandler.dump_traceback_later(60, exit=True)

    register = getattr(threading, "_register_atexit", None)
    if register is not None:
        register(guard)


if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    # started in the background of a non-interactive shell (a CI runner's `cmd &`): SIGINT is ignored, and
    # an ignored signal stays ignored across exec, so no process a test starts could be stopped with Ctrl-C
    # (mlxd top, a pull); a handler here is reset to the default in every child instead
    signal.signal(signal.SIGINT, signal.default_int_handler)


os.environ.setdefault("MLXD_AUDIT_FILE", os.path.join(tempfile.mkdtemp(prefix="mlxd-test-audit-"), "model-actions.log"))
"""Model actions of the gateways the tests start are logged in a temporary
folder, not the user's cache directory."""


@pytest.fixture(autouse=True)
def environment_restored():
    """After each test: the test process's environment as it was before it.
    Code that runs in-process in a test may set variables (a library's
    first import does: mlx-audio sets ``TRANSFORMERS_NO_ADVISORY_WARNINGS``,
    mlx-embeddings too); every later test, and every subprocess they start,
    would inherit them. mlxd's own loaders set none (see
    ``tests/test_speech_model.py`` and ``tests/test_embedding_mlx_embeddings.py``)."""
    saved = dict(os.environ)
    yield
    if dict(os.environ) != saved:
        os.environ.clear()
        os.environ.update(saved)


def _idle_pool_worker(frame) -> bool:
    """Whether ``frame`` (a thread's innermost) is a ``ThreadPoolExecutor``
    worker waiting for work: no leak, since the interpreter's exit wakes
    and joins it (a process-wide pool, such as the gateway's image
    fetchers, keeps its threads between tests)."""
    import linecache
    from concurrent.futures import thread as pool

    while frame is not None:
        if frame.f_code is pool._worker.__code__:
            return "work_queue.get(" in linecache.getline(frame.f_code.co_filename, frame.f_lineno)
        frame = frame.f_back
    return False


THREAD_GRACE_SECONDS = 5.0
"""How long a thread a test started may take to end after the test."""


@pytest.fixture(autouse=True)
def no_thread_left():
    """After each test: no thread it started (and did not mark as a daemon)
    still runs :data:`THREAD_GRACE_SECONDS` later; else the test fails,
    naming each such thread with its stack. Such a thread keeps its test
    process from exiting; under xdist the process is then killed at the end
    of the run without a word, so the leak is caught here, at its test."""
    import threading
    import traceback

    before = set(threading.enumerate())
    yield
    left = [t for t in threading.enumerate() if t not in before and not t.daemon]
    deadline = time.monotonic() + THREAD_GRACE_SECONDS
    while True:
        frames = sys._current_frames()
        left = [t for t in left if t.is_alive() and not _idle_pool_worker(frames.get(t.ident))]
        if not left or time.monotonic() >= deadline:
            break
        left[0].join(0.05)
    if left:
        stacks = [
            f"thread {t.name!r} (not a daemon):\n" + "".join(traceback.format_stack(frames[t.ident]))
            for t in left
            if t.ident in frames
        ]
        pytest.fail("the test left threads running:\n" + "\n".join(stacks), pytrace=False)


@pytest.fixture(autouse=True)
def official_response_types():
    """After each test: every response a test gateway sent during it (or
    finished since the last check) must be of its official type; else the
    test fails, naming the response and what is wrong."""
    yield
    problems = shapes.check_new()
    if problems:
        pytest.fail(shapes.report(problems), pytrace=False)


def pytest_sessionfinish(session, exitstatus):
    """Check the responses that ended after the last test's check."""
    problems = shapes.check_new()
    if problems:
        print("\n" + shapes.report(problems))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter):
    """Say how many responses were checked against their official types."""
    if shapes.CHECKED["responses"]:
        checked = shapes.CHECKED
        terminalreporter.write_line(
            f"official response types: {checked['responses']} responses checked "
            f"({checked['objects']} bodies and events, {checked['seconds']:.1f} s)"
        )


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A tiny random-weight model directory (built once per session)."""
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_server(tiny_model_dir, tmp_path_factory):
    """A gateway serving the tiny model as ``tiny`` (API key required)."""
    srv = start_server(
        tmp_path_factory.mktemp("tiny-gw"),
        [{"name": TINY, "source": str(tiny_model_dir), "max_batch_size": 16, "aliases": ["tiny-alias"]}],
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="session")
def real_server(tmp_path_factory):
    """A gateway serving the default SmolLM2 model as ``smollm2``."""
    srv = start_server(
        tmp_path_factory.mktemp("real-gw"),
        [{"name": REAL, "source": DEFAULT_MODEL_SOURCE, "max_batch_size": 8}],
        api_key=None,
    )
    yield srv
    srv.stop()
