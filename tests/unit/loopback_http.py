"""Small real HTTP(S) servers on loopback addresses for the remote-image tests.

:class:`LoopbackServer` serves on ``127.0.0.x`` from a thread; each path is
answered by a route function (helpers below: an image, a redirect, a
status, a stall, a trickle) and every request is recorded with its
``Host`` header (and, over TLS, the SNI name). :func:`make_tls_files`
writes a throwaway CA and a server certificate for chosen names with
``cryptography``.
"""

from __future__ import annotations

import datetime
import socket
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

Route = Callable[[BaseHTTPRequestHandler], None]


class LoopbackServer:
    """A threaded HTTP server on ``host`` (port chosen by the OS).

    ``routes`` maps a path (with query) to its route; ``seen`` lists
    ``(path, Host header)`` per request, ``sni`` the TLS server names
    asked for; ``ended`` the :func:`time.monotonic` instants at which
    stalling and trickling routes noticed the client had gone.
    """

    def __init__(self, host: str, tls: ssl.SSLContext | None = None) -> None:
        self.host = host
        self.routes: dict[str, Route] = {}
        self.seen: list[tuple[str, str]] = []
        self.sni: list[str | None] = []
        self.ended: list[float] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server.seen.append((self.path, self.headers.get("Host", "")))
                route = server.routes.get(self.path)
                if route is None:
                    self.send_error(404)
                    return
                route(self)

            def log_message(self, *_args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer((host, 0), Handler)
        self.httpd.daemon_threads = True
        self.httpd.handle_error = lambda *_args: None
        if tls is not None:
            tls.sni_callback = lambda _sock, name, _ctx: self.sni.append(name)
            self.httpd.socket = tls.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str, scheme: str = "http", host: str | None = None) -> str:
        """The URL of ``path`` on this server (``host`` replaces the address)."""
        return f"{scheme}://{host or self.host}:{self.port}{path}"

    def reset(self) -> None:
        """Forget routes and records."""
        self.routes.clear()
        self.seen.clear()
        self.sni.clear()
        self.ended.clear()

    def close(self) -> None:
        """Stop serving and close the listening socket."""
        self.httpd.shutdown()
        self.httpd.server_close()


def image(body: bytes, content_type: str = "image/png", length: bool = True) -> Route:
    """Answer 200 with ``body``; without ``length`` the body is ended by
    closing the connection (no Content-Length)."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", content_type)
        if length:
            handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return route


def redirect(location: str, status: int = 302) -> Route:
    """Answer a redirect to ``location``."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(status)
        handler.send_header("Location", location)
        handler.send_header("Content-Length", "0")
        handler.end_headers()

    return route


def status(code: int) -> Route:
    """Answer ``code`` with a short image-typed body."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(code)
        handler.send_header("Content-Type", "image/png")
        handler.send_header("Content-Length", "2")
        handler.end_headers()
        handler.wfile.write(b"no")

    return route


def declared_length(declared: int, body: bytes) -> Route:
    """Declare ``declared`` bytes, send ``body`` and close."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "image/png")
        handler.send_header("Content-Length", str(declared))
        handler.end_headers()
        handler.wfile.write(body)
        handler.close_connection = True

    return route


def stall(server: LoopbackServer, limit: float = 10.0) -> Route:
    """Send nothing until the client closes (recorded in ``server.ended``)
    or ``limit`` seconds pass."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        handler.connection.settimeout(limit)
        try:
            handler.connection.recv(1)
        except OSError:
            pass
        server.ended.append(time.monotonic())
        handler.close_connection = True

    return route


def trickle(server: LoopbackServer, in_head: bool, every: float = 0.05, limit: float = 10.0) -> Route:
    """Send one byte every ``every`` seconds (of the head when ``in_head``,
    else of a declared 100000-byte PNG body) until the client goes away
    (recorded in ``server.ended``) or ``limit`` seconds pass."""

    def route(handler: BaseHTTPRequestHandler) -> None:
        sock = handler.connection
        head = b"HTTP/1.1 200 OK\r\nContent-Type: image/png\r\nContent-Length: 100000\r\n"
        try:
            sock.sendall(head + (b"X-Slow: " if in_head else b"\r\n"))
            stop = time.monotonic() + limit
            while time.monotonic() < stop:
                sock.sendall(b"y" if in_head else b"x")
                time.sleep(every)
        except OSError:
            pass
        server.ended.append(time.monotonic())
        handler.close_connection = True

    return route


def make_tls_files(directory: Path, names: list[str]) -> tuple[Path, Path, Path]:
    """A CA certificate and a server certificate and key for ``names``
    (DNS names), as PEM files in ``directory``: ``(ca, cert, key)``."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)

    def build(subject: str, key: ec.EllipticCurvePrivateKey, issuer: str, signer: ec.EllipticCurvePrivateKey, ca: bool):
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
            .issuer_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, issuer)]))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
            ).add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        else:
            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.DNSName(n) for n in names]), critical=False
            ).add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(signer.public_key()), critical=False)
        return builder.sign(signer, hashes.SHA256())

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = build("mlxd test CA", ca_key, "mlxd test CA", ca_key, ca=True)
    key = ec.generate_private_key(ec.SECP256R1())
    cert = build(names[0], key, "mlxd test CA", ca_key, ca=False)
    paths = (directory / "ca.pem", directory / "cert.pem", directory / "key.pem")
    paths[0].write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths


def resolver(names: dict[str, list[str]], calls: list[str]) -> Callable[..., list]:
    """A stand-in for :func:`socket.getaddrinfo` answering ``names`` (each
    call's host appended to ``calls``) and any other host as the real one."""
    real = socket.getaddrinfo

    def getaddrinfo(host, port, *args, **kwargs):  # noqa: ANN001, ANN202 - socket's signature
        calls.append(host)
        if host not in names:
            return real(host, port, *args, **kwargs)
        out = []
        for address in names[host]:
            family = socket.AF_INET6 if ":" in address else socket.AF_INET
            sockaddr = (address, port, 0, 0) if family == socket.AF_INET6 else (address, port)
            out.append((family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr))
        return out

    return getaddrinfo
