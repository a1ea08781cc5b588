"""Fetching an image a client names by an ``http(s)`` URL: the gateway's
one outbound connection on a client's behalf, so a trust boundary.

Policy comes from ``[images]`` (:class:`shared.config.ImagesConfig`): off
unless ``remote_fetch``; then only hosts on ``allowed_hosts``, only public
addresses (or ones in ``allowed_networks``), checked again after every
redirect, within ``max_bytes``, ``fetch_timeout`` and ``max_redirects``
(the rules: :mod:`gateway.images.policy`; the download:
:mod:`gateway.images.http`).

The download blocks, so it runs on this module's own pool of
:data:`FETCH_THREADS` threads, never on the event loop's thread and never
on the loop's default executor (slow image hosts cannot starve other
users of it). The event loop enforces ``fetch_timeout`` over the whole
fetch, time waiting for a pool thread included, and aborts the download
(shutting its socket) on a timeout or when the caller is cancelled. Each
fetch is logged at INFO (host, bytes, milliseconds, redirects), each
refusal at WARNING (host, milliseconds, reason, the detail clients never
see).
"""

from __future__ import annotations

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor

from gateway.core.errors import APIError, bad_request
from gateway.images.http import ImageDownload
from gateway.images.policy import FetchRefused, FetchRules
from shared.config import ImagesConfig

log = logging.getLogger("mlxd.gateway.images")

FETCH_THREADS = 8
"""Remote image downloads running at once; more wait for a thread (their
``fetch_timeout`` running)."""

_POOL = ThreadPoolExecutor(max_workers=FETCH_THREADS, thread_name_prefix="mlxd-image-fetch")


async def fetch_remote_image(url: str, policy: ImagesConfig, param: str, media: str = "image") -> bytes:
    """The bytes at ``url`` when ``policy`` allows fetching it.

    ``param``: the request part that named the URL, for the error;
    ``media``: ``image`` or ``video`` (a video URL is fetched under the
    same policy, ``video/*`` required). The bytes are whatever the host
    sent as ``image/*`` (``video/*``); whether they are valid is the
    caller's (the worker's) check.

    Raises:
        APIError: 400 (code ``invalid_image``, ``param``) when remote
            fetching is off, the URL or its host is not allowed, or the
            fetch fails or breaks a limit; the message says which.
    """
    if not policy.remote_fetch:
        raise bad_request(
            f"remote {media} URLs are not fetched by this server ([images] remote_fetch is off): "
            f"send the {media} inline as base64",
            param=param,
            code="invalid_image",
        )
    started = time.monotonic()
    download = ImageDownload(url, FetchRules.from_config(policy), started + policy.fetch_timeout, media)
    future = asyncio.get_running_loop().run_in_executor(_POOL, download.run)
    try:
        body = await asyncio.wait_for(future, policy.fetch_timeout)
    except TimeoutError:
        download.abort()
        refusal = download.timeout_refusal()
    except FetchRefused as exc:
        refusal = exc
    except asyncio.CancelledError:
        download.abort()
        raise
    else:
        log.info(
            "image fetch from %s ok: %d bytes in %d ms, %d redirects",
            download.host,
            len(body),
            _elapsed_ms(started),
            download.redirects,
        )
        return body
    raise _refused(download.host, refusal, started, param)


def _refused(host: str, refusal: FetchRefused, started: float, param: str) -> APIError:
    """Log ``refusal`` at WARNING; the client's 400 for it."""
    detail = f" ({refusal.detail})" if refusal.detail else ""
    log.warning(
        "image fetch from %s refused after %d ms: %s%s", host or "?", _elapsed_ms(started), refusal.reason, detail
    )
    return bad_request(refusal.reason, param=param, code="invalid_image")


def _elapsed_ms(started: float) -> int:
    """Milliseconds since ``started`` (a :func:`time.monotonic` instant)."""
    return int((time.monotonic() - started) * 1000)
