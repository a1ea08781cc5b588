"""Per-key limits against a real gateway with the tiny model.

Keys given as tables carry limits (requests and tokens per minute,
concurrent requests, allowed models); a plain-string key is unlimited.
Over a limit a request gets 429 in its protocol's shape with
``Retry-After``; answers carry the ``x-ratelimit-*`` (OpenAI) or
``anthropic-ratelimit-*`` (``/v1/messages``) headers; a model the key may
not use does not exist for it. Under concurrent load each key's counts are
its own, ``/metrics`` shows them by key name (never the key), and a
config reload keeps them.
"""

from __future__ import annotations

import concurrent.futures
import os
import re
import signal
import time

import httpx
import pytest

from tests.conftest import TINY, start_server, write_config

PLAIN = "sk-plain-unlimited"
KEYS = [
    PLAIN,
    {"name": "alpha", "key": "sk-alpha", "requests_per_minute": 3},
    {"name": "burst", "key": "sk-burst", "requests_per_minute": 5},
    {"name": "wide", "key": "sk-wide", "requests_per_minute": 100, "concurrent_requests": 2},
    {"name": "tokens", "key": "sk-tokens", "tokens_per_minute": 10},
    {"name": "anthro", "key": "sk-anthro", "requests_per_minute": 50, "tokens_per_minute": 100000},
    {"name": "other-only", "key": "sk-other", "models": ["other"]},
    {"name": "reload", "key": "sk-reload", "requests_per_minute": 2},
]
OTHER = "other"
"""A configured model that only the ``other-only`` key may use (never loaded)."""
HEARTBEAT_TIMEOUT = 300.0
"""The gateway's heartbeat timeout. :func:`test_concurrent_requests_limit`
holds the worker stopped (SIGSTOP) for at most :data:`MAX_STOP` seconds,
which must never reach it: the gateway would kill the silent worker."""
MAX_STOP = 90.0
"""The longest the worker can stay stopped: the sum of the bounds of what
runs while it is (a 30 s wait whose last poll may take 10 s, and a 30 s
request)."""
assert MAX_STOP < HEARTBEAT_TIMEOUT / 2


def models(tiny_model_dir) -> list[dict]:
    """The two configured models: ``tiny`` (preloaded) and ``other``."""
    return [
        {"name": TINY, "source": str(tiny_model_dir), "max_batch_size": 16},
        {"name": OTHER, "source": str(tiny_model_dir), "preload": False},
    ]


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """A gateway with the keys of :data:`KEYS`."""
    srv = start_server(
        tmp_path_factory.mktemp("limits"), models(tiny_model_dir), api_keys=KEYS, heartbeat_timeout=HEARTBEAT_TIMEOUT
    )
    yield srv
    srv.stop()


def auth(key: str) -> dict[str, str]:
    """The headers presenting ``key``."""
    return {"Authorization": f"Bearer {key}"}


def chat(server, key: str, model: str = TINY, timeout: float = 120, **kw) -> httpx.Response:
    """One small OpenAI chat request with ``key``."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, **kw}
    return httpx.post(f"{server.url}/v1/chat/completions", json=body, headers=auth(key), timeout=timeout)


def anthropic(server, key: str, model: str = TINY) -> httpx.Response:
    """One small Anthropic Messages request with ``key``."""
    body = {"model": model, "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"x-api-key": key, "anthropic-version": "2023-06-01"}
    return httpx.post(f"{server.url}/v1/messages", json=body, headers=headers, timeout=120)


def ollama(server, key: str, model: str = TINY) -> httpx.Response:
    """One small Ollama chat request with ``key``."""
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "stream": False}
    body["options"] = {"num_predict": 2}
    return httpx.post(f"{server.url}/api/chat", json=body, headers=auth(key), timeout=120)


def metric(server, name: str, **labels: str) -> float:
    """The value of one ``/metrics`` sample."""
    text = httpx.get(f"{server.url}/metrics", headers=auth(PLAIN), timeout=10).text
    want = ",".join(f'{k}="{v}"' for k, v in labels.items())
    match = re.search(rf"^{re.escape(name)}\{{{re.escape(want)}\}} (\S+)$", text, re.MULTILINE)
    assert match, f"{name}{{{want}}} not in /metrics"
    return float(match.group(1))


def test_requests_per_minute_in_every_protocol(server):
    for remaining in (2, 1, 0):
        r = chat(server, "sk-alpha")
        assert r.status_code == 200, r.text
        assert r.headers["x-ratelimit-limit-requests"] == "3"
        assert r.headers["x-ratelimit-remaining-requests"] == str(remaining)
        assert re.fullmatch(r"\d+(\.\d+)?(ms|s)|\d+m\d+s", r.headers["x-ratelimit-reset-requests"])
    r = chat(server, "sk-alpha")
    assert r.status_code == 429
    assert 1 <= int(r.headers["retry-after"]) <= 60
    error = r.json()["error"]
    assert (error["type"], error["code"]) == ("requests", "rate_limit_exceeded")
    assert "alpha" in error["message"] and "sk-alpha" not in error["message"]
    assert r.headers["x-ratelimit-remaining-requests"] == "0"

    r = anthropic(server, "sk-alpha")
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert r.json()["type"] == "error" and r.json()["error"]["type"] == "rate_limit_error"
    assert r.headers["anthropic-ratelimit-requests-remaining"] == "0"

    r = ollama(server, "sk-alpha")
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert set(r.json()) == {"error"} and "Rate limit" in r.json()["error"]

    # the other keys are untouched; listings are not model requests
    assert chat(server, PLAIN).status_code == 200
    assert "x-ratelimit-limit-requests" not in chat(server, PLAIN).headers
    assert httpx.get(f"{server.url}/v1/models", headers=auth("sk-alpha"), timeout=10).status_code == 200


def test_anthropic_headers_on_messages(server):
    r = anthropic(server, "sk-anthro")
    assert r.status_code == 200, r.text
    assert r.headers["anthropic-ratelimit-requests-limit"] == "50"
    assert r.headers["anthropic-ratelimit-requests-remaining"] == "49"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", r.headers["anthropic-ratelimit-requests-reset"])
    assert r.headers["anthropic-ratelimit-tokens-limit"] == "100000"
    assert not any(name.startswith("x-ratelimit") for name in r.headers)


def test_tokens_per_minute(server):
    first = chat(server, "sk-tokens")
    assert first.status_code == 200, first.text
    assert first.headers["x-ratelimit-remaining-tokens"] == "10"  # counted when the request ends
    usage = first.json()["usage"]
    assert usage["total_tokens"] >= 10
    r = chat(server, "sk-tokens")
    assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
    assert r.json()["error"]["type"] == "tokens"
    assert r.headers["x-ratelimit-remaining-tokens"] == "0"
    assert metric(server, "mlxd:api_key_tokens_total", key="tokens") == usage["total_tokens"]


def test_disallowed_model_does_not_exist_for_the_key(server):
    r = chat(server, "sk-other")
    assert r.status_code == 404 and r.json()["error"]["code"] == "model_not_found"
    assert anthropic(server, "sk-other").json()["error"]["type"] == "not_found_error"
    assert ollama(server, "sk-other").status_code == 404
    listed = httpx.get(f"{server.url}/v1/models", headers=auth("sk-other"), timeout=10).json()
    assert [m["id"] for m in listed["data"]] == [OTHER]
    r = httpx.get(f"{server.url}/v1/models/{TINY}", headers=auth("sk-other"), timeout=10)
    assert r.status_code == 404
    assert chat(server, PLAIN).status_code == 200  # the model itself is there


def test_concurrent_load_keeps_keys_apart(server):
    """Ten requests at once from each of three keys: the limited key gets
    exactly its five, the others all of theirs."""
    before = {name: metric(server, "mlxd:api_key_requests_total", key=name) for name in ("key1", "burst", "wide")}
    jobs = [("burst", "sk-burst"), ("key1", PLAIN), ("wide", "sk-wide")] * 10
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        results = list(pool.map(lambda job: (job[0], chat(server, job[1]).status_code), jobs, timeout=600))
    by_key: dict[str, list[int]] = {}
    for name, status in results:
        by_key.setdefault(name, []).append(status)
    assert sorted(by_key["burst"]) == [200] * 5 + [429] * 5
    assert by_key["key1"] == [200] * 10
    # "wide" allows two at once: each of its requests is either admitted or
    # refused for concurrency, never for another key's use
    assert set(by_key["wide"]) <= {200, 429} and 200 in by_key["wide"]
    wide_refused = by_key["wide"].count(429)
    assert metric(server, "mlxd:api_key_requests_total", key="burst") - before["burst"] == 5
    assert metric(server, "mlxd:api_key_rate_limited_total", key="burst", limit="requests") == 5
    assert metric(server, "mlxd:api_key_requests_total", key="key1") - before["key1"] == 10
    assert metric(server, "mlxd:api_key_rate_limited_total", key="wide", limit="concurrency") == wide_refused
    assert metric(server, "mlxd:api_key_rate_limited_total", key="wide", limit="requests") == 0
    assert metric(server, "mlxd:api_key_requests_in_flight", key="wide") == 0
    text = httpx.get(f"{server.url}/metrics", headers=auth(PLAIN), timeout=10).text
    assert "sk-" not in text  # names, never keys


def wait_for(predicate, timeout: float = 30.0) -> None:
    """Poll ``predicate`` until it holds (fails after ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.05)


def test_concurrent_requests_limit(server):
    """Two requests held in a stopped worker use up ``wide``'s two slots; a
    third is refused at once (not queued) until they end."""
    pid = server.worker(TINY)["pid"]
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        os.kill(pid, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            # everything while the worker is stopped is bounded (MAX_STOP in all), far inside the heartbeat timeout
            held = [pool.submit(chat, server, "sk-wide") for _ in range(2)]
            wait_for(lambda: metric(server, "mlxd:api_key_requests_in_flight", key="wide") == 2, timeout=30)
            r = chat(server, "sk-wide", timeout=30)
            assert r.status_code == 429 and r.headers["retry-after"] == "1"
            assert "concurrent requests" in r.json()["error"]["message"]
        finally:
            os.kill(pid, signal.SIGCONT)
        assert time.monotonic() - stopped < HEARTBEAT_TIMEOUT
        assert [f.result(timeout=180).status_code for f in held] == [200, 200]
    wait_for(lambda: metric(server, "mlxd:api_key_requests_in_flight", key="wide") == 0)
    assert chat(server, "sk-wide").status_code == 200


def test_counters_survive_a_reload(server, tiny_model_dir):
    """Raising a key's limit from 2 to 3 by a reload allows exactly one more
    request in this minute: its two earlier ones still count."""
    assert [chat(server, "sk-reload").status_code for _ in range(3)] == [200, 200, 429]
    keys = [dict(k, requests_per_minute=3) if isinstance(k, dict) and k["name"] == "reload" else k for k in KEYS]
    port = int(server.url.rsplit(":", 1)[1])
    configured = [{"preload": True, **m} for m in models(tiny_model_dir)]
    write_config(server.log_path.parent / "mlxd.toml", port, configured, keys, heartbeat_timeout=HEARTBEAT_TIMEOUT)
    r = httpx.post(f"{server.url}/v1/admin/reload", headers=auth(PLAIN), timeout=60)
    assert r.status_code == 200, r.text
    r = chat(server, "sk-reload")
    assert r.status_code == 200 and r.headers["x-ratelimit-limit-requests"] == "3"
    assert r.headers["x-ratelimit-remaining-requests"] == "0"
    assert chat(server, "sk-reload").status_code == 429
    assert metric(server, "mlxd:api_key_requests_total", key="reload") == 3
