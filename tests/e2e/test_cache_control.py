"""Cache and request control against a real gateway with the tiny model:
``GET /v1/cache/stats``, ``DELETE /v1/cache``,
``POST /v1/requests/{id}/cancel``, and ``warm_prompts`` prefilled at load.

A warm prompt (an agent's system prompt and tools) makes the first request
that starts with it report cached tokens; the stats show both cache tiers
and the warm prompts; a clear empties memory and disk (the next identical
request starts cold); a cancel ends a running stream with exactly one
terminal event and frees its sequence. Every route needs the key.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.conftest import API_KEY, TINY, start_server

OTHER_KEY = "sk-other-tenant"
SYSTEM = "You are the build agent of a large repository. " + "Follow the house rules in every answer. " * 40
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file of the repository",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
        },
    }
]


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """A gateway whose model warms the agent prompt and has a disk tier."""
    tmp = tmp_path_factory.mktemp("control")
    warm = tmp / "warm.json"
    warm.write_text(json.dumps([{"messages": [{"role": "system", "content": SYSTEM}], "tools": TOOLS}]))
    model = {
        "name": TINY,
        "source": str(tiny_model_dir),
        "warm_prompts": str(warm),
        "disk_cache_bytes": "64MiB",
        "disk_cache_dir": str(tmp / "disk"),
    }
    srv = start_server(tmp, [model], api_keys=[API_KEY, {"name": "other", "key": OTHER_KEY}])
    srv.disk_dir = tmp / "disk"
    yield srv
    srv.stop()


def auth(key: str = API_KEY) -> dict[str, str]:
    """The headers presenting ``key``."""
    return {"Authorization": f"Bearer {key}"}


def agent_turn(server, text: str, **kw) -> httpx.Response:
    """A request of the warmed agent: its system prompt, its tools, a turn."""
    body = {
        "model": TINY,
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
        "tools": TOOLS,
        "max_tokens": 2,
        "temperature": 0,
        **kw,
    }
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=auth(), timeout=120)


def stats(server, **params) -> dict:
    """``GET /v1/cache/stats`` with the key."""
    r = httpx.get(f"{server.url}/v1/cache/stats", params=params, headers=auth(), timeout=10)
    assert r.status_code == 200, r.text
    return r.json()


def wait_for(predicate, timeout: float = 30.0):
    """Poll ``predicate`` until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.1)


def test_warm_prompt_makes_the_first_request_hit(server):
    (model,) = wait_for(lambda: (stats(server)["models"][0]["warm"] or {}).get("prompts") and stats(server)["models"])
    assert model["model"] == TINY and model["state"] == "ready"
    assert model["warm"]["prompts"] == 1 and model["warm"]["tokens"] > 100
    assert model["memory"]["entries"] >= 1
    r = agent_turn(server, "List the files.")
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    # the whole system turn (with its tools) was cached; only the user turn is new
    assert usage["prompt_tokens_details"]["cached_tokens"] >= model["warm"]["tokens"] - 3
    assert "1 warm prompts" in server.log_path.read_text()


def test_cache_stats_shape_and_errors(server):
    assert agent_turn(server, "Run the tests.").status_code == 200  # a hit on the warm prompt at least
    (model,) = wait_for(lambda: stats(server, model=TINY)["models"][0]["memory"]["hits"] and stats(server)["models"])
    assert set(model["memory"]) == {
        "entries",
        "bytes",
        "budget_bytes",
        "queries",
        "hits",
        "hit_rate",
        "cached_tokens",
        "evictions",
    }
    assert set(model["disk"]) == {
        "entries",
        "bytes",
        "hits",
        "hit_rate",
        "cached_tokens",
        "writes",
        "rejected",
        "evictions",
    }
    assert 0 < model["memory"]["hit_rate"] <= 1 and model["memory"]["hits"] >= 1
    r = httpx.get(f"{server.url}/v1/cache/stats", params={"model": "nope"}, headers=auth(), timeout=10)
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    for method, path in (("GET", "/v1/cache/stats"), ("DELETE", "/v1/cache"), ("POST", "/v1/requests/x/cancel")):
        assert httpx.request(method, f"{server.url}{path}", timeout=10).status_code == 401


def test_clear_empties_memory_and_disk(server):
    assert agent_turn(server, "Show the build log.").status_code == 200
    on_disk = wait_for(lambda: stats(server)["models"][0]["disk"]["entries"] >= 1 and stats(server)["models"][0])
    assert on_disk["memory"]["entries"] >= 1
    assert list(server.disk_dir.rglob("*.safetensors"))
    r = httpx.delete(f"{server.url}/v1/cache", params={"model": TINY}, headers=auth(), timeout=60)
    assert r.status_code == 200, r.text
    (cleared,) = r.json()["models"]
    assert cleared["cleared"] is True and cleared["memory"]["entries"] >= 1 and cleared["disk"]["entries"] >= 1
    assert not list(server.disk_dir.rglob("*.safetensors"))
    wait_for(lambda: stats(server)["models"][0]["memory"]["entries"] == 0)
    assert stats(server)["models"][0]["disk"]["entries"] == 0
    r = agent_turn(server, "Show the build log.")
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0  # cold again
    r = httpx.delete(f"{server.url}/v1/cache", headers=auth(), timeout=60)  # every model
    assert r.status_code == 200 and [m["model"] for m in r.json()["models"]] == [TINY]


def first_event(lines) -> dict:
    """The first JSON ``data:`` event of an SSE stream."""
    for line in lines:
        if line.startswith("data: {"):
            return json.loads(line[len("data: ") :])
    raise AssertionError("no event")


def test_cancel_ends_a_stream_with_one_terminal_event(server):
    body = {"model": TINY, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1800, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, headers=auth(), timeout=120) as r:
        lines = r.iter_lines()
        request_id = first_event(lines)["id"]
        assert request_id.startswith("chatcmpl-")
        other = httpx.post(f"{server.url}/v1/requests/{request_id}/cancel", headers=auth(OTHER_KEY), timeout=10)
        assert other.status_code == 404  # another key's request does not exist for it
        c = httpx.post(f"{server.url}/v1/requests/{request_id}/cancel", headers=auth(), timeout=10)
        assert c.status_code == 200, c.text
        assert c.json() == {"id": request_id, "model": TINY, "object": "request.cancelled"}
        rest = [line for line in lines if line.startswith("data: ")]
    errors = [line for line in rest if '"error"' in line]
    assert len(errors) == 1, rest[-5:]
    assert rest.index(errors[0]) >= len(rest) - 2  # the end (at most [DONE] after it)
    assert json.loads(errors[0][len("data: ") :])["error"]["code"] == "aborted"
    again = httpx.post(f"{server.url}/v1/requests/{request_id}/cancel", headers=auth(), timeout=10)
    assert again.status_code == 404 and again.json()["error"]["code"] == "request_not_found"
    wait_for(lambda: server.worker(TINY)["stats"]["running"] == 0)  # the worker freed the sequence


def test_cancel_an_anthropic_stream(server):
    body = {"model": TINY, "max_tokens": 1800, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01"}
    with httpx.stream("POST", f"{server.url}/v1/messages", json=body, headers=headers, timeout=120) as r:
        lines = r.iter_lines()
        message_id = first_event(lines)["message"]["id"]
        c = httpx.post(f"{server.url}/v1/requests/{message_id}/cancel", headers=auth(), timeout=10)
        assert c.status_code == 200, c.text
        events = [line for line in lines if line.startswith("event: ")]
    assert events.count("event: error") == 1 and events[-1] == "event: error"
    assert "event: message_stop" not in events
