"""HTTP edge cases against a real gateway: the Host check (DNS rebinding),
CORS only when configured, compressed bodies refused, oversized heads,
and the header timeout that cuts off slowloris clients.

Requests that clients such as httpx would normalise or refuse to send go
over raw sockets (:func:`exchange`). Every raw read has a deadline and
notices the server closing the connection (:func:`receive`), so a server
that misbehaves fails a test instead of hanging it.

The timer tests hold on a busy machine: the timers are long enough that
the test's own gaps stay far inside them, a timer is never asserted to
fire early (its start is taken before the server can have armed it), and
it may fire up to :data:`SLACK` seconds late, still well before anything
else (uvicorn's 30 s keep-alive timeout, the client's own give-up) would
end the connection.
"""

from __future__ import annotations

import gzip
import json
import select
import socket
import threading
import time
import zlib
from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import API_KEY, TINY, start_server

GOOD_ORIGIN = "http://app.example"
OTHER_ORIGIN = "http://other.example"
EXTRA_HOST = "mlxd.test"
BODY_TIMEOUT = 10.0
HEADER_TIMEOUT = 2.0
SLACK = 10.0
"""Seconds a busy machine may add between a server timer coming due and the
client seeing its effect (a late event loop, a descheduled test process)."""
MSG = [{"role": "user", "content": "hi"}]


# -- raw HTTP ---------------------------------------------------------------------------


@dataclass
class Reply:
    """A parsed raw HTTP response (``status`` 0: the server sent nothing)."""

    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> dict:
        """The body parsed as JSON."""
        return json.loads(self.body)


def port_of(server) -> int:
    """The TCP port of a test ``Server``."""
    return int(server.url.rsplit(":", 1)[1])


def head(method: str, target: str, headers: list[tuple[str, str]], version: str = "HTTP/1.1") -> bytes:
    """A request head, sent exactly as given (plus ``Connection: close``)."""
    lines = [f"{method} {target} {version}", *(f"{k}: {v}" for k, v in headers), "Connection: close"]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def parse_reply(data: bytes) -> Reply:
    """Parse one HTTP/1.1 response read up to the connection's close."""
    if not data:
        return Reply(0, {}, b"")
    raw_head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = raw_head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Reply(int(status_line.split()[1]), headers, body)


def receive(sock: socket.socket, deadline: float, so_far: bytes, eof_ok: bool = False) -> bytes:
    """One ``recv`` on ``sock`` that must return by ``deadline`` (a
    :func:`time.monotonic` value): the bytes received, or b"" when the
    server closed the connection and ``eof_ok``. AssertionError, naming
    what was read so far (``so_far``), when the server closed it otherwise
    or sent nothing in time."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise AssertionError(f"no answer from the server in time; read so far: {so_far[:2000]!r}")
    sock.settimeout(left)
    try:
        chunk = sock.recv(65536)
    except TimeoutError:
        raise AssertionError(f"no answer from the server in time; read so far: {so_far[:2000]!r}") from None
    if not chunk and not eof_ok:
        raise AssertionError(f"the server closed the connection; read so far: {so_far[:2000]!r}")
    return chunk


def read_all(sock: socket.socket, timeout: float = 60) -> bytes:
    """Everything ``sock`` receives until the peer closes it (AssertionError
    if it has not closed it within ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    data = b""
    while chunk := receive(sock, deadline, data, eof_ok=True):
        data += chunk
    return data


def exchange(port: int, data: bytes, timeout: float = 30) -> Reply:
    """Send ``data`` on a fresh connection and parse what comes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(data)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server answered and closed before reading it all
        return parse_reply(read_all(sock, timeout))


def raw_get(port: int, target: str, host: str = "localhost", extra: list[tuple[str, str]] | None = None) -> Reply:
    """``GET target`` with the given Host header (and ``extra`` headers)."""
    return exchange(port, head("GET", target, [("Host", host), *(extra or [])]))


def assert_openai_error(reply: Reply, status: int) -> dict:
    """``reply`` is ``status`` with an OpenAI error object; return it."""
    assert reply.status == status, reply
    err = reply.json()["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"]
    return err


def assert_anthropic_error(reply: Reply, status: int) -> dict:
    """``reply`` is ``status`` with an Anthropic error body; return its error."""
    assert reply.status == status, reply
    body = reply.json()
    assert body["type"] == "error" and body["error"]["message"] and body["error"]["type"]
    return body["error"]


@pytest.fixture(scope="module")
def edge_server(tiny_model_dir, tmp_path_factory):
    """A gateway with CORS, an extra allowed host, a 2 s header timeout and
    a 10 s body timeout."""
    srv = start_server(
        tmp_path_factory.mktemp("edge-gw"),
        [{"name": TINY, "source": str(tiny_model_dir)}],
        cors_origins=[GOOD_ORIGIN],
        allowed_hosts=[EXTRA_HOST],
        header_timeout=HEADER_TIMEOUT,
        body_timeout=BODY_TIMEOUT,
    )
    yield srv
    srv.stop()


AUTH = [("Authorization", f"Bearer {API_KEY}")]


# -- 1. Host header check -----------------------------------------------------------------


@pytest.mark.parametrize(
    "host",
    [
        "localhost",
        "localhost:8000",
        "LocalHost",
        "127.0.0.1",
        "127.0.0.1:1",
        "[::1]",
        "[::1]:8000",
        EXTRA_HOST,
        f"{EXTRA_HOST}:443",
    ],
)
def test_own_host_names_are_served(edge_server, host):
    reply = raw_get(port_of(edge_server), "/v1/models", host, AUTH)
    assert reply.status == 200, reply
    assert reply.json()["data"][0]["id"] == TINY


@pytest.mark.parametrize(
    "host",
    [
        "evil.example",
        "evil.example:8000",
        "localhost.evil.example",
        "127.0.0.1.nip.io",
        "127.0.0.2",
        "::1",
        "a/#@b",
        "localhost:8000@evil",
        "localhost:80:80",
        "localhost/",
        "",
        "[::1",
        "evil.example\\",
    ],
)
def test_foreign_host_is_misdirected_in_protocol_shape(edge_server, host):
    port = port_of(edge_server)
    err = assert_openai_error(raw_get(port, "/v1/models", host, AUTH), 421)
    assert err["code"] == "host_not_allowed"
    assert_openai_error(raw_get(port, "/health", host), 421)  # public routes too: they show worker state
    body = json.dumps({"model": TINY, "max_tokens": 1, "messages": MSG})
    data = (
        head(
            "POST",
            "/v1/messages",
            [
                ("Host", host),
                ("x-api-key", API_KEY),
                ("Content-Type", "application/json"),
                ("Content-Length", str(len(body))),
            ],
        )
        + body.encode()
    )
    assert_anthropic_error(exchange(port, data), 421)


def test_allowed_hosts_is_per_server(tiny_server):
    # tiny_server has no allowed_hosts: only the loopback names pass
    port = port_of(tiny_server)
    assert raw_get(port, "/health", "localhost").status == 200
    assert_openai_error(raw_get(port, "/health", EXTRA_HOST), 421)


def test_missing_or_repeated_host_is_refused(edge_server):
    port = port_of(edge_server)
    assert_openai_error(exchange(port, head("GET", "/health", [], version="HTTP/1.0")), 421)
    twice = head("GET", "/health", [("Host", "localhost"), ("Host", "evil.example")])
    assert exchange(port, twice).status in (400, 421)


# -- 2. CORS ---------------------------------------------------------------------------------


def preflight(server, path: str, origin: str, method: str = "POST") -> httpx.Response:
    """A browser's CORS preflight for ``method path`` from ``origin`` (no key)."""
    headers = {
        "Origin": origin,
        "Access-Control-Request-Method": method,
        "Access-Control-Request-Headers": "authorization, content-type",
    }
    return httpx.options(f"{server.url}{path}", headers=headers, timeout=30)


def cors_headers(response: httpx.Response) -> dict[str, str]:
    """The ``Access-Control-*`` headers of ``response``."""
    return {k: v for k, v in response.headers.items() if k.lower().startswith("access-control-")}


def test_no_cors_headers_unless_configured(tiny_server):
    r = preflight(tiny_server, "/v1/chat/completions", GOOD_ORIGIN)
    assert r.status_code == 401 and not cors_headers(r)
    for path, headers in (("/health", {}), ("/v1/models", tiny_server.headers)):
        r = httpx.get(f"{tiny_server.url}{path}", headers={"Origin": GOOD_ORIGIN, **headers}, timeout=30)
        assert r.status_code == 200 and not cors_headers(r)


def test_cors_for_the_configured_origin_only(edge_server):
    r = preflight(edge_server, "/v1/chat/completions", GOOD_ORIGIN)
    assert r.status_code == 200, r.text  # no API key needed for a preflight
    assert r.headers["access-control-allow-origin"] == GOOD_ORIGIN
    assert {"GET", "POST", "OPTIONS"} <= set(r.headers["access-control-allow-methods"].replace(" ", "").split(","))
    allowed = r.headers["access-control-allow-headers"].lower()
    assert all(h in allowed for h in ("authorization", "content-type", "x-api-key", "anthropic-version"))
    ok = httpx.get(f"{edge_server.url}/v1/models", headers={"Origin": GOOD_ORIGIN, **edge_server.headers}, timeout=30)
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == GOOD_ORIGIN
    denied = httpx.get(f"{edge_server.url}/v1/models", headers={"Origin": GOOD_ORIGIN}, timeout=30)
    assert denied.status_code == 401  # CORS never replaces the key
    assert denied.headers["access-control-allow-origin"] == GOOD_ORIGIN  # so the page can read the error

    refused = preflight(edge_server, "/v1/chat/completions", OTHER_ORIGIN)
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    assert set(refused.json()["error"]) == {"message", "type", "param", "code"}
    refused = preflight(edge_server, "/v1/messages", OTHER_ORIGIN)
    assert refused.status_code == 400 and refused.json()["type"] == "error"
    other = httpx.get(
        f"{edge_server.url}/v1/models", headers={"Origin": OTHER_ORIGIN, **edge_server.headers}, timeout=30
    )
    assert other.status_code == 200 and "access-control-allow-origin" not in other.headers
    assert preflight(edge_server, "/v1/models", GOOD_ORIGIN, method="DELETE").status_code == 400


# -- 3. Content-Encoding ------------------------------------------------------------------------


CHAT = json.dumps({"model": TINY, "max_tokens": 1, "messages": MSG}).encode()
ENCODED = {
    "gzip": gzip.compress(CHAT),
    "deflate": zlib.compress(CHAT),
    "br": b"\x0b\x02\x80" + CHAT + b"\x03",  # never decoded, so any bytes will do
    "gzip, identity": gzip.compress(CHAT),
    "x-unknown": CHAT,
}


@pytest.mark.parametrize("encoding", sorted(ENCODED))
def test_compressed_bodies_get_415(tiny_server, encoding):
    headers = {**tiny_server.headers, "Content-Type": "application/json", "Content-Encoding": encoding}
    r = httpx.post(f"{tiny_server.url}/v1/chat/completions", content=ENCODED[encoding], headers=headers, timeout=30)
    assert r.status_code == 415, r.text
    err = r.json()["error"]
    assert "Content-Encoding" in err["message"] and "not supported" in err["message"]
    r = httpx.post(f"{tiny_server.url}/v1/messages", content=ENCODED[encoding], headers=headers, timeout=30)
    assert r.status_code == 415 and r.json()["type"] == "error"


def test_identity_encoding_is_served(tiny_server):
    headers = {**tiny_server.headers, "Content-Type": "application/json", "Content-Encoding": "identity"}
    r = httpx.post(f"{tiny_server.url}/v1/chat/completions", content=CHAT, headers=headers, timeout=60)
    assert r.status_code == 200, r.text


# -- 4. Oversized request heads --------------------------------------------------------------------


def big_head(size: int) -> bytes:
    """``GET /health`` with one header of ``size`` bytes."""
    return head("GET", "/health", [("Host", "localhost"), ("X-Big", "a" * size)])


def exchange_in_pieces(port: int, data: bytes) -> Reply:
    """Send ``data`` in 4 KiB writes with a pause after the first (so the
    server sees an incomplete head grow past its limit), then read the reply."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        try:
            for i in range(0, len(data), 4096):
                sock.sendall(data[i : i + 4096])
                if i == 0:
                    time.sleep(0.05)
        except (BrokenPipeError, ConnectionResetError):
            pass
        return parse_reply(read_all(sock))


def test_100kb_header_gets_431_and_the_server_keeps_serving(tiny_server):
    port = port_of(tiny_server)
    err = assert_openai_error(exchange(port, big_head(100_000)), 431)  # arrives in one read
    assert err["code"] == "headers_too_large"
    assert_openai_error(exchange_in_pieces(port, big_head(100_000)), 431)
    anthropic = head("POST", "/v1/messages?beta=true", [("Host", "localhost"), ("X-Big", "a" * 100_000)])
    assert_anthropic_error(exchange(port, anthropic), 431)
    assert_anthropic_error(exchange_in_pieces(port, anthropic), 431)  # the path is read from the partial head
    many = head("GET", "/health", [("Host", "localhost"), *((f"X-H{i}", "b" * 100) for i in range(1000))])
    assert_openai_error(exchange(port, many), 431)
    assert exchange(port, big_head(30_000)).status == 200  # below the limit is fine
    assert httpx.get(f"{tiny_server.url}/health", timeout=10).status_code == 200


def test_garbage_request_gets_400_json(tiny_server):
    assert_openai_error(exchange(port_of(tiny_server), b"HELLO THERE\r\n\r\n"), 400)


# -- 5. Header timeout (slowloris) ---------------------------------------------------------------------


def trickle(port: int, data: bytes, interval: float, stop_after: float) -> tuple[Reply, float, int]:
    """Send ``data`` one byte per ``interval`` seconds, as a client that
    watches its socket would: stop sending as soon as the server answers or
    closes (or ``stop_after`` seconds pass), then read everything. Return
    what came back, the seconds until then (counted from before the
    connection was opened, so never less than the server's own count) and
    the bytes sent."""
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=stop_after + 5) as sock:
        sent = 0
        try:
            for byte in data:
                if time.monotonic() - start > stop_after:
                    break
                sock.sendall(bytes([byte]))
                sent += 1
                if select.select([sock], [], [], interval)[0]:
                    break  # the server spoke (or closed): stop writing
            received = read_all(sock, timeout=SLACK)
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise AssertionError(f"the connection was reset instead of answered ({exc!r})") from exc
        elapsed = time.monotonic() - start
    return parse_reply(received), elapsed, sent


def test_trickled_head_is_cut_off_while_others_are_served(edge_server):
    port = port_of(edge_server)
    data = head("GET", "/health", [("Host", "localhost")] + [("X-Slow", "x" * 20)] * 10)
    served: list[object] = []

    def normal_traffic() -> None:
        for _ in range(8):
            try:
                served.append(httpx.get(f"{edge_server.url}/health", timeout=30).status_code)
            except httpx.HTTPError as exc:
                served.append(exc)
            time.sleep(0.2)

    other = threading.Thread(target=normal_traffic, daemon=True)
    other.start()
    # the whole head would take over a minute at this pace: only the header timer can end it sooner
    reply, elapsed, sent = trickle(port, data, interval=0.2, stop_after=HEADER_TIMEOUT + SLACK + 5)
    other.join(timeout=300)
    assert not other.is_alive(), "the normal traffic never finished"
    assert sent < len(data), "the server let the whole trickled head in"
    assert HEADER_TIMEOUT * 0.9 <= elapsed <= HEADER_TIMEOUT + SLACK, elapsed
    assert reply.status == 408, reply
    assert reply.json()["error"]["code"] == "timeout"
    assert served == [200] * 8


def test_silent_connection_is_closed(edge_server):
    start = time.monotonic()  # before the server can have started its timer
    with socket.create_connection(("127.0.0.1", port_of(edge_server)), timeout=60) as sock:
        assert read_all(sock, timeout=HEADER_TIMEOUT + SLACK + 10) == b""
        elapsed = time.monotonic() - start
    assert HEADER_TIMEOUT * 0.9 <= elapsed <= HEADER_TIMEOUT + SLACK, elapsed


def read_response(sock: socket.socket, timeout: float = 60) -> Reply:
    """One Content-Length-framed response from a keep-alive connection
    (AssertionError if the server closes the connection first or has not
    sent it all within ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    data = b""
    while b"\r\n\r\n" not in data:
        data += receive(sock, deadline, data)
    reply = parse_reply(data)
    length = int(reply.headers["content-length"])
    while len(reply.body) < length:
        reply.body += receive(sock, deadline, data + reply.body)
    return reply


def test_timer_restarts_after_each_response(edge_server):
    """Six requests on one connection, each a quarter of the header timeout
    after the previous response: their gaps alone add up to one and a half
    timeouts, yet each is served (the timer restarts after every response,
    and a gap is far inside it even on a slow machine). Then, idle, the
    connection is closed about one timeout after the last request (not by
    uvicorn's 30 s keep-alive timeout)."""
    keep_alive = b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n"
    gap = HEADER_TIMEOUT / 4
    with socket.create_connection(("127.0.0.1", port_of(edge_server)), timeout=60) as sock:
        opened = time.monotonic()
        for i in range(6):
            time.sleep(gap)
            start = time.monotonic()  # the last one: before the server can restart its timer
            sock.sendall(keep_alive)
            reply = read_response(sock)
            assert reply.status == 200, (i, reply)
        assert time.monotonic() - opened > HEADER_TIMEOUT  # the connection outlived one timer
        assert read_all(sock, timeout=HEADER_TIMEOUT + SLACK + 10) == b""  # then idle: closed
        elapsed = time.monotonic() - start
    assert HEADER_TIMEOUT * 0.9 <= elapsed <= HEADER_TIMEOUT + SLACK, elapsed


def test_slow_body_after_a_complete_head_is_not_cut(edge_server):
    body = json.dumps({"model": TINY, "prompt": "hello", "max_tokens": 1}).encode()
    data = head(
        "POST",
        "/v1/completions",
        [("Host", "localhost"), *AUTH, ("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
    )
    # the pauses add up to one and a half header timeouts, and stay far inside the body timeout
    with socket.create_connection(("127.0.0.1", port_of(edge_server)), timeout=60) as sock:
        sock.sendall(data)
        for part in (body[:5], body[5:10], body[10:]):
            time.sleep(HEADER_TIMEOUT * 0.5)
            sock.sendall(part)
        reply = parse_reply(read_all(sock))
    assert reply.status == 200, reply
    assert reply.json()["usage"]["completion_tokens"] == 1


def test_trickled_body_gets_408_while_others_are_served(edge_server):
    body = json.dumps({"model": TINY, "prompt": "hello", "max_tokens": 1}).encode()
    data = head(
        "POST",
        "/v1/completions",
        [("Host", "localhost"), *AUTH, ("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
    )
    served: list[object] = []

    def normal_traffic() -> None:
        for _ in range(6):
            try:
                served.append(httpx.get(f"{edge_server.url}/health", timeout=30).status_code)
            except httpx.HTTPError as exc:
                served.append(exc)
            time.sleep(0.5)

    other = threading.Thread(target=normal_traffic, daemon=True)
    other.start()
    with socket.create_connection(("127.0.0.1", port_of(edge_server)), timeout=60) as sock:
        start = time.monotonic()  # before the server can have started its body timer
        sock.sendall(data)
        for byte in body[:4]:  # a trickle that then stalls: the body never completes
            sock.sendall(bytes([byte]))
            time.sleep(0.5)
        reply = parse_reply(read_all(sock, timeout=BODY_TIMEOUT + SLACK + 10))
        elapsed = time.monotonic() - start
    other.join(timeout=300)
    assert not other.is_alive(), "the normal traffic never finished"
    assert reply.status == 408, reply
    assert reply.json()["error"]["code"] == "timeout"
    assert BODY_TIMEOUT * 0.9 <= elapsed <= BODY_TIMEOUT + SLACK, elapsed
    assert served == [200] * 6
