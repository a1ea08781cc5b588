"""One pull: a model repo from the hub into huggingface-hub's cache, checked.

:func:`pull` does, in order:

1. resolve the revision to a commit and list the repo's files through
   huggingface-hub's ``HfApi`` (``HF_ENDPOINT`` and ``HF_TOKEN`` are
   honoured as huggingface-hub honours them; ``endpoint``/``token``
   override them); the commit id and every listed name are checked
   (:mod:`gateway.hub.names`) and only the files MLX needs are chosen
   (:mod:`gateway.hub.selection`);
2. refuse before downloading anything when the chosen files are larger
   than ``max_bytes`` or than the free space where the cache lives (less
   what is already there);
3. write the pull record ``downloading`` (:mod:`shared.hub_snapshots`:
   from now on this commit is not served until the pull completes) and
   download those files, and only those, with huggingface-hub's
   ``snapshot_download`` at that exact commit, while a
   :class:`gateway.hub.progress.DownloadWatcher` reports progress;
   huggingface-hub resumes a file whose connection drops with ``Range``
   requests; a pull run again after an interruption keeps the files
   already finished (a file cut short restarts from its beginning:
   huggingface-hub 2.4 keeps no partial file between runs, so the
   leftovers of a killed run are deleted);
4. hash every chosen file against the listing (:mod:`gateway.hub.verify`,
   which huggingface-hub does not do); a mismatch deletes that file from
   the cache and fails the pull;
5. mark the record ``complete`` and point ``refs/<revision>`` at the commit.

Pulls of one repo are serialized across processes by a lock file in the
repo's cache folder; a commit whose record is already complete is not
fetched again. Every pull, finished or failed, is recorded with who
asked (:mod:`gateway.hub.audit`). Failures raise :class:`PullRefused`
(the request itself cannot be met: bad name, too large, no space, not
found) or :class:`PullFailed` (the transfer or a check failed), each
with a one-line message. Blocking: call from a thread, never from the
gateway's event loop.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from gateway.hub import audit
from gateway.hub.catalog import Target
from gateway.hub.names import InvalidName
from gateway.hub.progress import DownloadWatcher, Listener, PullStatus, human_bytes, with_phase
from gateway.hub.selection import RemoteFile, select_files
from gateway.hub.store import repo_lock
from gateway.hub.verify import HashMismatch, check_file
from shared.hub_snapshots import (
    COMMIT,
    PullRecord,
    SnapshotUnavailable,
    check_pulled,
    escaping_links,
    hub_cache_dir,
    read_record,
    repo_folder,
    write_record,
    write_ref,
)

FREE_SPACE_MARGIN = 64 * 1024 * 1024
"""Bytes left free beyond the download itself (logs, records, the OS)."""


class PullError(Exception):
    """A pull did not complete; the message is one line."""


class PullRefused(PullError):
    """The pull cannot be done as asked (bad name, not found, too large, no space)."""


class PullFailed(PullError):
    """The transfer or a check failed; running the pull again may succeed."""


@dataclass(frozen=True)
class PullPlan:
    """What a pull will fetch: the target, the commit its revision names,
    the chosen files and the repo's cache folder."""

    target: Target
    commit: str
    files: list[RemoteFile]
    folder: Path

    @property
    def total(self) -> int:
        """Bytes of the chosen files."""
        return sum(f.size for f in self.files)

    def missing_bytes(self) -> int:
        """Bytes of chosen files whose blob is not in the cache yet."""
        blobs = self.folder / "blobs"
        return sum(f.size for f in self.files if not (blobs / f.blob_name).is_file())


@dataclass(frozen=True)
class PulledModel:
    """A completed pull: the target, its commit, the snapshot directory,
    its bytes, and how many of them this pull fetched."""

    target: Target
    commit: str
    path: Path
    bytes: int
    fetched: int


def plan_pull(
    target: Target, *, cache_dir: Path | None = None, endpoint: str | None = None, token: str | None = None
) -> PullPlan:
    """Ask the hub which commit ``target``'s revision names and which of
    its files MLX needs.

    Raises:
        PullRefused: unknown repo or revision, gated repo, unsafe names, no weights.
        PullFailed: the hub cannot be reached or answers nonsense.
    """
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    ref = target.ref
    api = HfApi(endpoint=endpoint, token=token)
    with _hub_errors(target, endpoint):
        info = api.model_info(ref.repo_id, revision=ref.revision)
        commit = str(info.sha or "")
        if not COMMIT.fullmatch(commit):
            raise PullFailed(
                f"{target.label}: the hub named no valid commit for revision {ref.revision!r} ({commit!r})"
            )
        listing = [
            RemoteFile(entry.path, int(entry.size), entry.lfs.sha256 if entry.lfs else None, entry.blob_id)
            for entry in api.list_repo_tree(ref.repo_id, revision=commit, recursive=True)
            if isinstance(entry, RepoFile)
        ]
    try:
        files = select_files(listing, target.label)
    except InvalidName as exc:
        raise PullRefused(str(exc)) from exc
    for remote in files:
        if (remote.sha256 is not None and not _hex(remote.sha256, 64)) or not _hex(remote.git_oid, 40):
            raise PullFailed(f"{target.label}: the hub listed a malformed hash for {remote.path}")
    return PullPlan(target, commit, files, repo_folder(ref.repo_id, cache_dir))


def check_space(plan: PullPlan, max_bytes: int) -> None:
    """Refuse a plan over ``max_bytes`` (0: no cap) or over the free disk.

    Raises:
        PullRefused: the message gives the sizes and the setting or path.
    """
    if max_bytes and plan.total > max_bytes:
        raise PullRefused(
            f"{plan.target.label} is {human_bytes(plan.total)}, over the pull size limit of "
            f"{human_bytes(max_bytes)} (server.max_pull_bytes)"
        )
    needed = plan.missing_bytes()
    where = plan.folder
    while not where.exists() and where != where.parent:
        where = where.parent
    free = shutil.disk_usage(where).free
    if needed + FREE_SPACE_MARGIN > free:
        raise PullRefused(
            f"{plan.target.label} needs {human_bytes(needed)} more on disk but {where} has only "
            f"{human_bytes(free)} free"
        )


def pull(
    target: Target,
    *,
    who: str,
    cache_dir: Path | None = None,
    endpoint: str | None = None,
    token: str | None = None,
    max_bytes: int = 0,
    listener: Listener | None = None,
    interval: float = 0.5,
) -> PulledModel:
    """Pull ``target`` as the module docstring describes; ``who`` is
    recorded, ``listener`` receives :class:`PullStatus` updates every
    ``interval`` seconds while downloading and at each change of phase.

    Raises:
        PullRefused, PullFailed: with a one-line message (also recorded).
    """
    report = listener or (lambda _status: None)
    cache = cache_dir or hub_cache_dir()
    report(PullStatus(target.label, "listing"))
    try:
        plan = plan_pull(target, cache_dir=cache, endpoint=endpoint, token=token)
        if _already_complete(plan) is None:
            check_space(plan, max_bytes)  # before the lock creates anything in the cache
        with repo_lock(plan.folder):
            pulled = _fetch(
                plan,
                who=who,
                cache=cache,
                endpoint=endpoint,
                token=token,
                max_bytes=max_bytes,
                report=report,
                interval=interval,
            )
    except PullError as exc:
        report(PullStatus(target.label, "failed", error=str(exc)))
        audit.record("pull", target.label, who, f"failed: {exc}", repo=str(target.ref))
        raise
    audit.record(
        "pull",
        target.label,
        who,
        "complete",
        repo=str(target.ref),
        commit=pulled.commit,
        bytes=pulled.bytes,
        fetched=pulled.fetched,
    )
    return pulled


def _fetch(
    plan: PullPlan,
    *,
    who: str,
    cache: Path,
    endpoint: str | None,
    token: str | None,
    max_bytes: int,
    report: Listener,
    interval: float,
) -> PulledModel:
    """Steps 2-5 of the module docstring, under the repo's lock."""
    target, folder = plan.target, plan.folder
    done = _already_complete(plan)
    if done is not None:
        write_ref(folder, target.ref.revision, plan.commit)
        status = DownloadWatcher(target.label, folder / "blobs", plan.files, report).measure("complete")
        report(status)
        return PulledModel(target, plan.commit, done, plan.total, 0)
    _drop_stale_partials(plan, cache)
    check_space(plan, max_bytes)
    missing = plan.missing_bytes()
    record = PullRecord(
        repo_id=target.ref.repo_id,
        revision=target.ref.revision,
        commit=plan.commit,
        state="downloading",
        files={f.path: (f.size, f.digest) for f in plan.files},
        who=who,
        started=time.time(),
    )
    write_record(folder, record)
    watcher = DownloadWatcher(target.label, folder / "blobs", plan.files, report, interval)
    (folder / "blobs").mkdir(parents=True, exist_ok=True)
    watcher.start()
    try:
        snapshot = _download(plan, cache=cache, endpoint=endpoint, token=token)
    finally:
        watcher.stop()
    report(watcher.measure())
    report(watcher.measure("verifying"))
    _verify(plan, snapshot)
    write_record(folder, PullRecord(**{**_fields(record), "state": "complete", "finished": time.time()}))
    write_ref(folder, target.ref.revision, plan.commit)
    report(with_phase(watcher.measure(), "complete"))
    return PulledModel(target, plan.commit, snapshot, plan.total, missing)


def _already_complete(plan: PullPlan) -> Path | None:
    """The snapshot when this commit was already pulled completely (and
    still is), else None."""
    try:
        record = read_record(plan.folder, plan.commit)
        if record is None:
            return None
        return check_pulled(plan.folder, record)
    except SnapshotUnavailable:
        return None


def _drop_stale_partials(plan: PullPlan, cache: Path) -> None:
    """Delete the partial files an interrupted run left behind for the
    chosen blobs (huggingface-hub 2.4 never resumes them: each run writes a
    new ``<etag>.<id>.incomplete``), but only when huggingface-hub's own
    lock on that blob is free, so a download running in another process
    keeps its file."""
    from filelock import FileLock, Timeout

    blobs = plan.folder / "blobs"
    for remote in plan.files:
        partials = list(blobs.glob(f"{remote.blob_name}.*incomplete"))
        if not partials:
            continue
        lock = FileLock(str(cache / ".locks" / plan.folder.name / f"{remote.blob_name}.lock"))
        try:
            lock.acquire(timeout=0)
        except Timeout:
            continue
        try:
            for partial in partials:
                partial.unlink(missing_ok=True)
        finally:
            lock.release()


def _download(plan: PullPlan, *, cache: Path, endpoint: str | None, token: str | None) -> Path:
    """huggingface-hub's ``snapshot_download`` of exactly the chosen files
    at the plan's commit; its own progress bars are turned off.

    Raises:
        PullRefused, PullFailed: mapped from huggingface-hub's errors.
    """
    from huggingface_hub import snapshot_download
    from huggingface_hub.utils import disable_progress_bars

    disable_progress_bars()
    with _hub_errors(plan.target, endpoint):
        path = snapshot_download(
            plan.target.ref.repo_id,
            revision=plan.commit,
            cache_dir=cache,
            endpoint=endpoint,
            token=token,
            allow_patterns=[f.path for f in plan.files],
        )
    return Path(path)


def _verify(plan: PullPlan, snapshot: Path) -> None:
    """Hash every chosen file; delete a bad one from the cache.

    Raises:
        PullFailed: a file is missing, escapes the cache folder, or its
            content does not match the listing.
    """
    escapes = escaping_links(snapshot, plan.folder)
    if escapes:
        raise PullFailed(f"{plan.target.label}: {', '.join(escapes)} resolve outside the Hugging Face cache")
    for remote in plan.files:
        path = snapshot / remote.path
        if not path.is_file():
            raise PullFailed(f"{plan.target.label}: {remote.path} was not downloaded; run the pull again")
        try:
            check_file(path, remote)
        except HashMismatch as exc:
            blob = Path(os.path.realpath(path))
            path.unlink(missing_ok=True)
            blob.unlink(missing_ok=True)
            raise PullFailed(f"{plan.target.label}: {exc}; the file was deleted, run the pull again") from exc


def _fields(record: PullRecord) -> dict:
    """A record's fields as a dict (to copy it with changes)."""
    return {name: getattr(record, name) for name in record.__struct_fields__}


def _hex(text: str, length: int) -> bool:
    """Whether ``text`` is ``length`` lowercase hex digits."""
    return len(text) == length and all(c in "0123456789abcdef" for c in text)


@contextmanager
def _hub_errors(target: Target, endpoint: str | None) -> Iterator[None]:
    """Turn huggingface-hub's and the HTTP client's errors into
    :class:`PullRefused` / :class:`PullFailed` with one-line messages."""
    import httpx2
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RemoteEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    where = endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co"
    label = target.label
    try:
        yield
    except PullError:
        raise
    except GatedRepoError as exc:
        raise PullRefused(f"{label}: the repo is gated; accept its terms on the hub and set HF_TOKEN") from exc
    except RepositoryNotFoundError as exc:
        raise PullRefused(f"{label}: no repo {target.ref.repo_id} on {where} (or it is private: set HF_TOKEN)") from exc
    except RevisionNotFoundError as exc:
        raise PullRefused(f"{label}: {target.ref.repo_id} has no revision {target.ref.revision!r}") from exc
    except RemoteEntryNotFoundError as exc:
        raise PullFailed(f"{label}: a listed file is missing on the hub ({_first_line(exc)})") from exc
    except (httpx2.HTTPError, LocalEntryNotFoundError) as exc:
        raise PullFailed(f"{label}: cannot reach {where}: {_first_line(exc)}") from exc
    except HfHubHTTPError as exc:
        raise PullFailed(f"{label}: the hub answered {_first_line(exc)}") from exc
    except (OSError, ValueError) as exc:
        raise PullFailed(f"{label}: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type when empty)."""
    lines = [line for line in str(exc).splitlines() if line.strip()]
    return lines[0].strip() if lines else type(exc).__name__
