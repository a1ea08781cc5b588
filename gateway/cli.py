"""The ``mlxd`` command line.

- ``mlxd serve [--config FILE] [--host H] [--port P]`` (the default): run
  the gateway and its workers until drained by SIGTERM/SIGINT;
  ``mlxd serve --model NAME [--model NAME2 ...] [--pull]`` serves those
  hub models with default settings and no config file.
- ``mlxd reload [--config FILE]``: make the running server re-read its
  config (sends SIGHUP to the pid in its pid file).
- ``mlxd pull MODEL``, ``mlxd ls``, ``mlxd rm MODEL [--force]``,
  ``mlxd convert SRC ...``: models from the Hugging Face Hub
  (see :mod:`gateway.hub.commands`).
- ``mlxd install [--config FILE] [--env K=V ...] [--dry-run]``,
  ``mlxd uninstall``, ``mlxd status [--config FILE]``: the launchd agent on
  macOS; ``status`` also prints the running server's models.
- ``mlxd top`` (a live view) and ``mlxd ps`` (one table: every model's
  state, context, memory, caches and idle expiry) of the running server:
  :mod:`gateway.dashboard.top`.

A config error prints one line and exits with status 2; other failures
print one line and exit 1. ``serve --service`` is how launchd starts mlxd:
a config error then exits with :data:`SERVICE_CONFIG_ERROR_EXIT` (0, the
only status launchd's ``KeepAlive``/``SuccessfulExit = false`` leaves
stopped) after printing why, instead of being restarted every 10 seconds
forever, and logs go to ``~/Library/Logs/mlxd/mlxd.log`` when the config
names no ``log_file``.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec

from gateway.dashboard.commands import COMMANDS as DASHBOARD_COMMANDS
from gateway.dashboard.commands import (
    add_dashboard_parsers,
    add_target_arguments,
    print_server_models,
    run_dashboard_command,
)
from shared.config import DEFAULT_CONFIG_PATH, Config, ConfigError
from shared.config_loader import load_config, validate
from shared.config_values import parse_size
from shared.logging import setup_logging

SERVICE_CONFIG_ERROR_EXIT = 0
"""Exit status of ``serve --service`` on a config error: launchd restarts
the agent after any other status (see ``deploy/com.mlxd.server.plist.in``)."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mlxd``."""
    parser = argparse.ArgumentParser(prog="mlxd", description="LLM serving on MLX")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the gateway and its model workers (default)")
    for p in (parser, serve):
        p.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="TOML config file")
        p.add_argument("--host", help="override server.host")
        p.add_argument("--port", type=int, help="override server.port")
        p.add_argument(
            "--service",
            action="store_true",
            help="run as the launchd agent: a config error exits 0 (so launchd does not restart it) "
            "and logs default to ~/Library/Logs/mlxd/mlxd.log",
        )
    serve.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="MODEL",
        help="serve this model (catalog name such as qwen3:4b, or org/name[@revision]) with default settings "
        "instead of the config's [[models]] and [server] (repeatable)",
    )
    serve.add_argument(
        "--pull",
        action="store_true",
        help="first pull the models (of --model or the config) that are not downloaded yet",
    )
    reload = sub.add_parser("reload", help="make the running server re-read its config")
    install = sub.add_parser("install", help="install and start the launchd agent (macOS)")
    install.add_argument("--dry-run", action="store_true", help="print the plist, change nothing")
    install.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="add a variable to the agent's environment (repeatable); HF_HOME, HF_HUB_CACHE, "
        "XDG_CACHE_HOME and MLXD_* are copied from this shell automatically",
    )
    status = sub.add_parser("status", help="is the launchd agent loaded and healthy? and the server's models")
    for p in (reload, install, status):
        p.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="TOML config file")
    add_target_arguments(status)
    add_dashboard_parsers(sub)
    sub.add_parser("uninstall", help="stop and remove the launchd agent (macOS)")
    keys = sub.add_parser("keys", help="make a CURVE key pair for a gateway or a node (mlxd node)")
    keys.add_argument("--dir", default="~/.config/mlxd/keys", help="where to write NAME.pub and NAME.key")
    keys.add_argument("--name", default="gateway", help="file name stem, e.g. gateway or the node's name")
    node = sub.add_parser("node", help="host model workers for a gateway on another machine")
    node.add_argument("--config", required=True, help="the node's TOML config ([node] and [[models]])")
    from gateway.hub.commands import add_parsers

    add_parsers(sub)
    return parser


def make_keys(directory: str, name: str) -> int:
    """``mlxd keys``: write a new key pair (see
    :func:`shared.sockets.write_key_pair`) and print the public key."""
    from shared.sockets import write_key_pair

    try:
        public_path, secret_path = write_key_pair(directory, name)
    except (FileExistsError, OSError) as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 1
    public = public_path.read_text().strip()
    print(f"secret key: {secret_path} (mode 600; keep it on this machine)")
    print(f"public key: {public_path}")
    print(public)
    return 0


def node(config_path: str) -> int:
    """``mlxd node``: load the node config and run the node until stopped
    (see :mod:`gateway.node_main`); 2 on a config error."""
    from gateway.node_main import run_node
    from shared.config_loader import load_node_config

    try:
        config = load_node_config(config_path)
    except ConfigError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 2
    settings = config.node
    if settings.log_file:
        Path(settings.log_file).expanduser().parent.mkdir(parents=True, exist_ok=True)
    setup_logging(settings.log_level, name="node", log_file=settings.log_file or None, background=True)
    return run_node(config)


def _load(
    path: str | None, host: str | None = None, port: int | None = None, service: bool = False, named: Sequence[str] = ()
) -> Config:
    """Load the config, applying command-line overrides and, for the
    launchd ``service``, the default log file (ConfigError on error).
    With ``named`` models (``serve --model``) no file is read (``path``
    None): the server's defaults and those models (see
    :func:`gateway.hub.commands.named_models_config`)."""
    if path is None:
        from gateway.hub.commands import named_models_config

        config = named_models_config(named)
    else:
        config = load_config(path)
    log_file = config.server.log_file
    if service and not log_file:
        from gateway.service.logs import SERVICE_LOG, default_log_dir

        log_file = str(default_log_dir() / SERVICE_LOG)
    if host is None and port is None and log_file == config.server.log_file:
        return config
    server = msgspec.structs.replace(
        config.server,
        host=host if host is not None else config.server.host,
        port=port if port is not None else config.server.port,
        log_file=log_file,
    )
    return validate(msgspec.structs.replace(config, server=server), path)


def serve(
    config: Config, config_path: str, loader: Callable[[], Config] | None = None, *, as_service: bool = False
) -> int:
    """Run the server until it is stopped; return the exit code.

    ``loader`` re-reads the config on reload (default: the file alone,
    without command-line overrides). Raises the open-file limit first
    (see :mod:`gateway.http.file_limit`). ``as_service`` (launchd): first roll
    over launchd's own stdout/stderr files when they are over
    ``log_max_bytes`` (see :func:`gateway.service.logs.rotate_service_streams`).
    """
    from gateway.http.file_limit import files_needed, raise_file_limit
    from gateway.server import run

    server = config.server
    if as_service:
        from gateway.service.logs import default_log_dir, rotate_service_streams

        rotate_service_streams(default_log_dir(), parse_size(server.log_max_bytes, 0), server.log_backups)
    if server.log_file:
        Path(server.log_file).expanduser().parent.mkdir(parents=True, exist_ok=True)
    setup_logging(
        server.log_level,
        log_file=server.log_file or None,
        max_bytes=parse_size(server.log_max_bytes, 0),
        backups=server.log_backups,
        background=True,
    )
    raise_file_limit(files_needed(config))
    logging.getLogger("mlxd").info(
        "serving %s at http://%s:%d/v1",
        ", ".join(m.name for m in config.models),
        config.server.host,
        config.server.port,
    )
    run(config, config_path, loader)
    logging.getLogger("mlxd").info("stopped")
    return 0


def reload(config: Config) -> int:
    """Signal the running server to reload; return the exit code."""
    from gateway.server import pid_file_for

    path = pid_file_for(config)
    try:
        pid = int(path.read_text().strip())
        os.kill(pid, signal.SIGHUP)
    except (OSError, ValueError) as exc:
        print(f"mlxd: no running server found through {path}: {exc}", file=sys.stderr)
        return 1
    print(f"asked mlxd (pid {pid}) to reload its config")
    return 0


def _config_error(exc: Exception, as_service: bool) -> int:
    """Print why the config cannot be used; return the exit status: 2, or
    :data:`SERVICE_CONFIG_ERROR_EXIT` under launchd (so it stays stopped)."""
    print(f"mlxd: {exc}", file=sys.stderr)
    if not as_service:
        return 2
    print(
        "mlxd: not starting, and launchd will not restart it: fix the config, then run `mlxd install` again",
        file=sys.stderr,
    )
    return SERVICE_CONFIG_ERROR_EXIT


def service(command: str, config_path: str, config: Config | None, dry_run: bool, env: Sequence[str] = ()) -> int:
    """Run one launchd command; return the exit code. ``env`` holds the
    ``--env NAME=VALUE`` items of ``install``."""
    from gateway.service import launchd
    from gateway.service import plist as launchd_plist

    try:
        if command == "install":
            assert config is not None
            for warning in launchd_plist.privacy_warnings(_install_paths(config_path, config)):
                print(f"mlxd: {warning}", file=sys.stderr)
            environment = launchd_plist.service_environment(os.environ, env)
            print(
                launchd.install(
                    config=Path(config_path),
                    drain_timeout=config.server.drain_timeout,
                    environment=environment,
                    log_file=config.server.log_file,
                    dry_run=dry_run,
                )
            )
            return 0
        if command == "uninstall":
            print(launchd.uninstall())
            return 0
        assert config is not None
        st = launchd.status(health_url=launchd.health_url_for(config.server.host, config.server.port))
        print(launchd.format_status(st))
        return 0 if st.healthy else 1
    except launchd_plist.ServiceError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 1


def _install_paths(config_path: str, config: Config) -> dict[str, str]:
    """What the agent will read, by what it is: the checkout, the Python
    interpreter, the config, the log file, the Hugging Face cache and every
    local model source (for :func:`gateway.service.plist.privacy_warnings`)."""
    from gateway.service.plist import PROJECT_ROOT
    from gateway.workers.model_paths import local_path

    paths = {"mlxd checkout": str(PROJECT_ROOT), "Python interpreter": sys.executable, "config": config_path}
    if config.server.log_file:
        paths["log_file"] = config.server.log_file
    hub = os.environ.get("HF_HUB_CACHE") or (os.environ.get("HF_HOME") and f"{os.environ['HF_HOME']}/hub")
    if hub:
        paths["Hugging Face cache"] = hub
    for model in config.models:
        path = local_path(model.source)
        if path is not None:
            paths[f"source of model {model.name!r}"] = str(path)
    return paths


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mlxd`` script."""
    args = build_parser().parse_args(argv)
    command = args.command or "serve"
    if command == "keys":
        return make_keys(args.dir, args.name)
    if command == "node":
        return node(args.config)
    if command in DASHBOARD_COMMANDS:
        return run_dashboard_command(args)
    from gateway.hub.commands import COMMANDS, run

    if command in COMMANDS:
        return run(args)
    config_path = getattr(args, "config", str(DEFAULT_CONFIG_PATH))
    as_service = command == "serve" and args.service
    overrides = (config_path, getattr(args, "host", None), getattr(args, "port", None), as_service)
    from gateway.hub.commands import serving_config

    named = getattr(args, "model", []) if command == "serve" else []
    if named:
        overrides = (None, *overrides[1:])
    try:
        config = None if command == "uninstall" else _load(*overrides, named)
        if command == "serve" and config is not None:
            config = serving_config(config, named, pull=getattr(args, "pull", False))
        if command == "serve" and config is not None and config.nodes:
            from shared.sockets import CurveKeyError, read_key_pair

            try:
                read_key_pair(config.server.curve_public_key_file, config.server.curve_secret_key_file)
            except CurveKeyError as exc:
                raise ConfigError(str(exc)) from exc
    except ConfigError as exc:
        return _config_error(exc, as_service)
    if command == "serve":
        assert config is not None
        return serve(
            config, config_path, lambda: serving_config(_load(*overrides, named), named), as_service=as_service
        )
    if command == "reload":
        assert config is not None
        return reload(config)
    code = service(command, config_path, config, getattr(args, "dry_run", False), getattr(args, "env", []))
    if command == "status" and code == 0:
        print_server_models(args, config_path)  # what the running server has loaded
    return code


if __name__ == "__main__":
    sys.exit(main())
