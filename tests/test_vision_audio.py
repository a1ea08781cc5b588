"""Audio clips in the vision path of the worker, in process: the tiny
Gemma 4 with an audio tower (``tests/tiny_vlm.py``) and the tiny Gemma 3n
(``tests/tiny_vlm_families/gemma3n.py``) loaded by worker.vision.model,
prompts built by worker.prompting.builder with an audio part, run by the
Scheduler over the batch engine. Greedy tokens equal mlx-vlm's own
``generate`` for the same clip and question (for Gemma 3n with two
library defects mended as the reference implementation computes:
:func:`gemma3n_as_reference`), alone and batched; a repeated clip is a prefix-cache hit with the same
tokens; a different clip changes the answer; bad clips are refused naming
the part."""

from __future__ import annotations

import contextlib
import hashlib
import io
import wave

import pytest

from shared.protocol import ChatMessage, GenerateRequest, ImagePart, SamplingParams
from tests.test_vision_engine import TOKENS, _Engine
from tests.tiny_vlm import build_tiny_audio_vlm
from tests.tiny_vlm_families.gemma3n import build_tiny_gemma3n
from tests.tiny_vlm_families.qwen3_omni_moe import build_tiny_qwen3_omni_moe

AUDIO_BUILDERS = {
    "gemma4": build_tiny_audio_vlm,
    "gemma3n": build_tiny_gemma3n,
    "qwen3_omni_moe": build_tiny_qwen3_omni_moe,
}
"""The audio families served, by mlx-vlm model type."""


def make_wav(kind: str, seconds: float = 1.5, rate: int = 16000) -> bytes:
    """A mono 16-bit WAV made with the standard library: ``tone`` (a 440 Hz
    sine rising to 880 Hz) or ``noise`` (seeded white noise)."""
    import numpy as np

    t = np.arange(int(seconds * rate)) / rate
    if kind == "tone":
        signal = 0.5 * np.sin(2 * np.pi * (440 + 147 * t) * t)
    else:
        signal = 0.3 * np.random.default_rng(7).standard_normal(t.size)
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((np.clip(signal, -1, 1) * 32767).astype("<i2").tobytes())
    return out.getvalue()


def audio_request(request_id: str, text: str, clip: bytes) -> GenerateRequest:
    """A greedy one-turn chat request: ``text`` then the clip."""
    part = ImagePart(data=clip, sha256=hashlib.sha256(clip).hexdigest(), offset=len(text), kind="audio")
    return GenerateRequest(
        request_id=request_id,
        sampling=SamplingParams(max_tokens=TOKENS, temperature=0.0),
        messages=[ChatMessage(role="user", content=text, images=[part])],
    )


@pytest.fixture(scope="module")
def clips(tmp_path_factory):
    """Clips as (path, bytes): a tone, noise, the tone at 22.05 kHz, and a
    3 s tone (75 audio tokens: the prompt outgrows the tiny model's
    64-token sliding window, so its rotating caches wrap)."""
    root = tmp_path_factory.mktemp("clips")
    made = {
        "tone": make_wav("tone"),
        "noise": make_wav("noise"),
        "tone22k": make_wav("tone", rate=22050),
        "long": make_wav("tone", seconds=3.0),
    }
    for name, blob in made.items():
        (root / f"{name}.wav").write_bytes(blob)
    return {name: (root / f"{name}.wav", blob) for name, blob in made.items()}


@pytest.fixture(scope="module", params=sorted(AUDIO_BUILDERS))
def model_dir(request, tmp_path_factory):
    """A tiny audio model's directory, one per audio family."""
    return AUDIO_BUILDERS[request.param](tmp_path_factory.mktemp(request.param) / "m")


class _AtCallStart:
    """``cache`` read at the position of a call's first token: ``length``
    positions before its offset (everything else as the cache)."""

    def __init__(self, cache, length: int) -> None:
        self._cache, self._length = cache, length

    def __getattr__(self, name):
        return getattr(self._cache, name)

    @property
    def offset(self):
        """The offset before the call's ``length`` tokens."""
        return self._cache.offset - self._length


@contextlib.contextmanager
def gemma3n_as_reference():
    """While open, mlx-vlm's Gemma 3n computes as the model's reference
    implementation (transformers) does in two places where mlx-vlm 0.7.10
    does not: its KV-shared attention layers rotate their queries from the
    position of the call's first token (mlx-vlm reads the shared cache's
    offset after the call's tokens were added, so a prompt prefilled in
    one call and in two answer differently; mlx-lm's Gemma 3n has it
    right), and ``get_input_embeddings`` scales text tokens by the square
    root of the hidden size as the language model scales ids (mlx-vlm
    leaves them unscaled, so a prompt fed as embeddings and as ids answer
    differently). The first is worker.vision.cache_view's SharedKVView,
    the second worker.vision.prompt_embeddings."""
    import mlx.core as mx
    from mlx_vlm.models.gemma3n.gemma3n import Model
    from mlx_vlm.models.gemma3n.language import Gemma3nAttention

    attention, embeddings = Gemma3nAttention.__call__, Model.get_input_embeddings

    def attend(self, x, mask=None, cache=None):
        if self.is_kv_shared_layer and cache is not None:
            cache = _AtCallStart(cache, x.shape[1])
        return attention(self, x, mask, cache)

    def embed(self, input_ids=None, pixel_values=None, **kwargs):
        result = embeddings(self, input_ids, pixel_values, **kwargs)
        text = input_ids < self.embed_vision.vocab_offset
        scale = self.config.text_config.hidden_size**0.5
        result.inputs_embeds = mx.where(text[..., None], result.inputs_embeds * scale, result.inputs_embeds)
        return result

    Gemma3nAttention.__call__, Model.get_input_embeddings = attend, embed
    try:
        yield
    finally:
        Gemma3nAttention.__call__, Model.get_input_embeddings = attention, embeddings


@pytest.fixture(scope="module")
def engine(model_dir):
    """The running engine over the tiny audio model."""
    running = _Engine(model_dir)
    yield running
    running.stop()


@pytest.fixture(scope="module")
def reference(model_dir):
    """mlx-vlm's own model and processor, loaded on this thread."""
    from mlx_vlm import load

    return load(str(model_dir))


def _reference(reference, text: str, clip_path) -> list[int]:
    """mlx-vlm's own greedy tokens for the same turn and clip (None: text only)."""
    from mlx_vlm import generate

    model, processor = reference
    content = [{"type": "text", "text": text}] + ([{"type": "audio"}] if clip_path else [])
    prompt = processor.tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    audio = [str(clip_path)] if clip_path else None
    fixed = gemma3n_as_reference() if model.config.model_type == "gemma3n" else contextlib.nullcontext()
    with fixed:
        result = generate(model, processor, prompt, audio=audio, max_tokens=TOKENS, temperature=0.0)
    return list(result.token_ids)


def test_audio_requests_match_mlx_vlm_alone_batched_and_cached(engine, reference, clips):
    """Each clip's answer equals mlx-vlm's (a resampled one too); the
    answers differ; a repeat, batched with other clips and a text request
    (whose answer equals mlx-vlm's text answer), is served from the prefix
    cache with the same tokens."""
    want = {name: _reference(reference, "Hi", path) for name, (path, _) in clips.items()}
    assert want["tone"] != want["noise"]  # the clip decides the answer
    cold = engine.run(audio_request("tone", "Hi", clips["tone"][1]))
    assert cold["tone"] == (want["tone"], 0)
    text = GenerateRequest(
        request_id="text",
        sampling=SamplingParams(max_tokens=TOKENS, temperature=0.0),
        messages=[ChatMessage(role="user", content="Hello there, what is said?")],
    )
    mixed = engine.run(
        text,
        audio_request("noise", "Hi", clips["noise"][1]),
        audio_request("tone2", "Hi", clips["tone"][1]),
        audio_request("tone22k", "Hi", clips["tone22k"][1]),
    )
    assert mixed["noise"][0] == want["noise"]
    assert mixed["text"][0] == _reference(reference, "Hello there, what is said?", None)
    assert mixed["tone22k"][0] == want["tone22k"]
    assert mixed["tone2"][0] == want["tone"] and mixed["tone2"][1] > 0  # from the cache
    long_cold = engine.run(audio_request("long", "Hi", clips["long"][1]))
    assert long_cold["long"] == (want["long"], 0)
    long_warm = engine.run(audio_request("long2", "Hi", clips["long"][1]), audio_request("n2", "Hi", clips["noise"][1]))
    assert long_warm["long2"][0] == want["long"] and long_warm["n2"][0] == want["noise"]
    assert long_warm["long2"][1] > 0 and long_warm["n2"][1] > 0  # both from the cache, wrapped windows too


def test_bad_clips_are_refused_naming_the_part(engine, clips):
    """Undecodable bytes, a clip over the limit, two clips, and an image
    for a model served for audio are refused naming the part."""
    from worker.prompting.builder import PromptError

    def refused(request: GenerateRequest, words: str) -> None:
        with pytest.raises(PromptError, match=words):
            engine.prompts.build(request)

    refused(audio_request("bad", "Hi", b"RIFF not really audio" * 20), "audio 0 is not WAV, MP3, FLAC or Ogg Vorbis")
    refused(audio_request("long", "Hi", make_wav("tone", seconds=31)), "audio 0 lasts 31.0 s, over the limit of 30 s")
    two = audio_request("two", "Hi", clips["tone"][1])
    parts = two.messages[0].images * 2
    refused(
        GenerateRequest(
            request_id="two", sampling=two.sampling, messages=[ChatMessage(role="user", content="Hi", images=parts)]
        ),
        "too many audio clips: 2 given, at most 1",
    )
    png = ImagePart(data=b"\x89PNG", sha256=hashlib.sha256(b"\x89PNG").hexdigest(), offset=0)
    refused(
        GenerateRequest(
            request_id="img", sampling=two.sampling, messages=[ChatMessage(role="user", content="Hi", images=[png])]
        ),
        rf"this vision model \({engine.prompts.images.model_type}\) is served for audio only",
    )
