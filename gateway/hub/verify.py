"""Checking downloaded files against the hashes the hub listed.

huggingface-hub 2.4 checks only a downloaded file's size (``http_get``'s
"Consistency check"), never its content, so mlxd hashes every file it
fetched: the sha256 of an LFS file (the tree listing's ``lfs.oid``), or
the git blob id of a small file (sha1 of ``blob <size>\\0`` + content, the
listing's ``oid``). Reads in 8 MiB chunks; never loads a file whole.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from gateway.hub.selection import RemoteFile

_CHUNK = 8 * 1024 * 1024


class HashMismatch(Exception):
    """A downloaded file's content is not what the hub listed (one line)."""


def file_digest(path: Path, expected: RemoteFile) -> str:
    """The digest of ``path`` in the form ``expected.digest`` uses."""
    size = path.stat().st_size
    hasher = hashlib.sha256() if expected.sha256 else hashlib.sha1(b"blob %d\0" % size)
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            hasher.update(chunk)
    prefix = "sha256" if expected.sha256 else "git-sha1"
    return f"{prefix}:{hasher.hexdigest()}"


def check_file(path: Path, expected: RemoteFile) -> None:
    """Return when ``path`` has the listed size and hash.

    Raises:
        HashMismatch: another size or another hash (the message names the
            file, the expected and the actual digest).
    """
    size = path.stat().st_size
    if size != expected.size:
        raise HashMismatch(f"{expected.path}: {size} bytes, the hub listed {expected.size}")
    actual = file_digest(path, expected)
    if actual != expected.digest:
        raise HashMismatch(f"{expected.path}: content hash {actual} does not match the hub's {expected.digest}")
