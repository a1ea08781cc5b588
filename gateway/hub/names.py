"""The names that cross the trust boundary of model downloads, checked
before anything touches the network or the disk: repo ids, revisions,
file names listed by a hub, and catalog short names.

Every check raises :class:`InvalidName` with a one-line message naming
the value and the rule. File names a hub lists are split in two: a
*hostile* name (absolute, ``..``, backslashes, control characters, empty
segments) makes the whole pull refuse, because an honest repo never has
one; an *unusual* but harmless name (spaces, non-ASCII, glob characters)
is simply never fetched (:func:`plain_file_name`), so every fetched name
is made of ``A-Z a-z 0-9 . _ + -`` and ``/``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SEGMENT = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
REPO_ID = re.compile(rf"{_SEGMENT}/{_SEGMENT}")
"""``org/name`` as the Hub accepts it (each part at most 96 characters)."""

REVISION = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,127}")
"""A branch, tag, ``refs/pr/N`` or commit id."""

CATALOG_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}(?::[a-z0-9][a-z0-9._-]{0,63})?")
"""``family:size`` (or a bare ``family``), lowercase."""

_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._+-]{0,254}")
_MAX_FILE_NAME = 1024


class InvalidName(ValueError):
    """A name is not acceptable; the message says which rule it breaks."""


@dataclass(frozen=True)
class RepoRef:
    """A model repo at a revision: ``org/name`` and ``main`` by default."""

    repo_id: str
    revision: str = "main"

    def __str__(self) -> str:
        return self.repo_id if self.revision == "main" else f"{self.repo_id}@{self.revision}"


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` if it is a valid ``org/name`` (no ``..`` or ``--``, not
    ending in ``.git``).

    Raises:
        InvalidName: anything else.
    """
    if not REPO_ID.fullmatch(repo_id) or ".." in repo_id or "--" in repo_id or repo_id.endswith(".git"):
        raise InvalidName(
            f"{repo_id!r} is not a Hugging Face repo id (org/name: letters, digits, '.', '_', '-'; no '..' or '--')"
        )
    return repo_id


def check_revision(revision: str) -> str:
    """``revision`` if it is a plausible branch, tag or commit (no ``..``,
    no empty or dot-only segments, no trailing ``/`` or ``.lock``).

    Raises:
        InvalidName: anything else.
    """
    segments = revision.split("/")
    if (
        not REVISION.fullmatch(revision)
        or any(s in ("", ".", "..") for s in segments)
        or ".." in revision
        or revision.endswith((".lock", "."))
    ):
        raise InvalidName(f"{revision!r} is not a revision (a branch, tag or commit id)")
    return revision


def parse_repo_ref(text: str) -> RepoRef:
    """``org/name`` or ``org/name@revision`` as a :class:`RepoRef`.

    Raises:
        InvalidName: a bad repo id or revision.
    """
    repo_id, at, revision = text.strip().partition("@")
    return RepoRef(check_repo_id(repo_id), check_revision(revision) if at else "main")


def is_catalog_name(text: str) -> bool:
    """Whether ``text`` has the form of a catalog short name (no ``/``)."""
    return bool(CATALOG_NAME.fullmatch(text))


def hostile_file_name(path: str) -> bool:
    """Whether a listed file name could escape the directory it is written
    under or confuse the file system: absolute, a drive, ``..``/``.`` or
    empty segments, backslashes, control characters, or over 1024
    characters."""
    if not path or len(path) > _MAX_FILE_NAME or path.startswith("/") or "\\" in path:
        return True
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return True
    if re.match(r"[A-Za-z]:", path):
        return True
    return any(segment in ("", ".", "..") for segment in path.split("/"))


def plain_file_name(path: str) -> bool:
    """Whether a (non-hostile) file name is made only of plain segments:
    ``A-Z a-z 0-9 . _ + -`` not starting with ``.``, ``+`` or ``-``. Only
    such files are ever fetched."""
    return not hostile_file_name(path) and all(_PLAIN_SEGMENT.fullmatch(s) for s in path.split("/"))
