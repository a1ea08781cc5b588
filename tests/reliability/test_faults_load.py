"""Faults and load: dead, hung and unloadable workers; disconnects at every
stage; 100 concurrent streams; slow readers; garbage on the worker sockets.
Each case ends with :func:`assert_recovered`."""

from __future__ import annotations

import concurrent.futures as cf
import os
import signal
import socket
import stat
import threading
import time
from pathlib import Path

import anthropic
import httpx
import openai
import psutil
import pytest
import zmq

from shared.codec import MAX_FRAME_BYTES
from tests.conftest import API_KEY, TINY, start_server
from tests.reliability.support import assert_recovered, worker_rss

MSG = [{"role": "user", "content": "hi"}]
HEARTBEAT_TIMEOUT = 120.0
"""The module gateway's heartbeat timeout: far longer than anything here
takes, so a worker's death is seen by its exit (at once), never by its
silence, and a busy machine never gets a live worker killed."""


BROKEN = "broken"
"""A model of the module gateway whose source does not exist: it cannot be
loaded (not preloaded: its first load attempt is the unloadable-model
test's, the last in the file, so the gateway does not keep retrying it
while the other tests run)."""


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("faults")
    srv = start_server(
        tmp,
        [
            {"name": TINY, "source": str(tiny_model_dir), "max_batch_size": 32, "max_queued": 32},
            {"name": BROKEN, "source": str(tmp / "missing"), "preload": False},
        ],
        heartbeat_timeout=HEARTBEAT_TIMEOUT,
    )
    yield srv
    srv.stop()


def wait_for_log(server, text: str, timeout: float = 60) -> None:
    """Wait until the gateway's log has ``text`` (fails after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while text not in server.log_path.read_text():
        assert time.monotonic() < deadline, f"no {text!r} in the gateway log"
        time.sleep(0.05)


def settled(server, key, before, delta, timeout=120):
    deadline = time.monotonic() + timeout
    while True:
        stats = server.worker(TINY)["stats"]
        if stats[key] - before >= delta and stats["running"] == 0 and stats["waiting"] == 0:
            return stats
        assert time.monotonic() < deadline, stats
        time.sleep(0.2)


def test_anthropic_stream_gets_error_event_when_worker_dies(server):
    claude = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=120)
    pid = server.worker(TINY)["pid"]
    restarts = server.worker(TINY)["restarts"]
    failure: list[BaseException] = []
    ended: list[float] = []
    streaming = threading.Event()

    def run():
        try:
            with claude.messages.stream(model=TINY, max_tokens=1900, messages=MSG) as stream:
                for event in stream:
                    if event.type == "content_block_delta":
                        streaming.set()
        except BaseException as exc:
            failure.append(exc)
        ended.append(time.monotonic())
        streaming.set()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert streaming.wait(60) and not failure  # tokens are flowing when the worker dies
    killed = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    thread.join(90)
    assert not thread.is_alive(), "the stream did not end after the worker died"
    assert failure and isinstance(failure[0], anthropic.APIStatusError)
    # at once: seen by the worker's exit, long before its silence could count (the heartbeat timeout)
    assert ended[0] - killed < HEARTBEAT_TIMEOUT / 4
    wait_for_log(server, f"worker for {TINY} ended (worker exited with code -9)")
    server.wait_ready(TINY, timeout=60, after_restarts=restarts + 1)
    assert_recovered(server, TINY)


def test_disconnects_at_every_stage_free_the_request(server):
    before = server.worker(TINY)["stats"]["requests_aborted"]
    baseline = worker_rss(server, TINY)
    url = f"{server.url}/v1/chat/completions"
    long_prompt = [{"role": "user", "content": "word " * 1500}]
    # mid-prefill: the client leaves before any token
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            url,
            json={"model": TINY, "messages": long_prompt, "max_tokens": 50, "stream": True},
            headers=server.headers,
            timeout=httpx.Timeout(5, read=0.01),
        )
    # mid-decode, streaming
    with httpx.stream(
        "POST",
        url,
        json={"model": TINY, "messages": MSG, "max_tokens": 1900, "ignore_eos": True, "stream": True},
        headers=server.headers,
        timeout=30,
    ) as r:
        lines = r.iter_lines()
        for _ in range(5):
            next(lines)
    # non-streaming
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(
            url,
            json={"model": TINY, "messages": MSG, "max_tokens": 1900, "ignore_eos": True},
            headers=server.headers,
            timeout=httpx.Timeout(5, read=0.3),
        )
    settled(server, "requests_aborted", before, 3)
    assert_recovered(server, TINY, baseline)


def test_hundred_concurrent_streams(server):
    baseline = worker_rss(server, TINY)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)

    def run(i):
        try:
            chunks = list(
                client.chat.completions.create(
                    model=TINY,
                    messages=[{"role": "user", "content": f"prompt number {i}"}],
                    max_tokens=24,
                    temperature=1.0,
                    seed=i,
                    stream=True,
                )
            )
            return i, "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        except openai.APIStatusError as exc:
            assert exc.status_code == 503
            return i, None

    with cf.ThreadPoolExecutor(100) as pool:
        results = dict(pool.map(run, range(100), timeout=600))
    served = {i: t for i, t in results.items() if t is not None}
    assert len(served) >= 32  # everything up to the limits is served, the rest refused cleanly
    # distinct seeded prompts never get each other's text: each stream starts
    # as the same request run alone does (batch shape may shift float
    # rounding later on), and no two streams are alike
    for i in list(served)[:5]:
        alone = run(i)[1]
        assert alone[:24] == served[i][:24]
    assert len({t[:24] for t in served.values()}) == len(served)
    assert_recovered(server, TINY, baseline)


def test_slow_reader_is_dropped_and_others_are_unaffected(server):
    before = server.worker(TINY)["stats"]["requests_aborted"]
    host, port = server.url.removeprefix("http://").split(":")
    body = (
        f'{{"model": "{TINY}", "messages": [{{"role": "user", "content": "hi"}}], "max_tokens": 1900, "n": 2, '
        '"logprobs": true, "top_logprobs": 20, "ignore_eos": true, "stream": true}'
    ).encode()
    sock = socket.socket()
    try:
        sock.settimeout(60)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect((host, int(port)))
        sock.sendall(
            b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            + f"Authorization: Bearer {API_KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        started = time.monotonic()
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)
        normal = client.chat.completions.create(
            model=TINY, messages=MSG, max_tokens=300, extra_body={"ignore_eos": True}
        )
        assert normal.usage.completion_tokens == 300
        assert time.monotonic() - started < 90  # not held up behind the stalled stream
        for _ in range(5):
            assert sock.recv(1), "the server closed the connection before sending anything"
            time.sleep(0.2)  # a trickle: far slower than the stream
        settled(server, "requests_aborted", before, 1)
    finally:
        sock.close()
    assert_recovered(server, TINY)


def test_garbage_on_the_worker_sockets_is_dropped(server):
    cmdline = psutil.Process(server.worker(TINY)["pid"]).cmdline()
    outputs = [Path(cmdline[cmdline.index("--outputs") + 1].removeprefix("ipc://"))]
    assert outputs[0].exists()
    for directory in {p.parent for p in outputs}:
        assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
    ctx = zmq.Context()
    try:
        push = ctx.socket(zmq.PUSH)
        push.setsockopt(zmq.LINGER, 0)
        for path in outputs:
            push.connect(f"ipc://{path}")
        for frame in (b"\xc1garbage", b"\x81\xa4type\xa4exec", b"\x00" * 1000, os.urandom(4096)):
            push.send(frame)
        push.send(b"\x00" * (MAX_FRAME_BYTES + 1))  # over the size cap: ZeroMQ drops it
        deadline = time.monotonic() + 60
        while "dropped a malformed frame" not in server.log_path.read_text():  # delivered and read
            assert time.monotonic() < deadline, "the gateway never reported the garbage frames"
            time.sleep(0.05)
        push.close()
    finally:
        ctx.destroy(linger=0)  # closes any socket left open (term would wait for it forever)
    assert_recovered(server, TINY)


def test_unloadable_model_fails_fast_and_retries(server):
    """A model whose load fails gets a 503 naming why, fast (its one load
    attempt, not the worker start timeout), and again while its retry backs
    off; the gateway retries it, and the other model keeps serving."""
    # fails fast: when its one load attempt fails, far sooner than the worker start timeout (600 s)
    started = time.monotonic()
    r = httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": BROKEN, "messages": MSG},
        headers=server.headers,
        timeout=150,
    )
    assert r.status_code == 503 and "missing" in r.json()["error"]["message"]
    assert r.headers["retry-after"]
    assert time.monotonic() - started < 120
    started = time.monotonic()
    again = httpx.post(
        f"{server.url}/v1/chat/completions", json={"model": BROKEN, "messages": MSG}, headers=server.headers, timeout=60
    )
    assert again.status_code == 503  # fails fast while the retry backs off
    assert time.monotonic() - started < 30
    deadline = time.monotonic() + 180  # two more load attempts (1 s and 2 s back-off), each a new process
    while server.worker(BROKEN)["restarts"] < 2:
        assert time.monotonic() < deadline, server.worker(BROKEN)
        time.sleep(0.5)
    assert_recovered(server, TINY)
