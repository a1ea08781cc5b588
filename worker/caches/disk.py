"""The disk tier of the prefix cache: entries kept in files, so an agent's
long prompt survives an idle unload, a worker restart and an mlxd restart.

Layout: ``<directory>/<sha256 of the model identity>/<sha256 of the
tokens>.safetensors`` holds one entry (mlx-lm's ``save_prompt_cache``
format, with the identity and the tokens' digest in its metadata), next to
``<same>.json``: the entry's tokens, byte size and the SHA-256 of the
``.safetensors`` bytes. The identity is the model's weights content hash
(:mod:`worker.loading.weights_digest`), dtype and KV settings, so another model's
files never match and the same weights find theirs again wherever they are.

Integrity: a file is used only when its bytes hash to the recorded digest,
its metadata names this identity and these tokens, and it loads; anything
else (truncated, corrupt, foreign, unreadable) is logged, deleted and
treated as a miss. Never a crash, never a wrong state.

Threads: :meth:`DiskTier.serialize` and :meth:`DiskTier.load` run on the
scheduler thread (they touch MLX arrays); file writes and evictions run on
the tier's own writer thread (:meth:`DiskTier.start`), which takes bytes
already serialized. The index is shared under ``_lock``. A failed write
(disk full, permissions) is logged and dropped; the writer never dies of
one.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

log = logging.getLogger("mlxd.worker.disk_cache")

FORMAT = "mlxd-prefix-1"
"""Bumped when the file layout changes (part of the identity)."""

MIN_TOKENS = 128
"""Shorter entries are not worth a file: they prefill in milliseconds."""

MAX_PENDING = 8
"""Most serialized entries waiting for the writer; more are dropped."""


def disk_stats(tier: DiskTier | None) -> dict[str, int]:
    """The ``disk_cache_*`` fields of a heartbeat's ``WorkerStats`` for
    ``tier`` (all 0 without one). Any thread."""
    if tier is None:
        return {}
    s = tier.stats
    return {
        "disk_cache_bytes": tier.nbytes,
        "disk_cache_entries": tier.entries,
        "disk_cache_hits": s.hits,
        "disk_cached_tokens": s.hit_tokens,
        "disk_cache_writes": s.writes,
        "disk_cache_rejected": s.rejected,
        "disk_cache_evictions": s.evictions,
    }


def digest(tokens: list[int]) -> str:
    """The SHA-256 of ``tokens`` as little-endian int64 values."""
    return hashlib.sha256(np.asarray(tokens, dtype="<i8").tobytes()).hexdigest()


@dataclass
class _Entry:
    tokens: np.ndarray
    nbytes: int
    used: float


@dataclass
class DiskStats:
    """Counters of one tier (read by the output thread for heartbeats)."""

    hits: int = 0
    hit_tokens: int = 0
    writes: int = 0
    rejected: int = 0
    evictions: int = 0


class DiskTier:
    """Prefix-cache entries of one model identity on disk, at most
    ``budget_bytes`` (least recently used files deleted first).

    ``identity`` must change whenever a stored state would not be valid
    for the model (weights, dtype, KV settings). Raises OSError when
    ``directory`` cannot be created.
    """

    def __init__(self, directory: Path, identity: str, budget_bytes: int) -> None:
        self.identity = f"{FORMAT}|{identity}"
        self.directory = Path(directory) / hashlib.sha256(self.identity.encode()).hexdigest()[:32]
        self.directory.mkdir(parents=True, exist_ok=True)
        self.budget_bytes = budget_bytes
        self.stats = DiskStats()
        self._lock = threading.Lock()
        self._index: dict[str, _Entry] = {}
        self._queue: queue.Queue[tuple[str, list[int], bytes, int] | None] = queue.Queue(MAX_PENDING)
        self._generation = 0  # bumped by clear(): older queued writes are dropped
        self._thread: threading.Thread | None = None
        self._scan()

    # -- index ------------------------------------------------------------------

    def _scan(self) -> None:
        """Index the entries already on disk (a restart picks them up);
        delete what an interrupted write left (temporary files, data files
        without their ``.json``)."""
        for leftover in self.directory.glob("*.tmp"):
            leftover.unlink(missing_ok=True)
        for data in self.directory.glob("*.safetensors"):
            if not data.with_suffix(".json").exists():
                data.unlink(missing_ok=True)
        for meta_path in self.directory.glob("*.json"):
            key = meta_path.stem
            try:
                meta = json.loads(meta_path.read_text())
                tokens = np.asarray(meta["tokens"], dtype=np.int64)
                if digest(tokens.tolist()) != key or not (self.directory / f"{key}.safetensors").exists():
                    raise ValueError("entry does not match its name")
                self._index[key] = _Entry(tokens, int(meta["nbytes"]), meta_path.stat().st_mtime)
            except Exception as exc:  # a broken index file is a missing entry
                log.warning("ignoring disk cache entry %s: %s", meta_path.name, exc)
                self._delete(key)

    @property
    def nbytes(self) -> int:
        """Bytes of entry files on disk (as indexed)."""
        with self._lock:
            return sum(e.nbytes for e in self._index.values())

    @property
    def entries(self) -> int:
        """Number of entries on disk."""
        with self._lock:
            return len(self._index)

    def has(self, tokens: list[int]) -> bool:
        """Whether an entry for exactly ``tokens`` is on disk or queued."""
        with self._lock:
            return digest(tokens) in self._index

    def best(self, prompt: list[int], trimmable: bool) -> tuple[str, int] | None:
        """The entry sharing the longest prefix with ``prompt[:-1]`` and the
        number of tokens usable from it (an entry longer than that shared
        part is usable only when ``trimmable``); None when nothing is."""
        head = np.asarray(prompt[:-1], dtype=np.int64)
        found: tuple[str, int] | None = None
        with self._lock:
            for key, entry in self._index.items():
                n = min(len(entry.tokens), len(head))
                if n == 0:
                    continue
                same = entry.tokens[:n] == head[:n]
                shared = n if same.all() else int(np.argmin(same))
                if shared < len(entry.tokens) and not trimmable:
                    continue
                if shared > 0 and (found is None or shared > found[1]):
                    found = (key, shared)
        return found

    # -- scheduler thread ---------------------------------------------------------

    def serialize(self, tokens: list[int], cache: list[Any]) -> bool:
        """Serialize ``cache`` (the state of exactly ``tokens``) and queue
        it for the writer; False when it is too short, already stored,
        larger than the budget or the writer is behind. Scheduler thread
        only (reads MLX arrays)."""
        from mlx_lm.models.cache import save_prompt_cache

        if len(tokens) < MIN_TOKENS or self.budget_bytes <= 0 or self.has(tokens):
            return False
        if sum(c.nbytes for c in cache) > self.budget_bytes:
            return False
        buffer = io.BytesIO()
        key = digest(tokens)
        save_prompt_cache(buffer, cache, {"identity": self.identity, "tokens": key})
        try:
            self._queue.put_nowait((key, list(tokens), buffer.getvalue(), self._generation))
        except queue.Full:
            return False
        return True

    def load(self, key: str, tokens: list[int]) -> list[Any] | None:
        """The cache stored under ``key`` for ``tokens``, or None (the file
        is then deleted) when it fails any check. Scheduler thread only."""
        from mlx_lm.models.cache import load_prompt_cache

        path = self.directory / f"{key}.safetensors"
        try:
            meta = json.loads((self.directory / f"{key}.json").read_text())
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() != meta["sha256"] or len(data) != meta["size"]:
                raise ValueError("checksum mismatch (truncated or corrupt)")
            buffer = io.BytesIO(data)
            buffer.name = path.name  # mx.load picks the format from the name
            cache, stored = load_prompt_cache(buffer, return_metadata=True)
            if stored.get("identity") != self.identity or stored.get("tokens") != digest(tokens):
                raise ValueError("entry belongs to another model or prefix")
        except Exception as exc:
            log.warning("disk cache entry %s rejected: %s", key[:12], exc)
            self.stats.rejected += 1
            with self._lock:
                self._index.pop(key, None)
            self._delete(key)
            return None
        with self._lock:
            if key in self._index:
                self._index[key].used = time.time()
        return cache

    def clear(self) -> tuple[int, int]:
        """Delete every entry of this tier (writes already queued are
        dropped when they come); return the entries and bytes deleted.
        Any thread; the file deletions run on the caller's."""
        with self._lock:
            self._generation += 1
            dropped = dict(self._index)
            self._index.clear()
        for key in dropped:
            self._delete(key)
        return len(dropped), sum(e.nbytes for e in dropped.values())

    # -- writer thread --------------------------------------------------------------

    def start(self) -> None:
        """Start the writer thread (daemon; :meth:`close` flushes it)."""
        self._thread = threading.Thread(target=self._write_loop, name="mlxd-disk-cache", daemon=True)
        self._thread.start()

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, then stop the writer (any thread); gives
        up after ``timeout`` seconds (unwritten entries are lost, never
        half-used)."""
        if self._thread is None:
            return
        deadline = time.monotonic() + timeout
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:  # the writer is stuck: give up on what is queued
            log.warning("disk cache writer did not drain its queue in %.0f s", timeout)
        self._thread.join(max(0.0, deadline - time.monotonic()))
        self._thread = None

    def _write_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            key, tokens, data, generation = item
            try:
                self._write(key, tokens, data, generation)
            except Exception:  # disk full, permissions: the entry is dropped
                log.exception("disk cache write failed")
                self._delete(key)

    def _write(self, key: str, tokens: list[int], data: bytes, generation: int) -> None:
        """Write one entry atomically (the ``.json`` last: it commits the
        entry) and evict least recently used entries past the budget; an
        entry serialized before a :meth:`clear` is deleted instead of kept."""
        path = self.directory / f"{key}.safetensors"
        meta = {"tokens": tokens, "nbytes": len(data), "size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        for target, payload in ((path, data), (self.directory / f"{key}.json", json.dumps(meta).encode())):
            tmp = target.with_suffix(target.suffix + ".tmp")
            with open(tmp, "wb") as f:
                f.write(payload)
            os.replace(tmp, target)
        with self._lock:
            stale = generation != self._generation
            victims = []
            if not stale:
                self._index[key] = _Entry(np.asarray(tokens, dtype=np.int64), len(data), time.time())
                total = sum(e.nbytes for e in self._index.values())
                for old, entry in sorted(self._index.items(), key=lambda kv: kv[1].used):
                    if total <= self.budget_bytes:
                        break
                    victims.append(old)
                    total -= entry.nbytes
                for old in victims:
                    del self._index[old]
        if stale:
            self._delete(key)
            return
        self.stats.writes += 1
        self.stats.evictions += len(victims)
        for old in victims:
            self._delete(old)
        log.info("disk cache stored %d tokens (%d bytes)", len(tokens), len(data))

    def _delete(self, key: str) -> None:
        for suffix in (".json", ".safetensors"):
            try:
                (self.directory / f"{key}{suffix}").unlink()
            except OSError:
                pass
