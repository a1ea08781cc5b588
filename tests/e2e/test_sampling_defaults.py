"""Sampling defaults when a request sets none: the model's own
``generation_config.json`` recommendations, the config's
``sampling_defaults`` over them, mlxd's fallback without either, and the
report in ``GET /v1/models/{id}``; through a real gateway and workers
(tiny models whose generation configs differ)."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.conftest import API_KEY, start_server
from tests.tiny_model import build_model_with_generation_defaults

MSG = [{"role": "user", "content": "Tell me a story."}]
TOKENS = 24
FALLBACK = {"temperature": 1.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "repetition_penalty": 1.0}


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """``greedy``: generation_config top_k 1 (sampling equals greedy);
    ``cool``: temperature 0.5 from generation_config, top_p 0.9 from the
    config; ``plain``: the tiny model without sampling recommendations."""
    tmp = tmp_path_factory.mktemp("sampling-defaults")
    greedy = build_model_with_generation_defaults(tmp / "greedy", tiny_model_dir, top_k=1)
    cool = build_model_with_generation_defaults(tmp / "cool", tiny_model_dir, temperature=0.5, top_p=0.5)
    srv = start_server(
        tmp,
        [
            {"name": "greedy", "source": str(greedy)},
            {"name": "cool", "source": str(cool), "sampling_defaults": {"top_p": 0.9}},
            {"name": "plain", "source": str(tiny_model_dir)},
        ],
    )
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


def text(client, model, **kw) -> str:
    r = client.chat.completions.create(model=model, messages=MSG, max_tokens=TOKENS, **kw)
    return r.choices[0].message.content


def test_models_report_their_effective_defaults(server):
    def defaults(model):
        r = httpx.get(f"{server.url}/v1/models/{model}", headers=server.headers, timeout=30)
        assert r.status_code == 200
        return r.json()["sampling_defaults"]

    assert defaults("greedy") == {**FALLBACK, "top_k": 1}
    assert defaults("cool") == {**FALLBACK, "temperature": 0.5, "top_p": 0.9}  # the config wins over the file
    assert defaults("plain") == FALLBACK
    listed = httpx.get(f"{server.url}/v1/models", headers=server.headers, timeout=30).json()["data"]
    assert {m["id"]: m["sampling_defaults"] for m in listed}["greedy"] == {**FALLBACK, "top_k": 1}


def test_generation_config_top_k_makes_unset_sampling_greedy(client, server):
    """top_k 1 from generation_config.json: a request without sampling
    settings (OpenAI and Anthropic) decodes greedily; a request that sets
    its own top_k (-1: off) samples."""
    greedy = text(client, "greedy", temperature=0)
    assert text(client, "greedy") == greedy
    assert text(client, "greedy", seed=3) == greedy
    claude = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=300)
    m = claude.messages.create(model="greedy", max_tokens=TOKENS, messages=MSG)
    assert m.content[0].text == greedy
    sampled = {text(client, "greedy", seed=s, extra_body={"top_k": -1}) for s in (1, 2, 3)}
    assert sampled != {greedy}


def test_temperature_default_is_used_when_unset(client):
    """Seeded sampling: an unset temperature behaves as the model's 0.5 (and
    top_p as the config's 0.9), not as 1."""
    unset = text(client, "cool", seed=11)
    assert unset == text(client, "cool", seed=11, temperature=0.5, top_p=0.9)
    assert unset != text(client, "cool", seed=11, temperature=1.0, top_p=1.0)


def test_responses_echo_the_settings_used(client):
    r = client.responses.create(model="cool", input="hi", max_output_tokens=2)
    assert (r.temperature, r.top_p) == (0.5, 0.9)
    r = client.responses.create(model="cool", input="hi", max_output_tokens=2, temperature=0.3)
    assert (r.temperature, r.top_p) == (0.3, 0.9)


def test_fallback_without_recommendations(client):
    """No recommendations: mlxd's fallback (temperature 1, no filters), as
    before it read model defaults."""
    unset = text(client, "plain", seed=5)
    assert unset == text(client, "plain", seed=5, temperature=1.0, top_p=1.0)
    assert unset != text(client, "plain", seed=5, temperature=0)
