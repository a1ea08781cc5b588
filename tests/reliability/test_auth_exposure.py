"""What an unauthenticated client can reach, against a real gateway.

With a key configured, every route of the app (enumerated from
``build_app``, so a new route is covered automatically) answers 401 to any
method without a key or with a wrong one, except ``/health``,
``/openapi.json``, the Ollama probes ``/`` and ``/api/version``, the
dashboard page's files (no data in them) (and ``/ready`` and ``/metrics``
unless ``server.metrics_require_key``). Path,
Host, request-target and forwarding-header tricks reach no model data.
Model names that happen to be paths on disk answer exactly like any other
unknown name and never load anything. Starting on a non-loopback address
without keys is refused by the command line unless explicitly allowed.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from gateway.app import build_app
from shared.config import Config, ModelConfig
from tests.conftest import API_KEY, ROOT, TINY, Server, free_port, start_server, write_config
from tests.reliability.test_http_edges import exchange, head, port_of

LAZY = "lazy"
"""A configured model that is never preloaded: it must stay unloaded."""

DASHBOARD_PAGE = {"/dashboard", "/dashboard/dashboard.css", "/dashboard/dashboard.js"}
ALWAYS_PUBLIC = {"/health", "/openapi.json", "/", "/api/version"} | DASHBOARD_PAGE
MONITORING = {"/ready", "/metrics"}
METHODS = ("GET", "POST", "HEAD", "OPTIONS")
WRONG_CREDENTIALS = [
    {},
    {"Authorization": "Bearer wrong"},
    {"x-api-key": "wrong"},
    {"Authorization": f"Bearer {API_KEY}x"},
    {"Authorization": f"Bearer {API_KEY[:-1]}"},
    {"Authorization": f"Bearer {API_KEY.upper()}"},
    {"Authorization": f"Basic {API_KEY}"},
    {"Authorization": API_KEY},
    {"Authorization": "Bearer"},
    {"x-api-key": ""},
]


def app_paths() -> list[str]:
    """Every route path of the gateway app, path parameters filled in."""
    app = build_app(Config(models=[ModelConfig(name=TINY)]))
    paths = [re.sub(r"\{[^}]*\}", TINY, route.path) for route in app.routes]
    assert "/v1/chat/completions" in paths and "/health" in paths
    return paths


def snapshot(server: Server) -> dict[str, tuple]:
    """Each model's worker identity: state, pid, incarnation, restarts."""
    return {
        name: (s["state"], s["pid"], s["incarnation"], s["restarts"]) for name, s in server.health()["models"].items()
    }


def assert_401(response: httpx.Response, path: str) -> None:
    """``response`` is a 401 in the protocol shape of ``path``."""
    assert response.status_code == 401, (response.request.method, path, response.text)
    if response.request.method == "HEAD":
        return
    body = response.json()
    if path.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
    elif path.startswith("/api/"):
        assert list(body) == ["error"] and "API key" in body["error"]
    else:
        assert body["error"]["code"] == "invalid_api_key"


@pytest.fixture(scope="module")
def auth_server(tiny_model_dir, tmp_path_factory):
    """A keyed gateway with a preloaded ``tiny`` and a lazy ``lazy`` model."""
    srv = start_server(
        tmp_path_factory.mktemp("auth-gw"),
        [
            {"name": TINY, "source": str(tiny_model_dir)},
            {"name": LAZY, "source": str(tiny_model_dir), "preload": False},
        ],
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def locked_server(tiny_model_dir, tmp_path_factory):
    """A keyed gateway with ``metrics_require_key`` (no worker started)."""
    srv = start_server(
        tmp_path_factory.mktemp("locked-gw"),
        [{"name": TINY, "source": str(tiny_model_dir), "preload": False}],
        metrics_require_key=True,
    )
    yield srv
    srv.stop()


# -- every route needs the key ---------------------------------------------------------


@pytest.mark.parametrize("method", METHODS)
def test_every_route_needs_a_valid_key(auth_server, method):
    # one client for the ~900 requests (a client per request builds a TLS context each time: ~25 ms of CPU)
    with httpx.Client(timeout=30) as http:
        for path in app_paths():
            if path in ALWAYS_PUBLIC | MONITORING:
                continue
            for headers in WRONG_CREDENTIALS:
                assert_401(http.request(method, f"{auth_server.url}{path}", headers=headers), path)


def test_public_routes(auth_server, locked_server):
    with httpx.Client(timeout=30) as http:
        for path in ALWAYS_PUBLIC | MONITORING:
            assert http.get(f"{auth_server.url}{path}").status_code == 200, path
        assert http.get(f"{locked_server.url}/health").status_code == 200
        for path in app_paths():
            if path in ALWAYS_PUBLIC:
                continue
            for method in METHODS:
                for headers in WRONG_CREDENTIALS[:3]:
                    assert_401(http.request(method, f"{locked_server.url}{path}", headers=headers), path)
        r = http.get(f"{locked_server.url}/metrics", headers=locked_server.headers)
        assert r.status_code == 200 and "mlxd:" in r.text


# -- bypass probes -------------------------------------------------------------------------


PROBE_TARGETS = [
    "//v1/models",
    "/v1//models",
    "/%2Fv1/models",
    "/v1/models/",
    "/V1/models",
    "/v1/models?x=1#y",
    "/v1/models#",
    "/v1/%6Dodels",
    "/./v1/models",
    "/v1/./models",
    "/health/../v1/models",
    "/health%2F..%2Fv1%2Fmodels",
    "/health;/v1/models",
    "/health/",
    "/HEALTH",
    "/v1/models%00",
    "/v1/models/tiny",
    "/v1/models/%74iny",
    "/v1/models/tiny-alias",
    "*",
]
PROBE_HOSTS = ["a/#@b", "localhost:8000@evil", "evil@localhost", "localhost#@evil", "evil.example", "localhost "]
FORWARDING = [
    ("X-Forwarded-For", "127.0.0.1"),
    ("X-Forwarded-Host", "localhost"),
    ("X-Forwarded-Proto", "https"),
    ("X-Forwarded-Prefix", "/health"),
    ("X-Forwarded-Path", "/health"),
    ("X-Original-URL", "/health"),
    ("X-Rewrite-URL", "/health"),
    ("X-Real-IP", "127.0.0.1"),
    ("Forwarded", "for=127.0.0.1;host=localhost"),
    ("X-HTTP-Method-Override", "GET"),
    ("X-Api-Key-Bypass", "1"),
]


def assert_no_model_data(reply, what: str) -> None:
    """``reply`` refused the request and says nothing about the models."""
    assert reply.status in (400, 401, 421), (what, reply)
    assert b'"object"' not in reply.body and b'"data"' not in reply.body, (what, reply)


def test_path_tricks_reach_nothing(auth_server):
    port = port_of(auth_server)
    for target in PROBE_TARGETS:
        for method in ("GET", "POST"):
            reply = exchange(port, head(method, target, [("Host", "localhost"), ("Content-Length", "0")]))
            assert_no_model_data(reply, f"{method} {target}")


def test_host_tricks_reach_nothing(auth_server):
    port = port_of(auth_server)
    for host in PROBE_HOSTS:
        assert_no_model_data(exchange(port, head("GET", "/v1/models", [("Host", host)])), host)


def test_absolute_form_targets_reach_nothing(auth_server):
    port = port_of(auth_server)
    for target in (
        "http://evil/v1/models",
        f"http://127.0.0.1:{port}/v1/models",
        f"http://localhost:{port}/health",
        "http://localhost/v1/models?x",
        "https://evil:443/v1/models",
    ):
        for host in ("localhost", "evil"):
            reply = exchange(port, head("GET", target, [("Host", host)]))
            assert_no_model_data(reply, f"{target} Host {host}")


def test_forwarding_headers_reach_nothing(auth_server):
    port = port_of(auth_server)
    reply = exchange(port, head("GET", "/v1/models", [("Host", "localhost"), *FORWARDING]))
    assert_no_model_data(reply, "all forwarding headers")
    for header in FORWARDING:
        for target in ("/v1/models", "/v1/chat/completions"):
            assert_no_model_data(exchange(port, head("GET", target, [("Host", "localhost"), header])), header)


# -- model names that are paths ----------------------------------------------------------------


def not_found_shapes(server: Server, name: str) -> list[tuple]:
    """The 404 of every model-taking endpoint for ``name``, with the name
    itself and per-request ids taken out."""
    bodies = {
        "/v1/chat/completions": {"model": name, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]},
        "/v1/completions": {"model": name, "max_tokens": 1, "prompt": "hi"},
        "/v1/responses": {"model": name, "max_output_tokens": 16, "input": "hi"},
        "/v1/messages": {"model": name, "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]},
        "/v1/messages/count_tokens": {"model": name, "messages": [{"role": "user", "content": "hi"}]},
    }
    responses = [
        (path, httpx.post(f"{server.url}{path}", json=body, headers=server.headers, timeout=60))
        for path, body in bodies.items()
    ]
    url = f"{server.url}/v1/models/{quote(name, safe='')}"
    responses.append(("/v1/models/{name}", httpx.get(url, headers=server.headers, timeout=60)))
    shapes = []
    for path, r in responses:
        body = r.json()
        err = body["error"]
        if path.startswith("/v1/messages"):
            assert body["type"] == "error"
        shapes.append(
            (
                path,
                r.status_code,
                err["type"],
                err.get("code"),
                err.get("param"),
                err["message"].replace(name, "<name>"),
            )
        )
    return shapes


def test_unknown_names_that_exist_on_disk_are_just_unknown(auth_server, tiny_model_dir):
    names = [
        "/etc/passwd",
        "../configs",
        "configs",
        "configs/mlxd.toml",
        f"../{ROOT.name}/configs",
        str(tiny_model_dir),
        str(tiny_model_dir) + "/",
        str(tiny_model_dir / "config.json"),
        str(tiny_model_dir.parent),
        f"{TINY}/../{TINY}",
        f"./{TINY}",
        f"{TINY}/",
        "~",
        "/",
        str(ROOT),
    ]
    assert Path("/etc/passwd").exists() and (ROOT / "configs").is_dir() and tiny_model_dir.is_dir()
    before = snapshot(auth_server)
    assert before[LAZY][0] == "unloaded" and before[TINY][0] == "ready"
    expected = not_found_shapes(auth_server, "no-such-model-or-file")
    assert all(status == 404 for _, status, *_ in expected)
    for name in names:
        assert not_found_shapes(auth_server, name) == expected, name
    time.sleep(0.5)  # a load would have begun by now
    assert snapshot(auth_server) == before


# -- non-loopback binds ----------------------------------------------------------------------------


def serve_cli(tmp: Path, host: str, **server) -> subprocess.Popen:
    """Run ``python -m gateway serve --host HOST`` on a config without keys
    whose one model is never preloaded; its port is in ``tmp/port``."""
    port = free_port()
    (tmp / "port").write_text(str(port))
    config = write_config(tmp / "mlxd.toml", port, [{"name": LAZY, "source": "unused", "preload": False}], **server)
    return subprocess.Popen(
        [sys.executable, "-m", "gateway", "serve", "--config", str(config), "--host", host],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def running(proc: subprocess.Popen, tmp: Path) -> Server:
    """Wait until the ``serve_cli`` gateway answers on 127.0.0.1."""
    log = tmp / "gateway.log"
    srv = Server(f"http://127.0.0.1:{(tmp / 'port').read_text()}", proc, None, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        try:
            httpx.get(f"{srv.url}/health", timeout=2)
            return srv
        except httpx.HTTPError:
            time.sleep(0.1)
    raise TimeoutError("gateway did not start")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.1"])
def test_non_loopback_without_keys_is_refused(tmp_path, host):
    proc = serve_cli(tmp_path, host)
    try:
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:  # it started serving: stop it, the test fails below
            proc.kill()
            out, err = proc.communicate()
    assert proc.returncode == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and host in lines[0] and "api_keys" in lines[0] and "allow_insecure_bind" in lines[0], err


def test_allow_insecure_bind_overrides(tmp_path):
    srv = running(serve_cli(tmp_path, "0.0.0.0", allow_insecure_bind=True), tmp_path)
    try:
        r = httpx.get(f"{srv.url}/v1/models", timeout=10)
        assert r.status_code == 200 and r.json()["data"][0]["id"] == LAZY
        # not loopback and no allowed_hosts: any Host is served (a LAN name, say)
        assert exchange(port_of(srv), head("GET", "/health", [("Host", "gpu-box.lan")])).status == 200
    finally:
        srv.stop()


def test_allowed_hosts_is_enforced_on_non_loopback_binds(tmp_path):
    srv = running(serve_cli(tmp_path, "0.0.0.0", allow_insecure_bind=True, allowed_hosts=["gpu-box.lan"]), tmp_path)
    try:
        port = port_of(srv)
        for host, status in (("gpu-box.lan:8000", 200), ("localhost", 200), ("evil.example", 421)):
            assert exchange(port, head("GET", "/health", [("Host", host)])).status == status, host
    finally:
        srv.stop()
