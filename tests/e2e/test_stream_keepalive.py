"""Streams whose first token is slow start with SSE keep-alive comments.

A gateway with ``stream_keepalive`` 0.05 s and a long prompt (the tiny
model needs well over 0.05 s to prefill it): the raw stream begins with
``: keep-alive`` comments, and the official SDKs read every protocol's
stream through them.
"""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from tests.conftest import API_KEY, TINY, start_server

LONG = [{"role": "user", "content": "keep the line open " * 400}]  # ~1,600 of the 2,048-token context


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    srv = start_server(
        tmp_path_factory.mktemp("keepalive"),
        [{"name": TINY, "source": str(tiny_model_dir), "prefix_cache_bytes": 0}],
        stream_keepalive=0.05,
    )
    yield srv
    srv.stop()


def test_raw_stream_starts_with_keepalives(server):
    body = {"model": TINY, "messages": LONG, "max_tokens": 3, "stream": True}
    headers = {"Authorization": f"Bearer {API_KEY}"}
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json=body, headers=headers, timeout=60) as r:
        assert r.status_code == 200
        lines = [line for line in r.iter_lines() if line]
    first_data = next(i for i, line in enumerate(lines) if line.startswith("data: "))
    assert first_data >= 1 and all(line == ": keep-alive" for line in lines[:first_data])
    assert lines[-1] == "data: [DONE]"
    assert '"finish_reason":"length"' in lines[-2] and not any('"error"' in line for line in lines)


def test_sdks_read_streams_through_keepalives(server):
    oai = openai.OpenAI(base_url=f"{server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
    chunks = list(oai.chat.completions.create(model=TINY, messages=LONG, max_tokens=3, stream=True))
    assert chunks[-1].choices[0].finish_reason == "length"
    events = list(oai.responses.create(model=TINY, input=LONG[0]["content"], max_output_tokens=3, stream=True))
    assert events[-1].type == "response.incomplete"
    claude = anthropic.Anthropic(base_url=server.url, api_key=API_KEY, max_retries=0, timeout=300)
    with claude.messages.stream(model=TINY, max_tokens=3, messages=LONG) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "max_tokens" and final.usage.output_tokens == 3
