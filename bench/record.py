"""Where the bench scripts leave their results as data: ``bench/results/NAME.json``.

Every file is one envelope::

    {"bench": NAME, "date": "2026-12-02T10:00:00Z", "machine": "...",
     "source": "measured by bench/NAME.py ...", "results": {...}}

``machine`` says what ran it (OS, architecture, CPU, cores, memory, MLX
version and BLAS), ``source`` how the numbers came to be (a run of the
script, or a seed transcribed from ``bench/NOTES.md``), and ``results`` is
the script's own shape, which ``bench/plots.py`` draws. :func:`write`
replaces the file of the same bench (the latest run is the one plotted),
which each script does only when run with ``--write``
(:func:`add_write_flag`; ``make bench`` passes it);
:func:`read_all` reads every file back.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
"""The directory of the result files (and of ``plots/``)."""


def _cpu_model() -> str:
    """The CPU's marketing name, or the architecture when unknown."""
    try:
        if sys.platform == "darwin":
            done = subprocess.run(["sysctl", "-n", "machdep.cpu.brand_string"], capture_output=True, text=True)
            if done.returncode == 0 and done.stdout.strip():
                return done.stdout.strip()
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _blas() -> str:
    """Which BLAS MLX's CPU work uses: Metal/Accelerate on macOS, else
    OpenBLAS when the system has it (the workers preload it) or MLX's own."""
    if sys.platform == "darwin":
        return "Metal"
    if os.environ.get("MLXD_BLAS") == "builtin":
        return "MLX reference BLAS"
    try:
        listed = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True).stdout
    except OSError:
        listed = ""
    return "OpenBLAS" if "libopenblas.so.0 " in listed else "MLX reference BLAS"


def machine() -> str:
    """One line saying what this machine is, e.g. ``Linux x86_64, AMD EPYC
    7B13, 2 cores, 15.6 GiB, mlx 0.32.4, OpenBLAS``."""
    parts = [f"{platform.system()} {platform.machine()}", _cpu_model(), f"{os.cpu_count()} cores"]
    try:
        import psutil

        parts.append(f"{psutil.virtual_memory().total / 2**30:.1f} GiB")
    except ImportError:
        pass
    try:
        from importlib import metadata

        name = "mlx-cpu" if sys.platform == "linux" else "mlx"
        parts.append(f"mlx {metadata.version(name)}")
    except Exception:  # noqa: BLE001 (a version we cannot read is left out)
        pass
    parts.append(_blas())
    return ", ".join(parts)


def add_write_flag(parser: argparse.ArgumentParser) -> None:
    """``--write``: replace ``bench/results/NAME.json`` with this run's numbers.
    Without it a script only prints them, so a smoke run leaves the committed
    results (the ones the README's plots are drawn from) alone; ``make bench``
    passes it."""
    parser.add_argument(
        "--write",
        action="store_true",
        help="write the results to bench/results/NAME.json (make bench does); without it they are only printed",
    )


def write(bench: str, results: dict[str, Any], source: str | None = None, directory: Path = RESULTS) -> Path:
    """Write ``results`` of ``bench`` (its script's name without ``.py``)
    to ``directory/bench.json``, with today's date (UTC) and this machine;
    ``source`` defaults to "measured by bench/<bench>.py" and the command
    line. Returns the path."""
    directory.mkdir(parents=True, exist_ok=True)
    envelope = {
        "bench": bench,
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "machine": machine(),
        "source": source or f"measured by bench/{bench}.py {' '.join(sys.argv[1:])}".rstrip(),
        "results": results,
    }
    path = directory / f"{bench}.json"
    path.write_text(json.dumps(envelope, indent=2) + "\n")
    print(f"[results] {path}", file=sys.stderr)
    return path


def read_all(directory: Path = RESULTS) -> dict[str, dict[str, Any]]:
    """Every result file in ``directory``, by bench name.

    Raises:
        ValueError: a file is not a result envelope (names the file).
    """
    found = {}
    for path in sorted(directory.glob("*.json")):
        data = json.loads(path.read_text())
        if not isinstance(data, dict) or not {"bench", "date", "machine", "source", "results"} <= set(data):
            raise ValueError(f"{path} is not a bench result (bench, date, machine, source, results)")
        found[data["bench"]] = data
    return found
