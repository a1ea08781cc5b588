"""Links to the exact lines of a source file: the repository's configured
URL and the commit being documented.

The URL is ``[project.urls]`` ``Repository`` (or ``Source``) of
``pyproject.toml``, else the ``origin`` remote of the checkout (an
``git@host:owner/name.git`` remote is rewritten to ``https://host/owner/name``);
the commit is ``MLXD_SOURCE_COMMIT`` when set, else ``git rev-parse HEAD``.
Either may be missing (no URL configured, not a git checkout): links are
then null, never guessed. Reads files and runs ``git`` (read-only); never
imports the project.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from dataclasses import dataclass
from pathlib import Path

COMMIT_VARIABLE = "MLXD_SOURCE_COMMIT"
"""Environment variable that names the commit (a build from an exported tree)."""


@dataclass(frozen=True)
class SourceLinks:
    """Where the source lives: ``repository`` (an ``https://`` URL without a
    trailing slash, or None) and ``commit`` (a hex id, or None)."""

    repository: str | None
    commit: str | None

    def url(self, path: str, line: int | None = None, end_line: int | None = None) -> str | None:
        """``<repository>/blob/<commit>/<path>#L<line>-L<end_line>`` (the
        fragment only when ``line`` is given); None without a repository or
        a commit."""
        if not self.repository or not self.commit:
            return None
        url = f"{self.repository}/blob/{self.commit}/{path}"
        if line is not None:
            url += f"#L{line}-L{end_line or line}"
        return url


def _git(root: Path, *args: str) -> str | None:
    try:
        done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None


def https_url(remote: str) -> str | None:
    """``remote`` as an ``https://`` web URL without ``.git`` (None for a
    local path or anything else not hosted)."""
    remote = remote.strip()
    ssh = re.fullmatch(r"(?:ssh://)?git@([^:/]+)[:/](.+?)(?:\.git)?/?", remote)
    if ssh:
        return f"https://{ssh[1]}/{ssh[2]}"
    web = re.fullmatch(r"https?://(?:[^@/]+@)?([^/]+)/(.+?)(?:\.git)?/?", remote)
    return f"https://{web[1]}/{web[2]}" if web else None


def configured_repository(root: Path) -> str | None:
    """The repository URL ``pyproject.toml`` configures, else the
    checkout's ``origin`` (see the module docstring)."""
    try:
        project = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get("project", {})
    except (OSError, tomllib.TOMLDecodeError):
        project = {}
    urls = {key.lower(): value for key, value in project.get("urls", {}).items()}
    for key in ("repository", "source"):
        if key in urls:
            return https_url(str(urls[key]))
    origin = _git(root, "remote", "get-url", "origin")
    return https_url(origin) if origin else None


def source_links(root: Path) -> SourceLinks:
    """The :class:`SourceLinks` of the checkout at ``root``."""
    commit = os.environ.get(COMMIT_VARIABLE) or _git(root, "rev-parse", "HEAD")
    return SourceLinks(configured_repository(root), commit)
