"""The two model directories the comparison bench serves.

* :func:`float32_model` writes, once, a float32 copy of the default model
  (SmolLM2-135M-Instruct). mlxd dequantizes the quantized directory it
  converts from the GGUF file at load on a CPU backend; a peer such as
  ``mlx_lm.server`` would not, so every contender is pointed at this one
  float32 directory instead. The copy is made in a subprocess (``python
  bench/models.py float32 OUT``) so the bench process never holds MLX state.
* :func:`tiny_model` builds the tiny random-weight llama of
  ``tests/tiny_model.py``, whose forward pass costs almost nothing.

Both live under ``<mlxd model cache>/bench/`` and are keyed by the source's
fingerprint, so a later run reuses them.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "generation_config.json",
    "chat_template.jinja",
)


def bench_cache() -> Path:
    """Where the bench keeps its model directories (inside mlxd's model cache)."""
    from worker.loading.gguf_convert import default_cache_root

    return default_cache_root() / "bench"


def float32_model() -> Path:
    """The float32 copy of the default model, written on first use."""
    from shared.config import DEFAULT_MODEL_SOURCE
    from worker.loading.loader import directory_fingerprint, resolve_source

    source = resolve_source(DEFAULT_MODEL_SOURCE)
    out = bench_cache() / f"smollm2-135m-f32-{directory_fingerprint(source)}"
    if not (out / "model.safetensors").exists():
        subprocess.run(
            [sys.executable, str(Path(__file__).resolve()), "float32", str(out)],
            cwd=ROOT,
            check=True,
        )
    return out


def tiny_model() -> Path:
    """The tiny random-weight model directory, built on first use."""
    from tests.tiny_model import build_tiny_model

    return build_tiny_model(bench_cache() / "tiny-llama")


def write_float32_copy(out: Path) -> None:
    """Load the default model dequantized to float32 and save it to ``out``
    as a plain (unquantized) mlx-lm directory: weights, a config without its
    ``quantization`` sections, and the tokenizer files. Writes to a sibling
    temporary directory and renames it, so a crash leaves nothing half made."""
    import mlx.core as mx
    from mlx.utils import tree_flatten

    from shared.config import DEFAULT_MODEL_SOURCE
    from worker.loading.loader import load_model

    loaded = load_model(DEFAULT_MODEL_SOURCE, dtype="float32")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    weights = dict(tree_flatten(loaded.model.parameters()))
    assert all(w.dtype == mx.float32 for w in weights.values()), "not every weight is float32"
    mx.save_safetensors(str(tmp / "model.safetensors"), weights, metadata={"format": "mlx"})
    config = json.loads((loaded.path / "config.json").read_text())
    for key in ("quantization", "quantization_config"):
        config.pop(key, None)
    config["torch_dtype"] = "float32"
    (tmp / "config.json").write_text(json.dumps(config, indent=2))
    for name in TOKENIZER_FILES:
        if (loaded.path / name).exists():
            shutil.copy(loaded.path / name, tmp / name)
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    print(f"wrote float32 model to {out} ({sum(w.nbytes for w in weights.values()) / 1e6:.0f} MB)")


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "float32":
        sys.exit("usage: python bench/models.py float32 OUT_DIR")
    write_float32_copy(Path(sys.argv[2]))
