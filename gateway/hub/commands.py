"""The model commands of ``mlxd``: ``pull``, ``ls``, ``rm`` and ``convert``
(what a running server has loaded: ``mlxd ps``, :mod:`gateway.dashboard.commands`).

- ``mlxd pull MODEL``: MODEL is a catalog name (``qwen3:4b``) or
  ``org/name[@revision]``; shows a progress bar on a terminal and plain
  lines otherwise (:mod:`gateway.hub.progress`); ``--list`` prints the
  catalog instead.
- ``mlxd ls``: the models in the local cache with size, kind, state and the
  config entries using them.
- ``mlxd rm MODEL [--force]``: removes a model from the cache; refused
  while a config entry uses it, unless forced.
- ``mlxd convert SRC --quantize 4|8 [--group-size N] --out DIR``: runs
  ``python -m worker.loading.convert`` (mlx-lm's or mlx-vlm's own
  conversion) in a child process, after turning a catalog name into its
  repo id.

Each reads the config (``--config``, default ``configs/mlxd.toml``) for
``server.max_pull_bytes``, ``server.catalog_file``, the ``[[models]]``
entries and where the server listens; a missing default config means
defaults. Exit status: 0 done, 1 failed, 2 bad arguments or config.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from shared.config import DEFAULT_CONFIG_PATH, Config, ConfigError, ServerConfig
from shared.config_values import parse_size

COMMANDS = ("pull", "ls", "rm", "convert")
"""The subcommands this module adds to ``mlxd``."""


def add_parsers(sub: argparse._SubParsersAction) -> None:
    """Add the model commands to ``mlxd``'s subcommand parsers."""
    pull = sub.add_parser("pull", help="download a model from the Hugging Face Hub (catalog name or org/name[@rev])")
    pull.add_argument("model", nargs="?", help="e.g. qwen3:4b or mlx-community/Qwen3-4B-4bit")
    pull.add_argument("--list", action="store_true", help="list the catalog's short names instead")
    ls = sub.add_parser("ls", help="list the models in the local Hugging Face cache")
    rm = sub.add_parser("rm", help="remove a model from the local Hugging Face cache")
    rm.add_argument("model", help="catalog name or org/name")
    rm.add_argument("--force", action="store_true", help="remove it even while a config entry uses it")
    convert = sub.add_parser("convert", help="convert or quantize a model to MLX weights with mlx-lm / mlx-vlm")
    convert.add_argument("source", help="a model directory, .gguf file, catalog name or org/name in the cache")
    convert.add_argument("--quantize", type=int, choices=(4, 8), help="bits per weight (omit to keep floats)")
    convert.add_argument("--group-size", type=int, choices=(32, 64, 128), default=64, help="quantization group size")
    convert.add_argument("--dtype", choices=("float16", "bfloat16", "float32"), help="type of unquantized weights")
    convert.add_argument("--out", required=True, help="the new model directory (must not exist)")
    for parser in (pull, ls, rm, convert):
        parser.add_argument("--config", default=str(DEFAULT_CONFIG_PATH), help="TOML config file")


def run(args: argparse.Namespace) -> int:
    """Run the model command ``args.command``; return the exit status."""
    from gateway.hub.catalog import CatalogError, load_catalog

    try:
        config = _config(args.config)
        catalog = load_catalog(config.server.catalog_file)
    except (ConfigError, CatalogError) as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 2
    handler = {"pull": _pull, "ls": _ls, "rm": _rm, "convert": _convert}[args.command]
    return handler(args, config, catalog)


def named_models_config(named: Sequence[str]) -> Config:
    """The config of ``mlxd serve --model NAME ...``: the server's defaults
    and one entry per name (see :func:`gateway.hub.served.models_for_names`).

    Raises:
        ConfigError: a bad name, an unknown catalog name, a model mlxd
            cannot serve, or a name given twice.
    """
    from gateway.hub.catalog import CatalogError, load_catalog, resolve
    from gateway.hub.names import InvalidName
    from gateway.hub.served import models_for_names
    from shared.config_loader import validate

    try:
        catalog = load_catalog()
        models = models_for_names([resolve(name, catalog) for name in named])
    except (InvalidName, CatalogError) as exc:
        raise ConfigError(f"--model: {exc}") from exc
    return validate(Config(server=ServerConfig(), models=models), "--model")


def serving_config(config: Config, named: Sequence[str] = (), *, pull: bool = False) -> Config:
    """``config`` as ``mlxd serve`` runs it: with ``pull``, every model whose
    source is on the hub and not downloaded yet is pulled first (progress on
    standard error); catalog-name sources become repo ids with the
    catalog's kind and parsers, and with ``server.allow_model_management``
    the pulled models are added (:mod:`gateway.hub.served`).

    Raises:
        ConfigError: the catalog file is invalid, or a pull failed.
    """
    from gateway.hub.audit import command_line_user
    from gateway.hub.catalog import CatalogError
    from gateway.hub.progress import LineReport, TerminalBar
    from gateway.hub.pull import PullError
    from gateway.hub.pull import pull as pull_model
    from gateway.hub.served import catalog_of, expand_sources, pull_target, with_pulled_models

    try:
        catalog = catalog_of(config)
        if pull:
            for model in config.models:
                target = pull_target(model, catalog)
                if target is None:
                    continue
                report = (
                    TerminalBar(sys.stderr)
                    if sys.stderr.isatty()
                    else LineReport(lambda s: print(s, file=sys.stderr), 5.0)
                )
                pull_model(
                    target,
                    who=command_line_user(),
                    max_bytes=parse_size(config.server.max_pull_bytes, 0),
                    listener=report,
                )
        return with_pulled_models(expand_sources(config, catalog), catalog)
    except (CatalogError, PullError) as exc:
        raise ConfigError(str(exc)) from exc


def _config(path: str) -> Config:
    """The config at ``path``; defaults when the default file is absent.

    Raises:
        ConfigError: the file is invalid, or a named file is missing.
    """
    from shared.config_loader import load_config

    if path == str(DEFAULT_CONFIG_PATH) and not Path(path).exists():
        return Config(server=ServerConfig())
    return load_config(path)


def _sources(config: Config) -> dict[str, str]:
    """Config entry name -> source."""
    return {m.name: m.source for m in config.models}


def _pull(args: argparse.Namespace, config: Config, catalog: dict) -> int:
    """``mlxd pull``."""
    from gateway.hub.audit import command_line_user
    from gateway.hub.catalog import resolve
    from gateway.hub.names import InvalidName
    from gateway.hub.progress import LineReport, TerminalBar, human_bytes
    from gateway.hub.pull import PullError, pull

    if args.list or not args.model:
        for name, entry in sorted(catalog.items()):
            print(f"{name:<16} {entry.kind:<13} {entry.repo}  {entry.description}")
        return 0 if args.list else 2
    try:
        target = resolve(args.model, catalog)
    except InvalidName as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 2
    listener = TerminalBar(sys.stderr) if sys.stderr.isatty() else LineReport(lambda s: print(s, file=sys.stderr), 5.0)
    who = command_line_user()
    _exit_on_interrupt(target.label, who)
    try:
        pulled = pull(
            target,
            who=who,
            max_bytes=parse_size(config.server.max_pull_bytes, 0),
            listener=listener,
        )
    except PullError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 1
    already = ", already complete" if pulled.fetched == 0 else ""
    print(
        f"pulled {target.label} ({target.ref.repo_id}@{pulled.commit[:12]}, {human_bytes(pulled.bytes)}{already})"
        f" to {pulled.path}"
    )
    print(f"serve it: mlxd serve --model {target.label}")
    return 0


def _exit_on_interrupt(label: str, who: str) -> None:
    """Make Ctrl-C (and SIGTERM) end a pull at once: huggingface-hub's
    download threads would otherwise finish the files in flight first.
    Nothing is lost: the pull's record still says ``downloading`` (so the
    model is not served) and the next ``mlxd pull`` keeps the finished
    files. The interruption is recorded."""
    import signal

    from gateway.hub import audit

    def stop(signum: int, _frame: object) -> None:
        print(f"\nmlxd: pull of {label} interrupted; run `mlxd pull {label}` again to finish it", file=sys.stderr)
        audit.record("pull", label, who, f"interrupted by signal {signal.Signals(signum).name}")
        os._exit(130)

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)


def _ls(args: argparse.Namespace, config: Config, catalog: dict) -> int:
    """``mlxd ls``."""
    from gateway.hub.progress import human_bytes
    from gateway.hub.store import list_local

    models = list_local(_sources(config), catalog)
    rows = [("NAME", "REPO", "COMMIT", "SIZE", "KIND", "STATE", "USED BY")]
    for m in models:
        name = ", ".join(m.names) or "-"
        revision = ",".join(m.refs) or "-"
        rows.append(
            (
                name,
                m.repo_id,
                f"{m.commit[:12]} ({revision})",
                human_bytes(m.size),
                m.kind,
                m.state,
                ", ".join(m.used_by) or "-",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    return 0


def _rm(args: argparse.Namespace, config: Config, catalog: dict) -> int:
    """``mlxd rm``."""
    from gateway.hub.audit import command_line_user
    from gateway.hub.catalog import resolve
    from gateway.hub.names import InvalidName
    from gateway.hub.progress import human_bytes
    from gateway.hub.store import StoreError, remove

    try:
        target = resolve(args.model, catalog)
        freed = remove(target, who=command_line_user(), sources=_sources(config), catalog=catalog, force=args.force)
    except InvalidName as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 2
    except StoreError as exc:
        print(f"mlxd: {exc}", file=sys.stderr)
        return 1
    print(f"removed {target.label} ({target.ref.repo_id}, {human_bytes(freed)})")
    return 0


def _convert(args: argparse.Namespace, config: Config, catalog: dict) -> int:
    """``mlxd convert``: a catalog name becomes its repo id, then the
    conversion runs in ``python -m worker.loading.convert``."""
    from gateway.hub.catalog import resolve
    from gateway.hub.names import InvalidName

    source = args.source
    if Path(source).expanduser().exists():
        source = str(Path(source).expanduser().resolve())
    elif not source.startswith("package:"):
        try:
            source = str(resolve(source, catalog).ref)
        except InvalidName as exc:
            print(f"mlxd: {exc}", file=sys.stderr)
            return 2
    out = str(Path(args.out).expanduser().resolve())
    command = [sys.executable, "-m", "worker.loading.convert", source, "--out", out]
    if args.quantize:
        command += ["--quantize", str(args.quantize), "--group-size", str(args.group_size)]
    if args.dtype:
        command += ["--dtype", args.dtype]
    return subprocess.call(command)
