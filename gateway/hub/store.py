"""The models in the local Hugging Face cache: listing them and removing them.

:func:`list_local` reads the cache directory (no network): every model
repo, each of its snapshots with its size, kind (:mod:`shared.model_kind`),
state (``complete``/``downloading`` from mlxd's pull records, ``cached``
for snapshots mlxd did not pull), the revisions naming it, the catalog
names standing for it and the config entries that use it.

:func:`remove` deletes a repo's whole cache folder (every revision, its
blobs, refs and pull records), refusing while a ``[[models]]`` entry uses
it (unless forced) or while a pull of it holds its lock; every removal is
recorded with who asked (:mod:`gateway.hub.audit`).

:func:`repo_lock` is the per-repo lock pulls and removals share.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gateway.hub import audit
from gateway.hub.catalog import CatalogEntry, Target, names_for, resolve
from gateway.hub.names import InvalidName
from shared.hub_snapshots import (
    COMMIT,
    RECORDS_DIR,
    SnapshotUnavailable,
    check_pulled,
    hub_cache_dir,
    read_record,
    repo_folder,
)
from shared.model_kind import detect_kind


class StoreError(Exception):
    """A listing or removal cannot be done; the message is one line."""


class RepoBusy(StoreError):
    """Another process holds the repo's lock (a pull is running)."""


@dataclass(frozen=True)
class LocalModel:
    """One snapshot in the local cache (see the module docstring)."""

    repo_id: str
    commit: str
    refs: tuple[str, ...]
    path: Path
    size: int
    kind: str
    state: str
    names: tuple[str, ...]
    used_by: tuple[str, ...]


@contextmanager
def repo_lock(folder: Path, wait: bool = True) -> Iterator[None]:
    """Hold ``folder``'s lock (an ``flock`` on ``mlxd-pulls/.lock``,
    released when the process ends however it ends).

    Raises:
        RepoBusy: ``wait`` is False and another holder has it.
    """
    lock_dir = folder / RECORDS_DIR
    lock_dir.mkdir(parents=True, exist_ok=True)
    with open(lock_dir / ".lock", "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except OSError as exc:
            if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise RepoBusy(f"a pull of {folder.name} is running; try again when it ends") from exc
            raise
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def hub_source(source: str, catalog: dict[str, CatalogEntry]) -> Target | None:
    """The hub target a ``[[models]]`` ``source`` names (a catalog name or
    ``org/name[@revision]``), or None for a local path, a ``package:``
    source or anything else."""
    text = source.strip()
    if text.startswith(("package:", "/", ".", "~")) or Path(text).expanduser().exists():
        return None
    try:
        return resolve(text, catalog)
    except InvalidName:
        return None


def users_of(repo_id: str, sources: dict[str, str], catalog: dict[str, CatalogEntry]) -> tuple[str, ...]:
    """The config entries (name -> source) whose source is ``repo_id``."""
    return tuple(
        sorted(
            name for name, source in sources.items() if (t := hub_source(source, catalog)) and t.ref.repo_id == repo_id
        )
    )


def list_local(
    sources: dict[str, str], catalog: dict[str, CatalogEntry], cache_dir: Path | None = None
) -> list[LocalModel]:
    """Every model snapshot in the cache, by repo id then commit;
    ``sources`` maps config entry names to their sources (for ``used_by``)."""
    cache = cache_dir or hub_cache_dir()
    found: list[LocalModel] = []
    for folder in sorted(cache.glob("models--*--*")) if cache.is_dir() else []:
        repo_id = folder.name[len("models--") :].replace("--", "/", 1)
        refs: dict[str, list[str]] = {}
        for ref in (folder / "refs").rglob("*") if (folder / "refs").is_dir() else []:
            text = ref.read_text().strip() if ref.is_file() else ""
            if COMMIT.fullmatch(text):
                refs.setdefault(text, []).append(ref.relative_to(folder / "refs").as_posix())
        commits = {p.name for p in (folder / "snapshots").glob("*") if COMMIT.fullmatch(p.name)}
        commits |= {p.stem for p in (folder / RECORDS_DIR).glob("*.json") if COMMIT.fullmatch(p.stem)}
        for commit in sorted(commits):
            snapshot = folder / "snapshots" / commit
            found.append(
                LocalModel(
                    repo_id=repo_id,
                    commit=commit,
                    refs=tuple(sorted(refs.get(commit, []))),
                    path=snapshot,
                    size=_snapshot_size(snapshot),
                    kind=detect_kind(snapshot) if snapshot.is_dir() else "?",
                    state=_state(folder, commit),
                    names=tuple(names_for(repo_id, catalog)),
                    used_by=users_of(repo_id, sources, catalog),
                )
            )
    return found


def _state(folder: Path, commit: str) -> str:
    """``complete``, ``downloading`` (or interrupted), ``damaged`` (a
    complete pull whose files changed) or ``cached`` (not pulled by mlxd)."""
    try:
        record = read_record(folder, commit)
    except SnapshotUnavailable:
        return "damaged"
    if record is None:
        return "cached"
    if record.state != "complete":
        return "downloading"
    try:
        check_pulled(folder, record)
    except SnapshotUnavailable:
        return "damaged"
    return "complete"


def _snapshot_size(snapshot: Path) -> int:
    """Bytes of a snapshot's files (each blob counted once)."""
    seen: set[str] = set()
    total = 0
    for entry in snapshot.rglob("*") if snapshot.is_dir() else []:
        real = os.path.realpath(entry)
        if real in seen or not os.path.isfile(real):
            continue
        seen.add(real)
        total += os.path.getsize(real)
    return total


def remove(
    target: Target,
    *,
    who: str,
    sources: dict[str, str],
    catalog: dict[str, CatalogEntry],
    force: bool = False,
    cache_dir: Path | None = None,
) -> int:
    """Delete ``target``'s repo from the cache; return the bytes freed.

    Raises:
        StoreError: not in the cache, used by a config entry (without
            ``force``), or being pulled (:class:`RepoBusy`).
    """
    repo_id = target.ref.repo_id
    folder = repo_folder(repo_id, cache_dir)
    if not folder.is_dir():
        audit.record("remove", target.label, who, "refused: not in the local store", repo=repo_id)
        raise StoreError(f"{target.label} is not in the local store ({folder.parent})")
    users = users_of(repo_id, sources, catalog)
    if users and not force:
        message = f"{target.label} is used by config entries {', '.join(users)}; remove them first or use --force"
        audit.record("remove", target.label, who, f"refused: {message}", repo=repo_id)
        raise StoreError(message)
    freed = sum(p.stat().st_size for p in (folder / "blobs").glob("*") if p.is_file())
    try:
        with repo_lock(folder, wait=False):
            shutil.rmtree(folder / "snapshots", ignore_errors=True)
            for child in folder.iterdir():
                if child.name != RECORDS_DIR:
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
            shutil.rmtree(folder / RECORDS_DIR, ignore_errors=True)
    except RepoBusy as exc:
        audit.record("remove", target.label, who, f"refused: {exc}", repo=repo_id)
        raise
    shutil.rmtree(folder, ignore_errors=True)
    locks = folder.parent / ".locks" / folder.name
    shutil.rmtree(locks, ignore_errors=True)
    audit.record("remove", target.label, who, "removed", repo=repo_id, bytes=freed, forced=bool(users))
    return freed
