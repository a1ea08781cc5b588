"""The default model, served as ``make run`` serves it."""

from __future__ import annotations

import concurrent.futures as cf

import openai
import pytest

from tests.conftest import REAL

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def client(real_server):
    return openai.OpenAI(base_url=f"{real_server.url}/v1", api_key="unused", max_retries=0)


def test_paris_non_streaming(client):
    r = client.chat.completions.create(model=REAL, messages=QUESTION, max_tokens=20, temperature=0)
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"


def test_paris_streaming(client):
    stream = client.chat.completions.create(
        model=REAL, messages=QUESTION, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "Paris" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens > 0


def test_real_model_batches_concurrent_requests(client, real_server):
    questions = ["What is the capital of France?", "What is 2+2?", "Name a color.", "Say hello."]

    def ask(q):
        return client.chat.completions.create(
            model=REAL, messages=[{"role": "user", "content": q}], max_tokens=16, temperature=0
        )

    with cf.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, questions))
    assert "Paris" in answers[0].choices[0].message.content
    assert all(a.choices[0].message.content for a in answers)
    assert real_server.wait_ready(REAL)["stats"]["max_batch_seen"] >= 2
