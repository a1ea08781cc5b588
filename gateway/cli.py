"""The ``mlxd`` command line.

- ``mlxd serve [--config FILE] [--host H] [--port P]`` (the default): run
  the gateway and its workers until drained by SIGTERM/SIGINT.
- ``mlxd reload [--config FILE]``: make the running server re-read its
  config (sends SIGHUP to the pid in its pid file).
- ``mlxd install [--config FILE] [--dry-run]``, ``mlxd uninstall``,
  ``mlxd status [--config FILE]``: the launchd agent on macOS.

A config error prints one line and exits with status 2; other failures
print one line and exit 1.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path

import msgspec

from shared.config import DEFAULT_CONFIG_PATH, Config, ConfigError, load_config, validate
from shared.logging import setup_logging


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mlxd``."""
    parser = argparse.ArgumentParser(prog="mlxd", description="LLM serving on MLX")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the gateway and its model workers (default)")
    for p in (parser, serve):
        p.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="TOML config file")
        p.add_argument("--host", help="override server.host")
        p.add_argument("--port", type=int, help="override server.port")
    reload = sub.add_parser("reload", help="make the running server re-read its config")
    install = sub.add_parser("install", help="install and start the launchd agent (macOS)")
    install.add_argument("--dry-run", action="store_true", help="print the plist, change nothing")
    status = sub.add_parser("status", help="is the launchd agent loaded and healthy?")
    for p in (reload, install, status):
        p.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="TOML config file")
    sub.add_parser("uninstall", help="stop and remove the launchd agent (macOS)")
    return parser


def _load(path: str, host: str | None = None, port: int | None = None) -> Config:
    """Load the config, applying command-line overrides (ConfigError on error)."""
    config = load_config(path)
    if host is None and port is None:
        return config
    server = msgspec.structs.replace(
        config.server,
        host=host if host is not None else config.server.host,
        port=port if port is not None else config.server.port,
    )
    return validate(msgspec.structs.replace(config, server=server), path)


def serve(config: Config, config_path: str) -> int:
    """Run the server until it is stopped; return the exit code."""
    from gateway.server import run

    setup_logging(config.server.log_level, log_file=config.server.log_file or None)
    logging.getLogger("mlxd").info(
        "serving %s at http://%s:%d/v1",
        ", ".join(m.name for m in config.models),
        config.server.host,
        config.server.port,
    )
    run(config, config_path)
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


def service(command: str, config_path: str, config: Config | None, dry_run: bool) -> int:
    """Run one launchd command; return the exit code."""
    from gateway import launchd

    try:
        if command == "install":
            assert config is not None
            print(launchd.install(config=Path(config_path), drain_timeout=config.server.drain_timeout, dry_run=dry_run))
            return 0
        if command == "uninstall":
            print(launchd.uninstall())
            return 0
        assert config is not None
        st = launchd.status(health_url=launchd.health_url_for(config.server.host, config.server.port))
        print(launchd.format_status(st))
        return 0 if st.healthy else 1
    except launchd.ServiceError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mlxd`` script."""
    args = build_parser().parse_args(argv)
    command = args.command or "serve"
    config_path = getattr(args, "config", str(DEFAULT_CONFIG_PATH))
    try:
        config = (
            None
            if command == "uninstall"
            else _load(config_path, getattr(args, "host", None), getattr(args, "port", None))
        )
    except ConfigError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 2
    if command == "serve":
        assert config is not None
        return serve(config, config_path)
    if command == "reload":
        assert config is not None
        return reload(config)
    return service(command, config_path, config, getattr(args, "dry_run", False))


if __name__ == "__main__":
    sys.exit(main())
