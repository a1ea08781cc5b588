"""Replay what real coding agents send, and check mlxd answers in the
official shapes.

Each file in ``fixtures/`` is one request captured from Claude Code or the
Codex CLI (its structure, fields, headers and content-block, item and tool
shapes kept; prose replaced; see ``fixtures/README.md``). The test posts it
unchanged (plus an API key) to a real gateway with a real worker, once as
sent (streaming) and once with ``stream: false``, and requires a 200 whose
body, or every SSE event, validates strictly against the installed SDKs'
response types (:mod:`tests.shapes.official`).

The worker serves the terse tiny model of :func:`tests.tiny_model.build_terse_model`:
the default model's tokenizer and context (``CONTEXT``, 8192 tokens) and
answers of a few tokens, so each request stays fast while the large
``max_tokens`` the agents send (Claude Code: 64000, or 32000 for model names
it does not know) meet the same context as on the default model. The model names the
fixtures carry (``claude-opus-4-8``, ``gpt-6.2-sol``, ...) are aliases of it;
the Codex fixtures with a configured model name use ``tiny`` directly.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from anthropic.types.beta import BetaMessage, BetaRawMessageStreamEvent
from openai.types.responses import Response, ResponseStreamEvent

from tests.conftest import API_KEY, TINY, start_server
from tests.shapes.frames import sse_events
from tests.shapes.official import validate

FIXTURES = sorted(Path(__file__).with_name("fixtures").glob("*.json"))
TIMEOUT = 120
CONTEXT = 8192
"""The default model's context length, given to the replay model."""


def load(path: Path) -> dict:
    """One fixture: ``{"name", "covers", "method", "path", "headers", "body"}``."""
    return json.loads(path.read_text())


def is_anthropic(fixture: dict) -> bool:
    """Whether the fixture is a Messages API request (else a Responses one)."""
    return fixture["path"].split("?")[0] == "/v1/messages"


@pytest.fixture(scope="module")
def replay_server(tiny_model_dir, tmp_path_factory):
    """A gateway serving the terse tiny model as ``tiny``, aliased to every
    other model name the fixtures use."""
    from tests.tiny_model import build_terse_model

    tmp = tmp_path_factory.mktemp("replay")
    model = build_terse_model(tmp / "model", tiny_model_dir, CONTEXT)
    aliases = sorted({load(f)["body"]["model"] for f in FIXTURES} - {TINY})
    srv = start_server(tmp, [{"name": TINY, "source": str(model), "max_batch_size": 4, "aliases": aliases}])
    yield srv
    srv.stop()


def send(server, fixture: dict) -> httpx.Response:
    """POST the fixture as captured, with this server's key in the header the client uses."""
    headers = dict(fixture["headers"])
    if is_anthropic(fixture):
        headers["x-api-key"] = API_KEY
    else:
        headers["authorization"] = f"Bearer {API_KEY}"
    return httpx.request(
        fixture["method"],
        server.url + fixture["path"],
        headers=headers,
        content=json.dumps(fixture["body"]),
        timeout=TIMEOUT,
    )


def check_anthropic_stream(text: str) -> None:
    """Every frame an ``event:`` matching its data's type and a valid beta
    stream event; message_start first, message_stop last, blocks opened and
    closed in index order, one message_delta before the stop."""
    events = sse_events(text)
    names = []
    open_block = None
    next_index = 0
    for event, data in events:
        payload = json.loads(data)
        assert event == payload.get("type"), f"event {event!r} carries {data[:200]}"
        assert event != "error", f"error event: {data}"
        names.append(event)
        if event == "ping":
            assert payload == {"type": "ping"}
            continue
        parsed = validate(BetaRawMessageStreamEvent, payload)
        if event == "message_start":
            assert parsed.message.content == [] and parsed.message.stop_reason is None
        elif event == "content_block_start":
            assert open_block is None and parsed.index == next_index
            open_block = parsed.index
        elif event == "content_block_delta":
            assert parsed.index == open_block
        elif event == "content_block_stop":
            assert parsed.index == open_block
            open_block, next_index = None, next_index + 1
        elif event == "message_delta":
            assert open_block is None
            assert parsed.delta.stop_reason == "end_turn", parsed.delta
    assert names[0] == "message_start" and names[-1] == "message_stop", names
    assert names.count("message_start") == names.count("message_stop") == names.count("message_delta") == 1, names
    assert names.index("message_delta") == len(names) - 2, names


def check_responses_stream(text: str) -> None:
    """Every frame valid as an official Responses stream event, ``event:``
    naming its type, sequence numbers 0, 1, 2, ...; response.created first,
    response.completed last with a strictly valid completed response."""
    events = sse_events(text)
    payloads = []
    for event, data in events:
        assert data != "[DONE]", "the Responses API has no [DONE] frame"
        payload = json.loads(data)
        assert event == payload.get("type"), f"event {event!r} carries {data[:200]}"
        validate(ResponseStreamEvent, payload)
        payloads.append(payload)
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads)))
    types = [p["type"] for p in payloads]
    assert types[0] == "response.created" and types[-1] == "response.completed", types
    final = payloads[-1]["response"]
    assert validate(Response, final).status == "completed"
    added = [p["item"]["id"] for p in payloads if p["type"] == "response.output_item.added"]
    done = [p["item"]["id"] for p in payloads if p["type"] == "response.output_item.done"]
    assert added == done == [item["id"] for item in final["output"]]


@pytest.mark.parametrize("path", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_replay_as_sent(replay_server, path):
    fixture = load(path)
    assert fixture["body"].get("stream") is True
    r = send(replay_server, fixture)
    assert r.status_code == 200, r.text[:2000]
    assert r.headers["content-type"].startswith("text/event-stream")
    if is_anthropic(fixture):
        check_anthropic_stream(r.text)
    else:
        check_responses_stream(r.text)


@pytest.mark.parametrize("path", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_replay_without_streaming(replay_server, path):
    fixture = load(path)
    fixture["body"]["stream"] = False
    r = send(replay_server, fixture)
    assert r.status_code == 200, r.text[:2000]
    assert r.headers["content-type"].startswith("application/json")
    if is_anthropic(fixture):
        message = validate(BetaMessage, r.json())
        assert message.stop_reason == "end_turn"
        assert message.usage.input_tokens + (message.usage.cache_read_input_tokens or 0) > 0
    else:
        response = validate(Response, r.json())
        assert response.status == "completed" and response.usage is not None


def strings(value, path="$"):
    """Every string in a JSON value, with its path."""
    if isinstance(value, dict):
        for key, item in value.items():
            yield from strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for item in value:
            yield from strings(item, f"{path}[]")
    elif isinstance(value, str):
        yield path, value


@pytest.mark.parametrize("path", FIXTURES, ids=[f.stem for f in FIXTURES])
def test_fixture_holds_no_client_prose(path):
    """Fixtures keep the clients' structure, not their prompts or tool
    descriptions: no long text apart from image data and id metadata."""
    fixture = load(path)
    for where, text in strings(fixture["body"]):
        if where.endswith((".data", ".image_url", ".user_id", ".x-codex-turn-metadata")):
            continue
        assert len(text) <= 200, f"{where}: {text[:80]}..."
