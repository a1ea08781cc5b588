"""Log files: the gateway rotates by size, workers follow the rotation
(shared/logging.py), and the service defaults (gateway/cli.py)."""

from __future__ import annotations

import logging

import pytest

from shared.logging import setup_logging


@pytest.fixture
def restore_root():
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    for handler in root.handlers:
        handler.close()
    root.handlers[:], root.level = handlers, level


def handler_for(**kw) -> logging.Handler:
    setup_logging("info", **kw)
    return logging.getLogger().handlers[0]


def emit(handler: logging.Handler, text: str) -> None:
    handler.handle(logging.LogRecord("mlxd.test", logging.INFO, __file__, 1, text, None, None))


def test_gateway_rotates_and_a_worker_follows(tmp_path, restore_root):
    path = tmp_path / "mlxd.log"
    worker = handler_for(name="worker:m-1", log_file=str(path))
    gateway = handler_for(name="gateway", log_file=str(path), max_bytes=600, backups=2)
    for i in range(40):
        emit(gateway, f"gateway line {i:02d} " + "x" * 40)
        emit(worker, f"worker line {i:02d}")
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["mlxd.log", "mlxd.log.1", "mlxd.log.2"]  # two backups kept, older ones deleted
    current = path.read_text()
    assert "gateway line 39" in current
    assert "worker line 39" in current  # the worker reopened the path after the rotation
    for name in files:
        assert (tmp_path / name).stat().st_size < 600 + 200
    gateway.close()
    worker.close()


def test_without_a_size_limit_nothing_rotates(tmp_path, restore_root):
    path = tmp_path / "mlxd.log"
    handler = handler_for(log_file=str(path))
    assert isinstance(handler, logging.handlers.WatchedFileHandler)
    for _ in range(100):
        emit(handler, "y" * 100)
    assert [p.name for p in tmp_path.iterdir()] == ["mlxd.log"]
    handler.close()


def test_service_mode_logs_to_the_library_logs_folder(tmp_path, monkeypatch):
    from gateway.cli import _load

    monkeypatch.setenv("HOME", str(tmp_path))
    config = tmp_path / "c.toml"
    config.write_text('[[models]]\nname = "a"\n')
    assert _load(str(config)).server.log_file == ""
    assert _load(str(config), service=True).server.log_file == str(tmp_path / "Library" / "Logs" / "mlxd" / "mlxd.log")
    config.write_text('[server]\nlog_file = "/var/tmp/x.log"\n[[models]]\nname = "a"\n')
    assert _load(str(config), service=True).server.log_file == "/var/tmp/x.log"  # the config wins


def test_background_logging_queues_and_writes_everything_by_exit(tmp_path):
    """The gateway's records are only queued where they are logged (its
    event loop never waits for the disk); a thread writes them, and what
    is queued when the process exits is written before it ends."""
    import subprocess
    import sys
    from pathlib import Path

    path = tmp_path / "gateway.log"
    code = (
        "import logging\n"
        "from shared.logging import setup_logging\n"
        f"setup_logging('info', log_file={str(path)!r}, max_bytes=1 << 30, backups=1, background=True)\n"
        "assert type(logging.getLogger().handlers[0]) is logging.handlers.QueueHandler\n"
        "for i in range(2000):\n"
        "    logging.getLogger('mlxd.test').info('line %d', i)\n"
    )
    root = Path(__file__).resolve().parent.parent
    subprocess.run([sys.executable, "-c", code], cwd=root, check=True, timeout=60)
    lines = path.read_text().splitlines()
    assert len(lines) == 2000 and lines[-1].endswith("[gateway] mlxd.test: line 1999")
