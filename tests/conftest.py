"""Shared fixtures: real gateway processes with real worker processes.

``tiny_server`` serves a tiny random-weight model (fast); ``real_server``
serves the default SmolLM2 model as ``make run`` does. Each starts
``python -m gateway serve`` on a free loopback port with its own config and
waits until every worker is ready.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from shared.config import DEFAULT_MODEL_SOURCE

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
    """A running gateway: its base URL, process, key and log file."""

    url: str
    proc: subprocess.Popen
    api_key: str | None
    log_path: Path

    @property
    def headers(self) -> dict[str, str]:
        """Auth headers for raw HTTP requests."""
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def health(self) -> dict:
        """The parsed ``GET /health`` body."""
        return httpx.get(f"{self.url}/health", timeout=10).json()

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
            except httpx.HTTPError:
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
                httpx.get(f"{self.url}/health", timeout=2)
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


def toml_value(value: object) -> str:
    """``value`` as TOML: a dict becomes an inline table, anything else is
    written as JSON (which TOML reads the same for strings, numbers,
    booleans and lists)."""
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {toml_value(v)}" for k, v in value.items()) + "}"
    return json.dumps(value)


def settled_stats(server: Server, model: str = TINY, timeout: float = 15.0) -> dict:
    """``model``'s worker counters once nothing runs or waits and two
    heartbeats in a row agree. Raises TimeoutError (with the last counters)
    when they do not settle within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    previous = None
    while time.monotonic() < deadline:
        time.sleep(0.6)
        stats = server.worker(model)["stats"]
        if stats["running"] == 0 and stats["waiting"] == 0 and stats == previous:
            return stats
        previous = stats
    raise TimeoutError(f"{model}'s counters did not settle within {timeout}s; last: {previous}")


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
    api_keys: list[str] | None = None,
    mcp_servers: list[dict] | None = None,
    extra: str = "",
    **server,
) -> Path:
    """Write a TOML config for a test gateway (``mcp_servers``: the
    ``[[mcp_servers]]`` tables; ``extra``: TOML appended as is)."""
    lines = ["[server]", 'host = "127.0.0.1"', f"port = {port}", f"api_keys = {json.dumps(api_keys or [])}"]
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
    **server,
) -> Server:
    """Start a gateway for ``models`` and wait for every worker to be ready.

    ``env`` adds variables to the gateway's environment (its workers
    inherit them); ``mcp_servers`` are its ``[[mcp_servers]]`` tables;
    ``server`` adds ``[server]`` keys to its config and ``extra`` raw TOML
    after the models (e.g. ``[[nodes]]``); with ``wait`` False it returns
    once the gateway listens.
    """
    port = free_port()
    models = [{"preload": True, **m} for m in models]
    config = write_config(tmp / "mlxd.toml", port, models, [api_key] if api_key else [], mcp_servers, extra, **server)
    log_path = tmp / "gateway.log"
    log = open(log_path, "w")
    proc = subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config)],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})},
    )
    srv = Server(f"http://127.0.0.1:{port}", proc, api_key, log_path)
    srv.wait_listening()
    for model in models:
        if model["preload"] and wait:
            srv.wait_ready(model["name"])
    return srv


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
