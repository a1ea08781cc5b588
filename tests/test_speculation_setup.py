"""When a worker turns speculative decoding on (worker/model_setup.py
``speculation_for``): by the model's cache layout (trimmed, replayed, or
off with a log line), and for ``draft:<source>`` by whether the draft
model loads, shares the vocabulary and can be trimmed."""

from __future__ import annotations

import logging

import pytest

from shared.config import ModelConfig
from tests.tiny_model import build_tiny_model
from worker.caches.profile import CacheProfile
from worker.model_setup import speculation_for

TRIMMED = CacheProfile({"KVCache": 2}, True, None)
HYBRID = CacheProfile({"ArraysCache": 1, "KVCache": 1}, False, None)
WINDOW = CacheProfile({"RotatingKVCache": 1, "KVCache": 1}, False, None)
CHUNKED = CacheProfile({"ChunkedKVCache": 3, "KVCache": 1}, False, "ChunkedKVCache has no batched form")


def config(speculative: str) -> ModelConfig:
    return ModelConfig(name="m", speculative=speculative, speculative_tokens=5, speculative_max_batch=3)


def test_off_unless_asked():
    assert speculation_for(config("none"), TRIMMED) is None


@pytest.mark.parametrize("profile", [TRIMMED, HYBRID])
def test_on_for_trimmed_and_replayed_caches(profile):
    spec = speculation_for(config("prompt_lookup"), profile)
    assert spec is not None and spec.tokens == 5 and spec.max_batch == 3 and spec.draft_model is None


@pytest.mark.parametrize("profile", [WINDOW, CHUNKED])
def test_off_with_a_log_line_for_other_caches(profile, caplog):
    with caplog.at_level(logging.WARNING, logger="mlxd.worker"):
        assert speculation_for(config("prompt_lookup"), profile) is None
    assert "speculative decoding turned off" in caplog.text


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("draft") / "m")


def test_draft_model_loads(tiny_dir):
    spec = speculation_for(config(f"draft:{tiny_dir}"), TRIMMED, vocab=49152)
    assert spec is not None and spec.draft_model is not None


@pytest.mark.parametrize(
    "source, vocab, why",
    [("/nonexistent/model", 49152, "draft model /nonexistent/model"), (None, 100, "vocabulary has")],
)
def test_draft_model_that_cannot_draft_turns_speculation_off(tiny_dir, caplog, source, vocab, why):
    with caplog.at_level(logging.WARNING, logger="mlxd.worker"):
        assert speculation_for(config(f"draft:{source or tiny_dir}"), TRIMMED, vocab=vocab) is None
    assert "speculative decoding turned off" in caplog.text and why in caplog.text


def test_auto_is_the_default_and_drafts_from_a_suffix_index_with_a_controller():
    assert ModelConfig(name="m").speculative == "auto"
    for mode in ("auto", "suffix"):
        spec = speculation_for(config(mode), TRIMMED)
        assert spec is not None and spec.index is not None and spec.controller is not None
        assert spec.index.budget == ModelConfig(name="m").speculative_index_tokens
    lookup = speculation_for(config("prompt_lookup"), TRIMMED)
    assert lookup.index is None and lookup.controller is not None and lookup.controller.timed


@pytest.mark.parametrize("profile", [WINDOW, CHUNKED])
def test_auto_is_quietly_off_where_drafts_cannot_be_cut_back(profile, caplog):
    with caplog.at_level(logging.WARNING, logger="mlxd.worker"):
        assert speculation_for(config("auto"), profile) is None
    assert "speculative decoding turned off" not in caplog.text


def test_auto_is_off_in_a_tensor_parallel_group_and_named_modes_decide_alike_there():
    assert speculation_for(config("auto"), TRIMMED, grouped=True) is None
    spec = speculation_for(config("suffix"), TRIMMED, grouped=True)
    assert spec is not None and not spec.controller.timed


def test_timing_can_be_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("MLXD_SPECULATION_TIMING", "0")
    assert not speculation_for(config("auto"), TRIMMED).controller.timed
    monkeypatch.delenv("MLXD_SPECULATION_TIMING")
    assert speculation_for(config("auto"), TRIMMED).controller.timed
