"""Peers that need an environment of their own: vllm-mlx.

vllm-mlx 0.6.0 pins ``mlx-lm<0.32`` (mlxd's venv has 0.32.x) and declares
heavy dependencies that its text server never imports (torchvision, gradio,
opencv, mlx-vlm, mlx-embeddings, ...). So it gets its own venv under the
bench cache (next to the bench's model directories, shared by every
checkout), with vllm-mlx installed ``--no-deps`` plus exactly the packages
its ``serve --continuous-batching`` path imports (:data:`VLLM_MLX_DEPS`,
found by starting it and adding what failed to import). ``mlx[cpu]`` is
pinned to the version mlxd's venv runs, so every contender uses the same
MLX build.

Usage (``make bench`` runs the first before bench/compare.py)::

    .venv/bin/python bench/peers.py ensure-vllm-mlx   # create or update the venv
    .venv/bin/python bench/peers.py status            # say whether it is usable

A failed install never raises out of :func:`ensure_vllm_mlx`: the reason is
written to the venv's ``FAILED`` file, and :func:`vllm_mlx_python` returns it
so bench/compare.py can skip the contender with that reason.
"""

from __future__ import annotations

import fcntl
import hashlib
import shutil
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

VLLM_MLX = "vllm-mlx==0.6.0"
VLLM_MLX_DEPS = (
    "mlx-lm==0.31.3",  # vllm-mlx 0.6.0 needs >=0.31.3,<0.32
    "transformers==5.24.0",
    "tokenizers==0.23.3",
    "huggingface-hub==2.4.0",
    "numpy==2.4.6",
    "pyyaml==6.0.4",
    "jinja2==3.1.6",
    "sentencepiece==0.2.3",
    "protobuf==7.36.2",
    "safetensors==0.8.0",
    "regex==2026.11.19",
    "fastapi==0.165.0",
    "starlette==1.10.0",
    "uvicorn==0.54.0",
    "pydantic==2.14.4",
    "psutil==7.2.2",
    "requests==2.34.2",
    "tqdm==4.70.1",
    "pillow==13.0.0",
    "prometheus-client==0.26.0",
    "jsonschema==4.26.0",
    "python-multipart==0.0.34",  # fastapi needs it for vllm-mlx's form (audio) routes
    "tabulate",
    "pytz",
)
"""What vllm-mlx's text server imports, pinned (mostly to the versions mlxd's
venv has, which this machine's wheel cache holds). Installed with their own
dependencies; vllm-mlx itself is installed ``--no-deps``."""

CHECK_IMPORTS = ("vllm_mlx.cli", "vllm_mlx.server", "vllm_mlx.engine.batched", "mlx_lm.generate")
"""Modules the server path needs; importing them all is the install check."""


def mlx_requirement() -> str:
    """``mlx[cpu]`` (Linux) or ``mlx`` (macOS) at the version mlxd's venv runs."""
    extra = "[cpu]" if sys.platform.startswith("linux") else ""
    return f"mlx{extra}=={version('mlx')}"


def requirements() -> list[str]:
    """Every requirement of the venv except vllm-mlx itself."""
    return [mlx_requirement(), *VLLM_MLX_DEPS]


def spec_digest() -> str:
    """A digest of what the venv should hold (a change reinstalls)."""
    text = "\n".join([VLLM_MLX, *requirements(), sys.version.split()[0]])
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def vllm_mlx_venv() -> Path:
    """The venv's directory (under the bench cache of bench/models.py)."""
    from models import bench_cache

    return bench_cache() / "venv-vllm-mlx"


def _python(venv: Path) -> Path:
    return venv / "bin" / "python"


def vllm_mlx_python() -> tuple[Path | None, str]:
    """``(python, "")`` when the vllm-mlx venv is installed and up to date,
    else ``(None, reason)`` (never raises). Does not install anything."""
    venv = vllm_mlx_venv()
    stamp, failed = venv / "READY", venv / "FAILED"
    if stamp.exists() and stamp.read_text().strip() == spec_digest() and _python(venv).exists():
        return _python(venv), ""
    if failed.exists():
        return None, failed.read_text().strip()
    if stamp.exists():
        return None, f"{venv} is out of date: run `.venv/bin/python bench/peers.py ensure-vllm-mlx`"
    return None, f"{venv} not installed: run `.venv/bin/python bench/peers.py ensure-vllm-mlx`"


def _run(cmd: list[str], log: Path) -> None:
    with open(log, "a") as out:
        out.write(f"\n$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    if done.returncode:
        tail = log.read_text().strip().splitlines()[-15:]
        raise RuntimeError(f"`{' '.join(cmd[:4])} ...` failed ({done.returncode}):\n" + "\n".join(tail))


def ensure_vllm_mlx() -> tuple[Path | None, str]:
    """Create (or bring up to date) the vllm-mlx venv and check that its
    server modules import; return what :func:`vllm_mlx_python` returns
    afterwards. Never raises: a failure is written to the venv's ``FAILED``
    file (and returned) so the bench can skip vllm-mlx with the reason.
    Pip's output goes to the venv's ``install.log``. Concurrent callers (two
    checkouts running ``make bench``) take turns on a lock file beside the
    venv."""
    venv = vllm_mlx_venv()
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / "venv-vllm-mlx.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _ensure_locked(venv)


def _ensure_locked(venv: Path) -> tuple[Path | None, str]:
    python, _ = vllm_mlx_python()
    if python is not None:
        return python, ""
    stamp, failed = venv / "READY", venv / "FAILED"
    try:
        if stamp.exists() or failed.exists():  # out of date or half made: start over
            shutil.rmtree(venv)
        venv.mkdir(parents=True, exist_ok=True)
        failed.unlink(missing_ok=True)
        log = venv / "install.log"
        base = getattr(sys, "_base_executable", sys.executable)
        if not _python(venv).exists():
            _run([base, "-m", "venv", str(venv)], log)
        pip = [str(_python(venv)), "-m", "pip", "install", "-q"]
        _run([*pip, *requirements()], log)
        _run([*pip, "--no-deps", VLLM_MLX], log)
        _run([str(_python(venv)), "-c", "; ".join(f"import {m}" for m in CHECK_IMPORTS)], log)
    except Exception as exc:  # noqa: BLE001 - any failure becomes the skip reason
        venv.mkdir(parents=True, exist_ok=True)
        failed.write_text(f"vllm-mlx venv could not be made ({venv}): {exc}\n")
        return None, failed.read_text().strip()
    failed.unlink(missing_ok=True)
    stamp.write_text(spec_digest() + "\n")
    return _python(venv), ""


def main() -> None:
    """``ensure-vllm-mlx`` or ``status``; prints the venv's python or the
    reason it is unusable (exit 0 either way: the bench skips vllm-mlx)."""
    if len(sys.argv) != 2 or sys.argv[1] not in ("ensure-vllm-mlx", "status"):
        sys.exit("usage: python bench/peers.py ensure-vllm-mlx|status")
    python, reason = ensure_vllm_mlx() if sys.argv[1] == "ensure-vllm-mlx" else vllm_mlx_python()
    print(f"vllm-mlx: {python}" if python else f"vllm-mlx unavailable: {reason}")


if __name__ == "__main__":
    main()
