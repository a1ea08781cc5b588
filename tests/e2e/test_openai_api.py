"""The OpenAI API end to end: real gateway, real worker, tiny model.

Clients are the official ``openai`` SDK and raw HTTP (httpx).
"""

from __future__ import annotations

import concurrent.futures as cf
import json

import httpx
import openai
import pytest

from tests.conftest import API_KEY, TINY, mean_batch, settled_stats


@pytest.fixture(scope="module")
def client(tiny_server):
    return openai.OpenAI(base_url=f"{tiny_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


def chat(client, content="Hello there", **kw):
    kw.setdefault("max_tokens", 12)
    kw.setdefault("temperature", 0)
    return client.chat.completions.create(model=TINY, messages=[{"role": "user", "content": content}], **kw)


def test_models_list(client):
    ids = [m.id for m in client.models.list().data]
    assert ids == [TINY]
    assert client.models.retrieve(TINY).id == TINY


def test_chat_non_streaming(client):
    r = chat(client, max_tokens=7)
    assert r.object == "chat.completion"
    assert r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content
    assert r.choices[0].finish_reason == "length"
    assert r.usage.completion_tokens == 7
    assert r.usage.prompt_tokens > 5
    assert r.usage.total_tokens == r.usage.prompt_tokens + 7


def test_alias_routes_to_the_model(client):
    r = client.chat.completions.create(model="tiny-alias", messages=[{"role": "user", "content": "x"}], max_tokens=2)
    assert r.usage.completion_tokens == 2


def test_greedy_is_deterministic_and_streaming_matches(client):
    a = chat(client, "Tell me a story").choices[0].message.content
    b = chat(client, "Tell me a story").choices[0].message.content
    assert a == b
    stream = chat(client, "Tell me a story", stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == a
    assert chunks[0].choices[0].delta.role == "assistant"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 12
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "length"


def test_content_as_text_parts(client):
    parts = [{"type": "text", "text": "Tell me "}, {"type": "text", "text": "a story"}]
    r = client.chat.completions.create(
        model=TINY, messages=[{"role": "user", "content": parts}], max_tokens=12, temperature=0
    )
    assert r.choices[0].message.content == chat(client, "Tell me a story").choices[0].message.content


def test_raw_sse_frames(tiny_server):
    body = {
        "model": TINY,
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    with httpx.stream(
        "POST", f"{tiny_server.url}/v1/chat/completions", json=body, headers=tiny_server.headers, timeout=60
    ) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in r.iter_lines() if line]
    assert all(line.startswith("data: ") for line in lines)
    assert lines[-1] == "data: [DONE]"
    frames = [json.loads(line[6:]) for line in lines[:-1]]
    assert {f["object"] for f in frames} == {"chat.completion.chunk"}
    assert len({f["id"] for f in frames}) == 1
    assert frames[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert frames[-1]["choices"] == [] and frames[-1]["usage"]["completion_tokens"] == 4
    assert frames[-2]["choices"][0]["finish_reason"] == "length"


def test_completions_endpoint(client):
    r = client.completions.create(model=TINY, prompt="Once upon a time", max_tokens=6, temperature=0)
    assert r.object == "text_completion"
    assert r.usage.completion_tokens == 6
    streamed = client.completions.create(
        model=TINY, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == r.choices[0].text


def test_completions_with_token_ids(client):
    r = client.completions.create(model=TINY, prompt=[1, 2, 3, 4], max_tokens=3)
    assert r.usage.prompt_tokens == 4 and r.usage.completion_tokens == 3


def test_stop_strings_under_batching(client):
    """Each of 8 concurrent requests stops at its own stop string."""
    prompts = [f"Write item number {i}" for i in range(8)]
    full = [chat(client, p, max_tokens=24).choices[0].message.content for p in prompts]
    # a stop string from the middle of each greedy answer
    stops = [t[len(t) // 2 : len(t) // 2 + 3] for t in full]

    def run(i):
        return chat(client, prompts[i], max_tokens=24, stop=[stops[i], "\u0000never"])

    with cf.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(8)))
    for text, stop, r in zip(full, stops, results):
        assert r.choices[0].finish_reason == "stop"
        assert r.choices[0].message.content == text[: text.index(stop)]


def test_stop_string_in_stream(client):
    text = chat(client, "abc", max_tokens=24).choices[0].message.content
    stop = text[5:8]
    stream = chat(client, "abc", max_tokens=24, stop=stop, stream=True)
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == text[: text.index(stop)]
    assert chunks[-1].choices[0].finish_reason == "stop"


def test_seeded_sampling_is_reproducible_inside_a_batch(client):
    def run(seed):
        return chat(client, "Pick words", temperature=1.0, seed=seed, max_tokens=16).choices[0].message.content

    alone = run(1234)
    with cf.ThreadPoolExecutor(6) as pool:
        futures = [pool.submit(run, s) for s in (1234, 1, 2, 1234, 3, 4)]
        batch = [f.result() for f in futures]
    assert batch[0] == alone and batch[3] == alone
    assert len(set(batch)) > 2  # other seeds differ


def test_logit_bias_forces_a_token(client):
    r = client.completions.create(model=TINY, prompt="x", max_tokens=5, logit_bias={"72": 100}, temperature=0)
    assert r.choices[0].text == "h" * 5 or len(set(r.choices[0].text)) == 1


def test_sampling_fields_are_honoured(client):
    r = chat(
        client,
        temperature=0.8,
        top_p=0.9,
        presence_penalty=0.5,
        frequency_penalty=0.5,
        seed=7,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.2},
    )
    assert r.usage.completion_tokens == 12


def test_concurrent_streams_share_batches(client, tiny_server):
    before = settled_stats(tiny_server, TINY)
    n, tokens = 8, 48

    def run(i):
        stream = chat(client, f"stream {i}", max_tokens=tokens, stream=True, stream_options={"include_usage": True})
        return list(stream)[-1].usage.completion_tokens

    with cf.ThreadPoolExecutor(n) as pool:
        counts = list(pool.map(run, range(n)))
    assert counts == [tokens] * n
    after = settled_stats(tiny_server, TINY)
    steps = after["steps"] - before["steps"]
    assert after["generated_tokens"] - before["generated_tokens"] == n * tokens
    # sequential decoding would need n * tokens steps (a mean batch of 1);
    # batching needs far fewer, in this test's own window
    assert steps < n * tokens / 2, (steps, n * tokens)
    assert mean_batch(before, after) >= n / 4, (before, after)
