"""gateway.launchd: the rendered plist, and the macOS install / uninstall /
status paths driven by a fake launchctl runner under a temporary HOME."""

from __future__ import annotations

import http.server
import os
import plistlib
import socket
import subprocess
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from gateway import launchd
from gateway.launchd import LABEL, LAUNCHCTL, ServiceError, ServiceStatus

PYTHON = "/opt/venv/bin/python"
DRAIN = 30.5
UID = os.getuid()
SERVICE = f"gui/{UID}/{LABEL}"

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


class FakeLaunchctl:
    """A ``subprocess.run`` stand-in: records every argv and answers each
    launchctl subcommand with a queued (returncode, stdout, stderr)."""

    def __init__(self, **replies: list[tuple[int, str, str]]) -> None:
        self.calls: list[list[str]] = []
        self.replies = replies

    def __call__(self, argv, *, capture_output, text, check):
        assert capture_output and text and not check
        self.calls.append(list(argv))
        queue = self.replies.get(argv[1], [])
        code, out, err = queue.pop(0) if len(queue) > 1 else (queue[0] if queue else (0, "", ""))
        return subprocess.CompletedProcess(argv, code, out, err)

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
    }
    assert data["Label"] == LABEL
    assert data["ProgramArguments"] == [PYTHON, "-m", "gateway", "serve", "--config", str(config.resolve())]
    assert data["RunAtLoad"] is True
    assert data["KeepAlive"] == {"SuccessfulExit": False}
    assert isinstance(data["ExitTimeOut"], int) and data["ExitTimeOut"] > DRAIN
    assert data["StandardOutPath"] == str(log_dir / "mlxd.out.log")
    assert data["StandardErrorPath"] == str(log_dir / "mlxd.err.log")
    assert data["WorkingDirectory"] == str(launchd.PROJECT_ROOT)
    env = data["EnvironmentVariables"]
    assert set(env) == {"PATH", "PYTHONUNBUFFERED"}
    assert env["PATH"].split(":")[:2] == ["/opt/venv/bin", "/opt/homebrew/bin"]
    assert "/usr/bin" in env["PATH"].split(":")
    assert env["PYTHONUNBUFFERED"] == "1"
    assert data["ProcessType"] == "Interactive"
    assert data["ThrottleInterval"] == 10
    # nothing touched
    assert runner.calls == []
    assert list(home.iterdir()) == []


def test_dry_run_stores_config_absolute(home, config, monkeypatch):
    monkeypatch.chdir(config.parent)
    assert dry_run(Path(config.name))["ProgramArguments"][-1] == str(config.resolve())


def test_config_path_with_xml_specials_round_trips(home, tmp_path):
    config = tmp_path / "a&b<c>d" / "my &amp; <conf>.toml"
    config.parent.mkdir()
    config.write_text("")
    text = launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, dry_run=True, platform="linux")
    ET.fromstring(text.encode())  # well-formed XML
    assert plistlib.loads(text.encode())["ProgramArguments"][-1] == str(config.resolve())


def test_render_escapes_every_value():
    odd = "x & y < z > w \"q\" 'a' \r\n\t é $label"
    plist = launchd.render_plist(
        python=f"/p{odd}/python",
        config=f"/c{odd}",
        log_dir=f"/l{odd}",
        exit_timeout=7,
        working_dir=f"/w{odd}",
        environment={f"K{odd}": f"V{odd}", "PATH": "/custom"},
    )
    data = plistlib.loads(plist)
    assert data["ProgramArguments"] == [f"/p{odd}/python", "-m", "gateway", "serve", "--config", f"/c{odd}"]
    assert data["WorkingDirectory"] == f"/w{odd}"
    assert data["StandardOutPath"] == f"/l{odd}/mlxd.out.log"
    assert data["StandardErrorPath"] == f"/l{odd}/mlxd.err.log"
    assert data["EnvironmentVariables"] == {f"K{odd}": f"V{odd}", "PATH": "/custom", "PYTHONUNBUFFERED": "1"}
    assert data["ExitTimeOut"] == 7


def test_render_rejects_what_xml_cannot_carry():
    with pytest.raises(ServiceError, match="cannot carry"):
        launchd.render_plist(python=PYTHON, config="/a\x00b", log_dir="/l", exit_timeout=5, working_dir="/w")


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
def test_render_rejects_bad_exit_timeout(bad):
    with pytest.raises(ValueError):
        launchd.render_plist(python=PYTHON, config="/c", log_dir="/l", exit_timeout=bad, working_dir="/w")


def test_missing_template_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(launchd, "TEMPLATE_PATH", tmp_path / "nope.plist.in")
    with pytest.raises(ServiceError, match="plist template not found"):
        launchd.render_plist(python=PYTHON, config="/c", log_dir="/l", exit_timeout=5, working_dir="/w")


def test_exit_timeout_exceeds_drain_timeout():
    assert launchd.exit_timeout_for(0) > 0
    assert launchd.exit_timeout_for(30) > 30
    assert launchd.exit_timeout_for(30.1) > 31
    with pytest.raises(ValueError):
        launchd.exit_timeout_for(-1)


def test_install_needs_an_existing_config_and_absolute_python(home, tmp_path, config):
    with pytest.raises(ServiceError, match="config file not found"):
        launchd.install(config=tmp_path / "missing.toml", drain_timeout=DRAIN, dry_run=True)
    with pytest.raises(ServiceError, match="absolute"):
        launchd.install(config=config, python="python3", drain_timeout=DRAIN, dry_run=True)


def test_paths_follow_home(home):
    assert launchd.plist_path() == home / "Library" / "LaunchAgents" / "com.mlxd.server.plist"
    assert launchd.default_log_dir() == home / "Library" / "Logs" / "mlxd"


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


def test_install_writes_plist_and_bootstraps(home, config):
    runner = FakeLaunchctl(bootout=[(3, "", "Boot-out failed: 3: No such process")])
    summary = launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=runner, platform="darwin")
    target = home / "Library" / "LaunchAgents" / "com.mlxd.server.plist"
    assert runner.calls == [
        [LAUNCHCTL, "bootout", SERVICE],
        [LAUNCHCTL, "bootstrap", f"gui/{UID}", str(target)],
    ]
    assert plistlib.loads(target.read_bytes()) == dry_run(config)
    assert target.stat().st_mode & 0o777 == 0o644
    assert list(target.parent.iterdir()) == [target]  # no temporary file left
    assert (home / "Library" / "Logs" / "mlxd").is_dir()
    assert str(target) in summary and str(config.resolve()) in summary


def test_install_replaces_a_loaded_service(home, config):
    runner = FakeLaunchctl()
    launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=runner, platform="darwin")
    launchd.install(config=config, python="/other/python", drain_timeout=DRAIN, runner=runner, platform="darwin")
    assert runner.subcommands() == ["bootout", "bootstrap", "bootout", "bootstrap"]
    assert plistlib.loads(launchd.plist_path().read_bytes())["ProgramArguments"][0] == "/other/python"


def test_install_reports_launchctl_error(home, config):
    runner = FakeLaunchctl(bootstrap=[(78, "", "Bootstrap failed: 78: Function not implemented")])
    with pytest.raises(ServiceError, match="Bootstrap failed: 78: Function not implemented"):
        launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=runner, platform="darwin")
    assert runner.subcommands() == ["bootout", "bootstrap"]  # no retry on a real error


def test_install_retries_bootstrap_on_eio(home, config, monkeypatch):
    monkeypatch.setattr(launchd, "BOOTSTRAP_RETRY_DELAY", 0)
    runner = FakeLaunchctl(bootstrap=[(5, "", "Bootstrap failed: 5: Input/output error"), (0, "", "")])
    launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=runner, platform="darwin")
    assert runner.subcommands() == ["bootout", "bootstrap", "bootstrap"]


def test_install_gives_up_after_repeated_eio(home, config, monkeypatch):
    monkeypatch.setattr(launchd, "BOOTSTRAP_RETRY_DELAY", 0)
    runner = FakeLaunchctl(bootstrap=[(5, "", "Bootstrap failed: 5: Input/output error")])
    with pytest.raises(ServiceError, match="Input/output error"):
        launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=runner, platform="darwin")
    assert runner.subcommands().count("bootstrap") == launchd.BOOTSTRAP_ATTEMPTS


def test_launchctl_missing_is_a_service_error(home):
    def runner(argv, **kwargs):
        raise FileNotFoundError(argv[0])

    with pytest.raises(ServiceError, match="not found"):
        launchd.uninstall(runner=runner, platform="darwin")


def test_uninstall_boots_out_and_removes_plist(home, config):
    launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=FakeLaunchctl(), platform="darwin")
    runner = FakeLaunchctl()
    summary = launchd.uninstall(runner=runner, platform="darwin")
    assert runner.calls == [[LAUNCHCTL, "bootout", SERVICE]]
    assert not launchd.plist_path().exists()
    assert "stopped" in summary and "removed" in summary


def test_uninstall_is_idempotent(home):
    runner = FakeLaunchctl(
        bootout=[(3, "", "Boot-out failed: 3: No such process")],
        print=[(113, "", f'Could not find service "{LABEL}" in domain for user gui: {UID}')],
    )
    assert launchd.uninstall(runner=runner, platform="darwin") == f"{LABEL} is not installed"
    assert launchd.uninstall(runner=runner, platform="darwin") == f"{LABEL} is not installed"
    assert runner.calls == [[LAUNCHCTL, "bootout", SERVICE], [LAUNCHCTL, "print", SERVICE]] * 2


def test_uninstall_fails_if_still_loaded(home, config):
    launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=FakeLaunchctl(), platform="darwin")
    runner = FakeLaunchctl(
        bootout=[(5, "", "Boot-out failed: 5: Input/output error")], print=[(0, LAUNCHCTL_PRINT, "")]
    )
    with pytest.raises(ServiceError, match="bootout failed: Boot-out failed: 5"):
        launchd.uninstall(runner=runner, platform="darwin")
    assert launchd.plist_path().exists()


def test_status_of_a_running_service(home, config, health_server):
    launchd.install(config=config, python=PYTHON, drain_timeout=DRAIN, runner=FakeLaunchctl(), platform="darwin")
    runner = FakeLaunchctl(print=[(0, LAUNCHCTL_PRINT, "")])
    st = launchd.status(health_url=f"{health_server}/health", runner=runner, platform="darwin")
    assert st == ServiceStatus(installed=True, loaded=True, pid=4242, healthy=True)
    assert runner.calls == [[LAUNCHCTL, "print", SERVICE]]


def test_status_loaded_but_not_running(home):
    waiting = LAUNCHCTL_PRINT.replace("\tpid = 4242\n", "").replace("state = running", "state = not running")
    runner = FakeLaunchctl(print=[(0, waiting, "")])
    st = launchd.status(health_url=dead_url(), runner=runner, platform="darwin")
    assert st == ServiceStatus(installed=False, loaded=True, pid=None, healthy=False)


def test_status_not_loaded(home):
    runner = FakeLaunchctl(print=[(113, "", "Could not find service")])
    st = launchd.status(health_url=dead_url(), runner=runner, platform="darwin")
    assert st == ServiceStatus(installed=False, loaded=False, pid=None, healthy=False)


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
