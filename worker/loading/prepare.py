"""``python -m worker.loading.prepare``: make every configured model ready to load.

Resolves each model's source once (a GGUF file is converted into the cache
the first time; later runs find it there), so ``make run`` and ``make test``
do the slow work up front with a clear message instead of inside the first
request. Exits 1 with one line per model that cannot be resolved.
"""

from __future__ import annotations

import argparse
import sys
import time

from shared.config import DEFAULT_CONFIG_PATH, ConfigError
from shared.config_loader import load_config


def main(argv: list[str] | None = None) -> int:
    """Resolve every model of the config; return the exit code."""
    parser = argparse.ArgumentParser(prog="python -m worker.loading.prepare")
    parser.add_argument("--config", default=str(DEFAULT_CONFIG_PATH))
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config)
    except ConfigError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 2
    from worker.loading.loader import ModelLoadError, resolve_source

    failed = 0
    for model in config.models:
        started = time.monotonic()
        try:
            path = resolve_source(model.source)
        except ModelLoadError as exc:
            print(f"mlxd: model {model.name!r}: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(f"model {model.name}: {path} ({time.monotonic() - started:.1f}s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
