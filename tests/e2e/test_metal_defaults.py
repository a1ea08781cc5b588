"""The Metal defaults, exercised on Linux: device-side sampling
(``MLXD_HOST_SAMPLING=0``) on half-precision models (bfloat16, as most
community MLX models are stored, and float16).

On Apple Silicon a worker samples and computes log-probabilities with MLX
in the model's dtype; the CPU backend defaults to float32 weights and NumPy
sampling, so without this module those paths would run only on a Mac. Each
dtype gets its own gateway and worker, and the representative features run
through the OpenAI SDK: greedy chat (streamed and not), log-probabilities,
seeded sampling, penalties and logit bias, ``n`` > 1, JSON schemas, tool
calls and a prefix-cache hit.
"""

from __future__ import annotations

import json
import math

import openai
import pytest

from tests.conftest import API_KEY, TINY, start_server
from tests.tiny_model import build_tiny_model

MSG = [{"role": "user", "content": "describe the sea in a few words"}]
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 24},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}


@pytest.fixture(scope="module", params=["bfloat16", "float16"])
def server(request, tmp_path_factory):
    """A gateway serving a tiny model stored and run in ``request.param``,
    sampling on the device."""
    dtype = request.param
    model = build_tiny_model(tmp_path_factory.mktemp(f"tiny-{dtype}") / "model", dtype=dtype)
    srv = start_server(
        tmp_path_factory.mktemp(f"metal-defaults-{dtype}"),
        [{"name": TINY, "source": str(model), "dtype": dtype, "max_batch_size": 8}],
        env={"MLXD_HOST_SAMPLING": "0"},
    )
    yield srv
    srv.stop()


@pytest.fixture
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=60)


def chat(client, **kw):
    return client.chat.completions.create(model=TINY, messages=kw.pop("messages", MSG), **kw)


def test_worker_samples_on_the_device(server):
    assert server.worker(TINY)["sampling"] == "device"


def test_greedy_streamed_and_not_agree(client):
    plain = chat(client, max_tokens=16, temperature=0)
    assert plain.usage.completion_tokens == 16 and plain.choices[0].message.content
    pieces = []
    for chunk in chat(client, max_tokens=16, temperature=0, stream=True):
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
    assert "".join(pieces) == plain.choices[0].message.content


def test_logprobs_are_normalized_and_match_greedy(client):
    plain = chat(client, max_tokens=8, temperature=0)
    r = chat(client, max_tokens=8, temperature=0, logprobs=True, top_logprobs=4)
    assert r.choices[0].message.content == plain.choices[0].message.content
    content = r.choices[0].logprobs.content
    assert len(content) == 8
    for t in content:
        tops = [x.logprob for x in t.top_logprobs]
        assert len(tops) == 4 and tops == sorted(tops, reverse=True)
        assert all(math.isfinite(v) and v <= 0 for v in tops)
        assert t.token == t.top_logprobs[0].token and math.isclose(t.logprob, tops[0], abs_tol=1e-6)
        assert sum(math.exp(v) for v in tops) <= 1 + 1e-3


def test_seeded_sampling_repeats(client):
    kw = dict(max_tokens=12, temperature=1.0, top_p=0.95, seed=7, logprobs=True, top_logprobs=1)
    first, again = chat(client, **kw), chat(client, **kw)
    assert first.choices[0].message.content == again.choices[0].message.content
    other = chat(client, **{**kw, "seed": 8})
    assert other.choices[0].message.content != first.choices[0].message.content
    assert all(t.logprob <= 0 for t in first.choices[0].logprobs.content)


def test_penalties_and_logit_bias_apply(client):
    plain = chat(client, max_tokens=24, temperature=0, logprobs=True)
    tokens = [t.token for t in plain.choices[0].logprobs.content]
    for kw in (
        dict(frequency_penalty=2.0),
        dict(presence_penalty=2.0),
        dict(extra_body={"repetition_penalty": 1.5}),
    ):
        r = chat(client, max_tokens=24, temperature=0, logprobs=True, **kw)
        penalized = [t.token for t in r.choices[0].logprobs.content]
        assert r.usage.completion_tokens == 24
        # a greedy random model repeats itself; a penalty makes it repeat less
        assert len(set(penalized)) >= len(set(tokens)), kw
        assert penalized != tokens, kw
    forced = chat(client, max_tokens=4, temperature=0, logprobs=True, logit_bias={"1000": 100})
    assert {t.token for t in forced.choices[0].logprobs.content} == {forced.choices[0].logprobs.content[0].token}
    assert forced.choices[0].logprobs.content[0].logprob > -0.01


def test_n_choices_each_complete(client):
    r = chat(client, max_tokens=10, temperature=1.0, seed=3, n=3)
    assert sorted(c.index for c in r.choices) == [0, 1, 2]
    assert r.usage.completion_tokens == 30
    assert len({c.message.content for c in r.choices}) > 1


def test_json_schema_and_tool_call(client):
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": 12},
            "age": {"type": "integer", "minimum": 0, "maximum": 120},
        },
        "required": ["name", "age"],
        "additionalProperties": False,
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "p", "schema": schema, "strict": True}}
    r = chat(client, max_tokens=60, temperature=0, response_format=fmt)
    data = json.loads(r.choices[0].message.content)
    assert set(data) == {"name", "age"} and isinstance(data["age"], int) and data["age"] >= 0
    r = chat(
        client,
        max_tokens=80,
        temperature=0.8,
        seed=1,
        tools=[WEATHER],
        tool_choice="required",
        parallel_tool_calls=False,
    )
    (call,) = r.choices[0].message.tool_calls
    args = json.loads(call.function.arguments)
    assert call.function.name == "get_weather" and set(args) == {"city", "days"} and args["days"] >= 1
    assert r.choices[0].finish_reason == "tool_calls"


def test_prefix_cache_hit(client):
    long = [{"role": "user", "content": "tell me about the sea " * 40}]
    cold = chat(client, messages=long, max_tokens=2, temperature=0)
    warm = chat(client, messages=long, max_tokens=2, temperature=0, logprobs=True)
    assert warm.usage.prompt_tokens_details.cached_tokens >= cold.usage.prompt_tokens // 2
    assert warm.choices[0].message.content == cold.choices[0].message.content
