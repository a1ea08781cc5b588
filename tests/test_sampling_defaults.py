"""Sampling defaults (worker.sampling.defaults): what a model's
generation_config.json recommends, the config's ``[models.sampling_defaults]``
over it, mlxd's fallback, and how a request's unset fields are filled."""

from __future__ import annotations

import json

import pytest

from shared.config import ConfigError, SamplingDefaultsConfig
from shared.config_loader import load_config
from shared.protocol import SamplingDefaults, SamplingParams
from worker.sampling.defaults import generation_config_defaults, model_sampling_defaults, with_defaults


def model_dir(tmp_path, **config):
    (tmp_path / "generation_config.json").write_text(json.dumps({"bos_token_id": 1, "eos_token_id": [0, 2], **config}))
    return tmp_path


def test_generation_config_fields_are_read(tmp_path):
    d = model_dir(tmp_path, temperature=0.6, top_p=0.95, top_k=20, min_p=0.05, repetition_penalty=1.1, do_sample=True)
    assert generation_config_defaults(d) == {
        "temperature": 0.6,
        "top_p": 0.95,
        "top_k": 20,
        "min_p": 0.05,
        "repetition_penalty": 1.1,
    }
    assert model_sampling_defaults(d, SamplingDefaultsConfig()) == SamplingDefaults(
        temperature=0.6, top_p=0.95, top_k=20, min_p=0.05, repetition_penalty=1.1
    )


def test_unusable_values_are_skipped(tmp_path):
    d = model_dir(tmp_path, temperature="hot", top_p=0.0, top_k=1.5, min_p=None, repetition_penalty=True)
    assert generation_config_defaults(d) == {}
    d = model_dir(tmp_path, temperature=3.0, top_k=-1)
    assert generation_config_defaults(d) == {}


def test_missing_or_broken_file_means_fallback(tmp_path):
    assert model_sampling_defaults(tmp_path, SamplingDefaultsConfig()) == SamplingDefaults()
    (tmp_path / "generation_config.json").write_text("{not json")
    assert generation_config_defaults(tmp_path) == {}
    assert SamplingDefaults() == SamplingDefaults(
        temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0
    )


def test_config_overrides_field_by_field(tmp_path):
    d = model_dir(tmp_path, temperature=0.6, top_k=20)
    got = model_sampling_defaults(d, SamplingDefaultsConfig(temperature=0.2, min_p=0.1))
    assert got == SamplingDefaults(temperature=0.2, top_k=20, min_p=0.1)


def test_request_values_win_and_unset_ones_are_filled():
    defaults = SamplingDefaults(temperature=0.6, top_p=0.9, top_k=20, min_p=0.05, repetition_penalty=1.1)
    filled = with_defaults(SamplingParams(max_tokens=5, temperature=0.0, top_k=0, seed=3), defaults)
    assert filled == SamplingParams(
        max_tokens=5, temperature=0.0, top_p=0.9, top_k=0, min_p=0.05, repetition_penalty=1.1, seed=3
    )
    complete = SamplingParams(temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, repetition_penalty=1.0)
    assert with_defaults(complete, defaults) is complete


def test_config_table_is_parsed_and_bounded(tmp_path):
    path = tmp_path / "c.toml"
    path.write_text('[[models]]\nname = "a"\n[models.sampling_defaults]\ntemperature = 0.7\ntop_k = 40\n')
    model = load_config(path).models[0]
    assert model.sampling_defaults == SamplingDefaultsConfig(temperature=0.7, top_k=40)
    for bad in ("temperature = 5.0", "top_p = 0", "colour = 1"):
        path.write_text(f'[[models]]\nname = "a"\n[models.sampling_defaults]\n{bad}\n')
        with pytest.raises(ConfigError):
            load_config(path)
