"""gateway.service.launchd, gateway.service.plist and gateway.service.logs: the
rendered plist, the macOS install / uninstall / status paths driven by a
fake launchctl runner under a temporary HOME, and the service's log
rotation."""

from __future__ import annotations

import http.server
import os
import plistlib
import socket
import subprocess
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gateway.service import launchd
from gateway.service import logs as service_logs
from gateway.service import plist as launchd_plist
from gateway.service.launchd import LAUNCHCTL, ServiceStatus
from gateway.service.plist import LABEL, ServiceError

PYTHON = "/opt/venv/bin/python"
DRAIN = 30.5
UID = os.getuid()
SERVICE = f"gui/{UID}/{LABEL}"
USER_SERVICE = f"user/{UID}/{LABEL}"

LAUNCHCTL_PRINT = f"""\
gui/{UID}/{LABEL} = {{
\tactive count = 1
\tpath = /Users/me/Library/LaunchAgents/{LABEL}.plist
\ttype = LaunchAgent
\tstate = running

\tprogram = {PYTHON}
\targuments = {{
\t\t{PYTHON}
\t\t-m
\t\tgateway
\t}}

\tdomain = gui/{UID} [100005]
\tminimum runtime = 10
\texit timeout = 46
\truns = 1
\tpid = 4242
\timmediate reason = speculative
\tlast exit code = (never exited)
}}
"""


NOT_FOUND = (113, "", f'Could not find service "{LABEL}" in domain for user gui: {UID}')
NO_DOMAIN = "Domain does not support specified action"


class FakeLaunchctl:
    """A ``subprocess.run`` stand-in that behaves like ``launchctl`` for the
    subcommands mlxd uses, over a model of launchd's state.

    ``services`` maps ``domain/label`` to the plist it was bootstrapped
    from. ``gui`` False means there is no GUI login session (over SSH):
    every ``gui/<uid>`` call fails with error 125. After a successful
    ``bootout`` the job keeps exiting for ``exit_polls`` more ``print``
    calls (launchctl returns before the process is gone); meanwhile
    ``bootstrap`` fails with error 5, as it does for a service that is
    still loaded or disabled. ``bootstrap`` parses the plist like launchd.
    ``fail`` injects one-shot replies per subcommand. Every argv is
    recorded in ``calls``.
    """

    def __init__(self, *, gui: bool = True, exit_polls: int = 0, loaded: bool = False, disabled: bool = False, **fail):
        self.calls: list[list[str]] = []
        self.gui = gui
        self.exit_polls = exit_polls
        self.services: dict[str, str] = {SERVICE: "old.plist"} if loaded else {}
        self.exiting: dict[str, int] = {}
        self.disabled: set[str] = {SERVICE} if disabled else set()
        self.fail = {k: list(v) for k, v in fail.items()}

    def __call__(self, argv, *, capture_output, text, check):
        assert capture_output and text and not check
        assert argv[0] == LAUNCHCTL
        self.calls.append(list(argv))
        code, out, err = self._reply(argv[1], argv[2:])
        return subprocess.CompletedProcess(argv, code, out, err)

    def _reply(self, sub: str, args: list[str]) -> tuple[int, str, str]:
        if self.fail.get(sub):
            return self.fail[sub].pop(0)
        target = args[0]
        if target.startswith("gui/") and not self.gui:
            verb = {"bootout": "Boot-out", "bootstrap": "Bootstrap"}.get(sub)
            return (125, "", f"{verb} failed: 125: {NO_DOMAIN}") if verb else (125, "", NO_DOMAIN)
        if sub == "print":
            if target not in self.services:
                return NOT_FOUND
            if target in self.exiting:
                self.exiting[target] -= 1
                if self.exiting[target] < 0:
                    del self.exiting[target], self.services[target]
                    return NOT_FOUND
            return 0, LAUNCHCTL_PRINT.replace(SERVICE, target), ""
        if sub == "bootout":
            if target not in self.services or target in self.exiting:
                return 3, "", "Boot-out failed: 3: No such process"
            self.exiting[target] = self.exit_polls
            return 0, "", ""
        if sub == "enable":
            self.disabled.discard(target)
            return 0, "", ""
        if sub == "bootstrap":
            service = f"{target}/{plistlib.loads(Path(args[1]).read_bytes())['Label']}"
            if service in self.services or service in self.disabled:
                return 5, "", "Bootstrap failed: 5: Input/output error"
            self.services[service] = args[1]
            return 0, "", ""
        raise AssertionError(f"launchctl {sub} is not used by mlxd")

    def subcommands(self) -> list[str]:
        """The launchctl subcommands called, in order."""
        return [argv[1] for argv in self.calls]


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A temporary HOME (Path.home() follows it)."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    return home


@pytest.fixture
def config(tmp_path) -> Path:
    """An existing config file."""
    path = tmp_path / "mlxd.toml"
    path.write_text("[[models]]\nname = 'm'\n")
    return path


@pytest.fixture
def health_server():
    """A local HTTP server: 200 on /health, 503 elsewhere; yields its base URL."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/health" else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def dead_url() -> str:
    """A health URL on a loopback port nobody listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/health"


def dry_run(config: Path, platform: str = "linux") -> dict:
    return plistlib.loads(
        launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, dry_run=True, platform=platform).encode()
    )


# --- the plist -------------------------------------------------------------


@pytest.mark.parametrize("platform", ["linux", "darwin"])
def test_dry_run_plist_has_every_key(home, config, platform):
    runner = FakeLaunchctl()
    plist = launchd.install(
        config=config, python=PYTHON, drain_timeout=DRAIN, dry_run=True, runner=runner, platform=platform
    )
    data = plistlib.loads(plist.encode())
    log_dir = home / "Library" / "Logs" / "mlxd"
    assert set(data) == {
        "Label",
        "ProgramArguments",
        "RunAtLoad",
        "KeepAlive",
        "ExitTimeOut",
        "StandardOutPath",
        "StandardErrorPath",
        "WorkingDirectory",
        "EnvironmentVariables",
        "ProcessType",
        "ThrottleInterval",
        "SoftResourceLimits",
        "HardResourceLimits",
    }
    assert data["Label"] == LABEL
    assert data["ProgramArguments"] == [
        PYTHON,
        "-m",
        "gateway",
        "serve",
        "--config",
        str(config.resolve()),
        "--service",
    ]
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] == {"SuccessfulExit": False}
    assert isinstance(data["ExitTimeOut"], int) and data["ExitTimeOut"] > DRAIN
    assert data["StandardOutPath"] == str(log_dir / "mlxd.out.log")
    assert data["StandardErrorPath"] == str(log_dir / "mlxd.err.log")
    assert data["WorkingDirectory"] == str(launchd_plist.PROJECT_ROOT)
    env = data["EnvironmentVariables"]
    assert set(env) == {"PATH", "PYTHONUNBUFFERED"}
    assert env["PATH"].split(":")[:2] == ["/opt/venv/bin", "/opt/homebrew/bin"]
    assert "/usr/bin" in env["PATH"].split(":")
    assert env["PYTHONUNBUFFERED"] == "1"
    assert data["ProcessType"] == "Interactive"
    assert data["ThrottleInterval"] == 10
    assert data["SoftResourceLimits"] == {"NumberOfFiles": launchd_plist.FILE_LIMIT}
    assert data["HardResourceLimits"] == {"NumberOfFiles": launchd_plist.FILE_LIMIT}
    # nothing touched
    assert runner.calls == []
    assert list(home.iterdir()) == []


def test_dry_run_stores_config_absolute(home, config, monkeypatch):
    monkeypatch.chdir(config.parent)
    assert dry_run(Path(config.name))["ProgramArguments"][-2] == str(config.resolve())


def test_config_path_with_xml_specials_round_trips(home, tmp_path):
    config = tmp_path / "a&b<c>d" / "my &amp; <conf>.toml"
    config.parent.mkdir()
    config.write_text("")
    text = launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, dry_run=True, platform="linux")
    ET.fromstring(text.encode())  # well-formed XML
    assert plistlib.loads(text.encode())["ProgramArguments"][-2] == str(config.resolve())


def test_render_escapes_every_value():
    odd = "x & y < z > w \"q\" 'a' \r\n\t é $label"
    plist = launchd_plist.render_plist(
        python=f"/p{odd}/python",
        config=f"/c{odd}",
        log_dir=f"/l{odd}",
        exit_timeout=7,
        working_dir=f"/w{odd}",
        environment={f"K{odd}": f"V{odd}", "PATH": "/custom"},
    )
    data = plistlib.loads(plist)
    assert data["ProgramArguments"] == [
        f"/p{odd}/python",
        "-m",
        "gateway",
        "serve",
        "--config",
        f"/c{odd}",
        "--service",
    ]
    assert data["WorkingDirectory"] == f"/w{odd}"
    assert data["StandardOutPath"] == f"/l{odd}/mlxd.out.log"
    assert data["StandardErrorPath"] == f"/l{odd}/mlxd.err.log"
    assert data["EnvironmentVariables"] == {f"K{odd}": f"V{odd}", "PATH": "/custom", "PYTHONUNBUFFERED": "1"}
    assert data["ExitTimeOut"] == 7


def test_render_rejects_what_xml_cannot_carry():
    with pytest.raises(ServiceError, match="cannot carry"):
        launchd_plist.render_plist(python=PYTHON, config="/a\x00b", log_dir="/l", exit_timeout=5, working_dir="/w")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_render_rejects_bad_exit_timeout(bad):
    with pytest.raises(ValueError):
        launchd_plist.render_plist(python=PYTHON, config="/c", log_dir="/l", exit_timeout=bad, working_dir="/w")


def test_missing_template_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(launchd_plist, "TEMPLATE_PATH", tmp_path / "nope.plist.in")
    with pytest.raises(ServiceError, match="plist template not found"):
        launchd_plist.render_plist(python=PYTHON, config="/c", log_dir="/l", exit_timeout=5, working_dir="/w")


def test_exit_timeout_exceeds_drain_timeout():
    assert launchd_plist.exit_timeout_for(0) > 0
    assert launchd_plist.exit_timeout_for(30) > 30
    assert launchd_plist.exit_timeout_for(30.1) > 31
    with pytest.raises(ValueError):
        launchd_plist.exit_timeout_for(-1)


def test_install_needs_an_existing_config_and_absolute_python(home, tmp_path, config):
    with pytest.raises(ServiceError, match="config file not found"):
        launchd.install(config=tmp_path / "missing.toml", drain_timeout=DRAIN, dry_run=True)
    with pytest.raises(ServiceError, match="absolute"):
        launchd.install(config=config, python="python3", drain_timeout=DRAIN, dry_run=True)


def test_paths_follow_home(home):
    assert launchd.plist_path() == home / "Library" / "LaunchAgents" / "com.mlxd.server.plist"
    assert service_logs.default_log_dir() == home / "Library" / "Logs" / "mlxd"


# --- not macOS ----------------------------------------------------------------

MACOS_ONLY = "launchd is only available on macOS; use --dry-run to see the plist"


def test_install_off_macos_without_dry_run_fails(home, config):
    runner = FakeLaunchctl()
    with pytest.raises(ServiceError) as info:
        launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=runner, platform="linux")
    assert str(info.value) == MACOS_ONLY
    assert runner.calls == [] and list(home.iterdir()) == []


def test_uninstall_off_macos_fails(home):
    runner = FakeLaunchctl()
    with pytest.raises(ServiceError) as info:
        launchd.uninstall(runner=runner, platform="linux")
    assert str(info.value) == MACOS_ONLY
    assert runner.calls == []


def test_status_off_macos_asks_no_launchctl(home, health_server):
    runner = FakeLaunchctl()
    st = launchd.status(health_url=f"{health_server}/health", runner=runner, platform="linux")
    assert st == ServiceStatus(installed=False, loaded=False, pid=None, healthy=True)
    assert runner.calls == []


# --- macOS, with a fake launchctl ----------------------------------------------


def install(config, runner, **kw):
    return launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=runner, platform="darwin", **kw)


def test_install_writes_plist_and_bootstraps(home, config):
    runner = FakeLaunchctl()
    summary = install(config, runner)
    target = home / "Library" / "LaunchAgents" / "com.mlxd.server.plist"
    assert runner.calls == [
        [LAUNCHCTL, "bootout", SERVICE],
        [LAUNCHCTL, "print", SERVICE],
        [LAUNCHCTL, "bootout", USER_SERVICE],
        [LAUNCHCTL, "print", USER_SERVICE],
        [LAUNCHCTL, "enable", SERVICE],
        [LAUNCHCTL, "bootstrap", f"gui/{UID}", str(target)],
    ]
    assert runner.services == {SERVICE: str(target)}
    assert plistlib.loads(target.read_bytes()) == dry_run(config)
    assert target.stat().st_mode & 0o777 == 0o644
    assert list(target.parent.iterdir()) == [target]  # no temporary file left
    assert (home / "Library" / "Logs" / "mlxd").is_dir()
    assert str(target) in summary and str(config.resolve()) in summary
    assert f"gui/{UID}" in summary and "note:" not in summary


def test_install_waits_until_the_old_job_is_gone(home, config, monkeypatch):
    """bootout returns while the old process still drains; bootstrapping
    then would fail with error 5, so install polls print until it is gone."""
    monkeypatch.setattr(launchd, "POLL_INTERVAL", 0)
    runner = FakeLaunchctl(loaded=True, exit_polls=4)
    install(config, runner)
    assert runner.subcommands() == ["bootout"] + ["print"] * 5 + ["bootout", "print", "enable", "bootstrap"]
    assert SERVICE in runner.services and not runner.exiting


def test_install_gives_up_when_the_old_job_never_exits(home, config, monkeypatch):
    monkeypatch.setattr(launchd, "POLL_INTERVAL", 0.01)
    monkeypatch.setattr(launchd, "WAIT_MARGIN", 0.2)
    monkeypatch.setattr(launchd, "exit_timeout_for", lambda drain: 1)
    runner = FakeLaunchctl(loaded=True, exit_polls=10**9)
    started = time.monotonic()
    with pytest.raises(ServiceError, match="still running after its exit timeout"):
        install(config, runner)
    assert 1.2 <= time.monotonic() - started < 6
    assert "bootstrap" not in runner.subcommands()


def test_install_waits_for_the_old_jobs_own_exit_timeout(home, config, monkeypatch):
    """The old plist's ExitTimeOut bounds the wait, even when the new one
    is shorter (launchd SIGKILLs the old job only after its own)."""
    monkeypatch.setattr(launchd, "POLL_INTERVAL", 0)
    target = launchd.plist_path()
    target.parent.mkdir(parents=True)
    target.write_bytes(plistlib.dumps({"Label": LABEL, "ExitTimeOut": 120}))
    assert launchd._installed_exit_timeout(target) == 120
    waits = []
    monkeypatch.setattr(launchd, "_wait_gone", lambda runner, service, deadline: waits.append(deadline))
    before = time.monotonic()
    install(config, FakeLaunchctl())
    assert all(d - before >= 120 for d in waits) and len(waits) == 2


def test_install_retries_bootstrap_while_teardown_reports_eio(home, config, monkeypatch):
    monkeypatch.setattr(launchd, "POLL_INTERVAL", 0)
    runner = FakeLaunchctl(bootstrap=[(5, "", "Bootstrap failed: 5: Input/output error")] * 2)
    install(config, runner)
    assert runner.subcommands()[-6:] == ["enable", "bootstrap"] * 3
    assert SERVICE in runner.services


def test_install_gives_up_on_eio_at_the_deadline(home, config, monkeypatch):
    monkeypatch.setattr(launchd, "POLL_INTERVAL", 0.01)
    monkeypatch.setattr(launchd, "WAIT_MARGIN", 0.1)
    monkeypatch.setattr(launchd, "exit_timeout_for", lambda drain: 1)
    runner = FakeLaunchctl(bootstrap=[(5, "", "Bootstrap failed: 5: Input/output error")] * 10**6)
    with pytest.raises(ServiceError, match="Input/output error"):
        install(config, runner)


def test_install_enables_a_disabled_service_before_bootstrap(home, config):
    runner = FakeLaunchctl(disabled=True)
    install(config, runner)
    assert runner.subcommands()[-2:] == ["enable", "bootstrap"]
    assert SERVICE in runner.services and not runner.disabled


def test_install_replaces_a_loaded_service(home, config):
    runner = FakeLaunchctl()
    install(config, runner)
    launchd.install(config=config, python="/other/python", drain_timeout=DRAIN, runner=runner, platform="darwin")
    once = ["bootout", "print", "bootout", "print", "enable", "bootstrap"]
    assert runner.subcommands() == once * 2
    assert plistlib.loads(launchd.plist_path().read_bytes())["ProgramArguments"][0] == "/other/python"


def test_install_without_a_gui_session_falls_back_to_the_user_domain(home, config):
    runner = FakeLaunchctl(gui=False)
    summary = install(config, runner)
    target = launchd.plist_path()
    assert runner.calls[-4:] == [
        [LAUNCHCTL, "enable", SERVICE],
        [LAUNCHCTL, "bootstrap", f"gui/{UID}", str(target)],
        [LAUNCHCTL, "enable", USER_SERVICE],
        [LAUNCHCTL, "bootstrap", f"user/{UID}", str(target)],
    ]
    assert runner.services == {USER_SERVICE: str(target)}
    assert f"in the user/{UID} domain" in summary
    assert "no GUI login session" in summary and "mlxd install" in summary
    # status and uninstall find it there
    st = launchd.status(health_url=dead_url(), runner=runner, platform="darwin")
    assert st.loaded and st.pid == 4242
    assert "stopped" in launchd.uninstall(runner=runner, platform="darwin")


def test_install_reports_launchctl_error(home, config):
    runner = FakeLaunchctl(bootstrap=[(78, "", "Bootstrap failed: 78: Function not implemented")])
    with pytest.raises(ServiceError, match="Bootstrap failed: 78: Function not implemented"):
        install(config, runner)
    assert runner.subcommands().count("bootstrap") == 1  # no retry on a real error


def test_install_puts_the_environment_in_the_plist(home, config):
    env = launchd_plist.service_environment(
        {"HF_HOME": "/data/hf", "MLXD_HOST_SAMPLING": "0", "HF_TOKEN": "hf_secret", "HOME": "/Users/me"},
        ["HF_HUB_CACHE=/data/hub", "MLXD_HOST_SAMPLING=1", "EMPTY="],
    )
    assert env == {"HF_HOME": "/data/hf", "HF_HUB_CACHE": "/data/hub", "MLXD_HOST_SAMPLING": "1", "EMPTY": ""}
    install(config, FakeLaunchctl(), environment=env)
    written = plistlib.loads(launchd.plist_path().read_bytes())["EnvironmentVariables"]
    assert written == {**env, "PATH": written["PATH"], "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("bad", ["NOEQUALS", "=x", "1X=y", "A B=c"])
def test_service_environment_refuses_bad_items(bad):
    with pytest.raises(ServiceError, match="NAME=value"):
        launchd_plist.service_environment({}, [bad])


def test_privacy_warnings_name_guarded_folders(home, tmp_path):
    (home / "Documents" / "mlxd").mkdir(parents=True)
    link = tmp_path / "models"
    link.symlink_to(home / "Documents" / "mlxd")  # a link into a guarded folder counts
    warnings = launchd_plist.privacy_warnings(
        {
            "mlxd checkout": str(home / "Documents" / "mlxd"),
            "config": "~/Desktop/mlxd.toml",
            "Python interpreter": str(home / "Downloads" / "venv" / "bin" / "python"),
            "icloud": str(home / "Library" / "Mobile Documents" / "com~apple~CloudDocs" / "m"),
            "model": "/Volumes/External/models/m",
            "linked": str(link),
            "fine": str(home / "mlxd" / "config.toml"),
            "lookalike": str(home / "Documents2" / "x"),
        }
    )
    named = [w.split("(")[0] for w in warnings]
    assert named == [
        "warning: the mlxd checkout ",
        "warning: the config ",
        "warning: the Python interpreter ",
        "warning: the icloud ",
        "warning: the model ",
        "warning: the linked ",
    ]
    assert all("privacy protection" in w and "Full Disk Access" in w for w in warnings)


def test_launchctl_missing_is_a_service_error(home):
    def runner(argv, **kwargs):
        raise FileNotFoundError(argv[0])

    with pytest.raises(ServiceError, match="not found"):
        launchd.uninstall(runner=runner, platform="darwin")


def test_uninstall_boots_out_and_removes_plist(home, config):
    runner = FakeLaunchctl()
    install(config, runner)
    runner.calls.clear()
    summary = launchd.uninstall(runner=runner, platform="darwin")
    assert runner.calls == [
        [LAUNCHCTL, "bootout", SERVICE],
        [LAUNCHCTL, "bootout", USER_SERVICE],
        [LAUNCHCTL, "print", USER_SERVICE],
    ]
    assert not launchd.plist_path().exists()
    assert "stopped" in summary and "removed" in summary


def test_uninstall_is_idempotent(home):
    runner = FakeLaunchctl()
    assert launchd.uninstall(runner=runner, platform="darwin") == f"{LABEL} is not installed"
    assert launchd.uninstall(runner=runner, platform="darwin") == f"{LABEL} is not installed"
    once = [
        [LAUNCHCTL, "bootout", SERVICE],
        [LAUNCHCTL, "print", SERVICE],
        [LAUNCHCTL, "bootout", USER_SERVICE],
        [LAUNCHCTL, "print", USER_SERVICE],
    ]
    assert runner.calls == once * 2


def test_uninstall_fails_if_still_loaded(home, config):
    runner = FakeLaunchctl()
    install(config, runner)
    runner.fail["bootout"] = [(5, "", "Boot-out failed: 5: Input/output error")]
    with pytest.raises(ServiceError, match="bootout failed: Boot-out failed: 5"):
        launchd.uninstall(runner=runner, platform="darwin")
    assert launchd.plist_path().exists()


def test_status_of_a_running_service(home, config, health_server):
    runner = FakeLaunchctl()
    install(config, runner)
    runner.calls.clear()
    st = launchd.status(health_url=f"{health_server}/health", runner=runner, platform="darwin")
    assert st == ServiceStatus(installed=True, loaded=True, pid=4242, healthy=True)
    assert runner.calls == [[LAUNCHCTL, "print", SERVICE]]


def test_status_loaded_but_not_running(home):
    waiting = LAUNCHCTL_PRINT.replace("\tpid = 4242\n", "").replace("state = running", "state = not running")
    runner = FakeLaunchctl(print=[(0, waiting, "")])
    st = launchd.status(health_url=dead_url(), runner=runner, platform="darwin")
    assert st == ServiceStatus(installed=False, loaded=True, pid=None, healthy=False)


def test_status_not_loaded(home):
    runner = FakeLaunchctl()
    st = launchd.status(health_url=dead_url(), runner=runner, platform="darwin")
    assert st == ServiceStatus(installed=False, loaded=False, pid=None, healthy=False)
    assert runner.calls == [[LAUNCHCTL, "print", SERVICE], [LAUNCHCTL, "print", USER_SERVICE]]


def test_health_needs_a_200(home, health_server):
    assert launchd.status(health_url=f"{health_server}/health", platform="linux").healthy
    assert not launchd.status(health_url=f"{health_server}/other", platform="linux").healthy
    assert not launchd.status(health_url=dead_url(), platform="linux").healthy


def test_health_ignores_proxy_settings(home, health_server, monkeypatch):
    monkeypatch.setenv("http_proxy", dead_url().removesuffix("/health"))
    monkeypatch.setenv("HTTP_PROXY", dead_url().removesuffix("/health"))
    assert launchd.status(health_url=f"{health_server}/health", platform="linux").healthy


def test_format_status_one_line_per_fact():
    text = launchd.format_status(ServiceStatus(installed=True, loaded=True, pid=4242, healthy=False))
    assert text.splitlines() == ["installed: yes", "loaded: yes", "pid: 4242", "healthy: no"]
    text = launchd.format_status(ServiceStatus(installed=False, loaded=False, pid=None, healthy=False))
    assert text.splitlines() == ["installed: no", "loaded: no", "pid: -", "healthy: no"]


@pytest.mark.parametrize(
    ("host", "url"),
    [
        ("127.0.0.1", "http://127.0.0.1:8000/health"),
        ("0.0.0.0", "http://127.0.0.1:8000/health"),
        ("::", "http://[::1]:8000/health"),
        ("::1", "http://[::1]:8000/health"),
        ("localhost", "http://localhost:8000/health"),
    ],
)
def test_health_url_for(host, url):
    assert launchd.health_url_for(host, 8000) == url


def test_service_start_rolls_over_launchds_own_log_files(tmp_path):
    """launchd never rotates the stdout/stderr files it opens for the
    agent: a service start rolls one over when it is past the size limit
    and points the descriptor at a fresh file; a small one and a
    descriptor that is not that file are left alone."""
    big, small = tmp_path / service_logs.OUT_LOG, tmp_path / service_logs.ERR_LOG
    big.write_text("x" * 200)
    small.write_text("y" * 10)
    (tmp_path / f"{service_logs.OUT_LOG}.1").write_text("older")
    elsewhere = tmp_path / "terminal"
    with open(big, "a") as out, open(small, "a") as err, open(elsewhere, "a") as other:
        streams = (
            (out.fileno(), service_logs.OUT_LOG),
            (err.fileno(), service_logs.ERR_LOG),
            (other.fileno(), "mlxd.other.log"),
        )
        rolled = service_logs.rotate_service_streams(tmp_path, 100, backups=3, streams=streams)
        assert rolled == [big]
        os.write(out.fileno(), b"after")
        os.write(err.fileno(), b"more")
    assert big.read_text() == "after"
    assert (tmp_path / f"{service_logs.OUT_LOG}.1").read_text() == "x" * 200
    assert (tmp_path / f"{service_logs.OUT_LOG}.2").read_text() == "older"
    assert small.read_text() == "y" * 10 + "more"
    assert service_logs.rotate_service_streams(tmp_path, 0, backups=3, streams=streams[:1]) == []


def test_the_agent_runs_in_the_source_checkout():
    """The agent's working directory is the checkout's root, where the plist
    template and the default config are (whatever package the module is in)."""
    root = Path(__file__).resolve().parent.parent
    assert launchd_plist.PROJECT_ROOT == root
    assert launchd_plist.TEMPLATE_PATH.is_file()
