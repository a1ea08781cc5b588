"""Worker death: every in-flight client gets a terminal error at once, the
worker restarts, and the next request succeeds. Also a worker whose input,
scheduler or output thread dies (faults injected with ``MLXD_FAULT``, see
``worker/faults.py``), and a worker speaking another wire protocol version.

The tests that kill a worker or one of its threads share one gateway (the
module's ``server``): each starts from the worker the one before it left
(restarted), so none pays for a gateway and a first worker of its own. Its
faults are armed by files (``MLXD_FAULT=files:DIR``), which a test creates
once its requests are streaming: the fault fires at the next pass, not after
a step count its streams would first have to generate. They come last in
the file, so the gateway (set up by the first of them) is not left idle
while the others run."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest

from shared.protocol import PROTOCOL_VERSION
from tests.conftest import API_KEY, TINY, start_server

HEARTBEAT_TIMEOUT = 120.0
"""The module gateway's heartbeat timeout: far longer than anything here
takes, so a killed worker is seen by its exit (at once), never by its
silence, and a busy machine never gets a live worker killed (a worker whose
output thread died sends nothing until it exits)."""

HUNG_HEARTBEAT_TIMEOUT = 8.0
"""The heartbeat timeout of the hung-worker test: a stopped worker must be
found silent, while a live one never is. Heartbeats are sent every 0.5 s;
the longest gap between two, as the gateway saw them, was 1.35 s on a
machine with 2 cores and a load average of 11 (streams running): 8 s holds
with that machine 4x slower again."""


@pytest.fixture(scope="module")
def fault_dir(tmp_path_factory) -> Path:
    """The directory whose files arm the module gateway's faults: creating
    ``fault_dir / "scheduler"`` (or ``input``, ``output``) makes the next
    pass of that point raise, in whichever worker is running (see
    ``worker/faults.py``)."""
    return tmp_path_factory.mktemp("fault-triggers")


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory, fault_dir):
    srv = start_server(
        tmp_path_factory.mktemp("faults"),
        [{"name": TINY, "source": str(tiny_model_dir)}],
        env={"MLXD_FAULT": f"files:{fault_dir}"},
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
    )
    yield srv
    srv.stop()


def log_size(srv) -> int:
    """How many characters the gateway's log has now (for ``since``)."""
    return len(srv.log_path.read_text())


def wait_for_log(srv, text: str, timeout: float = 60, since: int = 0) -> str:
    """The gateway's log from character ``since`` on, once that part has
    ``text`` (fails after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while text not in (log := srv.log_path.read_text()[since:]):
        assert time.monotonic() < deadline, f"no {text!r} in the gateway log"
        time.sleep(0.05)
    return log


def wait_gone(pid: int, timeout: float = 60) -> bool:
    """Whether process ``pid`` is gone (reaped) within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_workers_exit_with_the_gateway(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [{"name": TINY, "source": str(tiny_model_dir)}])
    pid = None
    exited = False
    try:
        pid = srv.worker(TINY)["pid"]
        srv.proc.kill()  # SIGKILL: no chance to clean up
        srv.proc.wait(timeout=30)
        exited = wait_gone(pid)
        assert exited, "worker outlived its gateway"
    finally:
        srv.stop()
        if pid is not None and not exited:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_graceful_stop_leaves_no_worker(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [{"name": TINY, "source": str(tiny_model_dir)}])
    try:
        pid = srv.worker(TINY)["pid"]
    finally:
        srv.stop()
    assert srv.proc.returncode == 0
    assert wait_gone(pid), "a worker outlived the gateway's graceful stop"


def test_hung_worker_is_replaced(tiny_model_dir, tmp_path):
    """A stopped (not dead) worker misses its heartbeats: its requests fail
    and a new worker takes over."""
    srv = start_server(
        tmp_path, [{"name": TINY, "source": str(tiny_model_dir)}], heartbeat_timeout=HUNG_HEARTBEAT_TIMEOUT
    )
    pid = None
    try:
        status = srv.worker(TINY)
        pid = status["pid"]
        assert status["restarts"] == 0
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)
        os.kill(pid, signal.SIGSTOP)
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=3)
        assert info.value.status_code == 503
        # the gateway ended it because the worker fell silent (not a client timeout, not a crash)
        wait_for_log(srv, f"worker for {TINY} is unresponsive; killing pid {pid}")
        new = srv.wait_ready(TINY, timeout=180, after_restarts=1)
        assert new["restarts"] == 1
        assert new["pid"] != pid
        r = client.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=3)
        assert r.usage.completion_tokens == 3
    finally:
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        srv.stop()


def test_worker_with_another_protocol_version_is_refused(tiny_model_dir, tmp_path):
    """A worker reporting another wire protocol version is stopped with one
    clear log line, not restarted in a loop, and requests get a 503 that
    says why."""
    srv = start_server(
        tmp_path,
        [{"name": TINY, "source": str(tiny_model_dir), "preload": False}],
        env={"MLXD_FAULT": "protocol"},
    )
    try:
        r = httpx.post(
            f"{srv.url}/v1/chat/completions",
            json={"model": TINY, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
            headers=srv.headers,
            timeout=60,
        )
        assert r.status_code == 503
        assert "wire protocol" in r.json()["error"]["message"]
        deadline = time.monotonic() + 60  # the refused worker is stopped (and reaped)
        while (status := srv.worker(TINY))["pid"] is not None:
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        # nothing to wait for here: a restart loop (1 s back-off) would have started more workers by now
        time.sleep(3)
        status = srv.worker(TINY)
        assert status["state"] == "failed" and status["pid"] is None
        assert status["restarts"] == 0 and status["incarnation"] == 1
        refusals = [line for line in srv.log_path.read_text().splitlines() if "refused the worker" in line]
        assert (
            len(refusals) == 1
            and f"wire protocol v{PROTOCOL_VERSION + 1} but this gateway speaks v{PROTOCOL_VERSION}" in refusals[0]
        )
        r = httpx.post(
            f"{srv.url}/v1/chat/completions",
            json={"model": TINY, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
            headers=srv.headers,
            timeout=60,
        )
        assert r.status_code == 503 and "wire protocol" in r.json()["error"]["message"]
        assert srv.worker(TINY)["incarnation"] == 1  # requests do not start it again either
        assert len([line for line in srv.log_path.read_text().splitlines() if "refused the worker" in line]) == 1
    finally:
        srv.stop()


def test_worker_killed_mid_stream(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)
    status = server.wait_ready(TINY, timeout=180)  # the worker an earlier test left (restarted) is back
    pid, restarts, log_start = status["pid"], status["restarts"], log_size(server)
    received: list[str] = []
    errors: list[BaseException] = []
    streaming = [threading.Event() for _ in range(3)]
    ended_at: list[float] = []

    def stream(started: threading.Event):
        try:
            s = client.chat.completions.create(
                model=TINY,
                messages=[{"role": "user", "content": "go"}],
                max_tokens=1900,
                stream=True,
            )
            for chunk in s:
                if chunk.choices and chunk.choices[0].delta.content:
                    received.append(chunk.choices[0].delta.content)
                    started.set()
        except BaseException as exc:  # the SDK raises on the error frame
            errors.append(exc)
        finally:
            ended_at.append(time.monotonic())
            started.set()

    threads = [threading.Thread(target=stream, args=(started,), daemon=True) for started in streaming]
    for t in threads:
        t.start()
    assert all(started.wait(60) for started in streaming)  # all three streaming before the kill
    assert not errors, errors
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    for t in threads:
        t.join(90)
    assert not any(t.is_alive() for t in threads), "a stream did not end after the worker died"
    assert len(errors) == 3, errors
    assert all(isinstance(e, openai.APIError) for e in errors)
    # at once: seen by the worker's exit, long before its silence could count (the heartbeat timeout)
    assert max(ended_at) - killed_at < HEARTBEAT_TIMEOUT / 4
    wait_for_log(server, f"worker for {TINY} ended (worker exited with code -9)", since=log_start)
    assert received

    # non-streaming requests during the restart get a clean 503 (or succeed
    # if the worker is already back)
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": TINY, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
        headers=server.headers,
        timeout=120,
    )
    assert r.status_code in (200, 503)
    if r.status_code == 503:
        assert r.json()["error"]["message"]
        assert "retry-after" in r.headers

    new = server.wait_ready(TINY, timeout=180, after_restarts=restarts + 1)
    assert new["pid"] != pid and new["restarts"] == restarts + 1
    r = client.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "again"}], max_tokens=3)
    assert r.usage.completion_tokens == 3
    # the killed worker is reaped, not a zombie
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def stream_until_error(client, errors: list, received: list, started: threading.Event) -> None:
    """One long streaming request; record the error that ends it (it must
    not complete: its 1900 tokens are only a bound, far more than are
    generated before the fault, which fires right after its file appears)."""
    try:
        s = client.chat.completions.create(
            model=TINY,
            messages=[{"role": "user", "content": "go"}],
            max_tokens=1900,
            stream=True,
            # one token per step (speculation would commit many, for more CPU a step)
            extra_body={"ignore_eos": True, "speculative": False},
        )
        for chunk in s:
            if chunk.choices and chunk.choices[0].delta.content:
                received.append(chunk.choices[0].delta.content)
                started.set()
        errors.append(None)  # completed: the fault did not end it
    except openai.APIError as exc:
        errors.append(exc)
    finally:
        started.set()


@pytest.mark.parametrize("point", ["scheduler", "input", "output"])
def test_thread_death_fails_requests_and_restarts(server, fault_dir, point):
    """An exception that kills one worker thread: every request in flight
    gets an error, the worker exits (no heartbeats from a half-dead worker)
    and a fresh worker serves the next request."""
    armed_by, fired = fault_dir / point, fault_dir / f"{point}.fired"
    fired.unlink(missing_ok=True)
    status = server.wait_ready(TINY, timeout=180)  # the worker an earlier test left (restarted) is back
    pid, restarts, log_start = status["pid"], status["restarts"], log_size(server)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
    errors: list = []
    received: list[str] = []
    threads = []
    try:
        # three streams in flight; for the input fault two, and a third request fires it
        for _ in range(2 if point == "input" else 3):
            started = threading.Event()
            t = threading.Thread(target=stream_until_error, args=(client, errors, received, started), daemon=True)
            t.start()
            threads.append(t)
            assert started.wait(120)  # admitted and streaming before the next one (and before the fault)
        armed_by.touch()  # the next pass of the point fires (and renames the file)
        if point == "input":
            t = threading.Thread(
                target=stream_until_error, args=(client, errors, received, threading.Event()), daemon=True
            )
            t.start()
            threads.append(t)
        for t in threads:
            t.join(300)  # a bound, not a wait: the fault ends them
        assert not any(t.is_alive() for t in threads)
        assert fired.exists() and not armed_by.exists()
        assert len(errors) == 3 and all(isinstance(e, openai.APIError) for e in errors), errors
        messages = [str(e) for e in errors]
        if point == "output":  # nobody left in the worker to send: the gateway ends them
            assert all("stopped unexpectedly" in m for m in messages), messages
        else:  # the output thread ends what the engine was running
            assert any("model worker failed" in m for m in messages), messages
        new = server.wait_ready(TINY, timeout=180, after_restarts=restarts + 1)
        assert new["pid"] != pid and new["restarts"] == restarts + 1
        r = client.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=3)
        assert r.usage.completion_tokens == 3
        log = wait_for_log(server, "worker exited with code 3", since=log_start)
        assert f"the {point} thread died (InjectedFault" in log
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        armed_by.unlink(missing_ok=True)  # a fault that did not fire must not fire in a later test
