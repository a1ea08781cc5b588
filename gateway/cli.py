"""The ``mlxd`` command line.

``mlxd serve [--config FILE] [--host H] [--port P]`` (the default command)
loads the config, starts the gateway under uvicorn and one worker per
model, and serves until SIGINT or SIGTERM. A config error prints one line
and exits with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import signal
import sys

import msgspec

from shared.config import DEFAULT_CONFIG_PATH, ConfigError, load_config, validate
from shared.logging import setup_logging


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``mlxd``."""
    parser = argparse.ArgumentParser(prog="mlxd", description="LLM serving on MLX")
    sub = parser.add_subparsers(dest="command")
    serve = sub.add_parser("serve", help="run the gateway and its model workers")
    for p in (parser, serve):
        p.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="TOML config file")
        p.add_argument("--host", help="override server.host")
        p.add_argument("--port", type=int, help="override server.port")
    return parser


def serve(config_path: str, host: str | None, port: int | None) -> int:
    """Run the server until it is stopped; return the exit code."""
    import uvicorn

    from gateway.app import build_app

    try:
        config = load_config(config_path)
        server = config.server
        if host is not None or port is not None:
            server = msgspec.structs.replace(
                server,
                host=host if host is not None else server.host,
                port=port if port is not None else server.port,
            )
            config = validate(msgspec.structs.replace(config, server=server), config_path)
    except ConfigError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 2
    setup_logging(config.server.log_level)
    logging.getLogger("mlxd").info(
        "serving %s at http://%s:%d/v1",
        ", ".join(m.name for m in config.models), config.server.host, config.server.port,
    )
    server_config = uvicorn.Config(
        build_app(config),
        host=config.server.host,
        port=config.server.port,
        log_level="warning",
        access_log=False,
        timeout_keep_alive=30,
        h11_max_incomplete_event_size=64 * 1024,
    )
    GracefulServer(server_config).run()
    logging.getLogger("mlxd").info("stopped")
    return 0


class GracefulServer:
    """A uvicorn server that treats SIGINT/SIGTERM as a request to shut
    down cleanly (lifespan shutdown stops every worker) and then returns,
    so the process exits 0 instead of re-raising the signal."""

    def __init__(self, config: object) -> None:
        import uvicorn

        class _Server(uvicorn.Server):
            @contextlib.contextmanager
            def capture_signals(self):  # type: ignore[override]
                handled = (signal.SIGINT, signal.SIGTERM)
                previous = {sig: signal.signal(sig, self.handle_exit) for sig in handled}
                try:
                    yield
                finally:
                    for sig, handler in previous.items():
                        signal.signal(sig, handler)

        self._server = _Server(config)  # type: ignore[arg-type]

    def run(self) -> None:
        """Serve until a shutdown signal; blocks the calling (main) thread."""
        self._server.run()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``mlxd`` script."""
    args = build_parser().parse_args(argv)
    return serve(args.config, args.host, args.port)


if __name__ == "__main__":
    sys.exit(main())
