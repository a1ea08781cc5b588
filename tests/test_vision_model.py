"""The vision model wrapper reads what differs between families from the
model itself (:class:`worker.vision.model.VisionLanguageModel`): its cache
layout (mlx-vlm's own, as mlx-lm's batchable classes), whether positions
follow the media's grids, and a refusal at load for a layout the batch
engine cannot batch."""

from __future__ import annotations

import pytest

from tests.tiny_vlm import build_tiny_audio_vlm, build_tiny_vlm


@pytest.fixture(scope="module")
def qwen(tmp_path_factory):
    from worker.vision.model import load_vision_model

    return load_vision_model(str(build_tiny_vlm(tmp_path_factory.mktemp("qwen"))))[0].model


@pytest.fixture(scope="module")
def gemma4(tmp_path_factory):
    from worker.vision.model import load_vision_model

    return load_vision_model(str(build_tiny_audio_vlm(tmp_path_factory.mktemp("gemma4") / "m")))[0].model


def test_caches_follow_the_language_models_own_layout(gemma4, qwen):
    """Gemma 4: the library's layout (sliding-window layers rotating at the
    window, up to the first KV-shared layer), each as mlx-lm's class."""
    import mlx_lm.models.cache as lm_cache

    theirs = gemma4.vlm.language_model.make_cache()
    ours = gemma4.make_cache()
    assert [type(c).__name__ for c in ours] == [type(c).__name__ for c in theirs] == ["RotatingKVCache", "KVCache"]
    assert all(type(c) is getattr(lm_cache, type(c).__name__) for c in ours)
    assert ours[0].max_size == theirs[0].max_size == 64
    assert all(type(c) is lm_cache.KVCache for c in qwen.make_cache())


def test_positions_follow_the_grid_only_where_the_model_says(gemma4, qwen):
    assert qwen.grid_positions and not gemma4.grid_positions
    assert gemma4.position_delta([1, 2, 3], None) == 0


def test_an_unbatchable_cache_layout_is_refused_with_the_reason(qwen):
    from mlx_vlm.models.cache import ChunkedKVCache

    from worker.vision.model import UnsupportedModel, VisionLanguageModel

    language = qwen.vlm.language_model
    language.make_cache = lambda: [ChunkedKVCache(8) for _ in language.model.layers]
    try:
        with pytest.raises(UnsupportedModel, match="ChunkedKVCache"):
            VisionLanguageModel(qwen.vlm)
    finally:
        del language.make_cache
