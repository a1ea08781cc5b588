"""One remote image download, run on a thread: the I/O half of the
remote-image trust boundary.

:class:`ImageDownload` checks each URL with
:mod:`gateway.images.policy` (scheme, allow-list), resolves the host
name once, refuses unless every address is allowed, and then connects to
that checked address itself: there is no second lookup for a rebinding
DNS server to answer differently. The ``Host`` header, TLS SNI and
certificate verification still use the host name (system trust store,
hostname checking on). Redirects are followed by hand, each hop checked
again like the first. The body must be a 200 with an ``image/*`` type
(``video/*`` for a video download) and
at most ``max_bytes`` (the declared length is checked before reading, the
bytes read are counted). Every socket operation waits at most until the
fetch's deadline; :meth:`ImageDownload.abort`, called from another
thread, shuts the socket so a blocked read ends at once. Proxies from the
environment are never used.

:meth:`ImageDownload.run` blocks: never call it on the event loop
(:func:`gateway.images.remote.fetch_remote_image` runs it on its own
thread pool).
"""

from __future__ import annotations

import http.client
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urljoin, urlsplit

from gateway.images.policy import FetchRefused, FetchRules, IPAddress, Target, parse_target

_REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_READ_CHUNK = 64 * 1024
_HEADERS = {
    "Accept": "image/*",
    "Accept-Encoding": "identity",
    "Connection": "close",
    "User-Agent": "mlxd-image-fetch",
}


class _PinnedConnection(http.client.HTTPConnection):
    """An HTTP/1.1 exchange with ``target.host`` (named in the ``Host``
    header) over a socket the caller already connected, to a checked
    address, and for https already wrapped in TLS."""

    def __init__(self, target: Target, sock: socket.socket) -> None:
        super().__init__(target.host, target.port)
        self._opened = sock

    def connect(self) -> None:
        """Use the opened socket; never resolve or connect again."""
        self.sock = self._opened


class ImageDownload:
    """The fetch of one client URL, following redirects.

    ``deadline``: a :func:`time.monotonic` instant after which every
    operation fails as a timeout. ``host`` is the host of the URL being
    fetched (the latest hop), ``redirects`` how many were followed: both
    for the caller's log line. ``media``: ``image`` or ``video``, the
    top-level content type asked for and required. Thread-safe only for
    :meth:`abort`.
    """

    def __init__(self, url: str, rules: FetchRules, deadline: float, media: str = "image") -> None:
        self.url = url
        self.media = media
        self.rules = rules
        self.deadline = deadline
        self.host = _host_of(url)
        self.redirects = 0
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._aborted = False

    def abort(self) -> None:
        """End the download from any thread: the current socket is shut
        down, so :meth:`run` fails (as a timeout) at its next or current
        operation."""
        with self._lock:
            self._aborted = True
            sock = self._sock
        if sock is not None:
            try:
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def run(self) -> bytes:
        """The image's bytes. Blocks (a pool thread, never the event loop).

        Raises:
            FetchRefused: any rule broken or any failure, with a reason
                safe for the client.
        """
        self._remaining()  # it may have waited for a pool thread
        url = self.url
        target = parse_target(url)
        self.host = target.host
        while True:
            response = self._request(target)
            try:
                if response.status not in _REDIRECT_STATUSES:
                    return self._body(target, response)
                location = response.getheader("Location")
            finally:
                self._close(response)
            url, target = self._redirect(url, location)

    def _redirect(self, url: str, location: str | None) -> tuple[str, Target]:
        """The next hop's URL and target, checked like the first.

        Raises:
            FetchRefused: too many redirects, no ``Location``, or a hop the
                rules refuse ("redirect refused: ...").
        """
        if self.redirects >= self.rules.max_redirects:
            raise FetchRefused(f"the image URL redirected more than {self.rules.max_redirects} times")
        if not location:
            raise FetchRefused(f"image host {self.host!r} sent a redirect without a location")
        self.redirects += 1
        url = urljoin(url, location.strip())
        try:
            target = parse_target(url)
        except FetchRefused as exc:
            raise FetchRefused(f"image URL redirect refused: {exc.reason}", exc.detail) from None
        self.host = target.host
        return url, target

    def _request(self, target: Target) -> http.client.HTTPResponse:
        """Check ``target``, connect to a checked address and send the GET;
        the response with its head read.

        Raises:
            FetchRefused: a rule is broken, the connection fails, the
                answer is not HTTP, or the deadline passes.
        """
        prefix = "image URL redirect refused: " if self.redirects else ""
        try:
            self.rules.check_host(target)
            addresses = self._resolve(target)
            self.rules.check_addresses(target, addresses)
        except FetchRefused as exc:
            raise FetchRefused(prefix + exc.reason, exc.detail) from None
        connection = _PinnedConnection(target, self._connect(target, addresses))
        try:
            with self._failures(target):
                connection.request("GET", target.path, headers={**_HEADERS, "Accept": f"{self.media}/*"})
                return connection.getresponse()
        except BaseException:
            connection.close()
            raise

    def _resolve(self, target: Target) -> list[IPAddress]:
        """Every address ``target.host`` resolves to (the literal itself
        for an IP), in the resolver's order, without duplicates.

        Raises:
            FetchRefused: the name does not resolve.
        """
        try:
            infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except (socket.gaierror, UnicodeError) as exc:
            raise FetchRefused(f"image host {target.host!r} could not be resolved", str(exc)) from None
        addresses: list[IPAddress] = []
        for _family, _type, _proto, _name, sockaddr in infos:
            address = ipaddress.ip_address(sockaddr[0])
            if address not in addresses:
                addresses.append(address)
        self._remaining()
        return addresses

    def _connect(self, target: Target, addresses: list[IPAddress]) -> socket.socket:
        """A socket connected to the first of ``addresses`` that answers
        (all already checked), registered for :meth:`abort`; for https
        wrapped in TLS with SNI and certificate verification for
        ``target.host``.

        Raises:
            FetchRefused: none answers in time, or the TLS handshake fails.
        """
        sock = self._connect_tcp(target, addresses)
        if target.scheme != "https":
            return sock
        try:
            with self._failures(target):
                wrapped = _tls_context().wrap_socket(sock, server_hostname=target.host)
        except BaseException:
            sock.close()
            raise
        self._register(wrapped)
        return wrapped

    def _connect_tcp(self, target: Target, addresses: list[IPAddress]) -> socket.socket:
        """A TCP socket connected to the first of ``addresses`` that
        answers, registered for :meth:`abort`.

        Raises:
            FetchRefused: none answers in time.
        """
        failure = ""
        for address in addresses:
            family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            self._register(sock)
            try:
                sock.settimeout(self._remaining())
                sock.connect((str(address), target.port))
                return sock
            except TimeoutError:
                sock.close()
                self._timed_out()
            except OSError as exc:
                sock.close()
                if self._aborted:
                    self._timed_out()
                failure = f"{address}: {exc}"
        raise FetchRefused(f"could not connect to image host {target.host!r}", failure)

    def _body(self, target: Target, response: http.client.HTTPResponse) -> bytes:
        """The body of a final (non-redirect) ``response``.

        Raises:
            FetchRefused: not 200, not ``image/*`` (``video/*``), compressed, larger than
                ``max_bytes`` (declared or read), cut short, or too slow.
        """
        host = target.host
        if response.status != 200:
            raise FetchRefused(f"image host {host!r} answered HTTP {response.status}, not 200")
        content_type = (response.getheader("Content-Type") or "").split(";")[0].strip().lower()
        media = self.media
        if not content_type.startswith(f"{media}/") or content_type == f"{media}/":
            raise FetchRefused(
                f"the answer from image host {host!r} is not a{'n' if media == 'image' else ''} {media} "
                f"(its content type is not {media}/*)",
                f"content type {content_type[:80]!r}",
            )
        encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity":
            raise FetchRefused(f"the answer from image host {host!r} is compressed, which is not accepted")
        limit = self.rules.max_bytes
        declared = response.getheader("Content-Length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise FetchRefused(f"the image at {host!r} is larger than the server's limit of {limit} bytes")
        body = bytearray()
        with self._failures(target):
            while True:
                self._set_timeout()
                chunk = response.read1(min(_READ_CHUNK, limit + 1 - len(body)))
                if not chunk:
                    break
                body += chunk
                if len(body) > limit:
                    raise FetchRefused(f"the image at {host!r} is larger than the server's limit of {limit} bytes")
        self._remaining()  # an abort ends a read as an empty one: not a complete body
        if response.length:
            raise FetchRefused(f"image host {host!r} closed the connection before sending the whole image")
        return bytes(body)

    @contextmanager
    def _failures(self, target: Target) -> Iterator[None]:
        """Run the block with the socket's timeout set to what is left;
        socket, TLS and HTTP errors in it become :class:`FetchRefused` (a
        timeout, or any failure after :meth:`abort`, as the timeout
        refusal; the exception text only in ``detail``).

        Raises:
            FetchRefused: as above.
        """
        self._set_timeout()
        host = target.host
        try:
            yield
        except (OSError, http.client.HTTPException) as exc:
            if isinstance(exc, TimeoutError) or self._aborted:
                self._timed_out()
            if isinstance(exc, ssl.SSLCertVerificationError):
                raise FetchRefused(f"image host {host!r} failed TLS certificate verification", str(exc)) from None
            if isinstance(exc, (http.client.HTTPException, ssl.SSLError)):
                raise FetchRefused(f"image host {host!r} sent an answer that is not valid HTTP", repr(exc)) from None
            raise FetchRefused(f"the connection to image host {host!r} failed", repr(exc)) from None

    def _register(self, sock: socket.socket) -> None:
        """Make ``sock`` the one :meth:`abort` shuts.

        Raises:
            FetchRefused: the download was already aborted (``sock`` closed).
        """
        with self._lock:
            if self._aborted:
                sock.close()
                self._timed_out()
            self._sock = sock

    def _set_timeout(self) -> None:
        """Let the current socket wait only until the deadline."""
        remaining = self._remaining()
        with self._lock:
            sock = self._sock
        if sock is not None:
            sock.settimeout(remaining)

    def _remaining(self) -> float:
        """Seconds left before the deadline.

        Raises:
            FetchRefused: none left, or the download was aborted.
        """
        remaining = self.deadline - time.monotonic()
        if remaining <= 0 or self._aborted:
            self._timed_out()
        return remaining

    def timeout_refusal(self) -> FetchRefused:
        """The refusal of a download that passed its deadline."""
        return FetchRefused(
            f"fetching the image from {self.host!r} took longer than the server's limit of {self.rules.timeout:g} s"
        )

    def _timed_out(self) -> None:
        """Raise :meth:`timeout_refusal`.

        Raises:
            FetchRefused: always.
        """
        raise self.timeout_refusal()

    def _close(self, response: http.client.HTTPResponse) -> None:
        """Close ``response`` and its socket; forget the socket."""
        response.close()
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()


def _host_of(url: str) -> str:
    """``url``'s host as written (for log lines and messages before the
    URL is checked), or empty when it has none."""
    try:
        return urlsplit(url.strip()).hostname or ""
    except ValueError:
        return ""


def _tls_context() -> ssl.SSLContext:
    """A client TLS context: the system trust store (``SSL_CERT_FILE`` /
    ``SSL_CERT_DIR`` honoured), hostname checking on, HTTP/1.1 by ALPN."""
    context = ssl.create_default_context()
    context.set_alpn_protocols(["http/1.1"])
    return context
