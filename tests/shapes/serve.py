"""``python -m tests.shapes.serve ARGS``: ``python -m gateway ARGS`` with every
HTTP response recorded for the official-type checks.

The test fixtures start their gateways this way (``tests/conftest.py``
``start_server``). The gateway is the real one, built by the real
``build_app``; the only difference is the outermost
:class:`~tests.shapes.recorder.ResponseRecorder`, which appends each
response to the JSON-lines file named by :data:`RECORD_ENV`.
"""

from __future__ import annotations

import os
import sys

RECORD_ENV = "MLXD_TEST_RESPONSE_LOG"
"""The environment variable naming the file the responses are appended to."""


def install(path: str) -> None:
    """Make the gateway's ``build_app`` wrap each app it builds in a recorder
    writing to ``path``."""
    import gateway.server
    from tests.shapes.recorder import FileSink, ResponseRecorder

    build_app = gateway.server.build_app

    def recorded_app(*args, **kwargs):
        app = build_app(*args, **kwargs)
        app.add_middleware(ResponseRecorder, sink=FileSink(path))
        return app

    gateway.server.build_app = recorded_app


def main() -> int:
    """Install the recorder (when :data:`RECORD_ENV` is set) and run the gateway's command line."""
    from gateway.cli import main as gateway_main

    path = os.environ.get(RECORD_ENV)
    if path:
        install(path)
    return gateway_main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
