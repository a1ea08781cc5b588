"""Run mlxd as a per-user launchd agent on macOS.

:func:`install` renders the agent's plist (:mod:`gateway.service.plist`) into
``~/Library/LaunchAgents/com.mlxd.server.plist`` and bootstraps it into the
``gui/<uid>`` domain, so the server starts at login and is restarted after
a crash; :func:`uninstall` boots it out and removes the plist;
:func:`status` reports what launchd and the server's ``/health`` say.

Every ``launchctl`` call goes through an injectable ``runner`` (with the
signature of :func:`subprocess.run`) and the platform check through an
injectable ``platform`` string, so the macOS path can be tested anywhere.
``install(..., dry_run=True)`` touches nothing and works on every OS.
Everything runs on the caller's thread (the ``mlxd`` command), blocking on
launchctl and polling while an old job exits.
"""

from __future__ import annotations

import os
import plistlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.client import HTTPException
from pathlib import Path

from gateway.service.logs import ERR_LOG, OUT_LOG, SERVICE_LOG, default_log_dir
from gateway.service.plist import LABEL, PROJECT_ROOT, ServiceError, exit_timeout_for, render_plist

LAUNCHCTL = "/bin/launchctl"
"""launchctl, by absolute path so a user's PATH cannot substitute another."""

HEALTH_TIMEOUT = 2.0
"""Seconds the health check waits for ``200``."""

POLL_INTERVAL = 0.25
"""Seconds between ``launchctl print`` polls while an old job exits."""

WAIT_MARGIN = 5.0
"""Seconds waited for an old job beyond its ExitTimeOut (after which
launchd has SIGKILLed it) before :func:`install` gives up."""

_EIO = 5
_NO_DOMAIN = 125
_PID = re.compile(r"^\s*pid = (\d+)\s*$", re.MULTILINE)

Runner = Callable[..., subprocess.CompletedProcess[str]]
"""The signature of :func:`subprocess.run`, as launchctl is called."""


@dataclass(frozen=True)
class ServiceStatus:
    """What is known about the agent.

    ``installed``: the plist exists. ``loaded``: launchd knows the job
    (always False off macOS). ``pid``: the running process, if any.
    ``healthy``: the health URL answered ``200`` within two seconds.
    """

    installed: bool
    loaded: bool
    pid: int | None
    healthy: bool


def plist_path() -> Path:
    """``~/Library/LaunchAgents/com.mlxd.server.plist`` of the current user."""
    return Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def health_url_for(host: str, port: int) -> str:
    """The ``/health`` URL of a server bound to ``host``:``port``; a wildcard
    bind (``0.0.0.0``, ``::``, empty) is checked over loopback."""
    if host in ("", "0.0.0.0"):
        host = "127.0.0.1"
    elif host == "::":
        host = "::1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{port}/health"


def install(
    *,
    config: Path,
    python: str = sys.executable,
    drain_timeout: float,
    environment: Mapping[str, str] | None = None,
    log_file: str = "",
    dry_run: bool = False,
    runner: Runner = subprocess.run,
    platform: str = sys.platform,
) -> str:
    """Install and start the agent; return a summary for the user.

    ``config`` must exist and is stored resolved to an absolute path;
    ``python`` must be absolute (keep a venv's own path: do not resolve
    it). ``environment`` goes into the plist's EnvironmentVariables (see
    :func:`service_environment`); ``log_file`` is the config's
    ``server.log_file`` (for the summary; empty: :data:`SERVICE_LOG`). With ``dry_run`` the plist text is
    returned and nothing is touched, on any OS. Otherwise, on macOS only:
    create the log directory, write the plist atomically, boot out a
    loaded job and wait until it is really gone (up to its ExitTimeOut),
    ``launchctl enable`` the service (undoing an earlier ``disable``) and
    bootstrap it into ``gui/<uid>``; when that domain does not exist (no
    GUI login session, as over SSH) into ``user/<uid>``, saying so in the
    summary.

    Raises:
        ServiceError: not macOS (without ``dry_run``), a missing config, a
            relative ``python``, an old job that does not exit, or
            launchctl bootstrap failed.
    """
    if not dry_run:
        _require_macos(platform)
    config_path = _existing_config(config)
    if not os.path.isabs(python):
        raise ServiceError(f"the Python interpreter must be an absolute path, not {python!r}")
    log_dir = default_log_dir()
    exit_timeout = exit_timeout_for(drain_timeout)
    plist = render_plist(
        python=python,
        config=str(config_path),
        log_dir=str(log_dir),
        exit_timeout=exit_timeout,
        working_dir=str(PROJECT_ROOT),
        environment=environment,
    )
    if dry_run:
        return plist.decode("utf-8")
    target = plist_path()
    wait = max(exit_timeout, _installed_exit_timeout(target)) + WAIT_MARGIN
    log_dir.mkdir(parents=True, exist_ok=True)
    _write_atomically(target, plist)
    deadline = time.monotonic() + wait
    for domain in _domains():
        _launchctl(runner, "bootout", f"{domain}/{LABEL}")
        _wait_gone(runner, f"{domain}/{LABEL}", deadline)
    domain, note = _bootstrap(runner, target, deadline)
    lines = [
        f"installed and started {LABEL} in the {domain} domain",
        f"  plist:  {target}",
        f"  config: {config_path}",
        f"  logs:   {log_file or log_dir / SERVICE_LOG} (standard output and error: {log_dir / OUT_LOG}, {ERR_LOG})",
    ]
    return "\n".join([*lines, *([note] if note else [])])


def uninstall(*, runner: Runner = subprocess.run, platform: str = sys.platform) -> str:
    """Stop the agent (SIGTERM, then SIGKILL after ExitTimeOut) in whichever
    domain holds it and remove its plist; return a summary. Idempotent:
    nothing installed or loaded is not an error.

    Raises:
        ServiceError: not macOS, or launchctl bootout failed and the job is
            still loaded.
    """
    _require_macos(platform)
    done = []
    for domain in _domains():
        service = f"{domain}/{LABEL}"
        result = _launchctl(runner, "bootout", service)
        if result.returncode == 0:
            done.append(f"stopped {LABEL}")
        elif _is_loaded(runner, service):
            raise ServiceError(f"launchctl bootout failed: {_launchctl_error(result)}")
    target = plist_path()
    try:
        target.unlink()
        done.append(f"removed {target}")
    except FileNotFoundError:
        pass
    return "; ".join(done) or f"{LABEL} is not installed"


def status(*, health_url: str, runner: Runner = subprocess.run, platform: str = sys.platform) -> ServiceStatus:
    """The agent's :class:`ServiceStatus` (in the ``gui/<uid>`` domain, else
    ``user/<uid>``). Off macOS, launchd is not asked (``loaded`` False,
    ``pid`` None) but the plist and health URL are."""
    loaded, pid = False, None
    if platform == "darwin":
        for domain in _domains():
            result = _launchctl(runner, "print", f"{domain}/{LABEL}")
            if result.returncode == 0:
                loaded, pid = True, _parse_pid(result.stdout)
                break
    return ServiceStatus(installed=plist_path().exists(), loaded=loaded, pid=pid, healthy=_is_healthy(health_url))


def format_status(st: ServiceStatus) -> str:
    """``st`` as text, one ``fact: value`` line per field."""
    return "\n".join(
        [
            f"installed: {_yes_no(st.installed)}",
            f"loaded: {_yes_no(st.loaded)}",
            f"pid: {st.pid if st.pid is not None else '-'}",
            f"healthy: {_yes_no(st.healthy)}",
        ]
    )


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def _require_macos(platform: str) -> None:
    if platform != "darwin":
        raise ServiceError("launchd is only available on macOS; use --dry-run to see the plist")


def _existing_config(config: Path) -> Path:
    path = Path(config).expanduser().resolve()
    if not path.is_file():
        raise ServiceError(f"config file not found: {path}")
    return path


def _write_atomically(target: Path, data: bytes) -> None:
    """Write ``data`` to ``target`` (mode 0644) via a temporary file in the
    same directory, so launchd never sees a partial plist."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _domains() -> tuple[str, str]:
    """The domains the agent may live in, preferred first: the GUI login
    session of this user, then the per-user domain (no GUI session)."""
    uid = os.getuid()
    return (f"gui/{uid}", f"user/{uid}")


def _installed_exit_timeout(target: Path) -> int:
    """ExitTimeOut of the plist installed at ``target`` (the old job's), 0
    when there is none or it cannot be read."""
    try:
        value = plistlib.loads(target.read_bytes()).get("ExitTimeOut", 0)
    except (OSError, plistlib.InvalidFileException, ValueError):
        return 0
    return value if isinstance(value, int) else 0


def _launchctl(runner: Runner, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``launchctl *args``, capturing its output; never raises on a
    non-zero exit."""
    try:
        return runner([LAUNCHCTL, *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ServiceError(f"{LAUNCHCTL} not found") from None


def _launchctl_error(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stderr or result.stdout or "").strip() or f"exit status {result.returncode}"


def _wait_gone(runner: Runner, service: str, deadline: float) -> None:
    """Poll ``launchctl print service`` until launchd no longer knows the
    job (bootout returns before the old process has exited).

    Raises:
        ServiceError: the job is still there at ``deadline``.
    """
    while _is_loaded(runner, service):
        if time.monotonic() >= deadline:
            raise ServiceError(
                f"the old {LABEL} job ({service}) is still running after its exit timeout; "
                "check it with `launchctl print " + service + "` and retry"
            )
        time.sleep(POLL_INTERVAL)


def _bootstrap(runner: Runner, plist: Path, deadline: float) -> tuple[str, str | None]:
    """Enable and bootstrap ``plist`` into ``gui/<uid>``, or ``user/<uid>``
    when the GUI domain does not exist (error 125); retry on errno 5 (an
    old job still being torn down) until ``deadline``. Returns the domain
    and a note for the user (None when all went as usual).

    Raises:
        ServiceError: with launchctl's message.
    """
    gui, user = _domains()
    domain, note = gui, None
    while True:
        _launchctl(runner, "enable", f"{domain}/{LABEL}")
        result = _launchctl(runner, "bootstrap", domain, str(plist))
        if result.returncode == 0:
            return domain, note
        if result.returncode == _NO_DOMAIN and domain == gui:
            domain = user
            note = (
                f"note: there is no GUI login session for this user (over SSH or before login), so "
                f"{LABEL} runs in the {user} domain: it stops when your last session ends and does not "
                "start at boot; run `mlxd install` again from a logged-in desktop session to have it "
                "start at every login"
            )
            continue
        if result.returncode != _EIO or time.monotonic() >= deadline:
            raise ServiceError(f"launchctl bootstrap failed: {_launchctl_error(result)}")
        time.sleep(POLL_INTERVAL)


def _is_loaded(runner: Runner, service: str) -> bool:
    return _launchctl(runner, "print", service).returncode == 0


def _parse_pid(text: str) -> int | None:
    """The top-level ``pid = N`` of ``launchctl print`` output, if any."""
    match = _PID.search(text or "")
    return int(match.group(1)) if match else None


def _is_healthy(url: str) -> bool:
    """Whether GET ``url`` answers 200 within :data:`HEALTH_TIMEOUT`; proxies
    from the environment are bypassed (the server is local)."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=HEALTH_TIMEOUT) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, HTTPException):
        return False
