"""Run mlxd as a per-user launchd agent on macOS.

:func:`install` renders ``deploy/com.mlxd.server.plist.in`` into
``~/Library/LaunchAgents/com.mlxd.server.plist`` and bootstraps it into the
``gui/<uid>`` domain, so the server starts at login and is restarted after
a crash; :func:`uninstall` boots it out and removes the plist;
:func:`status` reports what launchd and the server's ``/health`` say.

Every ``launchctl`` call goes through an injectable ``runner`` (with the
signature of :func:`subprocess.run`) and the platform check through an
injectable ``platform`` string, so the macOS path can be tested anywhere.
``install(..., dry_run=True)`` touches nothing and works on every OS.
"""

from __future__ import annotations

import math
import os
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
from string import Template
from xml.sax.saxutils import escape

LABEL = "com.mlxd.server"
"""The launchd label (and plist file name) of the mlxd agent."""

LAUNCHCTL = "/bin/launchctl"
"""launchctl, by absolute path so a user's PATH cannot substitute another."""

PROJECT_ROOT = Path(__file__).resolve().parent.parent
"""The source checkout; the agent's working directory."""

TEMPLATE_PATH = PROJECT_ROOT / "deploy" / "com.mlxd.server.plist.in"
"""The plist template: the one source of truth for the agent's keys."""

EXIT_TIMEOUT_MARGIN = 15
"""Seconds added to the drain timeout for ExitTimeOut (workers to exit)."""

DEFAULT_PATH = "/opt/homebrew/bin:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"
"""PATH of the agent after the Python's own bin directory (launchd's default
is only ``/usr/bin:/bin:/usr/sbin:/sbin``)."""

OUT_LOG = "mlxd.out.log"
ERR_LOG = "mlxd.err.log"
HEALTH_TIMEOUT = 2.0
"""Seconds the health check waits for ``200``."""

BOOTSTRAP_ATTEMPTS = 3
BOOTSTRAP_RETRY_DELAY = 1.0
"""launchctl bootstrap right after bootout can fail with errno 5 while the
old job is still being torn down; it is retried this many times, this far
apart."""

_EIO = 5
_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_PID = re.compile(r"^\s*pid = (\d+)\s*$", re.MULTILINE)

Runner = Callable[..., subprocess.CompletedProcess[str]]
"""The signature of :func:`subprocess.run`, as launchctl is called."""


class ServiceError(Exception):
    """The service cannot be installed, removed or queried; the message is
    meant for the user (it includes launchctl's own error when there is
    one)."""


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


def default_log_dir() -> Path:
    """``~/Library/Logs/mlxd``: where the agent's stdout and stderr go."""
    return Path.home() / "Library" / "Logs" / "mlxd"


def exit_timeout_for(drain_timeout: float) -> int:
    """The ExitTimeOut (whole seconds) for a server draining for
    ``drain_timeout`` seconds: strictly larger, by :data:`EXIT_TIMEOUT_MARGIN`.

    Raises:
        ValueError: ``drain_timeout`` is negative or not finite.
    """
    if not math.isfinite(drain_timeout) or drain_timeout < 0:
        raise ValueError(f"drain_timeout must be a finite number >= 0, not {drain_timeout!r}")
    return math.ceil(drain_timeout) + EXIT_TIMEOUT_MARGIN


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

    The job runs ``python -m gateway serve --config config`` in
    ``working_dir``, logs to ``log_dir``/mlxd.{out,err}.log and gets
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
    }
    return _load_template().substitute(values).encode("utf-8")


def install(
    *,
    config: Path,
    python: str = sys.executable,
    drain_timeout: float,
    dry_run: bool = False,
    runner: Runner = subprocess.run,
    platform: str = sys.platform,
) -> str:
    """Install and start the agent; return a summary for the user.

    ``config`` must exist and is stored resolved to an absolute path;
    ``python`` must be absolute (keep a venv's own path: do not resolve
    it). With ``dry_run`` the plist text is returned and nothing is
    touched, on any OS. Otherwise, on macOS only: create the log
    directory, write the plist atomically, boot out a loaded job (errors
    ignored) and bootstrap the new one into ``gui/<uid>``.

    Raises:
        ServiceError: not macOS (without ``dry_run``), a missing config, a
            relative ``python``, or launchctl bootstrap failed.
    """
    if not dry_run:
        _require_macos(platform)
    config_path = _existing_config(config)
    if not os.path.isabs(python):
        raise ServiceError(f"the Python interpreter must be an absolute path, not {python!r}")
    log_dir = default_log_dir()
    plist = render_plist(
        python=python,
        config=str(config_path),
        log_dir=str(log_dir),
        exit_timeout=exit_timeout_for(drain_timeout),
        working_dir=str(PROJECT_ROOT),
    )
    if dry_run:
        return plist.decode("utf-8")
    log_dir.mkdir(parents=True, exist_ok=True)
    target = plist_path()
    _write_atomically(target, plist)
    _launchctl(runner, "bootout", _service_target())
    _bootstrap(runner, target)
    return (
        f"installed and started {LABEL}\n"
        f"  plist:  {target}\n"
        f"  config: {config_path}\n"
        f"  logs:   {log_dir / OUT_LOG}, {log_dir / ERR_LOG}"
    )


def uninstall(*, runner: Runner = subprocess.run, platform: str = sys.platform) -> str:
    """Stop the agent (SIGTERM, then SIGKILL after ExitTimeOut) and remove
    its plist; return a summary. Idempotent: nothing installed or loaded is
    not an error.

    Raises:
        ServiceError: not macOS, or launchctl bootout failed and the job is
            still loaded.
    """
    _require_macos(platform)
    result = _launchctl(runner, "bootout", _service_target())
    if result.returncode != 0 and _is_loaded(runner):
        raise ServiceError(f"launchctl bootout failed: {_launchctl_error(result)}")
    done = [f"stopped {LABEL}"] if result.returncode == 0 else []
    target = plist_path()
    try:
        target.unlink()
        done.append(f"removed {target}")
    except FileNotFoundError:
        pass
    return "; ".join(done) or f"{LABEL} is not installed"


def status(*, health_url: str, runner: Runner = subprocess.run, platform: str = sys.platform) -> ServiceStatus:
    """The agent's :class:`ServiceStatus`. Off macOS, launchd is not asked
    (``loaded`` False, ``pid`` None) but the plist and health URL are."""
    loaded, pid = False, None
    if platform == "darwin":
        result = _launchctl(runner, "print", _service_target())
        loaded = result.returncode == 0
        pid = _parse_pid(result.stdout) if loaded else None
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


def _domain_target() -> str:
    return f"gui/{os.getuid()}"


def _service_target() -> str:
    return f"{_domain_target()}/{LABEL}"


def _launchctl(runner: Runner, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``launchctl *args``, capturing its output; never raises on a
    non-zero exit."""
    try:
        return runner([LAUNCHCTL, *args], capture_output=True, text=True, check=False)
    except FileNotFoundError:
        raise ServiceError(f"{LAUNCHCTL} not found") from None


def _launchctl_error(result: subprocess.CompletedProcess[str]) -> str:
    return (result.stderr or result.stdout or "").strip() or f"exit status {result.returncode}"


def _bootstrap(runner: Runner, plist: Path) -> None:
    """``launchctl bootstrap gui/<uid> plist``, retried only on errno 5.

    Raises:
        ServiceError: with launchctl's message, once out of attempts.
    """
    for attempt in range(1, BOOTSTRAP_ATTEMPTS + 1):
        result = _launchctl(runner, "bootstrap", _domain_target(), str(plist))
        if result.returncode == 0:
            return
        if result.returncode != _EIO or attempt == BOOTSTRAP_ATTEMPTS:
            break
        time.sleep(BOOTSTRAP_RETRY_DELAY)
    raise ServiceError(f"launchctl bootstrap failed: {_launchctl_error(result)}")


def _is_loaded(runner: Runner) -> bool:
    return _launchctl(runner, "print", _service_target()).returncode == 0


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
