"""The open-file limit the gateway raises at start (gateway/http/file_limit.py),
on this process's real RLIMIT_NOFILE (restored afterwards)."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.http.file_limit import BASE_FILES, OPEN_MAX, files_needed, raise_file_limit
from shared.config import Config, ModelConfig

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def limits():
    saved = resource.getrlimit(resource.RLIMIT_NOFILE)
    yield saved
    resource.setrlimit(resource.RLIMIT_NOFILE, saved)


def test_files_needed_counts_every_model_sequence():
    config = Config(
        models=[ModelConfig(name="a"), ModelConfig(name="b", max_batch_size=8, max_queued=0)],
    )
    assert files_needed(config) == BASE_FILES + 2 * (32 + 256 + 8)


def test_raises_a_low_soft_limit_to_the_need(limits):
    soft, hard = limits
    if hard != resource.RLIM_INFINITY and hard < 600:
        pytest.skip("hard limit too low to test")
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
    assert raise_file_limit(600, platform="linux") == (600, hard)
    assert resource.getrlimit(resource.RLIMIT_NOFILE) == (600, hard)
    assert raise_file_limit(300, platform="linux") == (600, hard)  # never lowered


def test_stops_at_the_hard_limit_and_warns():
    """In a child process: lowering a hard limit cannot be undone."""
    code = (
        "import logging, resource, sys\n"
        "logging.basicConfig(stream=sys.stderr)\n"
        "from gateway.http.file_limit import raise_file_limit\n"
        "resource.setrlimit(resource.RLIMIT_NOFILE, (256, 1000))\n"
        "print(raise_file_limit(6000, platform='linux'))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60, check=True
    )
    assert result.stdout.strip() == "(1000, 1000)"
    assert "open-file limit (1000) is below the 6000" in result.stderr


def test_macos_never_asks_for_more_than_open_max(limits, monkeypatch):
    calls = []
    monkeypatch.setattr(resource, "getrlimit", lambda _: (256, resource.RLIM_INFINITY))
    monkeypatch.setattr(resource, "setrlimit", lambda _, value: calls.append(value))
    assert raise_file_limit(50000, platform="darwin")[0] == OPEN_MAX
    assert calls == [(OPEN_MAX, resource.RLIM_INFINITY)]
