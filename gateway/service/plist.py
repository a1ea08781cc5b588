"""The mlxd launchd agent's definition: its plist, environment and exit timeout.

:func:`render_plist` fills ``deploy/com.mlxd.server.plist.in`` (the one
source of truth for the agent's keys) with the values of one install;
:func:`service_environment` picks the variables the agent gets,
:func:`exit_timeout_for` its ExitTimeOut, and :func:`privacy_warnings`
names the paths macOS privacy protection would hide from it. Pure
functions of their arguments (and the template file): nothing here calls
launchctl or writes a file; :mod:`gateway.service.launchd` does. Works on every OS.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from string import Template
from xml.sax.saxutils import escape

from gateway.service.logs import ERR_LOG, OUT_LOG

LABEL = "com.mlxd.server"
"""The launchd label (and plist file name) of the mlxd agent."""

PROJECT_ROOT = Path(__file__).resolve().parents[2]
"""The source checkout; the agent's working directory."""

TEMPLATE_PATH = PROJECT_ROOT / "deploy" / "com.mlxd.server.plist.in"
"""The plist template: the one source of truth for the agent's keys."""

EXIT_TIMEOUT_MARGIN = 15
"""Seconds added to the drain timeout for ExitTimeOut (workers to exit)."""

DEFAULT_PATH = "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
"""PATH of the agent after the Python's own bin directory (launchd's default
is only ``/usr/bin:/bin:/usr/sbin:/sbin``)."""

FILE_LIMIT = 10240
"""NumberOfFiles (soft and hard) of the agent: launchd starts agents with
a soft limit of 256 open files, fewer than ``max_batch_size + max_queued``
streaming clients need; 10240 is macOS's OPEN_MAX, the most a process may
set with setrlimit. The gateway raises its soft limit at start too (see
:mod:`gateway.http.file_limit`)."""

CAPTURED_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "XDG_CACHE_HOME")
"""Variables of the user's environment copied into the agent's by
:func:`service_environment`, besides every ``MLXD_*`` one (where models
and caches are found). Tokens and other secrets are never copied: the
plist is readable by other local users."""

PROTECTED_FOLDERS = ("Documents", "Desktop", "Downloads", "Library/Mobile Documents")
"""Folders under the home directory that macOS privacy protection (TCC)
guards; ``/Volumes/...`` (external and network volumes) is guarded too."""

_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class ServiceError(Exception):
    """The service cannot be installed, removed or queried; the message is
    meant for the user (it includes launchctl's own error when there is
    one)."""


def exit_timeout_for(drain_timeout: float) -> int:
    """The ExitTimeOut (whole seconds) for a server draining for
    ``drain_timeout`` seconds: strictly larger, by :data:`EXIT_TIMEOUT_MARGIN`.

    Raises:
        ValueError: ``drain_timeout`` is negative or not finite.
    """
    if not math.isfinite(drain_timeout) or drain_timeout < 0:
        raise ValueError(f"drain_timeout must be a finite number >= 0, not {drain_timeout!r}")
    return math.ceil(drain_timeout) + EXIT_TIMEOUT_MARGIN


def render_plist(
    *,
    python: str,
    config: str,
    log_dir: str,
    exit_timeout: int,
    working_dir: str,
    environment: Mapping[str, str] | None = None,
) -> bytes:
    """The agent's plist (UTF-8 XML) from :data:`TEMPLATE_PATH`.

    The job runs ``python -m gateway serve --config config --service`` in
    ``working_dir`` with :data:`FILE_LIMIT` open files, sends its
    standard output and error to ``log_dir``/mlxd.{out,err}.log and gets
    ``environment`` on top of a default PATH (``python``'s directory first)
    and ``PYTHONUNBUFFERED=1``. Every value is XML-escaped, so the result
    parses with :func:`plistlib.loads` back to exactly these values.

    Raises:
        ServiceError: the template is missing, or a value holds a character
            XML cannot carry (such as NUL).
        ValueError: ``exit_timeout`` is not a positive integer.
    """
    if isinstance(exit_timeout, bool) or not isinstance(exit_timeout, int) or exit_timeout < 1:
        raise ValueError(f"exit_timeout must be a positive integer, not {exit_timeout!r}")
    env = {"PATH": f"{Path(python).parent}:{DEFAULT_PATH}", "PYTHONUNBUFFERED": "1"}
    env.update(environment or {})
    values = {
        "label": _xml_text(LABEL),
        "python": _xml_text(python),
        "config": _xml_text(config),
        "working_dir": _xml_text(working_dir),
        "environment": _environment_xml(env),
        "exit_timeout": str(exit_timeout),
        "stdout_path": _xml_text(str(Path(log_dir) / OUT_LOG)),
        "stderr_path": _xml_text(str(Path(log_dir) / ERR_LOG)),
        "file_limit": str(FILE_LIMIT),
    }
    return _load_template().substitute(values).encode("utf-8")


def service_environment(source: Mapping[str, str], extra: Sequence[str] = ()) -> dict[str, str]:
    """The variables the agent should get: those of ``source`` (the user's
    environment at ``mlxd install``) named in :data:`CAPTURED_VARIABLES` or
    starting with ``MLXD_``, then each ``K=V`` of ``extra`` (``--env``),
    which wins.

    Raises:
        ServiceError: an ``extra`` item is not ``NAME=value`` with a valid
            variable name.
    """
    env = {k: v for k, v in source.items() if k in CAPTURED_VARIABLES or k.startswith("MLXD_")}
    for item in extra:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.fullmatch(name):
            raise ServiceError(f"--env wants NAME=value, not {item!r}")
        env[name] = value
    return env


def privacy_warnings(paths: Mapping[str, str], home: Path | None = None) -> list[str]:
    """One warning per path (``paths`` maps what it is, e.g. ``"config"``,
    to the path) inside a folder macOS privacy protection (TCC) guards:
    ``~/Documents``, ``~/Desktop``, ``~/Downloads``, iCloud Drive
    (``~/Library/Mobile Documents``) or ``/Volumes/...``. A launchd agent
    is not granted access to those, so it cannot read there although the
    same command works in Terminal. Paths are compared as given and with
    symbolic links resolved."""
    home = Path.home() if home is None else home
    guarded = [home / folder for folder in PROTECTED_FOLDERS] + [Path("/Volumes")]
    warnings = []
    for what, raw in paths.items():
        path = Path(raw).expanduser()
        candidates = {path.absolute(), Path(os.path.realpath(path))}
        hit = next((g for g in guarded for c in candidates if g in c.parents or c == g), None)
        if hit is not None:
            warnings.append(
                f"warning: the {what} ({raw}) is under {hit}, which macOS privacy protection hides from "
                "launchd agents; move it elsewhere (e.g. ~/mlxd, ~/.cache) or grant the Python "
                "interpreter Full Disk Access in System Settings > Privacy & Security"
            )
    return warnings


def _xml_text(value: str) -> str:
    """``value`` escaped for XML character data (``\\r`` as a character
    reference, since a parser would turn a raw one into ``\\n``)."""
    bad = _XML_INVALID.search(value)
    if bad:
        raise ServiceError(f"{value!r} holds {bad.group()!r}, which a plist cannot carry")
    return escape(value, {"\r": "&#13;"})


def _environment_xml(env: Mapping[str, str]) -> str:
    """The ``<key>``/``<string>`` pairs of the EnvironmentVariables dict."""
    pairs = (f"<key>{_xml_text(k)}</key><string>{_xml_text(v)}</string>" for k, v in sorted(env.items()))
    return "\n        ".join(pairs)


def _load_template() -> Template:
    try:
        return Template(TEMPLATE_PATH.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ServiceError(
            f"plist template not found at {TEMPLATE_PATH}; launchd support needs the mlxd source checkout"
        ) from None
