"""Worker death: every in-flight client gets a terminal error at once, the
worker restarts, and the next request succeeds."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import httpx
import openai
import pytest

from tests.conftest import API_KEY, TINY, start_server


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    srv = start_server(
        tmp_path_factory.mktemp("faults"),
        [{"name": TINY, "source": str(tiny_model_dir)}],
    )
    yield srv
    srv.stop()


def test_worker_killed_mid_stream(server):
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0)
    status = server.worker(TINY)
    pid = status["pid"]
    received: list[str] = []
    errors: list[BaseException] = []
    started = threading.Event()
    ended_at: list[float] = []

    def stream():
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

    threads = [threading.Thread(target=stream) for _ in range(3)]
    for t in threads:
        t.start()
    assert started.wait(30)
    time.sleep(0.3)
    killed_at = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    for t in threads:
        t.join(30)
    assert len(errors) == 3, errors
    assert all(isinstance(e, openai.APIError) for e in errors)
    assert max(ended_at) - killed_at < 2.0
    assert received

    # non-streaming requests during the restart get a clean 503 (or succeed
    # if the worker is already back)
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": TINY, "messages": [{"role": "user", "content": "x"}], "max_tokens": 2},
        headers=server.headers,
        timeout=30,
    )
    assert r.status_code in (200, 503)
    if r.status_code == 503:
        assert r.json()["error"]["message"]
        assert "retry-after" in r.headers

    new = server.wait_ready(TINY, timeout=60, after_restarts=1)
    assert new["pid"] != pid
    r = client.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "again"}], max_tokens=3)
    assert r.usage.completion_tokens == 3
    # the killed worker is reaped, not a zombie
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_workers_exit_with_the_gateway(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [{"name": TINY, "source": str(tiny_model_dir)}])
    pid = srv.worker(TINY)["pid"]
    srv.proc.kill()  # SIGKILL: no chance to clean up
    srv.proc.wait()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail("worker outlived its gateway")


def test_graceful_stop_leaves_no_worker(tiny_model_dir, tmp_path):
    srv = start_server(tmp_path, [{"name": TINY, "source": str(tiny_model_dir)}])
    pid = srv.worker(TINY)["pid"]
    srv.stop()
    assert srv.proc.returncode == 0
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_hung_worker_is_replaced(tiny_model_dir, tmp_path):
    """A stopped (not dead) worker misses its heartbeats: its requests fail
    and a new worker takes over."""
    srv = start_server(tmp_path, [{"name": TINY, "source": str(tiny_model_dir)}], heartbeat_timeout=2.0)
    try:
        pid = srv.worker(TINY)["pid"]
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key=API_KEY, max_retries=0, timeout=30)
        os.kill(pid, signal.SIGSTOP)
        started = time.monotonic()
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=3)
        assert info.value.status_code == 503
        assert time.monotonic() - started < 10
        new = srv.wait_ready(TINY, timeout=60, after_restarts=1)
        assert new["pid"] != pid
        r = client.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=3)
        assert r.usage.completion_tokens == 3
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        srv.stop()
