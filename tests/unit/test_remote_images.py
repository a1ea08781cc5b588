"""gateway.images.remote: the remote image URL trust boundary, over real
sockets to HTTP(S) servers on 127.0.0.1 and 127.0.0.2.

Off by default; when on, only allowed hosts, only public addresses or the
operator's ``allowed_networks`` (after every redirect too), at most
``max_redirects``, ``max_bytes`` and ``fetch_timeout``, 200 ``image/*``
only; the name is resolved once and the checked address is the one
connected to; the fetch never blocks the event loop. Every refusal is a
400 ``invalid_image`` naming the part. Also: the ``[images]`` config rules.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time

import pytest

from gateway.core.errors import APIError
from gateway.images.policy import is_public
from gateway.images.remote import fetch_remote_image
from shared.config import ConfigError, ImagesConfig
from shared.config_loader import load_config
from tests.unit import loopback_http
from tests.unit.loopback_http import LoopbackServer, declared_length, image, redirect, resolver, stall, status, trickle

BODY = os.urandom(200_000)  # several reads' worth
PARAM = "messages[0].content[1].image_url"


@pytest.fixture(scope="module")
def servers():
    """One server on 127.0.0.1 (allowed by ``LOCAL``) and one on 127.0.0.2."""
    first, second = LoopbackServer("127.0.0.1"), LoopbackServer("127.0.0.2")
    yield first, second
    first.close()
    second.close()


@pytest.fixture
def one(servers):
    """The 127.0.0.1 server, reset."""
    servers[0].reset()
    servers[1].reset()
    return servers[0]


@pytest.fixture
def two(servers, one):
    """The 127.0.0.2 server, reset (with ``one``)."""
    return servers[1]


def rules(**overrides) -> ImagesConfig:
    """Fetching on, loopback hosts allowed, 127.0.0.1 reachable; ``overrides`` win."""
    values = {
        "remote_fetch": True,
        "allowed_hosts": ["127.0.0.1", "127.0.0.2", "img.test", "*.pics.test"],
        "allowed_networks": ["127.0.0.1/32"],
        "max_bytes": "1MiB",
        "fetch_timeout": 5.0,
        "max_redirects": 3,
    }
    return ImagesConfig(**(values | overrides))


def fetch(url: str, policy: ImagesConfig) -> bytes:
    """Run one fetch on a fresh event loop."""
    return asyncio.run(fetch_remote_image(url, policy, PARAM))


def refused(url: str, policy: ImagesConfig, needle: str) -> str:
    """Assert the fetch is a 400 ``invalid_image`` for ``PARAM`` whose
    message holds ``needle``; the message."""
    with pytest.raises(APIError) as info:
        fetch(url, policy)
    error = info.value
    assert (error.status, error.code, error.param) == (400, "invalid_image", PARAM)
    assert needle in error.message, error.message
    return error.message


def test_off_by_default(one):
    """The default config fetches nothing."""
    one.routes["/a.png"] = image(BODY)
    assert ImagesConfig().remote_fetch is False
    refused(one.url("/a.png"), ImagesConfig(allowed_hosts=["127.0.0.1"]), "remote_fetch is off")
    assert one.seen == []


def test_allowed_host_gets_exact_bytes_and_logs(one, caplog):
    """An allowed host on an allowed network: the exact body, with the
    URL's host and port as the Host header; one INFO line."""
    one.routes["/a.png?x=1"] = image(BODY)
    with caplog.at_level(logging.INFO, logger="mlxd.gateway.images"):
        assert fetch(one.url("/a.png?x=1"), rules()) == BODY
    assert one.seen == [("/a.png?x=1", f"127.0.0.1:{one.port}")]
    assert any(r.levelno == logging.INFO and "200000 bytes" in r.getMessage() for r in caplog.records)


def test_body_without_length_and_odd_path(one):
    """A close-delimited body is read whole; spaces and non-ASCII in the
    path are percent-encoded, not sent raw."""
    one.routes["/a%20b/%C3%A9.png"] = image(BODY, length=False)
    assert fetch(one.url("/a b/é.png"), rules()) == BODY


def test_host_not_in_list_refused(one):
    """A host off the allow-list is refused before any connection."""
    one.routes["/a.png"] = image(BODY)
    refused(one.url("/a.png"), rules(allowed_hosts=["images.example.com"]), "not in the server's allowed hosts")
    assert one.seen == []


def test_non_public_address_refused_without_leaking_it(one, monkeypatch, caplog):
    """A name resolving to loopback is refused when no network allows it;
    the message names the host, never the address; a WARNING is logged."""
    one.routes["/a.png"] = image(BODY)
    monkeypatch.setattr(socket, "getaddrinfo", resolver({"img.test": ["127.0.0.1"]}, []))
    with caplog.at_level(logging.INFO, logger="mlxd.gateway.images"):
        message = refused(one.url("/a.png", host="img.test"), rules(allowed_networks=[]), "non-public address")
    assert "img.test" in message and "127.0.0.1" not in message
    assert one.seen == []
    assert any(r.levelno == logging.WARNING and "refused" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize(
    "addresses",
    [["8.8.8.8", "10.0.0.1"], ["::ffff:192.168.1.1"], ["100.64.0.1"], ["169.254.169.254"], ["fd00::1"], ["::"]],
)
def test_any_internal_address_refuses_the_name(addresses, monkeypatch):
    """One non-public address among a name's addresses is enough to refuse it."""
    calls: list[str] = []
    monkeypatch.setattr(socket, "getaddrinfo", resolver({"img.test": addresses}, calls))
    refused("http://img.test/a.png", rules(), "non-public address")
    assert calls == ["img.test"]


@pytest.mark.parametrize(
    "address, public",
    [
        ("93.184.216.34", True),
        ("2606:2800:220:1::1", True),
        ("127.0.0.1", False),
        ("10.1.2.3", False),
        ("172.16.0.1", False),
        ("192.168.0.1", False),
        ("100.64.0.1", False),  # shared address space (CGNAT)
        ("169.254.169.254", False),  # link-local: cloud metadata
        ("224.0.0.1", False),  # multicast
        ("0.0.0.0", False),
        ("240.0.0.1", False),  # reserved
        ("255.255.255.255", False),
        ("::1", False),
        ("fe80::1", False),
        ("fc00::1", False),
        ("ff02::1", False),
        ("::ffff:127.0.0.1", False),  # IPv4-mapped
        ("::ffff:8.8.8.8", True),
        ("2002:7f00:1::", False),  # 6to4 of 127.0.0.1
        ("64:ff9b::a00:1", False),  # NAT64 of 10.0.0.1
    ],
)
def test_is_public(address, public):
    """Only globally routable addresses count as public, embedded IPv4 included."""
    import ipaddress

    assert is_public(ipaddress.ip_address(address)) is public


def test_name_resolved_once_and_checked_address_used(one, two, monkeypatch):
    """The name is looked up once and the connection goes to the address
    that was checked, with the name in the Host header: a rebinding DNS
    answer cannot swap it. Wildcards match names below the suffix only,
    case-insensitively."""
    one.routes["/a.png"] = image(BODY)
    calls: list[str] = []
    lookups = iter([["127.0.0.1"], ["127.0.0.2"]])

    def rebinding(host, port, *args, **kwargs):
        calls.append(host)
        return resolver({host: next(lookups)}, [])(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)
    assert fetch(f"http://A.Pics.TEST:{one.port}/a.png", rules()) == BODY
    assert calls == ["a.pics.test"]
    assert one.seen == [("/a.png", f"a.pics.test:{one.port}")]
    assert two.seen == []
    refused(f"http://pics.test:{one.port}/a.png", rules(), "not in the server's allowed hosts")
    refused(f"http://evilpics.test:{one.port}/a.png", rules(), "not in the server's allowed hosts")
    refused(one.url("/a.png"), rules(allowed_hosts=["*.0.0.1"]), "not in the server's allowed hosts")


def test_idna_host_matches_normalised_pattern(one, monkeypatch):
    """A Unicode host and pattern compare in their IDNA form."""
    one.routes["/a.png"] = image(BODY)
    calls: list[str] = []
    monkeypatch.setattr(socket, "getaddrinfo", resolver({"xn--bcher-kva.test": ["127.0.0.1"]}, calls))
    assert fetch(f"http://BÜCHER.test:{one.port}/a.png", rules(allowed_hosts=["bücher.test"])) == BODY
    assert calls == ["xn--bcher-kva.test"]


def test_redirect_followed_and_each_hop_checked(one, two):
    """A redirect within the limit is followed (relative too); one to
    127.0.0.2 (loopback, not in allowed_networks) is refused before
    connecting; so is one to a host off the list."""
    one.routes["/start"] = redirect("/middle")
    one.routes["/middle"] = redirect(one.url("/a.png"), 301)
    one.routes["/a.png"] = image(BODY)
    assert fetch(one.url("/start"), rules()) == BODY
    one.routes["/private"] = redirect(two.url("/a.png"))
    two.routes["/a.png"] = image(BODY)
    message = refused(one.url("/private"), rules(), "redirect refused")
    assert "non-public address" in message
    assert two.seen == []
    refused(one.url("/private"), rules(allowed_hosts=["127.0.0.1"]), "not in the server's allowed hosts")
    one.routes["/file"] = redirect("file:///etc/passwd")
    refused(one.url("/file"), rules(), "only http and https")


def test_redirect_chain_longer_than_limit_refused(one):
    """max_redirects redirects are followed; one more is refused."""
    for hop in range(3):
        one.routes[f"/r{hop}"] = redirect(f"/r{hop + 1}")
    one.routes["/r3"] = image(BODY)
    assert fetch(one.url("/r1"), rules(max_redirects=2)) == BODY
    refused(one.url("/r0"), rules(max_redirects=2), "redirected more than 2 times")
    one.routes["/nowhere"] = redirect("")
    refused(one.url("/nowhere"), rules(), "without a location")


@pytest.mark.parametrize("length", [True, False])
def test_body_over_max_bytes_refused(one, length):
    """Too large is refused whether declared (Content-Length) or counted."""
    one.routes["/big.png"] = image(BODY, length=length)
    refused(one.url("/big.png"), rules(max_bytes=len(BODY) - 1), "larger than the server's limit")
    assert fetch(one.url("/big.png"), rules(max_bytes=len(BODY))) == BODY


def test_truncated_body_refused(one):
    """A body shorter than its Content-Length is not an image."""
    one.routes["/cut.png"] = declared_length(1000, b"x" * 10)
    refused(one.url("/cut.png"), rules(), "before sending the whole image")


@pytest.mark.parametrize("in_head", [None, True, False], ids=["stall", "trickled-head", "trickled-body"])
def test_slow_server_refused_within_timeout(one, in_head):
    """A server that stalls, or trickles its head or body a byte at a time
    (each read fast, the whole slow), is refused at about fetch_timeout,
    and the connection is closed then (the download thread is aborted)."""
    one.routes["/slow.png"] = stall(one) if in_head is None else trickle(one, in_head)
    started = time.monotonic()
    refused(one.url("/slow.png"), rules(fetch_timeout=0.5), "took longer than the server's limit of 0.5 s")
    # at fetch_timeout, not after the server's 10 s: bounds with room for a loaded machine
    assert time.monotonic() - started < 4.0
    deadline = time.monotonic() + 5
    while not one.ended and time.monotonic() < deadline:
        time.sleep(0.02)
    assert one.ended and one.ended[0] - started < 5.0


def test_cancelled_fetch_closes_its_connection(one):
    """A caller cancelled mid-fetch (its client went away) aborts the
    download: the server sees the connection close at once, not at
    fetch_timeout."""
    one.routes["/slow.png"] = stall(one)

    async def scenario():
        task = asyncio.create_task(fetch_remote_image(one.url("/slow.png"), rules(fetch_timeout=5.0), PARAM))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        return time.monotonic()

    cancelled = asyncio.run(scenario())
    deadline = time.monotonic() + 8
    while not one.ended and time.monotonic() < deadline:
        time.sleep(0.02)
    # well before fetch_timeout (5 s), with room for a loaded machine
    assert one.ended and one.ended[0] - cancelled < 2.5


@pytest.mark.parametrize(
    "route, needle",
    [
        (status(404), "answered HTTP 404, not 200"),
        (status(500), "answered HTTP 500, not 200"),
        (status(206), "answered HTTP 206, not 200"),
        (image(b"<html>", content_type="text/html"), "not an image"),
        (image(b"x", content_type="image/"), "not an image"),
        (image(b"x", content_type="application/octet-stream"), "not an image"),
    ],
)
def test_bad_status_or_type_refused(one, route, needle):
    """Only a 200 with an image/* content type is accepted."""
    one.routes["/x"] = route
    refused(one.url("/x"), rules(), needle)


@pytest.mark.parametrize(
    "url, needle",
    [
        ("http://user:pw@127.0.0.1/a.png", "user name or password"),
        ("http://user@127.0.0.1/a.png", "user name or password"),
        ("ftp://127.0.0.1/a.png", "only http and https"),
        ("file:///etc/passwd", "only http and https"),
        ("gopher://127.0.0.1/", "only http and https"),
        ("http:///a.png", "has no host"),
        ("http://127.0.0.1:99999/a.png", "not a valid URL"),
        ("http://127.0.0.1:0/a.png", "could not connect"),
        ("http://[::1/a.png", "not a valid URL"),
        ("http://exa mple.com/a.png", "not a valid host name"),
    ],
)
def test_malformed_urls_refused(one, url, needle):
    """Credentials, other schemes and malformed URLs never connect."""
    refused(url, rules(), needle)
    assert one.seen == []


def test_unresolvable_host_refused(monkeypatch):
    """A name that does not resolve is a 400 naming the host."""

    def failing(host, *_args, **_kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", failing)
    refused("http://img.test/a.png", rules(), "'img.test' could not be resolved")


def test_event_loop_serves_others_during_slow_fetch(one):
    """While one fetch stalls, a ticking coroutine keeps its pace and a
    fast fetch from another client completes."""
    one.routes["/slow.png"] = stall(one)
    one.routes["/fast.png"] = image(BODY)

    async def scenario():
        gaps: list[float] = []

        async def tick():
            last = time.monotonic()
            while True:
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        ticker = asyncio.create_task(tick())
        slow = asyncio.create_task(fetch_remote_image(one.url("/slow.png"), rules(fetch_timeout=1.5), PARAM))
        await asyncio.sleep(0.1)
        fast = await fetch_remote_image(one.url("/fast.png"), rules(), PARAM)
        slow_still_waiting = not slow.done()
        with pytest.raises(APIError):
            await slow
        ticker.cancel()
        return gaps, fast, slow_still_waiting

    gaps, fast, slow_still_waiting = asyncio.run(scenario())
    assert fast == BODY and slow_still_waiting
    # ~150 ticks of 10 ms when nothing blocks; a blocked loop would miss one tick for the whole
    # 1.5 s fetch_timeout (bounds with room for a loaded machine, which delays single ticks)
    assert len(gaps) > 20 and max(gaps) < 1.0, (len(gaps), max(gaps))


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """An HTTPS server on 127.0.0.1 whose certificate names img.test only,
    and the CA that signed it."""
    ca, cert, key = loopback_http.make_tls_files(tmp_path_factory.mktemp("tls"), ["img.test"])
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = LoopbackServer("127.0.0.1", tls=context)
    yield server, ca
    server.close()


def test_https_verifies_the_name_on_the_checked_address(tls_server, monkeypatch):
    """Over https the pinned connection still sends the name in SNI and
    Host and verifies the certificate against it: the right name passes,
    a name the certificate does not hold is refused."""
    server, ca = tls_server
    server.reset()
    server.routes["/a.png"] = image(BODY)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca))
    names = {"img.test": ["127.0.0.1"], "other.pics.test": ["127.0.0.1"]}
    monkeypatch.setattr(socket, "getaddrinfo", resolver(names, []))
    assert fetch(server.url("/a.png", "https", "img.test"), rules()) == BODY
    assert server.sni == ["img.test"]
    assert server.seen == [("/a.png", f"img.test:{server.port}")]
    refused(server.url("/a.png", "https", "other.pics.test"), rules(), "failed TLS certificate verification")
    monkeypatch.delenv("SSL_CERT_FILE")
    refused(server.url("/a.png", "https", "img.test"), rules(), "failed TLS certificate verification")


def write(tmp_path, images: str):
    """A config file with one model and ``images`` as its [images] section."""
    path = tmp_path / "c.toml"
    path.write_text(f'[[models]]\nname = "a"\n[images]\n{images}\n')
    return path


def test_config_accepts_a_full_images_section(tmp_path):
    """Every key, well-formed, loads."""
    config = load_config(
        write(
            tmp_path,
            'remote_fetch = true\nallowed_hosts = ["img.example.com", "*.cdn.example", "10.0.0.5"]\n'
            'allowed_networks = ["10.0.0.0/8", "fd00::/8"]\nmax_bytes = "5MiB"\nfetch_timeout = 3\nmax_redirects = 0',
        )
    )
    assert config.images.allowed_networks == ["10.0.0.0/8", "fd00::/8"]


@pytest.mark.parametrize(
    "images, needle",
    [
        ("remote_fetch = true", "remote_fetch is true but allowed_hosts is empty"),
        ('allowed_hosts = ["http://img.example.com"]', "images.allowed_hosts: not a host pattern"),
        ('allowed_hosts = ["img.example.com:8080"]', "images.allowed_hosts: not a host pattern"),
        ('allowed_hosts = ["*"]', "images.allowed_hosts: not a host pattern"),
        ('allowed_hosts = ["a.*.example.com"]', "images.allowed_hosts: not a host pattern"),
        ('allowed_networks = ["10.0.0.1/8"]', "images.allowed_networks: not a network"),
        ('allowed_networks = ["lan"]', "images.allowed_networks: not a network"),
        ("max_bytes = 0", "images.max_bytes: a positive size"),
        ('max_bytes = "50%"', "images.max_bytes: a positive size"),
        ('max_bytes = "lots"', "images.max_bytes: not a size"),
        ("max_redirects = 11", "<= 10"),
        ("fetch_timeout = 0", "> 0"),
        ("remote = true", "unknown field `remote`"),
    ],
)
def test_config_errors(tmp_path, images, needle):
    """Each malformed [images] key is one ConfigError line naming it."""
    with pytest.raises(ConfigError) as info:
        load_config(write(tmp_path, images))
    assert needle in str(info.value) and "\n" not in str(info.value)
