"""gateway.images.request and the pool's view of a model's kind: images
sent to a model without vision are refused before any worker sees them,
remote images are resolved (refused under the default policy), a repo id's
kind comes from its worker's Loaded report. No processes."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.core.errors import APIError
from gateway.images.parts import RemoteImage, image_part
from gateway.images.request import has_images, ready_images
from gateway.workers.model_files import read_models_files
from gateway.workers.pool import WorkerPool
from shared.config import Config, ImagesConfig, ModelConfig
from shared.protocol import ChatMessage, GenerateRequest, Loaded, SamplingParams


def _request(*parts) -> GenerateRequest:
    """A one-turn request with these image parts."""
    message = ChatMessage(role="user", content="hi", images=list(parts) or None)
    return GenerateRequest(request_id="r", sampling=SamplingParams(), messages=[message])


def test_images_need_a_vision_model_and_remote_ones_a_policy():
    """No images: unchanged; a text model: 400; a vision model: local
    images pass, a remote one is refused while remote_fetch is off."""
    plain = _request()
    assert not has_images(plain)
    assert asyncio.run(ready_images(plain, "m", "generate", ImagesConfig())) is plain
    local = _request(image_part(b"\x89PNG bytes", 2, "messages[0].content[1].image_url.url"))
    with pytest.raises(APIError) as caught:
        asyncio.run(ready_images(local, "m", "generate", ImagesConfig()))
    assert caught.value.status == 400 and "has no vision support" in caught.value.message
    assert asyncio.run(ready_images(local, "m", "vision", ImagesConfig())) == local
    assert asyncio.run(ready_images(local, "m", None, ImagesConfig())) == local  # the worker decides
    remote = _request(image_part(RemoteImage("http://example.com/a.png", "input[0].content[0].image_url"), 0))
    with pytest.raises(APIError) as caught:
        asyncio.run(ready_images(remote, "m", "vision", ImagesConfig()))
    assert caught.value.param == "input[0].content[0].image_url" and caught.value.code == "invalid_image"


def test_a_repo_ids_kind_comes_from_its_worker(tmp_path):
    """A source that is not on disk has no kind until its worker reports
    a vision model; a local directory with a vision_config is vision."""
    local = tmp_path / "vlm"
    local.mkdir()
    (local / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "vision_config": {}}))
    pool = WorkerPool(
        Config(models=[ModelConfig(name="hub", source="org/some-vl"), ModelConfig(name="vlm", source=str(local))])
    )
    pool._socket_dir = str(tmp_path)
    pool._apply_models(pool.config.models, read_models_files(pool.config.models))  # what start() reads off the loop
    assert pool.kind("vlm") == "vision"
    assert pool.kind("hub") is None
    pool.handles["hub"].status.loaded(
        Loaded(worker_id="w", context_length=8, load_seconds=0, model_path="/m", vision=True)
    )
    assert pool.kind("hub") == "vision"
    assert {info.name: info.kind for info in pool.models()} == {"hub": "vision", "vlm": "vision"}


def test_images_in_all_stay_under_the_frame_cap():
    """Images adding up to more than the per-request total are a 400
    naming the part that crosses it (the wire frame would be refused)."""
    from gateway.images.request import MAX_REQUEST_IMAGE_BYTES
    from shared.codec import MAX_FRAME_BYTES

    assert MAX_REQUEST_IMAGE_BYTES < MAX_FRAME_BYTES
    big = b"\0" * (MAX_REQUEST_IMAGE_BYTES // 2 + 1)
    request = _request(image_part(big, 0, "a"), image_part(big, 0, "b"))
    with pytest.raises(APIError) as caught:
        asyncio.run(ready_images(request, "m", "vision", ImagesConfig()))
    assert caught.value.param == "b" and "in all" in caught.value.message
