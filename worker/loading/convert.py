"""``python -m worker.loading.convert SRC --out DIR [--quantize 4|8] [--group-size N] [--dtype T]``:
make an MLX model directory from a checkpoint with mlx-lm's own
``mlx_lm.convert`` (mlx-vlm's ``mlx_vlm.convert`` for a vision model,
detected by :func:`shared.model_kind.detect_kind`).

``SRC`` is any model source the worker accepts
(:func:`worker.loading.loader.resolve_source`): a model directory, a ``.gguf``
file (converted to an MLX directory first, as serving it does), a
``package:`` source or a Hugging Face repo id already in the local cache
(``mlxd convert`` turns catalog names into repo ids). Nothing is
downloaded and no code from the model is run (``trust_remote_code`` is
off for both converters). ``--quantize`` of an already quantized model is
refused (quantize the full-precision checkpoint instead). ``DIR`` must
not exist; on failure nothing is left there.

Prints one line per step; exits 0 when the result loads with mlx-lm (or
mlx-vlm), 1 with a one-line reason otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shutil
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    """Run the conversion; return the exit status."""
    parser = argparse.ArgumentParser(prog="python -m worker.loading.convert")
    parser.add_argument("source")
    parser.add_argument("--out", required=True)
    parser.add_argument("--quantize", type=int, choices=(4, 8))
    parser.add_argument("--group-size", type=int, choices=(32, 64, 128), default=64)
    parser.add_argument("--dtype", choices=("float16", "bfloat16", "float32"))
    args = parser.parse_args(argv)
    out = Path(args.out).expanduser()
    if out.exists():
        print(f"mlxd convert: {out} already exists; choose a new directory", file=sys.stderr)
        return 2
    try:
        convert(args.source, out, bits=args.quantize, group_size=args.group_size, dtype=args.dtype)
    except ConversionError as exc:
        shutil.rmtree(out, ignore_errors=True)
        print(f"mlxd convert: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


class ConversionError(Exception):
    """The conversion cannot be done or failed (one line)."""


def convert(source: str, out: Path, *, bits: int | None, group_size: int = 64, dtype: str | None = None) -> Path:
    """Convert ``source`` into ``out`` (quantized to ``bits`` when given)
    and check that the result loads.

    Raises:
        ConversionError: unresolvable source, an already quantized source
            asked to be quantized, or the converter or the check failed.
    """
    from shared.model_kind import detect_kind
    from worker.loading.loader import ModelLoadError, one_line, resolve_source

    try:
        path = resolve_source(source)
    except ModelLoadError as exc:
        raise ConversionError(str(exc)) from exc
    config = _read_config(path)
    existing = config.get("quantization") or config.get("quantization_config")
    if bits and existing:
        raise ConversionError(
            f"{source} is already quantized ({existing.get('bits', '?')} bits); quantize its full-precision checkpoint"
        )
    kind = detect_kind(path)
    if kind in ("embedding", "rerank"):
        raise ConversionError(
            f"{source} is {'an embedding' if kind == 'embedding' else 'a rerank'} model; mlxd serves those without conversion"
        )
    print(f"converting {path} ({kind}) to {out}" + (f", {bits}-bit, group size {group_size}" if bits else ""))
    options = {
        "hf_path": str(path),
        "mlx_path": str(out),
        "quantize": bool(bits),
        "q_bits": bits or 4,
        "q_group_size": group_size,
        "dtype": dtype,
        "trust_remote_code": False,
    }
    try:
        with contextlib.redirect_stdout(sys.stderr):
            if kind == "vision":
                from mlx_vlm.convert import convert as vlm_convert

                vlm_convert(**options)
            else:
                from mlx_lm.convert import convert as lm_convert

                lm_convert(**options)
    except Exception as exc:  # the converters raise ValueError, OSError, KeyError, ...
        raise ConversionError(f"conversion of {source} failed: {one_line(exc)}") from exc
    _check_loads(out, kind)
    return out


def _read_config(path: Path) -> dict:
    """The model directory's ``config.json`` ({} when unreadable)."""
    try:
        data = json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _check_loads(out: Path, kind: str) -> None:
    """Load the result once with the library that will serve it.

    Raises:
        ConversionError: it does not load.
    """
    from worker.loading.loader import one_line

    try:
        if kind == "vision":
            from mlx_vlm import load as vlm_load

            vlm_load(str(out), trust_remote_code=False)
        else:
            from mlx_lm import load as lm_load

            lm_load(str(out), lazy=True)
    except Exception as exc:  # any loader failure means the result is unusable
        raise ConversionError(f"the converted model in {out} does not load: {one_line(exc)}") from exc


if __name__ == "__main__":
    sys.exit(main())
