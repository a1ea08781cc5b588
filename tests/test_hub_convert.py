"""``mlxd convert``: quantizing a full-precision model through mlx-lm's own
``mlx_lm.convert`` (run by ``python -m worker.loading.convert``), loading the
result and generating with it; a catalog name resolves to its pulled
snapshot; quantizing an already quantized model (such as the default GGUF)
is refused."""

from __future__ import annotations

import json

import pytest

from shared.config import DEFAULT_MODEL_SOURCE
from tests.hub_standin import HubStandin
from tests.hub_support import HubWorld


@pytest.fixture(scope="module")
def hub():
    """A hub stand-in for the module."""
    standin = HubStandin()
    yield standin
    standin.close()


@pytest.mark.parametrize("bits", [4, 8])
def test_quantize_a_float_model_then_load_and_generate(tmp_path, hub, tiny_model_dir, bits):
    world = HubWorld(tmp_path, hub)
    world.write_config()
    out = tmp_path / f"tiny-q{bits}"
    result = world.mlxd(
        "convert", str(tiny_model_dir), "--quantize", str(bits), "--group-size", "32", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    assert f"wrote {out}" in result.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["bits"] == bits and config["quantization"]["group_size"] == 32
    assert (out / "model.safetensors").stat().st_size < (tiny_model_dir / "model.safetensors").stat().st_size / 2

    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm import generate, load

    model, tokenizer = load(str(out))
    assert any(isinstance(m, nn.QuantizedLinear | nn.QuantizedEmbedding) for _, m in model.named_modules())
    mx.random.seed(0)
    text = generate(model, tokenizer, prompt="Hello", max_tokens=8)
    assert len(tokenizer.encode(text, add_special_tokens=False)) >= 1


def test_convert_a_pulled_model_by_its_catalog_name(tmp_path, hub, tiny_model_dir):
    world = HubWorld(tmp_path, hub)
    world.serve_tiny("test-org/tiny-convert", tiny_model_dir, "tiny:convert")
    world.write_config()
    assert world.mlxd("pull", "tiny:convert").returncode == 0
    out = tmp_path / "converted"
    result = world.mlxd("convert", "tiny:convert", "--quantize", "8", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "models--test-org--tiny-convert/snapshots/" in result.stdout
    assert json.loads((out / "config.json").read_text())["quantization"]["bits"] == 8


def test_quantizing_a_quantized_model_is_refused(tmp_path, hub):
    world = HubWorld(tmp_path, hub)
    world.write_config()
    out = tmp_path / "again"
    result = world.mlxd("convert", DEFAULT_MODEL_SOURCE, "--quantize", "4", "--out", str(out))
    assert result.returncode == 1
    assert "is already quantized (4 bits); quantize its full-precision checkpoint" in result.stderr
    assert not out.exists()
    exists = world.mlxd("convert", DEFAULT_MODEL_SOURCE, "--out", str(tmp_path))
    assert exists.returncode == 2 and "already exists" in exists.stderr


def test_a_vision_model_is_quantized_with_mlx_vlm(tmp_path, hub):
    from tests.tiny_vlm import build_tiny_vlm

    source = build_tiny_vlm(tmp_path / "vlm")
    world = HubWorld(tmp_path, hub)
    world.write_config()
    out = tmp_path / "vlm-q4"
    result = world.mlxd("convert", str(source), "--quantize", "4", "--group-size", "32", "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "(vision)" in result.stdout
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["bits"] == 4 and "vision_config" in config
    assert (out / "preprocessor_config.json").is_file()

    import mlx.nn as nn
    from mlx_vlm import load

    model, _processor = load(str(out))
    assert any(isinstance(m, nn.QuantizedLinear) for _, m in model.named_modules())
