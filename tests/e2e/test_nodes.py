"""Remote workers: a gateway and an ``mlxd node`` on 127.0.0.1 talking
ZeroMQ over tcp with CURVE. Requests, streaming, cancellation, a worker
crash and its restart, a gateway with an unlisted key refused, plaintext
and unauthenticated peers never served, and a node killed mid-stream (its
requests end with an error within the heartbeat timeout while a local
model serves on). The node-kill test runs last: it ends the node.

Every process a test starts is stopped on every path; every wait is
bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import openai
import pytest
import zmq

from shared.codec import link_codec
from shared.protocol import NodeStart
from tests.conftest import API_KEY, ROOT, TINY, free_port, settled_stats, start_server, write_config

LOCAL = "local-tiny"
HEARTBEAT = 15.0
"""The heartbeat timeout of the gateways and the node: long enough that a
busy machine (gateway and node say NodeAlive every second) never gets a
live peer given up, short enough to wait for where a test needs a dead or
refused peer given up."""
SLACK = 20.0
"""Seconds a busy machine may add to a heartbeat timeout's effect (still
far below the clients' 120 s timeout)."""


def make_keys(directory: Path, name: str) -> str:
    """Run ``mlxd keys`` and return the public key it printed."""
    out = subprocess.run(
        [sys.executable, "-m", "gateway", "keys", "--dir", str(directory), "--name", name],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout
    return out.strip().splitlines()[-1]


class NodeProcess:
    """A running ``mlxd node``: its address, public key, process and log."""

    def __init__(self, tmp: Path, model_dir: Path, allowed: list[str]) -> None:
        self.public = make_keys(tmp / "keys", "node")
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        config = tmp / "node.toml"
        config.write_text(
            "[node]\n"
            f'listen = "{self.address}"\n'
            f'public_key_file = "{tmp / "keys" / "node.pub"}"\n'
            f'secret_key_file = "{tmp / "keys" / "node.key"}"\n'
            f"allowed_clients = {json.dumps(allowed)}\n"
            f"heartbeat_timeout = {HEARTBEAT}\n"
            "[[models]]\n"
            f'name = "{TINY}"\n'
            f'source = "{model_dir}"\n'
            "max_batch_size = 8\n"
        )
        self.log_path = tmp / "node.log"
        self._log_file = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gateway", "node", "--config", str(config)],
            cwd=ROOT,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            self.wait_for_log("node listening", timeout=120)
        except BaseException:
            self.stop()
            raise

    def log(self) -> str:
        """The node's log so far."""
        return self.log_path.read_text()

    def wait_for_log(self, text: str, timeout: float = 60) -> str:
        """The node's log once it has ``text`` (fails after ``timeout`` s,
        or at once if the node exited)."""
        deadline = time.monotonic() + timeout
        while text not in (log := self.log()):
            assert self.proc.poll() is None or text in self.log(), log
            assert time.monotonic() < deadline, f"no {text!r} in the node log:\n{log[-4000:]}"
            time.sleep(0.1)
        return log

    def stop(self) -> None:
        """SIGTERM the node and wait for it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=30)
        self._log_file.close()


def gateway_on(tmp: Path, node: NodeProcess, key_name: str, model_dir: Path, wait: bool = True):
    """Start a gateway with the key pair ``key_name`` in ``tmp/keys``,
    serving ``tiny`` on ``node`` and ``local-tiny`` locally."""
    nodes = f'[[nodes]]\nname = "mac2"\naddress = "{node.address}"\npublic_key = "{node.public}"\n'
    return start_server(
        tmp,
        [{"name": TINY, "node": "mac2"}, {"name": LOCAL, "source": str(model_dir)}],
        extra=nodes,
        wait=wait,
        heartbeat_timeout=HEARTBEAT,
        curve_public_key_file=str(tmp / "keys" / f"{key_name}.pub"),
        curve_secret_key_file=str(tmp / "keys" / f"{key_name}.key"),
    )


@pytest.fixture(scope="module")
def setup(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("nodes")
    gateway_public = make_keys(tmp / "keys", "gw")
    node = NodeProcess(tmp, tiny_model_dir, [gateway_public])
    try:
        server = gateway_on(tmp, node, "gw", tiny_model_dir)
        try:
            yield server, node, tmp
        finally:
            server.stop()
    finally:
        node.stop()


def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=120)


def test_key_files_are_private(setup):
    _, _, tmp = setup
    assert (tmp / "keys" / "node.key").stat().st_mode & 0o777 == 0o600
    assert (tmp / "keys" / "node.pub").stat().st_mode & 0o777 == 0o644
    again = subprocess.run(
        [sys.executable, "-m", "gateway", "keys", "--dir", str(tmp / "keys"), "--name", "node"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode == 1 and "already exists" in again.stderr


def test_requests_and_streaming_through_node(setup):
    server, node, _ = setup
    status = server.worker(TINY)
    assert status["node"] == "mac2" and status["state"] == "ready"
    assert "started worker for tiny" in node.log()
    c = client(server)
    r = c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0)
    assert r.choices[0].finish_reason in ("stop", "length") and r.usage.completion_tokens > 0
    again = c.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0
    )
    assert again.choices[0].message.content == r.choices[0].message.content
    pieces, reasons = [], []
    for chunk in c.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": "hi"}], max_tokens=8, temperature=0, stream=True
    ):
        if chunk.choices:
            pieces.append(chunk.choices[0].delta.content or "")
            reasons.append(chunk.choices[0].finish_reason)
    assert "".join(pieces) == r.choices[0].message.content
    assert reasons[-1] in ("stop", "length")
    metrics = httpx.get(f"{server.url}/metrics", headers=server.headers, timeout=30).text
    assert f'mlxd:model_node{{model="{TINY}",node="mac2"}} 1.0' in metrics
    assert f'mlxd:model_node{{model="{LOCAL}",node="local"}} 1.0' in metrics
    assert f'mlxd:num_requests_running{{model="{TINY}"}}' in metrics


def test_cancellation_frees_the_remote_slot(setup):
    server, _, _ = setup
    c = client(server)
    stream = c.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": "go"}], max_tokens=1900, stream=True
    )
    seen = 0
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            seen += 1
            if seen >= 3:
                break
    stream.close()
    stats = settled_stats(server, TINY, timeout=120)
    assert stats["running"] == 0 and stats["waiting"] == 0
    assert server.worker(TINY)["restarts"] == 0


def test_plaintext_and_unlisted_peers_get_nothing(setup):
    _, node, _ = setup
    before = node.log().count("started worker for")
    ctx = zmq.Context()
    frame = link_codec().encode(NodeStart(model=TINY, incarnation=99))
    try:
        plain = ctx.socket(zmq.DEALER)
        plain.setsockopt(zmq.LINGER, 0)
        plain.connect(node.address)
        plain.send(frame)
        stranger = ctx.socket(zmq.DEALER)
        stranger.setsockopt(zmq.LINGER, 0)
        public, secret = zmq.curve_keypair()
        stranger.curve_publickey, stranger.curve_secretkey = public, secret
        stranger.curve_serverkey = node.public.encode()
        stranger.connect(node.address)
        stranger.send(frame)
        assert plain.poll(3000) == 0
        assert stranger.poll(1000) == 0
        node.wait_for_log(f"refused a connection from an unlisted CURVE key {public.decode()}")
    finally:
        ctx.destroy(linger=0)
    assert node.log().count("started worker for") == before


def test_gateway_with_unlisted_key_is_refused(setup, tiny_model_dir, tmp_path):
    _, node, _ = setup
    make_keys(tmp_path / "keys", "intruder")
    other = gateway_on(tmp_path, node, "intruder", tiny_model_dir, wait=False)
    try:
        other.wait_ready(LOCAL, timeout=180)
        deadline = time.monotonic() + 3 * HEARTBEAT + SLACK
        status = other.worker(TINY)
        while time.monotonic() < deadline and not status["last_error"]:
            time.sleep(0.3)
            status = other.worker(TINY)
        assert status["state"] != "ready"
        assert "did not answer" in (status["last_error"] or ""), status
        intruder = (tmp_path / "keys" / "intruder.pub").read_text().strip()
        node.wait_for_log(f"refused a connection from an unlisted CURVE key {intruder}")
        with pytest.raises(openai.APIStatusError) as err:
            client(other).chat.completions.create(model=TINY, messages=[{"role": "user", "content": "x"}], max_tokens=2)
        assert err.value.status_code == 503
    finally:
        other.stop()


def test_remote_worker_crash_restarts(setup):
    server, _, _ = setup
    c = client(server)
    before = server.worker(TINY)
    errors: list[BaseException] = []
    started = threading.Event()

    def stream() -> None:
        try:
            for chunk in c.chat.completions.create(
                model=TINY, messages=[{"role": "user", "content": "go"}], max_tokens=1900, stream=True
            ):
                if chunk.choices and chunk.choices[0].delta.content:
                    started.set()
        except BaseException as exc:
            errors.append(exc)
        finally:
            started.set()

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    assert started.wait(60)
    os.kill(before["pid"], signal.SIGKILL)
    t.join(90)
    assert not t.is_alive(), "the stream did not end after its worker died"
    assert errors and isinstance(errors[0], openai.APIError)
    after = server.wait_ready(TINY, timeout=180, after_restarts=before["restarts"] + 1)
    assert after["pid"] != before["pid"] and after["node"] == "mac2"
    r = c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert r.usage.completion_tokens > 0


def test_reload_drains_and_restarts_the_remote_worker(setup, tiny_model_dir):
    server, node, tmp = setup
    c = client(server)
    before = server.worker(TINY)
    result: list[object] = []
    streaming = threading.Event()

    def stream() -> None:
        try:
            reasons = []
            for chunk in c.chat.completions.create(
                model=TINY, messages=[{"role": "user", "content": "go"}], max_tokens=150, stream=True
            ):
                streaming.set()
                if chunk.choices:
                    reasons.append(chunk.choices[0].finish_reason)
            result.append(reasons[-1])
        except BaseException as exc:
            result.append(exc)
        streaming.set()

    t = threading.Thread(target=stream, daemon=True)
    t.start()
    assert streaming.wait(60)  # running on the old worker before the reload
    port = int(server.url.rsplit(":", 1)[1])
    nodes = f'[[nodes]]\nname = "mac2"\naddress = "{node.address}"\npublic_key = "{node.public}"\n'
    write_config(
        tmp / "mlxd.toml",
        port,
        [
            {"name": TINY, "node": "mac2", "preload": True, "max_batch_size": 4},
            {"name": LOCAL, "source": str(tiny_model_dir), "preload": True},
        ],
        [API_KEY],
        extra=nodes,
        heartbeat_timeout=HEARTBEAT,
        curve_public_key_file=str(tmp / "keys" / "gw.pub"),
        curve_secret_key_file=str(tmp / "keys" / "gw.key"),
    )
    server.proc.send_signal(signal.SIGHUP)
    t.join(180)
    assert not t.is_alive(), "the stream did not end"
    assert result and result[0] in ("stop", "length"), result
    deadline = time.monotonic() + 180
    status = server.worker(TINY)
    while time.monotonic() < deadline and not (
        status["state"] == "ready" and status["incarnation"] > before["incarnation"]
    ):
        time.sleep(0.3)
        status = server.worker(TINY)
    assert status["state"] == "ready" and status["incarnation"] > before["incarnation"], status
    r = c.chat.completions.create(model=TINY, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert r.usage.completion_tokens > 0


def test_node_killed_mid_stream(setup):
    """Runs last: kills the node."""
    server, node, _ = setup
    c = client(server)
    worker_pid = server.worker(TINY)["pid"]
    errors: list[BaseException] = []
    ended: list[float] = []
    streaming = [threading.Event() for _ in range(2)]

    def stream(started: threading.Event) -> None:
        try:
            for chunk in c.chat.completions.create(
                model=TINY, messages=[{"role": "user", "content": "go"}], max_tokens=1900, stream=True
            ):
                if chunk.choices and chunk.choices[0].delta.content:
                    started.set()
        except BaseException as exc:
            errors.append(exc)
        finally:
            ended.append(time.monotonic())
            started.set()

    threads = [threading.Thread(target=stream, args=(started,), daemon=True) for started in streaming]
    for t in threads:
        t.start()
    assert all(started.wait(60) for started in streaming)  # both streaming before the kill
    killed = time.monotonic()
    node.proc.send_signal(signal.SIGKILL)
    for t in threads:
        t.join(HEARTBEAT + 2 * SLACK)
    assert not any(t.is_alive() for t in threads), "a stream outlived its node"
    assert len(errors) == 2 and all(isinstance(e, openai.APIError) for e in errors), errors
    # ended by the heartbeat timeout (not the client's 120 s)
    assert max(ended) - killed < HEARTBEAT + SLACK
    r = c.chat.completions.create(model=LOCAL, messages=[{"role": "user", "content": "hi"}], max_tokens=4)
    assert r.usage.completion_tokens > 0
    assert server.worker(TINY)["state"] != "ready"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            os.kill(worker_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        pytest.fail("the node's worker outlived its node")
