"""Where a Hugging Face repo's downloaded files are, and whether mlxd may
serve them: the one rule both the gateway and the worker apply to a
``source`` that is a repo id.

The files live in huggingface-hub's own cache layout
(``<cache>/models--<org>--<name>/{refs,blobs,snapshots}``; the cache is
``HF_HUB_CACHE``, else ``HF_HOME/hub``, as huggingface-hub reads them).
``mlxd pull`` writes a *pull record* next to them,
``<cache>/models--<org>--<name>/mlxd-pulls/<commit>.json``
(:class:`PullRecord`): ``downloading`` from the moment it starts fetching
a commit, ``complete`` once every file it chose is on disk and matched the
hub's hashes. huggingface-hub's cache scan ignores that directory, and
removing the repo with huggingface-hub's own tools removes it too.

:func:`local_snapshot` is the rule:

- a commit mlxd pulled is served only when its record says ``complete``,
  every recorded file is present with the recorded size, and no file of
  the snapshot is a link that resolves outside the repo's cache folder;
- a repo that mlxd did not pull (fetched with ``hf download``, or by an
  older mlxd) is served as before: when huggingface-hub finds a complete
  snapshot in the local cache.

No network, no MLX; records are written atomically (a temporary file
renamed into place).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Literal

import msgspec

RECORDS_DIR = "mlxd-pulls"
"""The directory of pull records inside a repo's cache folder."""

COMMIT = re.compile(r"[0-9a-f]{40}")
"""A full commit id (what huggingface-hub names snapshot directories by)."""


class SnapshotUnavailable(Exception):
    """The repo has no snapshot mlxd may serve; the message says why in one line."""


class PullRecord(msgspec.Struct, kw_only=True):
    """What one ``mlxd pull`` of one commit did.

    ``files``: repo path -> ``[size, digest]`` of every file fetched
    (digest: ``sha256:<hex>`` for LFS files, ``git-sha1:<hex>`` for the
    others, as the hub's tree listing gives them). ``who``: who asked
    (``user <name>`` on the command line, ``api key <fingerprint>`` or
    ``client <address>`` over HTTP). Times are Unix seconds.
    """

    repo_id: str
    revision: str
    commit: str
    state: Literal["downloading", "complete"]
    files: dict[str, tuple[int, str]] = {}
    who: str = ""
    started: float = 0.0
    finished: float = 0.0


def hub_cache_dir() -> Path:
    """The Hugging Face hub cache directory huggingface-hub uses in this
    process (``HF_HUB_CACHE``, else ``HF_HOME/hub``, else its default)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser()


def repo_folder(repo_id: str, cache_dir: Path | None = None) -> Path:
    """The cache folder of a model repo (``models--<org>--<name>``)."""
    return (cache_dir or hub_cache_dir()) / ("models--" + repo_id.replace("/", "--"))


def record_path(folder: Path, commit: str) -> Path:
    """Where the pull record of ``commit`` lives in a repo's cache folder."""
    return folder / RECORDS_DIR / f"{commit}.json"


def read_record(folder: Path, commit: str) -> PullRecord | None:
    """The pull record of ``commit``, or None when mlxd never pulled it.

    Raises:
        SnapshotUnavailable: the record exists but cannot be read.
    """
    path = record_path(folder, commit)
    try:
        return msgspec.json.decode(path.read_bytes(), type=PullRecord)
    except FileNotFoundError:
        return None
    except (OSError, msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SnapshotUnavailable(f"unreadable pull record {path}: {exc}") from exc


def write_record(folder: Path, record: PullRecord) -> Path:
    """Write ``record`` atomically; return its path."""
    path = record_path(folder, record.commit)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    temporary.write_bytes(msgspec.json.encode(record))
    os.replace(temporary, path)
    return path


def write_ref(folder: Path, revision: str, commit: str) -> None:
    """Point ``refs/<revision>`` at ``commit`` (atomically), as
    huggingface-hub's cache layout does; nothing for a commit id."""
    if revision == commit:
        return
    path = folder / "refs" / revision
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    temporary.write_text(commit)
    os.replace(temporary, path)


def commit_for(folder: Path, revision: str) -> str | None:
    """The commit ``revision`` names in the local cache (itself for a
    commit id, else what ``refs/<revision>`` holds), or None."""
    if COMMIT.fullmatch(revision):
        return revision
    try:
        text = (folder / "refs" / revision).read_text().strip()
    except OSError:
        return None
    return text if COMMIT.fullmatch(text) else None


def escaping_links(snapshot: Path, folder: Path) -> list[str]:
    """Paths (relative to ``snapshot``) of entries that resolve outside the
    repo's cache ``folder`` (a link planted to read other files)."""
    root = Path(os.path.realpath(folder))
    bad = []
    for entry in snapshot.rglob("*"):
        real = Path(os.path.realpath(entry))
        if real != root and root not in real.parents:
            bad.append(entry.relative_to(snapshot).as_posix())
    return sorted(bad)


def check_pulled(folder: Path, record: PullRecord) -> Path:
    """The snapshot of a commit mlxd pulled, if it may be served.

    Raises:
        SnapshotUnavailable: the pull has not finished (or was interrupted),
            a recorded file is missing or has another size, or a file
            resolves outside the cache folder.
    """
    if record.state != "complete":
        raise SnapshotUnavailable(
            f"{record.repo_id}@{record.commit[:12]} is still downloading or its pull was interrupted; "
            f"run `mlxd pull {record.repo_id}` to finish it"
        )
    snapshot = folder / "snapshots" / record.commit
    for name, (size, _digest) in record.files.items():
        try:
            actual = (snapshot / name).stat().st_size
        except OSError:
            raise SnapshotUnavailable(f"{record.repo_id}: {name} is missing from its snapshot; pull it again") from None
        if actual != size:
            raise SnapshotUnavailable(f"{record.repo_id}: {name} has {actual} bytes, not {size}; pull it again")
    escapes = escaping_links(snapshot, folder)
    if escapes:
        raise SnapshotUnavailable(f"{record.repo_id}: {', '.join(escapes)} resolve outside the Hugging Face cache")
    return snapshot


def local_snapshot(repo_id: str, revision: str = "main", cache_dir: Path | None = None) -> Path:
    """The local snapshot directory of ``repo_id`` at ``revision`` that
    mlxd may serve (the rule of the module docstring). Never uses the
    network.

    Raises:
        SnapshotUnavailable: not in the local cache, or not servable.
    """
    folder = repo_folder(repo_id, cache_dir)
    commit = commit_for(folder, revision)
    if commit is not None:
        record = read_record(folder, commit)
        if record is not None:
            return check_pulled(folder, record)
    pending = sorted(folder.glob(f"{RECORDS_DIR}/*.json")) if commit is None else []
    for path in pending:
        record = read_record(folder, path.stem)
        if record is not None and record.revision == revision and record.state != "complete":
            check_pulled(folder, record)
    from huggingface_hub import snapshot_download

    try:
        snapshot = Path(snapshot_download(repo_id, revision=revision, cache_dir=cache_dir, local_files_only=True))
    except Exception as exc:  # LocalEntryNotFoundError, IncompleteSnapshotError, bad ids
        raise SnapshotUnavailable(f"{repo_id} is not in the local Hugging Face cache ({_one_line(exc)})") from exc
    escapes = escaping_links(snapshot, folder)
    if escapes:
        raise SnapshotUnavailable(f"{repo_id}: {', '.join(escapes)} resolve outside the Hugging Face cache")
    return snapshot


def _one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type when empty)."""
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__
