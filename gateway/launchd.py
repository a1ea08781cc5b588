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
import plistlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
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
SERVICE_LOG = "mlxd.log"
"""The service's own log (rotated by the gateway, see :mod:`shared.logging`)
when the config sets no ``log_file``; ``OUT_LOG`` and ``ERR_LOG`` get only
what is printed before logging starts and crash output."""
HEALTH_TIMEOUT = 2.0
"""Seconds the health check waits for ``200``."""

POLL_INTERVAL = 0.25
"""Seconds between ``launchctl print`` polls while an old job exits."""

WAIT_MARGIN = 5.0
"""Seconds waited for an old job beyond its ExitTimeOut (after which
launchd has SIGKILLed it) before :func:`install` gives up."""

FILE_LIMIT = 10240
"""NumberOfFiles (soft and hard) of the agent: launchd starts agents with
a soft limit of 256 open files, fewer than ``max_batch_size + max_queued``
streaming clients need; 10240 is macOS's OPEN_MAX, the most a process may
set with setrlimit. The gateway raises its soft limit at start too (see
:mod:`gateway.file_limit`)."""

CAPTURED_VARIABLES = ("HF_HOME", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HUB_OFFLINE", "XDG_CACHE_HOME")
"""Variables of the user's environment copied into the agent's by
:func:`service_environment`, besides every ``MLXD_*`` one (where models
and caches are found). Tokens and other secrets are never copied: the
plist is readable by other local users."""

PROTECTED_FOLDERS = ("Documents", "Desktop", "Downloads", "Library/Mobile Documents")
"""Folders under the home directory that macOS privacy protection (TCC)
guards; ``/Volumes/...`` (external and network volumes) is guarded too."""

_EIO = 5
_NO_DOMAIN = 125
_XML_INVALID = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
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


def rotate_service_streams(
    log_dir: Path, max_bytes: int, backups: int, streams: Sequence[tuple[int, str]] = ((1, OUT_LOG), (2, ERR_LOG))
) -> list[Path]:
    """Roll over the files launchd writes the agent's stdout and stderr to
    (``log_dir``/:data:`OUT_LOG` and :data:`ERR_LOG`) when one has grown
    past ``max_bytes`` (0: never): ``<file>`` becomes ``<file>.1`` (older
    ones shift up to ``<file>.<backups>``; the oldest is dropped) and the
    descriptor is pointed at a fresh ``<file>`` with ``dup2``. launchd opens
    these files itself and never rotates them, so this runs once at each
    service start. A descriptor that is not that file (a terminal, another
    path) is left alone. ``streams`` pairs each descriptor with its file
    name. Returns the files rolled over; never raises for a missing or
    unreadable file (it is then left as it is)."""
    rolled: list[Path] = []
    if max_bytes <= 0:
        return rolled
    for fd, name in streams:
        path = log_dir / name
        try:
            here, there = os.fstat(fd), path.stat()
            if (here.st_dev, here.st_ino) != (there.st_dev, there.st_ino) or there.st_size <= max_bytes:
                continue
            for n in range(backups - 1, 0, -1):
                older = path.with_name(f"{name}.{n}")
                if older.exists():
                    os.replace(older, path.with_name(f"{name}.{n + 1}"))
            os.replace(path, path.with_name(f"{name}.1"))
            fresh = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            try:
                os.dup2(fresh, fd)
            finally:
                os.close(fresh)
            rolled.append(path)
        except OSError:
            continue
    return rolled


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
