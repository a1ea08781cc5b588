"""The dashboard's subcommands of ``mlxd``: ``top`` and ``ps``, and the
model table ``status`` appends (the views: :mod:`gateway.dashboard.top`).

Only argument parsing lives here, so ``mlxd serve`` does not import the
terminal UI library; the views are imported when a command runs.
"""

from __future__ import annotations

import argparse
import sys

from shared.config import DEFAULT_CONFIG_PATH, ConfigError

COMMANDS = ("top", "ps")
"""The subcommands this module adds to ``mlxd`` (``status`` exists already)."""


def add_target_arguments(parser: argparse.ArgumentParser) -> None:
    """``--url`` and ``--api-key``: which server to read, with what key."""
    parser.add_argument("--url", help="the server's base URL (default: the config's host and port)")
    parser.add_argument("--api-key", help="API key (default: $MLXD_API_KEY, else the config's first key)")


def add_dashboard_parsers(sub: argparse._SubParsersAction) -> None:
    """Add ``mlxd top`` and the dashboard's ``mlxd ps`` to ``mlxd``'s
    subcommand parsers (``status`` gets :func:`add_target_arguments` where
    it is defined)."""
    top = sub.add_parser("top", help="a live view of the running server in the terminal (Ctrl-C quits)")
    top.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    ps = sub.add_parser("ps", help="the running server's models: state, memory, requests, caches (one table)")
    for parser in (top, ps):
        add_target_arguments(parser)
        parser.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="TOML config file")


def run_dashboard_command(args: argparse.Namespace) -> int:
    """Run ``mlxd top`` or ``mlxd ps``; return the exit status (2 on a bad
    config or interval)."""
    from gateway.dashboard.client import target
    from gateway.dashboard.top import print_models, run_top

    try:
        server = target(args.url, args.api_key, args.config)
    except ConfigError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 2
    if args.command == "top":
        if not 0.1 <= args.interval <= 3600:
            print("mlxd: --interval must be between 0.1 and 3600 seconds", file=sys.stderr)
            return 2
        return run_top(server, args.interval)
    return print_models(server)


def print_server_models(args: argparse.Namespace, config_path: str) -> None:
    """For ``mlxd status``: print the running server's model table (or, on
    stderr, why it cannot be read)."""
    from gateway.dashboard.client import target
    from gateway.dashboard.top import print_models

    try:
        print_models(target(args.url, args.api_key, config_path))
    except ConfigError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
