"""A content hash of a model directory, for identities that outlive a process.

:func:`weights_digest` hashes the bytes of a model directory's config,
tokenizer and weight files (the files :data:`IDENTITY_GLOBS` names), so two
directories holding the same model get the same digest wherever they are,
and a directory whose weights changed gets another one. The prefix cache's
disk tier keys its files with it (:mod:`worker.caches.disk`): an entry is
found again after a restart, a move of the directory or a re-download of
the same weights, and never for other weights.

Hashing reads every byte once (about a second per GB here), so each file's
digest is remembered in a small JSON memo (``memo_file``), keyed by the
file's absolute path, size and modification time: only a new or changed
file is read again. A memo that cannot be read or written costs a re-hash,
never an error.

Threads: called by the worker's scheduler thread while it loads the model
(before any request); touches no MLX state. Reads and rewrites
``memo_file`` (one writer per model directory at a time: the worker of that
model).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from pathlib import Path

log = logging.getLogger("mlxd.worker.weights_digest")

IDENTITY_GLOBS: tuple[str, ...] = ("*.json", "*.safetensors", "*.jinja", "tokenizer.model", "*.tiktoken")
"""The files of a model directory whose contents make its identity: config,
tokenizer and weights."""


def identity_files(path: Path) -> list[Path]:
    """The files of model directory ``path`` that :data:`IDENTITY_GLOBS`
    names, sorted by name."""
    return sorted({file for pattern in IDENTITY_GLOBS for file in path.glob(pattern) if file.is_file()})


def weights_digest(path: Path, memo_file: Path) -> str:
    """64 hex digits: SHA-256 over the names and contents of the identity
    files of model directory ``path``.

    Each file's own digest is taken from ``memo_file`` when its absolute
    path, size and modification time match an earlier hash, else computed
    and stored there. Raises ``OSError`` only when a model file itself
    cannot be read.
    """
    memo = _read_memo(memo_file)
    changed = False
    total = hashlib.sha256()
    started = time.monotonic()
    hashed_bytes = 0
    for file in identity_files(path):
        stat = file.stat()
        key = f"{file.resolve()}\0{stat.st_size}\0{stat.st_mtime_ns}"
        digest = memo.get(key)
        if digest is None:
            with open(file, "rb") as handle:
                digest = hashlib.file_digest(handle, "sha256").hexdigest()
            memo[key] = digest
            changed = True
            hashed_bytes += stat.st_size
        total.update(f"{file.name}\0{digest}\n".encode())
    if changed:
        log.info(
            "hashed %.1f MB of model files in %s in %.1f s",
            hashed_bytes / 1e6,
            path,
            time.monotonic() - started,
        )
        _write_memo(memo_file, memo)
    return total.hexdigest()


def _read_memo(memo_file: Path) -> dict[str, str]:
    """The memo's entries, or none when it is missing or unreadable."""
    try:
        data = json.loads(memo_file.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(k, str) and isinstance(v, str)}


def _write_memo(memo_file: Path, memo: dict[str, str]) -> None:
    """Replace the memo atomically; a failure is logged and ignored. Entries
    of files that no longer exist are dropped."""
    kept = {key: value for key, value in memo.items() if os.path.exists(key.split("\0", 1)[0])}
    try:
        memo_file.parent.mkdir(parents=True, exist_ok=True)
        partial = memo_file.with_name(f"{memo_file.name}.{os.getpid()}.partial")
        partial.write_text(json.dumps(kept, sort_keys=True))
        os.replace(partial, memo_file)
    except OSError as exc:
        log.warning("could not save the weights digest memo %s: %s", memo_file, exc)
