"""Preparing a vision request's media on the worker's input thread: decode
them under limits, run the model's own processor, and lay out the prompt
twice: the ids the model reads (each part's marker expanded to what the
processor makes of the template's markup for it) and the ids the prefix
cache keys on (the media's tokens replaced by ids derived from their
content).

No MLX is touched here: the processor runs with its MLX conversion left
out (:mod:`worker.vision.processing`), and the scheduler thread turns the
NumPy arrays into MLX inputs. Any processor that names an image token and
expands the template's image markup (tiles, rows, begin and end tokens,
whatever the family does) is driven the same way; a processor that does
not is refused at construction, after one probe with a blank image.

Content keys: the cache key of an image's ``j``-th token is
``vocab_size + H(sha256, j)`` with ``H`` 30 bits of a SHA-256, so two
requests share a cached prefix through an image only when the image bytes
are equal (a false match needs every one of the image's token keys to
collide). Key ids are never fed to the model.

Videos (see :mod:`worker.vision.video`): the request's media parts are
images and videos in one order. Qwen3-VL's video marker expands to one
block per temporal patch (``<t.t seconds>``, vision start, its video
tokens, vision end: :data:`VIDEO_FAMILIES`); any other model whose
processor names a video token and whose template places a video part
gets the processor's own expansion of the sampled frames. A video's keys
derive from its digest and the frame sampling settings (which change its
tokens); they lie in their own range (:data:`VIDEO_KEYS`). Audio clips
(:data:`AUDIO_FAMILIES`; decoded by :mod:`worker.vision.audio`) go through
the processor's own expansion of the template's audio markup, as images
do, and are keyed by content like images.
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import Any

from shared.model_kind import AUDIO_MODELS, cannot_read_message
from worker.messages import VisionPrompt
from worker.vision.audio import MAX_CLIPS, AudioLimits, decode_audio
from worker.vision.images import DEFAULT_LIMITS, ImageError, ImageLimits, decode_images
from worker.vision.markup import UnsupportedProcessor, part_markup
from worker.vision.processing import Expander, ExpansionError, ProcessorCall, ProcessorOutputError
from worker.vision.video import VideoLayout, VideoLimits, group_seconds, sample_video

VIDEO_FAMILIES = frozenset({"qwen3_vl", "qwen3_5", "qwen3_5_moe"})
"""mlx-vlm ``model_type`` values whose videos are laid out here, as
Qwen3-VL's processor does (time stamps per temporal patch); other
families' videos go through their processor's own expansion."""

IMAGES_OR_VIDEOS = frozenset({"qwen2_vl", "qwen2_5_vl", "qwen3_5", "qwen3_5_moe"})
"""mlx-vlm ``model_type`` values whose model runs its vision tower on a
prompt's images or on its videos, not both (a request with both is
refused)."""

ONE_IMAGE = frozenset({"mllama"})
"""mlx-vlm ``model_type`` values served one image per request (their
image's state must have one shape in every sequence of a batch:
:mod:`worker.vision.cross_attention`)."""

AUDIO_FAMILIES = frozenset({"gemma4", "gemma3n", "qwen3_omni_moe"})
"""mlx-vlm ``model_type`` values served for audio (an audio tower and a
processor with a NumPy feature extractor); their images are not served."""

KEY_BITS = 30
"""Bits of an image token's cache key above the vocabulary."""

VIDEO_KEYS = 1 << KEY_BITS
"""Where a video token's cache keys start above the vocabulary (past every
image or audio key; ``KEY_BITS - 1`` bits, so every key fits an int32), so
a key tells which token the model read there."""


class ImagePreparer:
    """Drives one model's processor (built once per worker, used by the
    input thread only). ``vocab_size`` is where cache keys start.

    ``model_type`` is the model's family; ``template`` the tokenizer whose
    chat template the prompt builder renders (None: the processor's).
    Videos are taken as the module docstring says (``video_limits`` bound
    and sample them), refused otherwise; audio clips when the family is in
    :data:`AUDIO_FAMILIES` (``audio_limits`` bound them; such a model takes
    no images, and :attr:`image_token_id` is then its audio token: the
    token its prompts' cache keys read as).

    Raises:
        UnsupportedProcessor: at construction, for a processor this module
            cannot drive for images (or audio, for an audio family).
    """

    def __init__(
        self,
        processor: Any,
        vocab_size: int,
        limits: ImageLimits = DEFAULT_LIMITS,
        *,
        model_type: str = "",
        video_limits: VideoLimits | None = None,
        audio_limits: AudioLimits | None = None,
        template: Any = None,
    ) -> None:
        tokenizer = getattr(processor, "tokenizer", processor)
        self._call = ProcessorCall(processor)
        self.audio_limits = audio_limits or AudioLimits()
        self._audio_expander: Expander | None = None
        self.takes_images = model_type not in AUDIO_FAMILIES
        self.vocab_size = vocab_size
        if self.takes_images:
            self._image_setup(processor, tokenizer, template if template is not None else tokenizer)
        else:
            self._audio_setup(processor, tokenizer, template if template is not None else tokenizer)
        self.limits = limits
        self.model_type = model_type
        self.video_limits = video_limits or VideoLimits()
        self.video_layout: VideoLayout | None = None
        self._video_expander: Expander | None = None
        video_processor = getattr(processor, "video_processor", None)
        if model_type not in VIDEO_FAMILIES and self.takes_images:
            self._video_setup(processor, tokenizer, template if template is not None else tokenizer)
        elif model_type in VIDEO_FAMILIES and video_processor is not None:
            from mlx_vlm.utils import resolve_video_sampling

            ids = {
                name: int(tokenizer.convert_tokens_to_ids(getattr(processor, name)))
                for name in ("vision_start_token", "vision_end_token", "video_token")
            }
            self.video_layout = VideoLayout(
                tokenizer, ids["vision_start_token"], ids["vision_end_token"], ids["video_token"]
            )
            self._video_processor = video_processor
            self._video_merge = int(video_processor.merge_size)
            self._video_group = int(getattr(video_processor, "temporal_patch_size", 2))
            self._sampling = resolve_video_sampling(
                processor, {"fps": self.video_limits.fps, "max_frames": self.video_limits.max_frames}
            )

    def _image_setup(self, processor: Any, tokenizer: Any, template: Any) -> None:
        """Read the image token and the chat template's image markup, and
        check the processor expands that markup with an image into ids
        holding image tokens (one probe call on a small blank image).

        Raises:
            UnsupportedProcessor: no image token, a template that cannot
                place an image, or a processor whose expansion this module
                cannot read.
        """
        from PIL import Image

        token = getattr(processor, "image_token", None)
        if not isinstance(token, str) or not token:
            raise UnsupportedProcessor(f"the {type(processor).__name__} processor names no image token")
        self.image_token = token
        self.image_token_id = int(tokenizer.convert_tokens_to_ids(token))
        self._images = self._expander(processor, tokenizer, "images", part_markup(template, "image"), token)
        _probe(processor, self._images, [Image.new("RGB", (32, 32))], "a test image")

    def _video_setup(self, processor: Any, tokenizer: Any, template: Any) -> None:
        """Take videos through the processor's own expansion when it names a
        video token, the chat template places a video part and a two-frame
        probe expands; otherwise the model takes no videos (a request with
        one is refused naming the part)."""
        import numpy as np
        from mlx_vlm.utils import resolve_video_sampling

        token = getattr(processor, "video_token", None)
        if not isinstance(token, str) or not token:
            return
        try:
            expander = self._expander(processor, tokenizer, "videos", part_markup(template, "video"), token)
            _probe(processor, expander, [np.zeros((2, 3, 32, 32), np.uint8)], "a test video")
        except UnsupportedProcessor:
            return
        self._video_expander = expander
        self._sampling = resolve_video_sampling(
            processor, {"fps": self.video_limits.fps, "max_frames": self.video_limits.max_frames}
        )

    @property
    def takes_audio(self) -> bool:
        """Whether the model reads audio clips."""
        return self._audio_expander is not None

    def _expander(self, processor: Any, tokenizer: Any, argument: str, markup: str, token: str) -> Expander:
        """An :class:`Expander` of ``processor`` for its ``argument`` media
        (separated by the tokenizer's end token).

        Raises:
            UnsupportedProcessor: the tokenizer names no end token.
        """
        separator = getattr(tokenizer, "eos_token", None)
        if not isinstance(separator, str) or not separator:
            raise UnsupportedProcessor(f"the {type(processor).__name__} processor's tokenizer names no end token")
        return Expander(
            self._call,
            argument,
            markup,
            int(tokenizer.convert_tokens_to_ids(token)),
            separator,
            int(tokenizer.convert_tokens_to_ids(separator)),
        )

    def _audio_setup(self, processor: Any, tokenizer: Any, template: Any) -> None:
        """Take audio clips through the processor's own expansion of the
        template's audio markup (with ``padding=True``, as mlx-vlm's own
        generation calls it), checked once on a second of silence.

        Raises:
            UnsupportedProcessor: no feature extractor or audio token, a
                template that cannot place an audio part, or a processor
                whose expansion this module cannot read.
        """
        import numpy as np

        extractor = getattr(processor, "feature_extractor", None)
        token = getattr(processor, "audio_token", None) or getattr(tokenizer, "audio_token", None)
        if extractor is None or not isinstance(token, str) or not token:
            raise UnsupportedProcessor(f"the {type(processor).__name__} processor is not supported for audio")
        self.image_token = token
        self.image_token_id = int(tokenizer.convert_tokens_to_ids(token))
        self._sample_rate = int(extractor.sampling_rate)
        expander = self._expander(processor, tokenizer, "audio", part_markup(template, "audio"), token)
        self._audio_expander = dataclasses.replace(expander, options={"padding": True})
        _probe(processor, self._audio_expander, [np.zeros(self._sample_rate, dtype=np.float32)], "a second of silence")

    def prepare(
        self, ids: list[int], blobs: list[tuple[bytes, str]], kinds: list[str] | None = None
    ) -> tuple[list[int], VisionPrompt]:
        """The cache-key prompt and the :class:`VisionPrompt` for ``ids``, a
        prompt holding one ``-(k + 1)`` marker where media part ``k`` of
        ``blobs`` (its bytes and SHA-256 hex digest) stands; ``kinds[k]``
        is ``"image"`` (default) or ``"video"``. An image's marker stands
        between the template's image markup; a video's in place of its
        vision start and end tokens (its layout brings them).

        Raises:
            worker.vision.images.ImageError: a part is unusable (names it by
                its index), its digest does not match its bytes, it is a
                video and this model takes none, or it is audio (no vision
                model reads audio).
            ValueError: the markers do not match the parts.
        """
        kinds = kinds or ["image"] * len(blobs)
        if "audio" in kinds and not self.takes_audio:
            at = kinds.index("audio")
            raise ImageError(cannot_read_message(None, "vision", "audio", AUDIO_MODELS, self.model_type), at)
        if "image" in kinds and not self.takes_images:
            at = kinds.index("image")
            raise ImageError(
                f"this vision model ({self.model_type}) is served for audio only: its images are not read",
                at,
            )
        for index, (blob, digest) in enumerate(blobs):
            if hashlib.sha256(blob).hexdigest() != digest:
                raise ImageError(f"{kinds[index]} {index}'s sha256 does not match its bytes", index)
        image_at = [k for k, kind in enumerate(kinds) if kind == "image"]
        video_at = [k for k, kind in enumerate(kinds) if kind == "video"]
        if video_at and image_at and self.model_type in IMAGES_OR_VIDEOS:
            raise ImageError(
                f"this vision model ({self.model_type}) reads images or videos in one request, not both",
                video_at[0],
            )
        if len(image_at) > 1 and self.model_type in ONE_IMAGE:
            raise ImageError(f"this vision model ({self.model_type}) reads one image per request", image_at[1])
        expansions: dict[int, tuple[list[int], list[int]]] = {}
        pixels = grids = None
        image_inputs: dict[str, Any] = {}
        if image_at:
            try:
                pictures = decode_images([blobs[k][0] for k in image_at], self.limits)
            except ImageError as exc:
                raise ImageError(str(exc), image_at[exc.index] if exc.index is not None else None) from None
            digests = [blobs[k][1] for k in image_at]
            pieces, image_inputs = self._images.expand(
                pictures, lambda i, n: image_keys(digests[i], n, self.vocab_size)
            )
            expansions.update(zip(image_at, pieces))
            pixels = image_inputs.pop("pixel_values", None)
            grids = image_inputs.pop("image_grid_thw", None)
        video_pixels = video_grids = None
        if video_at and self._video_expander is not None:
            video_pixels, video_grids, image_inputs = self._processor_videos(blobs, video_at, expansions)
        elif video_at:
            video_pixels, video_grids = self._videos(blobs, video_at, expansions)
        audio_at = [k for k, kind in enumerate(kinds) if kind == "audio"]
        features = features_mask = None
        if audio_at:
            features, features_mask = self._audio(blobs, audio_at, expansions)
        model_ids: list[int] = []
        key_ids: list[int] = []
        seen = 0
        image_end = 0
        for token in ids:
            if token >= 0:
                model_ids.append(token)
                key_ids.append(token)
                continue
            k = -token - 1
            if k != seen or k >= len(blobs):
                raise ValueError("the prompt's media markers do not match the request's images and videos")
            seen += 1
            model_ids += expansions[k][0]
            key_ids += expansions[k][1]
            image_end = len(model_ids)
        if seen != len(blobs):
            raise ValueError(f"the prompt places {seen} images and videos but the request carries {len(blobs)}")
        vision = VisionPrompt(
            model_ids,
            pixels,
            grids,
            image_end,
            self.image_token_id,
            pixel_values_videos=video_pixels,
            video_grid_thw=video_grids,
            video_token_id=self.video_token_id,
            video_keys_from=self.vocab_size + VIDEO_KEYS if video_at else None,
            input_features=features,
            input_features_mask=features_mask,
            image_inputs=image_inputs or None,
        )
        return key_ids, vision

    def _audio(
        self, blobs: list[tuple[bytes, str]], audio_at: list[int], expansions: dict[int, tuple[list[int], list[int]]]
    ) -> tuple[Any, Any]:
        """Decode the clips at ``audio_at`` of ``blobs``, run the processor on
        them, record each one's model ids and key ids in ``expansions``;
        return their features and feature mask (as the processor gives them).

        Raises:
            ImageError: too many clips, or a clip breaks a limit (see
                :mod:`worker.vision.audio`).
        """
        expander = self._audio_expander
        assert expander is not None  # checked by prepare
        if len(audio_at) > MAX_CLIPS:
            raise ImageError(f"too many audio clips: {len(audio_at)} given, at most {MAX_CLIPS} per request")
        waves = [decode_audio(blobs[k][0], k, self.audio_limits, self._sample_rate) for k in audio_at]
        digests = [blobs[k][1] for k in audio_at]
        pieces, inputs = expander.expand(waves, lambda i, n: image_keys(f"audio:{digests[i]}", n, self.vocab_size))
        expansions.update(zip(audio_at, pieces))
        mask = inputs.get("input_features_mask", inputs.get("feature_attention_mask"))
        return inputs["input_features"], mask

    @property
    def video_token_id(self) -> int | None:
        """The model's video token (None: it takes no videos)."""
        if self.video_layout is not None:
            return self.video_layout.video_token_id
        return self._video_expander.token_id if self._video_expander is not None else None

    def _processor_videos(
        self, blobs: list[tuple[bytes, str]], video_at: list[int], expansions: dict[int, tuple[list[int], list[int]]]
    ) -> tuple[Any, Any, dict[str, Any]]:
        """Sample the videos at ``video_at`` of ``blobs`` and expand them
        with the processor (each video's keys from its digest and the
        sampling settings), recording each one's ids in ``expansions``;
        return the patches, the grids and the processor's other video
        inputs.

        Raises:
            ImageError: too many videos, or a video breaks a limit (see
                :mod:`worker.vision.video`).
        """
        assert self._video_expander is not None
        limits = self.video_limits
        if len(video_at) > limits.max_videos:
            raise ImageError(f"too many videos: {len(video_at)} given, at most {limits.max_videos} per request")
        frames = [sample_video(blobs[k][0], k, limits, self._sampling).frames for k in video_at]
        seeds = [f"{blobs[k][1]}:{limits.sampling_key()}" for k in video_at]
        pieces, inputs = self._video_expander.expand(
            frames, lambda i, n: image_keys(seeds[i], n, self.vocab_size + VIDEO_KEYS, KEY_BITS - 1)
        )
        expansions.update(zip(video_at, pieces))
        return inputs.pop("pixel_values_videos", None), inputs.pop("video_grid_thw", None), inputs

    def _videos(
        self, blobs: list[tuple[bytes, str]], video_at: list[int], expansions: dict[int, tuple[list[int], list[int]]]
    ) -> tuple[Any, Any]:
        """Sample the videos at ``video_at`` of ``blobs``, record each one's
        model ids and key ids in ``expansions``; return the patches and
        grids of all of them, in order.

        Raises:
            ImageError: this model takes no videos, too many videos, or a
                video breaks a limit (see :mod:`worker.vision.video`).
        """
        import numpy as np

        layout = self.video_layout
        if layout is None:
            family = f" ({self.model_type})" if self.model_type else ""
            raise ImageError(
                f"this vision model{family} does not take videos (its processor or chat template has no video part)",
                video_at[0],
            )
        limits = self.video_limits
        if len(video_at) > limits.max_videos:
            raise ImageError(f"too many videos: {len(video_at)} given, at most {limits.max_videos} per request")
        all_pixels, all_grids = [], []
        for k in video_at:
            blob, digest = blobs[k]
            sampled = sample_video(blob, k, limits, self._sampling)
            features = self._video_processor(videos=[sampled.frames])
            grid = features["video_grid_thw"][0]
            per_frame = int(grid[1]) * int(grid[2]) // (self._video_merge * self._video_merge)
            seconds = group_seconds(sampled.indices, sampled.source_fps, self._video_group)
            if len(seconds) != int(grid[0]):
                raise ImageError(f"video {k}'s frames do not match the processor's temporal patches", k)
            keys = image_keys(
                f"{digest}:{limits.sampling_key()}",
                per_frame * len(seconds),
                self.vocab_size + VIDEO_KEYS,
                KEY_BITS - 1,
            )
            expansions[k] = (layout.ids(seconds, per_frame), layout.ids(seconds, per_frame, keys))
            all_pixels.append(features["pixel_values_videos"])
            all_grids.append(features["video_grid_thw"])
        return np.concatenate(all_pixels, axis=0), np.concatenate(all_grids, axis=0)


def image_keys(digest: str, count: int, vocab_size: int, bits: int = KEY_BITS) -> list[int]:
    """The ``count`` cache-key ids of an image with SHA-256 ``digest`` (see
    the module docstring), ``bits`` bits above ``vocab_size``."""
    mask = (1 << bits) - 1
    keys = []
    for j in range(count):
        h = hashlib.sha256(f"{digest}:{j}".encode()).digest()
        keys.append(vocab_size + (int.from_bytes(h[:4], "big") & mask))
    return keys


def _probe(processor: Any, expander: Expander, items: list[Any], what: str) -> None:
    """Expand ``items`` once (at load), so a processor this module cannot
    drive is refused then.

    Raises:
        UnsupportedProcessor: the processor fails on ``items`` (``what``
            names them) or its expansion cannot be read.
    """
    name = type(processor).__name__
    try:
        expander.expand(items, lambda i, n: [0] * n)
    except (ProcessorOutputError, ExpansionError) as exc:
        raise UnsupportedProcessor(f"the {name} processor is not supported: {exc}") from None
    except Exception as exc:  # the processor itself failed on plain media
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        raise UnsupportedProcessor(f"the {name} processor failed on {what}: {first}") from None
