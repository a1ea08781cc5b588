"""Watching an in-process model load for Hugging Face hub traffic and
changes to the process's environment.

:func:`watching_the_hub` points huggingface-hub at a loopback TCP listener
that counts the connections it accepts (``HF_ENDPOINT``, and the constants
huggingface-hub derived from it when it was imported), makes sure the hub
is not switched offline (so a request would really be sent), and records
every ``socket.connect`` in the process, wherever to. The test loads inside
the ``with`` block, then checks :class:`HubWatch`.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
"""The variables that switch huggingface-hub (and transformers) offline."""


@dataclass
class HubWatch:
    """What :func:`watching_the_hub` saw: ``accepted`` connections at the
    stand-in hub, every address ``socket.connect`` was called with
    (``connects``), the environment before the block (``environment``,
    with the watch's own variables) and after it (``environment_after``)."""

    endpoint: str
    accepted: int = 0
    connects: list[object] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    environment_after: dict[str, str] = field(default_factory=dict)


@contextmanager
def watching_the_hub(monkeypatch: pytest.MonkeyPatch) -> Iterator[HubWatch]:
    """Run the block with the hub at a counting loopback listener (see the
    module docstring); the :class:`HubWatch` is complete once the block ends."""
    from huggingface_hub import constants

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.05)
    watch = HubWatch(endpoint=f"http://127.0.0.1:{listener.getsockname()[1]}")
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            watch.accepted += 1
            conn.close()  # the client sees the connection drop at once

    monkeypatch.setenv("HF_ENDPOINT", watch.endpoint)
    monkeypatch.setattr(constants, "ENDPOINT", watch.endpoint)  # read from HF_ENDPOINT at import
    monkeypatch.setattr(
        constants, "HUGGINGFACE_CO_URL_TEMPLATE", watch.endpoint + "/{repo_id}/resolve/{revision}/{filename}"
    )
    for name in OFFLINE_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # read from the variables at import
    real_connect = socket.socket.connect

    def connect(sock: socket.socket, address: object) -> None:
        watch.connects.append(address)
        return real_connect(sock, address)

    thread = threading.Thread(target=serve, name="hub-watch", daemon=True)
    thread.start()
    watch.environment = dict(os.environ)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(socket.socket, "connect", connect)
            yield watch
    finally:
        watch.environment_after = dict(os.environ)
        stop.set()
        thread.join()
        listener.setblocking(False)
        while True:  # connections made but not yet accepted count too
            try:
                conn, _ = listener.accept()
            except BlockingIOError:
                break
            watch.accepted += 1
            conn.close()
        listener.close()


def assert_no_hub_and_no_environment_change(watch: HubWatch) -> None:
    """The load inside ``watch`` sent nothing to the hub (nor connected
    anywhere) and left the environment exactly as it found it, with no
    offline variable set."""
    assert watch.accepted == 0, f"{watch.accepted} connections reached the stand-in hub at {watch.endpoint}"
    assert watch.connects == [], f"the load connected to {watch.connects}"
    before, after = watch.environment, watch.environment_after
    offline = {name: after[name] for name in OFFLINE_VARIABLES if name in after}
    assert not offline, f"the load switched the hub offline in the process's environment: {offline}"
    changed = {k: (before.get(k), after.get(k)) for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert not changed, f"the load changed the environment (before, after): {changed}"
