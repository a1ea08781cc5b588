"""Short model names (``qwen3:4b``) and what they stand for.

The catalog is the TOML file shipped in this package
(``gateway/hub/catalog.toml``, whose header documents the keys) plus, when
it exists, a user file with more entries in the same form (an entry of the
user file replaces the shipped one of the same name). :func:`resolve`
turns what a person typed (a short name, ``org/name`` or
``org/name@revision``) into a :class:`Target`. Reading is strict: an
unknown key, a bad repo id or a bad name is a :class:`CatalogError`
naming the file and the entry.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import msgspec

from gateway.hub.names import CATALOG_NAME, InvalidName, RepoRef, check_repo_id, check_revision, parse_repo_ref
from shared.model_names import find_name

SHIPPED_CATALOG = Path(__file__).with_name("catalog.toml")
"""The catalog that ships with mlxd."""

DEFAULT_USER_CATALOG = "~/.config/mlxd/catalog.toml"
"""Where a user's own entries are read from when the config names no file."""

CatalogKind = Literal["generate", "vision", "embedding", "transcription"]


class CatalogError(ValueError):
    """A catalog file is unreadable or invalid (one line)."""


class CatalogEntry(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One short name: see the header of ``catalog.toml`` for each key."""

    repo: str
    revision: str = "main"
    kind: CatalogKind = "generate"
    context_length: int = 0
    tool_parser: str = "auto"
    reasoning_parser: str = "auto"
    description: str = ""


class _CatalogFile(msgspec.Struct, forbid_unknown_fields=True):
    models: dict[str, CatalogEntry] = {}


@dataclass(frozen=True)
class Target:
    """What to pull or serve: the repo at a revision, the short name it was
    asked by (empty for a repo id) and that name's entry (None for a repo id)."""

    ref: RepoRef
    name: str = ""
    entry: CatalogEntry | None = None

    @property
    def label(self) -> str:
        """How to show it: the short name, else ``org/name[@revision]``."""
        return self.name or str(self.ref)


def read_catalog_file(path: Path) -> dict[str, CatalogEntry]:
    """The entries of one catalog file.

    Raises:
        CatalogError: unreadable TOML, unknown keys, or a bad name, repo id
            or revision (the message names the file and entry).
    """
    try:
        data = tomllib.loads(path.read_text())
        entries = msgspec.convert(data, type=_CatalogFile).models
    except (OSError, tomllib.TOMLDecodeError, msgspec.ValidationError) as exc:
        raise CatalogError(f"{path}: {exc}") from exc
    for name, entry in entries.items():
        try:
            if not CATALOG_NAME.fullmatch(name):
                raise InvalidName(f"{name!r} is not a short name (lowercase family[:size], e.g. qwen3:4b)")
            check_repo_id(entry.repo)
            check_revision(entry.revision)
        except InvalidName as exc:
            raise CatalogError(f"{path}: models.{name!r}: {exc}") from exc
    return entries


def load_catalog(user_file: str = "") -> dict[str, CatalogEntry]:
    """The shipped entries, updated by the user file (``user_file``, else
    :data:`DEFAULT_USER_CATALOG` when it exists).

    Raises:
        CatalogError: a file is invalid, or ``user_file`` was named and is missing.
    """
    entries = read_catalog_file(SHIPPED_CATALOG)
    path = Path(user_file or DEFAULT_USER_CATALOG).expanduser()
    if user_file and not path.is_file():
        raise CatalogError(f"catalog_file {user_file!r} does not exist")
    if path.is_file():
        entries.update(read_catalog_file(path))
    return entries


def resolve(text: str, catalog: dict[str, CatalogEntry]) -> Target:
    """What ``text`` names: a catalog short name, or ``org/name[@revision]``.
    A short name also answers to its ``:latest`` twin as model names do
    (:func:`shared.model_names.find_name`: ``X:latest`` finds an entry
    ``X``, ``X`` one named ``X:latest``); the target carries the catalog's
    own spelling, under which the pulled model is served.

    Raises:
        InvalidName: neither (an unknown short name lists the known ones
            of the same family, or all of them).
    """
    text = text.strip()
    if "/" in text:
        return Target(parse_repo_ref(text))
    found = find_name(text, catalog)
    if found is not None:
        text = found
    entry = catalog.get(text)
    if entry is None:
        family = text.split(":")[0]
        near = sorted(n for n in catalog if n.split(":")[0] == family) or sorted(catalog)
        raise InvalidName(f"{text!r} is not in the model catalog (known: {', '.join(near)}) nor an org/name repo id")
    return Target(RepoRef(entry.repo, entry.revision), text, entry)


def names_for(repo_id: str, catalog: dict[str, CatalogEntry]) -> list[str]:
    """The short names that stand for ``repo_id`` (for listings)."""
    return sorted(name for name, entry in catalog.items() if entry.repo == repo_id)
