"""The vision path of the worker, in process: the tiny VLM loaded by
worker.vision.model, prompts built by worker.prompting.builder with images, run by the
Scheduler over the batch engine. Greedy tokens equal mlx-vlm's own
``generate`` for the same image and question, alone and batched with a
text request, and a repeated image is a prefix-cache hit (cached tokens
reported) with the same tokens."""

from __future__ import annotations

import hashlib
import io
import queue
import threading

import pytest

from shared.protocol import ChatMessage, GenerateRequest, ImagePart, SamplingParams
from tests.tiny_vlm import build_tiny_vlm

TOKENS = 8


def _png(color: tuple[int, int, int]) -> bytes:
    """A 64x64 one-color PNG made by Pillow."""
    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (64, 64), color).save(out, format="PNG")
    return out.getvalue()


def _request(request_id: str, text: str, image: bytes | None) -> GenerateRequest:
    """A greedy one-turn chat request: ``text`` then the image (if any)."""
    images = (
        None if image is None else [ImagePart(data=image, sha256=hashlib.sha256(image).hexdigest(), offset=len(text))]
    )
    return GenerateRequest(
        request_id=request_id,
        sampling=SamplingParams(max_tokens=TOKENS, temperature=0.0),
        messages=[ChatMessage(role="user", content=text, images=images)],
    )


class _Engine:
    """The tiny VLM's prompt builder and scheduler, the scheduler running
    on its own thread (which also loads the model, as in a worker);
    ``video_limits``: the videos' limits and sampling (None: defaults)."""

    def __init__(self, path, video_limits=None) -> None:
        self.video_limits = video_limits
        self.outputs: queue.SimpleQueue = queue.SimpleQueue()
        self._ready = threading.Event()
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(path,), daemon=True)
        self._thread.start()
        assert self._ready.wait(300), "the engine did not load in 300 s"
        if self.failure is not None:
            raise AssertionError(f"the engine thread died: {self.failure!r}") from self.failure

    def _run(self, path) -> None:
        """:meth:`_main`, a failure kept (and the waiter woken) instead of lost."""
        try:
            self._main(path)
        except BaseException as exc:
            self.failure = exc
            self._ready.set()
            raise

    def _main(self, path) -> None:
        """Load, build, then run the scheduler loop."""
        from worker.caches.prefix import PrefixCache
        from worker.engine.scheduler import Scheduler
        from worker.prompting.builder import PromptBuilder
        from worker.prompting.model_formats import model_formats
        from worker.sampling.constrained_decoding import GrammarCompiler
        from worker.vision.inputs import ImagePreparer
        from worker.vision.model import load_vision_model

        loaded, self.processor = load_vision_model(str(path))
        self.vlm = loaded.model.vlm
        vocab = len(loaded.tokenizer)
        self.prompts = PromptBuilder(
            loaded.tokenizer,
            context_length=2048,
            default_max_tokens=TOKENS,
            vocab_size=vocab,
            formats=model_formats(loaded.tokenizer, "auto", "auto"),
            grammars=GrammarCompiler(loaded.tokenizer._tokenizer, min(loaded.eos_token_ids), vocab),
            images=ImagePreparer(
                self.processor,
                vocab,
                model_type=loaded.config["model_type"],
                video_limits=self.video_limits,
                template=loaded.tokenizer,
            ),
        )
        self.scheduler = Scheduler(
            loaded.model,
            set(),
            self.outputs.put,
            cache=PrefixCache(loaded.model_id, 1 << 28),
            max_batch_size=4,
            prefill_batch_size=4,
            prefill_step_size=512,
            host_sampling=True,
        )
        self._ready.set()
        self.scheduler.run()

    def run(self, *requests: GenerateRequest) -> dict[str, tuple[list[int], int]]:
        """Each request's tokens and cached prompt tokens, submitted together."""
        from worker.messages import Started, TokenStep

        for request in requests:
            self.scheduler.submit(self.prompts.build(request))
        tokens: dict[str, list[int]] = {r.request_id: [] for r in requests}
        cached: dict[str, int] = {}
        while any(len(t) < TOKENS for t in tokens.values()):
            assert self._thread.is_alive(), f"the engine thread died: {self.failure!r}"
            item = self.outputs.get(timeout=120)
            if isinstance(item, Started):
                cached[item.request_id] = item.cached_tokens
            elif isinstance(item, TokenStep):
                for request_id, _, token, _, _ in item.tokens:
                    tokens[request_id].append(token)
            else:
                raise AssertionError(f"unexpected {item!r}")
        return {k: (tokens[k], cached[k]) for k in tokens}

    def stop(self) -> None:
        """End the scheduler loop."""
        from worker.messages import Stop

        self.scheduler.submit(Stop())
        self._thread.join(60)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """The running engine, once per module."""
    running = _Engine(build_tiny_vlm(tmp_path_factory.mktemp("tiny-vlm")))
    yield running
    running.stop()


def _reference(engine: _Engine, text: str, image: bytes | None) -> list[int]:
    """mlx-vlm's own greedy tokens for the same turn (run on this thread:
    a separate, fresh generation)."""
    from mlx_vlm import generate
    from PIL import Image

    content = [{"type": "text", "text": text}] + ([{"type": "image"}] if image else [])
    prompt = engine.processor.apply_chat_template(
        [{"role": "user", "content": content}], add_generation_prompt=True, tokenize=False
    )
    pictures = [Image.open(io.BytesIO(image)).convert("RGB")] if image else None
    result = generate(engine.vlm, engine.processor, prompt, image=pictures, max_tokens=TOKENS, temperature=0.0)
    return list(result.token_ids)


def test_image_requests_match_mlx_vlm_alone_batched_and_cached(engine):
    """Two images giving different answers: each equals mlx-vlm's answer
    alone, batched with a text request (whose answer equals mlx-vlm's text
    answer), and again from the prefix cache."""
    red, blue = _png((255, 0, 0)), _png((0, 0, 255))
    want_red, want_blue = _reference(engine, "Hi", red), _reference(engine, "Hi", blue)
    want_text = _reference(engine, "Hello there, how are you?", None)
    assert want_red != want_blue  # the image decides the answer

    alone = engine.run(_request("red", "Hi", red))
    assert alone["red"] == (want_red, 0)
    mixed = engine.run(
        _request("blue", "Hi", blue), _request("text", "Hello there, how are you?", None), _request("red2", "Hi", red)
    )
    assert mixed["blue"][0] == want_blue
    assert mixed["text"][0] == want_text
    assert mixed["red2"][0] == want_red and mixed["red2"][1] > 0  # the image came from the cache
    again = engine.run(_request("blue2", "Hi", blue))
    assert again["blue2"][0] == want_blue and again["blue2"][1] > 0
