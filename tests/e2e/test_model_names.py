"""Models whose names look alike as file names (``org/a`` and ``org_a``)
are served at once, each by its own worker on its own sockets: a request
reaches the model it names."""

from __future__ import annotations

import httpx
import pytest

from tests.conftest import start_server

SHORT, WIDE = "org/a", "org_a"


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    srv = start_server(
        tmp_path_factory.mktemp("names"),
        [
            {"name": SHORT, "source": str(tiny_model_dir), "context_length": 64},
            {"name": WIDE, "source": str(tiny_model_dir)},
        ],
    )
    yield srv
    srv.stop()


def chat(server, model: str, words: int) -> httpx.Response:
    return httpx.post(
        f"{server.url}/v1/chat/completions",
        json={"model": model, "messages": [{"role": "user", "content": "word " * words}], "max_tokens": 2},
        headers=server.headers,
        timeout=60,
    )


def test_look_alike_names_get_their_own_workers(server):
    short, wide = server.worker(SHORT), server.worker(WIDE)
    assert short["pid"] != wide["pid"]
    assert (short["context_length"], wide["context_length"]) == (64, 2048)
    # the context limit is enforced by the worker: a long prompt is refused
    # by org/a's worker only, a short one served by both
    for _ in range(3):
        refused, served = chat(server, SHORT, 100), chat(server, WIDE, 100)
        assert refused.status_code == 400 and refused.json()["error"]["code"] == "context_length_exceeded"
        assert served.status_code == 200 and served.json()["model"] == WIDE
        assert chat(server, SHORT, 5).status_code == 200
