"""The ``encrypted_content`` of mlxd's Responses reasoning items.

The OpenAI Responses API lets a stateless client keep a model's reasoning
across turns: with ``include: ["reasoning.encrypted_content"]`` each
reasoning item carries an opaque ``encrypted_content`` string, and the
client sends the item back in the next request's ``input``. mlxd stores
nothing either, so its opaque string is the reasoning text itself, packed
(:func:`seal`) so that :func:`unseal` can read it back. It is an encoding,
not encryption: it hides nothing from whoever holds it, and the reasoning
text is in the response anyway.

Format: ``mlxd1.`` followed by the URL-safe base64 (no padding) of the
zlib-compressed UTF-8 text. Strings without that prefix (e.g. real OpenAI
ciphertext replayed from another provider) are not mlxd's:
:func:`unseal` returns None for them.
"""

from __future__ import annotations

import base64
import binascii
import zlib

PREFIX = "mlxd1."
"""What every string :func:`seal` makes starts with."""

MAX_UNSEALED_CHARS = 8 * 1024 * 1024
"""Longest text :func:`unseal` returns (a bound against zip bombs)."""


class SealError(ValueError):
    """An ``mlxd1.`` string that does not decode to text."""


def seal(text: str) -> str:
    """Return the opaque ``encrypted_content`` string carrying ``text``."""
    packed = zlib.compress(text.encode("utf-8"))
    return PREFIX + base64.urlsafe_b64encode(packed).decode("ascii").rstrip("=")


def unseal(blob: str) -> str | None:
    """Return the text sealed in ``blob``; None when ``blob`` is not an
    mlxd string (no ``mlxd1.`` prefix).

    Raises:
        SealError: ``blob`` has the prefix but is not valid base64 of
        zlib data holding UTF-8 text of at most
        :data:`MAX_UNSEALED_CHARS` characters.
    """
    if not blob.startswith(PREFIX):
        return None
    body = blob[len(PREFIX) :]
    try:
        packed = base64.b64decode(body + "=" * (-len(body) % 4), altchars=b"-_", validate=True)
        inflater = zlib.decompressobj()
        raw = inflater.decompress(packed, MAX_UNSEALED_CHARS * 4)
        if inflater.unconsumed_tail:
            raise SealError("sealed reasoning is too long")
        if not inflater.eof:
            raise SealError("not a valid mlxd reasoning string (truncated)")
        text = raw.decode("utf-8")
    except (binascii.Error, ValueError, zlib.error) as exc:
        if isinstance(exc, SealError):
            raise
        raise SealError(f"not a valid mlxd reasoning string ({exc})") from None
    if len(text) > MAX_UNSEALED_CHARS:
        raise SealError("sealed reasoning is too long")
    return text
