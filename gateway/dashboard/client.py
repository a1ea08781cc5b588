"""Reading a running server's ``GET /v1/status`` from the command line.

:func:`target` finds the server and the key to use (``--url`` and
``--api-key``, else ``MLXD_API_KEY``, else the config's host, port and
first key), :func:`fetch_status` reads one snapshot over plain HTTP
(standard library only) and decodes it strictly into
:class:`gateway.dashboard.schema.Status`. Failures become one
:class:`StatusUnavailable` whose message says what to do.
"""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import msgspec

from gateway.dashboard.schema import Status
from shared.config import DEFAULT_CONFIG_PATH, Config, api_key_entries

KEY_VARIABLE = "MLXD_API_KEY"
"""Environment variable holding the API key the commands send."""

_DECODER = msgspec.json.Decoder(Status)


class StatusUnavailable(Exception):
    """The snapshot could not be read; the message says why and what to do."""


@dataclass(frozen=True)
class Target:
    """A server to read: its base URL (no trailing ``/``) and the key to
    send (None: none)."""

    url: str
    api_key: str | None


def base_url(host: str, port: int) -> str:
    """The base URL of a server bound to ``host``:``port`` (a wildcard bind
    is reached over loopback)."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}"


def target(url: str | None, api_key: str | None, config_path: str) -> Target:
    """The server to read: ``url`` or the config's address; the key
    ``api_key``, else ``$MLXD_API_KEY``, else the config's first key.
    A missing default config means the defaults (127.0.0.1:8000, no key).

    Raises:
        shared.config.ConfigError: the config file is invalid, or a
            config named explicitly does not exist.
    """
    from shared.config_loader import load_config

    config: Config | None = None
    if url is None or (api_key is None and KEY_VARIABLE not in os.environ):
        default = Path(config_path).expanduser() == Path(DEFAULT_CONFIG_PATH).expanduser()
        if default and not Path(config_path).expanduser().exists():
            config = None
        else:
            config = load_config(config_path)
    if url is None:
        url = base_url(config.server.host, config.server.port) if config else base_url("127.0.0.1", 8000)
    key = (
        api_key
        or os.environ.get(KEY_VARIABLE)
        or (api_key_entries(config.server)[0].key if config and config.server.api_keys else None)
    )
    return Target(url.rstrip("/"), key or None)


def fetch_status(server: Target, since: float | None = None, timeout: float = 5.0) -> Status:
    """One snapshot of ``server`` (samples after Unix time ``since`` only,
    when given).

    Raises:
        StatusUnavailable: the server does not answer, refuses the key, is
            not an mlxd with ``/v1/status``, or answers something else.
    """
    query = "" if since is None else "?" + urllib.parse.urlencode({"since": repr(since)})
    request = urllib.request.Request(f"{server.url}/v1/status{query}", headers={"Accept": "application/json"})
    if server.api_key:
        request.add_header("Authorization", f"Bearer {server.api_key}")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise StatusUnavailable(
                f"{server.url} needs an API key: pass --api-key or set {KEY_VARIABLE}"
                if not server.api_key
                else f"{server.url} refused the API key"
            ) from None
        if exc.code == 404:
            raise StatusUnavailable(f"{server.url} has no /v1/status (not mlxd, or an older one)") from None
        raise StatusUnavailable(f"{server.url}/v1/status answered {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise StatusUnavailable(f"no mlxd answers at {server.url} ({reason})") from None
    try:
        return _DECODER.decode(body)
    except msgspec.DecodeError as exc:
        raise StatusUnavailable(f"{server.url}/v1/status sent an unexpected answer: {exc}") from None
