"""``GET /v1/status`` and the admin actions, through plain HTTP against a real
gateway with real workers (the tiny model, and a model whose files cannot
be loaded).

The snapshot is decoded strictly into its msgspec Struct
(:class:`gateway.dashboard.schema.Status`) and validated against the schema
the OpenAPI document publishes for it; traffic in every protocol shows up
in its numbers (samples, recent requests, cache counters) without any of
the prompt's text; load, unload and reload work with the key and are
refused without it.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import httpx
import jsonschema
import msgspec
import pytest

from gateway.dashboard.schema import Status
from gateway.openapi_document import openapi_document
from tests.conftest import API_KEY, TINY, Server, start_server

BROKEN = "broken"
"""A configured model whose files name an unknown architecture."""

MARKER = "quartz-zebra-4471"
"""Text sent in every prompt here; it must never appear in a snapshot."""


def broken_model(tiny_model_dir: Path, tmp: Path) -> Path:
    """A copy of the tiny model whose ``config.json`` names a model type
    mlx-lm does not have (loading it fails with a clear reason)."""
    out = tmp / "broken-model"
    shutil.copytree(tiny_model_dir, out)
    config = json.loads((out / "config.json").read_text())
    config["model_type"] = "no_such_family"
    (out / "config.json").write_text(json.dumps(config))
    return out


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("status")
    srv = start_server(
        tmp,
        [
            {"name": TINY, "source": str(tiny_model_dir), "aliases": ["small"]},
            {"name": BROKEN, "source": str(broken_model(tiny_model_dir, tmp)), "preload": False},
        ],
    )
    yield srv
    srv.stop()


def get_status(srv: Server, **params) -> httpx.Response:
    return httpx.get(f"{srv.url}/v1/status", params=params, headers=srv.headers, timeout=30)


def status(srv: Server, **params) -> Status:
    """The snapshot, decoded strictly (unknown or missing fields, wrong types fail)."""
    response = get_status(srv, **params)
    assert response.status_code == 200, response.text
    return msgspec.json.decode(response.content, type=Status, strict=True)


def admin(srv: Server, action: str, body: object = None, headers: dict | None = None) -> httpx.Response:
    return httpx.post(
        f"{srv.url}/v1/admin/{action}",
        json=body,
        headers=srv.headers if headers is None else headers,
        timeout=120,
    )


def model(snapshot: Status, name: str):
    return next(m for m in snapshot.models if m.name == name)


def wait_for(predicate, timeout: float = 60.0):
    """Poll ``predicate`` (which reads the server) until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise TimeoutError("condition not met")


def test_snapshot_matches_the_published_schema(server):
    response = get_status(server)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    document = openapi_document([TINY])
    schema = {"$ref": "#/components/schemas/Status", "components": document["components"]}
    jsonschema.validate(response.json(), schema, cls=jsonschema.Draft202012Validator)
    snapshot = msgspec.json.decode(response.content, type=Status, strict=True)
    assert [m.name for m in snapshot.models] == [TINY, BROKEN]
    tiny = model(snapshot, TINY)
    assert tiny.state == "ready" and tiny.kind == "generate" and tiny.aliases == ["small"]
    assert tiny.pid and tiny.memory.mlx_active_bytes > 0 and tiny.memory.estimate_bytes > 0
    assert tiny.speculation is not None and tiny.speculation.method == "suffix"  # the default: auto
    assert model(snapshot, BROKEN).state == "unloaded" and model(snapshot, BROKEN).pid is None
    # the KV budget: within its budget when there is one; a model without a worker has none
    assert tiny.kv.budget_bytes == 0 or 0 <= tiny.kv.bytes <= tiny.kv.budget_bytes
    assert msgspec.structs.asdict(model(snapshot, BROKEN).kv) == dict.fromkeys(
        ("bytes", "budget_bytes", "waiting", "preemptions", "waited", "tokens"), 0
    )
    assert snapshot.mcp_servers == [] and snapshot.nodes == [] and not snapshot.draining
    assert snapshot.started_at <= snapshot.time
    assert "/v1/status" in document["paths"] and "/v1/admin/reload" in document["paths"]


def test_everything_but_the_page_needs_the_key(server):
    before = model(status(server), TINY)
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"x-api-key": API_KEY + "x"}):
        r = httpx.get(f"{server.url}/v1/status", headers=headers, timeout=30)
        assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
        for action, body in (("unload", {"model": TINY}), ("load", {"model": BROKEN}), ("reload", None)):
            r = admin(server, action, body, headers=headers)
            assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key", (action, r.text)
    after = model(status(server), TINY)
    assert (after.state, after.pid, after.restarts) == (before.state, before.pid, before.restarts)
    assert model(status(server), BROKEN).state == "unloaded"
    page = httpx.get(f"{server.url}/dashboard", timeout=30)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert API_KEY not in page.text


def test_traffic_in_every_protocol_moves_the_numbers(server):
    start = status(server)
    tiny_before = model(start, TINY)
    prompt = f"Tell me about {MARKER}."
    headers = server.headers
    sent = {
        "openai": httpx.post(
            f"{server.url}/v1/chat/completions",
            json={"model": "small", "messages": [{"role": "user", "content": prompt}], "max_tokens": 12},
            headers=headers,
            timeout=60,
        ),
        "responses": httpx.post(
            f"{server.url}/v1/responses",
            json={"model": TINY, "input": prompt, "max_output_tokens": 12},
            headers=headers,
            timeout=60,
        ),
        "anthropic": httpx.post(
            f"{server.url}/v1/messages",
            json={"model": TINY, "max_tokens": 12, "messages": [{"role": "user", "content": prompt}]},
            headers={**headers, "anthropic-version": "2023-06-01"},
            timeout=60,
        ),
        "ollama": httpx.post(
            f"{server.url}/api/chat",
            json={
                "model": TINY,
                "stream": False,
                "messages": [{"role": "user", "content": prompt}],
                "options": {"num_predict": 12},
            },
            headers=headers,
            timeout=60,
        ),
    }
    for protocol, response in sent.items():
        assert response.status_code == 200, (protocol, response.text)

    def finished():
        snapshot = status(server)
        new = [r for r in snapshot.requests if r.started_at >= start.time - 1 and r.finish is not None]
        return snapshot if {r.protocol for r in new} >= set(sent) else None

    snapshot = wait_for(finished)
    new = [r for r in snapshot.requests if r.started_at >= start.time - 1]
    assert sent["openai"].json()["id"] in {r.id for r in new}
    for r in new:
        assert r.model == TINY and r.finish in ("stop", "length"), r
        assert r.prompt_tokens > 0 and r.completion_tokens > 0, r
        assert r.ttft_seconds is not None and 0 < r.ttft_seconds <= r.duration_seconds, r
    assert [r.started_at for r in snapshot.requests] == sorted((r.started_at for r in snapshot.requests), reverse=True)
    # every protocol sent the same prompt: the later ones reused the earlier ones' prefix
    assert any(r.cached_tokens > 0 for r in new)

    def counted():
        snapshot = status(server, since=start.time)
        tiny = model(snapshot, TINY)
        moved = tiny.requests_finished >= tiny_before.requests_finished + len(sent)
        return snapshot if moved and any(s.tokens_per_second > 0 for s in snapshot.samples) else None

    snapshot = wait_for(counted)
    tiny = model(snapshot, TINY)
    assert tiny.generated_tokens > tiny_before.generated_tokens
    assert tiny.prefix_cache.queries >= tiny_before.prefix_cache.queries + len(sent)
    assert tiny.prefix_cache.hits > tiny_before.prefix_cache.hits and tiny.prefix_cache.hit_rate > 0
    assert 0 < tiny.prefix_cache.bytes <= tiny.prefix_cache.budget_bytes and tiny.prefix_cache.entries > 0
    assert all(s.t > start.time for s in snapshot.samples)
    assert any(s.ttft_p50 is not None and s.ttft_p95 >= s.ttft_p50 for s in snapshot.samples)
    assert all(TINY in s.memory_bytes for s in snapshot.samples)
    body = get_status(server).text
    assert MARKER not in body and "Tell me" not in body


def test_since_must_be_a_number(server):
    newest = status(server).samples[-1].t
    assert all(s.t > newest for s in status(server, since=newest).samples)
    for bad in ("yesterday", "nan", "inf"):
        r = get_status(server, since=bad)
        assert r.status_code == 400 and r.json()["error"]["param"] == "since", r.text


def test_unload_load_and_reload_with_the_key(server):
    pid = model(status(server), TINY).pid
    r = admin(server, "unload", {"model": "small"})
    assert r.status_code == 200 and r.json()["changes"] == [f"unloaded model {TINY}"], r.text
    after = model(status(server), TINY)
    assert after.state == "unloaded" and after.pid is None and after.memory.mlx_active_bytes == 0
    assert admin(server, "unload", {"model": TINY}).json()["changes"] == [f"model {TINY} is not loaded (unloaded)"]
    r = admin(server, "load", {"model": TINY})
    assert r.status_code == 200 and r.json() == {
        "object": "mlxd.admin_action",
        "action": "load",
        "model": TINY,
        "changes": [f"loaded model {TINY}"],
    }
    loaded = model(status(server), TINY)
    assert loaded.state == "ready" and loaded.pid not in (None, pid)
    r = admin(server, "reload")
    assert r.status_code == 200 and r.json()["changes"] == ["no changes"], r.text


def test_reload_keeps_the_running_config_when_the_file_is_broken(server):
    config = server.log_path.parent / "mlxd.toml"
    good = config.read_text()
    config.write_text(good + "\n[server]\nport = 1\n")  # a repeated table: invalid TOML
    try:
        r = admin(server, "reload")
        assert r.status_code == 409 and r.json()["error"]["code"] == "config_invalid", r.text
        assert "keeping the running config" in r.json()["error"]["message"]
    finally:
        config.write_text(good)
    assert model(status(server), TINY).state == "ready"
    assert admin(server, "reload").status_code == 200


def test_bad_admin_bodies(server):
    for body in ({}, {"model": ""}, {"model": TINY, "extra": 1}, [TINY], "tiny"):
        r = admin(server, "load", body)
        assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", (body, r.text)
    r = admin(server, "unload", {"model": "nope"})
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    r = admin(server, "reload", {"now": True})
    assert r.status_code == 400


def test_a_model_that_cannot_load_says_why(server):
    r = admin(server, "load", {"model": BROKEN})
    assert r.status_code == 503, r.text
    message = r.json()["error"]["message"]
    assert "no_such_family" in message, message
    broken = model(status(server), BROKEN)
    assert broken.state in ("failed", "loading", "starting") and "no_such_family" in (broken.error or "")
