"""Loading a vision-language model with mlx-vlm and serving it through
mlxd's batch engine.

:func:`load_vision_model` loads the model and its processor with mlx-vlm
(weights cast as :func:`worker.loading.loader.load_model` does) and wraps the model
in a :class:`VisionLanguageModel`: the text-only face that mlx-lm's batch
engine (:mod:`worker.engine.batch_engine`) steps like any language model, one
token id per position. Images never pass through the batch: a prompt with
images is prefilled once, outside it, by mlx-vlm's own model call
(:meth:`VisionLanguageModel.prefill_images`: vision tower, image features
merged into the embeddings, multimodal rotary positions), and the
resulting KV cache joins the batch like a cached prefix. Text and image
requests then decode together.

Positions: a language model with ``get_rope_index`` (Qwen-VL) numbers the
tokens after an image from the image's grid, not from the sequence
length, so a sequence's rotary position is its cache offset plus a
per-sequence delta (0 for text-only prompts; ``get_rope_index`` gives it
for a prompt with images). The engine tells the wrapper which sequences
each forward pass holds (:meth:`VisionLanguageModel.bind_rows`), and the
wrapper passes explicit position ids, so no state of mlx-vlm's language
model leaks between sequences. Any other language model's positions
follow the sequence. Caches: the language model's own layout, as mlx-lm's
cache classes (:meth:`VisionLanguageModel.make_cache`). A model whose
layers cross-attend to the image (Llama 3.2 Vision) keeps what those
layers read in its caches and runs through
:mod:`worker.vision.cross_attention`.

Served: any model mlx-vlm loads whose language model runs on the batch
engine's caches (else :class:`UnsupportedModel` at load, the reason
named), and whose
processor :mod:`worker.vision.inputs` can drive (checked when the worker
builds its preparer). Threads: load and call everything here on the
scheduler thread only.
"""

from __future__ import annotations

import json
from typing import Any

import mlx.core as mx
import mlx.nn as nn

from worker.loading.loader import (
    DTYPES,
    LoadedModel,
    ModelLoadError,
    cast_weights,
    context_length_of,
    directory_fingerprint,
    one_line,
    resolve_source,
)
from worker.vision import cross_attention, prompt_embeddings
from worker.vision.cache_view import viewed


class UnsupportedModel(ModelLoadError):
    """A vision model whose language model this path cannot serve (the
    message says why)."""


class _Positions:
    """Per-sequence position deltas, kept off the module's parameter tree
    (an ``nn.Module`` would register a dict or array attribute as a
    parameter): ``deltas`` by engine uid (absent: 0) and ``rows``, the
    deltas of the rows of the next forward passes (None: all 0)."""

    def __init__(self) -> None:
        self.deltas: dict[int, int] = {}
        self.rows: mx.array | None = None


class VisionLanguageModel(nn.Module):
    """An mlx-vlm model seen as a text language model by mlx-lm's batch
    engine (see the module docstring). ``vlm`` is mlx-vlm's model.

    What differs between families is read from the model itself: a
    language model with ``get_rope_index`` numbers positions from the
    media's grids (:attr:`grid_positions`: per-sequence deltas and explicit
    position ids), any other follows the sequence; the caches are the
    language model's own layout (``make_cache``) as mlx-lm's classes
    (:meth:`make_cache`).

    Raises:
        UnsupportedModel: at construction, for a language model whose cache
            layout holds a kind mlx-lm's batch engine cannot batch.
    """

    def __init__(self, vlm: nn.Module) -> None:
        super().__init__()
        self.vlm = vlm
        self._positions = _Positions()
        self.grid_positions = hasattr(vlm.language_model, "get_rope_index")
        """Whether positions after media follow the media's grids."""
        self.family = str(getattr(vlm.config, "model_type", ""))
        """The mlx-vlm family (which decides whether the caches are viewed:
        :mod:`worker.vision.cache_view`)."""
        self._probe()

    def _probe(self) -> None:
        """Run one token through the language model on this wrapper's caches,
        so a model the path cannot serve is refused at load, not at its
        first request.

        Raises:
            UnsupportedModel: the cache layout has a kind the batch engine
                cannot batch, or the language model fails on mlx-lm's cache
                classes (it needs its library's own cache methods).
        """
        caches = self.make_cache()
        try:
            mx.eval(self(mx.array([[0]]), cache=caches))
        except (AttributeError, TypeError) as exc:
            raise UnsupportedModel(
                f"its language model does not run on the batch engine's caches ({type(exc).__name__}: {exc})"
            ) from None

    @property
    def deltas(self) -> dict[int, int]:
        """Each engine uid's position delta (absent: 0); the engine writes it."""
        return self._positions.deltas

    @property
    def layers(self) -> list[Any]:
        """The language model's decoder layers (its ``layers``, or its inner
        model's where it exposes none)."""
        language = self.vlm.language_model
        layers = getattr(language, "layers", None)
        return list(layers) if layers is not None else language.model.layers

    def make_cache(self) -> list[Any]:
        """Fresh caches for one sequence: the language model's own layout
        (its ``make_cache``; one full cache per layer without one), each
        layer as the mlx-lm cache class of the same kind, so the batch
        engine can batch them (a sliding-window layer a rotating cache of
        its window, a recurrent layer an arrays cache of its size).

        Raises:
            UnsupportedModel: a layer kind with no mlx-lm batching
                counterpart (chunked or nested caches, say).
        """
        from mlx_lm.models.cache import ArraysCache, KVCache, RotatingKVCache

        make = getattr(self.vlm.language_model, "make_cache", None)
        if self.family in cross_attention.CROSS_ATTENTION:
            crossed = cross_attention.cross_layers(self.vlm)
            return [
                ArraysCache(size=cross_attention.SLOTS) if i in crossed else KVCache() for i in range(len(self.layers))
            ]
        if make is None:
            return [KVCache() for _ in self.layers]
        caches = []
        for cache in make():
            kind = type(cache).__name__
            if kind == "KVCache":
                caches.append(KVCache())
            elif kind == "RotatingKVCache":
                caches.append(RotatingKVCache(max_size=cache.max_size, keep=cache.keep))
            elif kind == "ArraysCache":
                caches.append(ArraysCache(size=len(cache.cache)))
            else:
                raise UnsupportedModel(f"its language model keeps a {kind} layer, which the batch engine cannot batch")
        return caches

    def bind_rows(self, uids: list[int]) -> None:
        """The next forward passes hold the sequences ``uids``, row by row."""
        deltas = [self._positions.deltas.get(uid, 0) for uid in uids]
        self._positions.rows = mx.array(deltas, dtype=mx.int32) if any(deltas) else None

    def __call__(self, inputs: mx.array, cache: list[Any] | None = None) -> mx.array:
        """The logits of ``inputs`` (``[batch, length]`` token ids, never a
        media token) at their positions: each row's cache offset onward,
        plus its bound delta where positions follow the media's grids.

        Raises:
            RuntimeError: deltas are bound for another number of rows (an
                engine bug; the scheduler thread then dies, failing every
                request, rather than answer from wrong positions).
        """
        if self.family in cross_attention.CROSS_ATTENTION:
            return cross_attention.forward(self.vlm, inputs, cache or self.make_cache())
        if not self.grid_positions:
            return self.vlm.language_model(inputs, cache=viewed(self.family, cache)).logits
        batch, length = inputs.shape
        offset = next((c.offset for c in cache or [] if hasattr(c, "offset")), 0)  # a recurrent layer has none
        if isinstance(offset, mx.array) and offset.ndim > 0:
            start = offset[:batch].astype(mx.int32).reshape(-1, 1)
        else:
            start = mx.full((batch, 1), int(offset), dtype=mx.int32)
        rows = self._positions.rows
        if rows is not None:
            if rows.shape[0] != batch:  # a forward pass the engine did not bind: positions would be wrong
                raise RuntimeError(f"position deltas bound for {rows.shape[0]} rows, the batch has {batch}")
            start = start + rows.reshape(-1, 1)
        positions = start + mx.arange(length, dtype=mx.int32)[None]
        positions = mx.broadcast_to(positions[None], (3, batch, length))
        return self.vlm.language_model(inputs, cache=viewed(self.family, cache), position_ids=positions).logits

    def position_delta(self, model_ids: list[int], image_grid_thw: Any, video_grid_thw: Any = None) -> int:
        """The position delta of a prompt with media (``model_ids`` as the
        model reads them, the grids as the processor gave them; None: none
        of that kind); 0 where positions follow the sequence."""
        if not self.grid_positions:
            return 0
        _, deltas = self.vlm.language_model.get_rope_index(
            mx.array([model_ids]),
            None if image_grid_thw is None else mx.array(image_grid_thw),
            None if video_grid_thw is None else mx.array(video_grid_thw),
        )
        return int(mx.array(deltas).reshape(-1)[0].item())

    def prefill_images(
        self,
        model_ids: list[int],
        pixel_values: Any,
        image_grid_thw: Any,
        cache: list[Any],
        pixel_values_videos: Any = None,
        video_grid_thw: Any = None,
        input_features: Any = None,
        input_features_mask: Any = None,
        image_inputs: dict[str, Any] | None = None,
    ) -> None:
        """Run ``model_ids`` (holding every image, video and audio token of
        the prompt) with their images, videos and audio features (None: none
        of that kind; ``image_inputs``: the processor's other image inputs)
        through mlx-vlm's model into ``cache`` (fresh, one sequence),
        evaluating it. As mlx-vlm's own generation does: the model's
        ``get_input_embeddings`` (with an all-ones attention mask: one
        unpadded prompt), then its language model on those embeddings with
        whatever else that call returned (positions, masks)."""
        media: dict[str, Any] = {name: mx.array(value) for name, value in (image_inputs or {}).items()}
        if input_features is not None:
            ids = mx.array([model_ids])
            media["input_features"] = mx.array(input_features)
            media["input_features_mask"] = mx.array(input_features_mask)
            audio_token = getattr(self.vlm.config, "audio_token_id", None)
            if audio_token is not None:  # the token types mlx-vlm's Gemma processors give (3: audio)
                media["mm_token_type_ids"] = (ids == int(audio_token)).astype(mx.int32) * 3
        if image_grid_thw is not None:
            media["image_grid_thw"] = mx.array(image_grid_thw)
        if pixel_values_videos is not None:
            media["pixel_values_videos"] = mx.array(pixel_values_videos)
            media["video_grid_thw"] = mx.array(video_grid_thw)
        crossed = self.family in cross_attention.CROSS_ATTENTION
        if crossed:  # the processor's mask is for its own text: the prompt's, from its image token
            media["cross_attention_mask"] = cross_attention.prompt_mask(
                model_ids, int(self.vlm.config.image_token_index), media["aspect_ratio_mask"]
            )
        ids = mx.array([model_ids])
        embedded = self.vlm.get_input_embeddings(
            ids, None if pixel_values is None else mx.array(pixel_values), mask=mx.ones(ids.shape), **media
        )
        extra = {k: v for k, v in embedded.to_dict().items() if k != "inputs_embeds" and v is not None}
        embeddings = prompt_embeddings.as_reference(self.family, self.vlm, ids, embedded.inputs_embeds)
        self.vlm.language_model(ids, inputs_embeds=embeddings, cache=viewed(self.family, cache), **{**media, **extra})
        if crossed:
            cross_attention.store_image(self.vlm, cache, extra["cross_attention_states"], extra["cross_attention_mask"])
        mx.eval([c.state for c in cache])


def load_vision_model(source: str, *, dtype: str = "auto") -> tuple[LoadedModel, Any]:
    """Resolve ``source`` and load it with mlx-vlm; return the model (as a
    :class:`VisionLanguageModel` in a :class:`~worker.loading.loader.LoadedModel`
    with mlx-lm's tokenizer wrapper) and mlx-vlm's processor. ``dtype`` as
    :func:`worker.loading.loader.load_model`. No custom model code is run.

    Raises:
        ModelLoadError: bad ``dtype``, unresolvable source, mlx-vlm cannot
            load it, or its cache layout cannot be batched
            (:class:`UnsupportedModel`).
    """
    if dtype not in DTYPES:
        raise ModelLoadError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    path = resolve_source(source)
    try:
        raw = json.loads((path / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ModelLoadError(f"model source {source!r}: no readable config.json in {path}: {one_line(exc)}") from exc
    try:
        from mlx_lm.utils import load_tokenizer
        from mlx_vlm import load as vlm_load

        vlm, processor = vlm_load(str(path), lazy=True, trust_remote_code=False)
    except Exception as exc:
        raise ModelLoadError(f"model source {source!r}: mlx-vlm cannot load {path}: {one_line(exc)}") from exc
    effective = cast_weights(vlm, dtype)
    eos = raw.get("eos_token_id", (raw.get("text_config") or {}).get("eos_token_id"))
    eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
    tokenizer = load_tokenizer(path, eos_token_ids=eos_ids or None)
    if not getattr(tokenizer, "chat_template", None) and getattr(processor, "chat_template", None):
        tokenizer._tokenizer.chat_template = processor.chat_template
    loaded = LoadedModel(
        model=_served(vlm, source),
        tokenizer=tokenizer,
        path=path,
        context_length=context_length_of(raw),
        eos_token_ids={int(t) for t in tokenizer.eos_token_ids},
        model_id=f"{path}#{directory_fingerprint(path)}:{effective}:vision",
        dtype=effective,
        config=raw,
    )
    return loaded, processor


def _served(vlm: nn.Module, source: str) -> VisionLanguageModel:
    """``vlm`` as the batch engine's model.

    Raises:
        UnsupportedModel: the path cannot serve it (the reason named).
    """
    try:
        return VisionLanguageModel(vlm)
    except UnsupportedModel as exc:
        raise UnsupportedModel(f"model source {source!r} cannot be served: {exc}") from None
