"""``mlxd top`` in a pseudo-terminal, and ``mlxd ps`` / ``mlxd status``, against
a real gateway with a real worker (the tiny model).

``mlxd top`` runs under pexpect in a 150x40 pseudo-terminal; what it writes
is fed to pyte, a terminal emulator, and the tests read the screen back as
a person would see it: the model and its state, the requests the test
sends appearing with their finish, and a clean exit (status 0, the
terminal's alternate screen left) on Ctrl-C. With ``NO_COLOR`` it writes
no colour codes. The one-shot tables are read from the commands' output.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import API_KEY, ROOT, TINY, free_port, start_server
from tests.e2e.test_status import BROKEN, broken_model

pexpect = pytest.importorskip("pexpect", reason="pexpect is not installed (pip install -e '.[test]')")
pyte = pytest.importorskip("pyte", reason="pyte is not installed (pip install -e '.[test]')")

COLUMNS, ROWS = 150, 40
COLOUR = re.compile(rb"\x1b\[[0-9;]*(3[0-7]|38;[25];[0-9;]+|9[0-7])m")
"""An SGR sequence that sets a foreground colour."""


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("top")
    srv = start_server(
        tmp,
        [
            {"name": TINY, "source": str(tiny_model_dir)},
            {"name": BROKEN, "source": str(broken_model(tiny_model_dir, tmp)), "preload": False},
        ],
    )
    try:
        yield srv
    finally:
        srv.stop()


class Terminal:
    """A command running in a pseudo-terminal, its screen kept by pyte."""

    def __init__(self, args: list[str], **env: str) -> None:
        self.screen = pyte.Screen(COLUMNS, ROWS)
        self.stream = pyte.ByteStream(self.screen)
        self.raw = bytearray()
        environment = {k: v for k, v in os.environ.items() if k != "NO_COLOR"}
        environment.update({"TERM": "xterm-256color", "COLUMNS": str(COLUMNS), "LINES": str(ROWS), **env})
        self.child = pexpect.spawn(
            args[0], args[1:], dimensions=(ROWS, COLUMNS), env=environment, cwd=str(ROOT), timeout=30
        )

    def pump(self, timeout: float = 0.2) -> None:
        """Feed whatever the command wrote (waiting at most ``timeout``)."""
        try:
            data = self.child.read_nonblocking(1 << 16, timeout=timeout)
        except (pexpect.TIMEOUT, pexpect.EOF):
            return
        self.raw += data
        self.stream.feed(data)

    @property
    def text(self) -> str:
        return "\n".join(line.rstrip() for line in self.screen.display)

    def wait_for(self, predicate, timeout: float = 60.0, what: str = "the screen") -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.pump()
            if predicate(self.text):
                return
        raise AssertionError(f"{what} never showed it; screen:\n{self.text}")

    def quit(self) -> int:
        """Ctrl-C; the exit status once the command has ended."""
        self.child.sendintr()
        deadline = time.monotonic() + 30
        while self.child.isalive() and time.monotonic() < deadline:
            self.pump()
        while True:  # the rest of the output
            try:
                data = self.child.read_nonblocking(1 << 16, timeout=0.5)
            except (pexpect.TIMEOUT, pexpect.EOF):
                break
            self.raw += data
        self.child.close()
        return self.child.exitstatus


def mlxd(*args: str) -> list[str]:
    return [sys.executable, "-m", "gateway", *args]


def row(text: str, first: str) -> str:
    """The screen line whose first word is ``first``."""
    for line in text.splitlines():
        cells = re.sub(r"[│┃|]", " ", line).split()
        if cells[:1] == [first]:
            return line
    return ""


def test_top_shows_the_server_live_and_quits_on_ctrl_c(server):
    term = Terminal(mlxd("top", "--url", server.url, "--api-key", API_KEY))
    try:
        term.wait_for(
            lambda t: "ready" in row(t, TINY) and "unloaded" in row(t, BROKEN) and "recent requests" in t,
            what="the first whole screen",
        )
        assert "MLX MEM" in term.text and "CACHE HIT" in term.text
        ids = []
        for _ in range(3):
            reply = httpx.post(
                f"{server.url}/v1/chat/completions",
                json={"model": TINY, "messages": [{"role": "user", "content": "top, please"}], "max_tokens": 16},
                headers=server.headers,
                timeout=60,
            )
            ids.append(reply.json()["id"])

        def listed(text: str) -> bool:
            lines = [line for line in text.splitlines() if line.lstrip("│ ").startswith("chatcmpl-")]
            return len(lines) >= 3 and all("openai" in line and "length" in line for line in lines[:3])

        term.wait_for(listed, what="the recent requests")
        assert any(line.lstrip("│ ").startswith(ids[-1][:20]) for line in term.text.splitlines())
        term.wait_for(lambda t: re.search(r"peak [1-9]", t) is not None, what="the tok/s line")
        assert "p50" in term.text
        term.wait_for(lambda t: "MiB" in row(t, TINY), what="tiny's MLX memory")
        assert COLOUR.search(bytes(term.raw)), "a terminal gets colours"
    finally:
        status = term.quit()
    assert status == 0, bytes(term.raw[-2000:])
    assert b"\x1b[?1049l" in term.raw, "the alternate screen was left"
    assert b"Traceback" not in term.raw


def test_top_without_colour_and_a_failed_model(server):
    httpx.post(f"{server.url}/v1/admin/load", json={"model": BROKEN}, headers=server.headers, timeout=120)
    term = Terminal(mlxd("top", "--url", server.url, "--api-key", API_KEY), NO_COLOR="1")
    try:
        term.wait_for(lambda t: "no_such_family" in t and "ready" in row(t, TINY), what="the failed model's reason")
    finally:
        status = term.quit()
    assert status == 0
    assert not COLOUR.search(bytes(term.raw)), "NO_COLOR: no colour codes"


def test_top_waits_for_a_server_that_does_not_answer():
    url = f"http://127.0.0.1:{free_port()}"
    term = Terminal(mlxd("top", "--url", url))
    try:
        term.wait_for(lambda t: f"no mlxd answers at {url}" in t and "retrying" in t, what="the waiting screen")
    finally:
        status = term.quit()
    assert status == 0


def test_ps_and_status_print_one_table(server):
    done = subprocess.run(
        mlxd("ps", "--url", server.url, "--api-key", API_KEY), capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "ready" in row(done.stdout, TINY) and "MLX MEM" in done.stdout
    assert "\x1b[" not in done.stdout  # not a terminal: plain text
    refused = subprocess.run(
        mlxd("ps", "--url", server.url),
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "MLXD_API_KEY": ""},
        timeout=120,
    )
    assert refused.returncode == 1 and "needs an API key" in refused.stderr
    config = server.log_path.parent / "mlxd.toml"  # its key and address come from the config
    status = subprocess.run(
        mlxd("status", "--config", str(config)), capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert status.returncode == 0, status.stderr
    assert "healthy: yes" in status.stdout and "ready" in row(status.stdout, TINY)
