"""The Anthropic Messages endpoints against a scripted ModelBackend (no MLX).

The ModelBackend (``ScriptedBackend`` of ``tests/unit/support.py``) replays
predetermined RequestOutputs and ends like a real RequestStream (after the
choice's final output, or right after an error/abort). Requests go through
the official ``anthropic`` SDK (built on httpx2, so httpx2's ASGI
transport), raw httpx for frame-level checks, or a hand-driven ASGI call for
disconnects.
"""

from __future__ import annotations

import json

import anthropic
import pytest
from starlette.routing import Route

from gateway.anthropic.routes import count_tokens, messages
from gateway.core.errors import APIError, unavailable
from gateway.frontend.error_shapes import anthropic_error_response
from tests.unit.support import HELLO, Client, Gateway, ScriptedBackend, call, out, sse_events

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


# --- scripts and clients ---------------------------------------------------------------


WEATHER = [
    out(reasoning="User wants ", completion=1),
    out(reasoning="weather.", completion=2),
    out("Checking.", completion=3),
    out(calls=[call(0, id="toolu_1", name="get_weather")], completion=4),
    out(calls=[call(0, '{"city": ')], completion=5),
    out(calls=[call(0, '"Paris"}')], completion=6),
    out(calls=[call(1, '{"city": "Rome"}', id="toolu_2", name="get_weather")], finish="tool_calls", completion=7),
]


GATEWAY = Gateway(
    Route("/v1/messages", messages, methods=["POST"]),
    Route("/v1/messages/count_tokens", count_tokens, methods=["POST"]),
)
http, sdk, run_app = GATEWAY.http, GATEWAY.anthropic, GATEWAY.run


USER = [{"role": "user", "content": "hi"}]
BODY = {"model": "m", "max_tokens": 64, "messages": USER}
TOOLS = [
    {
        "name": "get_weather",
        "description": "Weather for a city",
        "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
]


def delta_usage(input_tokens, output_tokens, cached=0) -> dict:
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached,
        "server_tool_use": {"web_search_requests": 0, "web_fetch_requests": 0},
        "fallback_credit": None,
        "iterations": None,
        "output_tokens_details": None,
    }


def usage(input_tokens, output_tokens, cached=0) -> dict:
    return {
        **delta_usage(input_tokens, output_tokens, cached),
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "service_tier": "standard",
        "inference_geo": None,
        "speed": "standard",
    }


NULL_FIELDS = {"stop_details": None, "container": None, "diagnostics": None}


# --- non-streaming ---------------------------------------------------------------------


async def test_non_streaming_raw_shape():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json=BODY, headers={"anthropic-version": "2023-06-01"})
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    assert resp.headers["request-id"].startswith("req_")
    body = resp.json()
    assert body["id"].startswith("msg_") and len(body["id"]) == len("msg_") + 32
    assert body == {
        "id": body["id"],
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "Hello!", "citations": None}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        **NULL_FIELDS,
        "usage": usage(5, 4),
    }
    model, request = engine.submitted[0]
    assert model == "m" and request.request_id == body["id"] and request.n == 1
    assert engine.stream.aclose_calls >= 1


async def test_sdk_text_message_via_alias():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        message = await client.messages.create(model="alias", max_tokens=64, messages=USER)
    assert message.model == "m"
    assert [block.type for block in message.content] == ["text"]
    assert message.content[0].text == "Hello!"
    assert message.stop_reason == "end_turn" and message.stop_sequence is None
    assert message.usage.input_tokens == 5 and message.usage.output_tokens == 4
    assert message._request_id.startswith("req_")


async def test_sdk_tool_use_and_thinking_blocks():
    engine = ScriptedBackend(WEATHER)
    async with sdk(engine) as client:
        message = await client.messages.create(
            model="m",
            max_tokens=4096,
            messages=USER,
            tools=TOOLS,
            thinking={"type": "enabled", "budget_tokens": 1024},
        )
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    thinking, text, first, second = message.content
    assert thinking.thinking == "User wants weather." and thinking.signature == ""
    assert text.text == "Checking."
    assert (first.id, first.name, first.input) == ("toolu_1", "get_weather", {"city": "Paris"})
    assert (second.id, second.input) == ("toolu_2", {"city": "Rome"})
    assert message.stop_reason == "tool_use"
    assert engine.request.thinking is True


@pytest.mark.parametrize(
    "final, reason, sequence",
    [
        (out("x", "length", completion=3), "max_tokens", None),
        (out("x", "stop", completion=3, stop_sequence="END"), "stop_sequence", "END"),
        (out("x", "stop", completion=3), "end_turn", None),
        (out(calls=[call(0, "{}", id="t", name="f")], finish="tool_calls", completion=3), "tool_use", None),
    ],
)
async def test_stop_reasons(final, reason, sequence):
    engine = ScriptedBackend([final])
    async with sdk(engine) as client:
        message = await client.messages.create(model="m", max_tokens=8, messages=USER)
    assert message.stop_reason == reason
    assert message.stop_sequence == sequence


async def test_usage_reports_cache_reads():
    engine = ScriptedBackend([out("a", prompt=40, cached=32), out("b", "stop", prompt=40, cached=32, completion=2)])
    async with sdk(engine) as client:
        message = await client.messages.create(model="m", max_tokens=8, messages=USER)
    assert message.usage.input_tokens == 8
    assert message.usage.cache_read_input_tokens == 32
    assert message.usage.cache_creation_input_tokens == 0
    assert message.usage.output_tokens == 2


async def test_tool_call_without_arguments_has_empty_input():
    engine = ScriptedBackend([out(calls=[call(0, id="t1", name="now")], finish="tool_calls")])
    async with sdk(engine) as client:
        message = await client.messages.create(model="m", max_tokens=8, messages=USER)
    assert message.content[0].input == {}


async def test_invalid_tool_arguments_are_a_500():
    engine = ScriptedBackend([out(calls=[call(0, "[1]", id="t1", name="f")], finish="tool_calls")])
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json=BODY)
    assert resp.status_code == 500
    assert resp.json()["error"]["type"] == "api_error"


async def test_empty_output_has_no_blocks():
    engine = ScriptedBackend([out(finish="stop")])
    async with sdk(engine) as client:
        message = await client.messages.create(model="m", max_tokens=8, messages=USER)
    assert message.content == [] and message.stop_reason == "end_turn"


async def test_response_blocks_can_be_sent_back():
    """A follow-up turn built from the SDK's own objects (``model_dump`` with
    its null ``caller``/``toolset_name``/``citations``, or ``to_param``)."""
    engine = ScriptedBackend(WEATHER)
    async with sdk(engine) as client:
        async with client.messages.stream(model="m", max_tokens=4096, messages=USER, tools=TOOLS) as stream:
            final = await stream.get_final_message()
        results = [{"type": "tool_result", "tool_use_id": b.id, "content": "18C"} for b in final.content[2:]]
        dumped = {"role": "assistant", "content": [b.model_dump() for b in final.content]}
        for assistant in (dumped, final.to_param()):
            turns = [*USER, assistant, {"role": "user", "content": results}]
            await client.messages.create(model="m", max_tokens=8, messages=turns, tools=TOOLS)
    for _, request in engine.submitted[1:]:
        history = request.messages[1]
        assert history.reasoning == "User wants weather." and history.content == "Checking."
        assert [c.id for c in history.tool_calls] == ["toolu_1", "toolu_2"]
        assert json.loads(history.tool_calls[0].arguments) == {"city": "Paris"}
        assert [(m.role, m.tool_call_id, m.name) for m in request.messages[2:]] == [
            ("tool", "toolu_1", "get_weather"),
            ("tool", "toolu_2", "get_weather"),
        ]


# --- errors -----------------------------------------------------------------------------


async def test_error_shape_and_request_id():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json={**BODY, "model": "nope"})
    assert resp.status_code == 404
    body = resp.json()
    assert body == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "The model 'nope' does not exist"},
        "request_id": body["request_id"],
    }
    assert body["request_id"].startswith("req_") and resp.headers["request-id"] == body["request_id"]
    assert engine.submitted == []


async def test_sdk_exception_classes():
    async with sdk(ScriptedBackend(HELLO)) as client:
        with pytest.raises(anthropic.NotFoundError):
            await client.messages.create(model="nope", max_tokens=8, messages=USER)
        with pytest.raises(anthropic.BadRequestError) as info:
            await client.messages.create(model="m", max_tokens=0, messages=USER)
    assert info.value.body["error"]["type"] == "invalid_request_error"
    assert "max_tokens" in info.value.body["error"]["message"]


@pytest.mark.parametrize(
    "submit_error",
    [
        APIError(503, "Model queue is full", code="overloaded", retry_after=2),
        unavailable("The model is starting"),
    ],
)
async def test_submit_503_becomes_529_overloaded(submit_error):
    engine = ScriptedBackend(submit_error=submit_error)
    async with sdk(engine) as client:
        with pytest.raises(anthropic.OverloadedError) as info:
            await client.messages.create(model="m", max_tokens=8, messages=USER)
    err = info.value
    assert err.status_code == 529
    assert err.body["error"]["type"] == "overloaded_error"
    assert err.response.headers["retry-after"] == str(submit_error.retry_after)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize(
    "terminal, status, error_type",
    [
        (out(finish="error", error="Prompt too long", kind="context_length_exceeded"), 400, "invalid_request_error"),
        (out(finish="error", error="busy", kind="overloaded"), 529, "overloaded_error"),
        (out(finish="error", kind="unavailable"), 529, "overloaded_error"),
        (out(finish="error", error="boom", kind="internal"), 500, "api_error"),
        (out(finish="error", kind="timeout"), 504, "timeout_error"),
        (out(finish="abort"), 529, "overloaded_error"),
    ],
)
async def test_first_output_errors_map_to_status(stream, terminal, status, error_type):
    engine = ScriptedBackend([terminal])
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json={**BODY, "stream": stream})
    assert resp.status_code == status
    assert resp.headers["content-type"] == "application/json"
    assert resp.json()["error"]["type"] == error_type
    assert ("retry-after" in resp.headers) == (status == 529)
    if terminal.error:
        assert resp.json()["error"]["message"] == terminal.error
    assert engine.stream.aclose_calls >= 1


async def test_error_after_first_output_non_streaming():
    engine = ScriptedBackend([out("a"), out(finish="error", error="boom", kind="internal")])
    async with sdk(engine) as client:
        with pytest.raises(anthropic.InternalServerError) as info:
            await client.messages.create(model="m", max_tokens=8, messages=USER)
    assert info.value.status_code == 500


async def test_timeout_is_504_in_sdk():
    engine = ScriptedBackend([out(finish="error", kind="timeout")])
    async with sdk(engine) as client:
        with pytest.raises(anthropic.GatewayTimeoutError):
            await client.messages.create(model="m", max_tokens=8, messages=USER)


async def test_invalid_body_is_400_and_never_submitted():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json={**BODY, "frequency_penalty": 1})
        bad_json = await client.post("/v1/messages", content=b"{")
    assert resp.status_code == 400
    assert resp.json()["error"] == {
        "type": "invalid_request_error",
        "message": "frequency_penalty: Extra inputs are not permitted",
    }
    assert bad_json.status_code == 400 and "not valid JSON" in bad_json.json()["error"]["message"]
    assert engine.submitted == []


def test_anthropic_error_response_helper():
    cases = [
        (APIError(401, "Invalid or missing API key"), 401, "authentication_error"),
        (APIError(403, "no"), 403, "permission_error"),
        (APIError(413, "too big"), 413, "request_too_large"),
        (APIError(429, "slow down"), 429, "rate_limit_error"),
        (APIError(405, "Method not allowed"), 405, "invalid_request_error"),
        (APIError(500, "Internal server error"), 500, "api_error"),
        (APIError(503, "overloaded", code="overloaded"), 529, "overloaded_error"),
        (APIError(504, "late"), 504, "timeout_error"),
    ]
    for err, status, error_type in cases:
        resp = anthropic_error_response(err)
        body = json.loads(resp.body)
        assert resp.status_code == status
        assert body["type"] == "error" and body["error"] == {"type": error_type, "message": err.message}
        assert body["request_id"] == resp.headers["request-id"]
        assert ("retry-after" in resp.headers) == (status == 529)


# --- streaming ---------------------------------------------------------------------------


async def test_stream_exact_frame_sequence():
    engine = ScriptedBackend(WEATHER)
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json={**BODY, "stream": True, "tools": TOOLS})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["request-id"].startswith("req_")
    events = sse_events(resp.content)
    message_id = engine.request.request_id

    def start(i, block):
        return ("content_block_start", {"type": "content_block_start", "index": i, "content_block": block})

    def delta(i, d):
        return ("content_block_delta", {"type": "content_block_delta", "index": i, "delta": d})

    def stop(i):
        return ("content_block_stop", {"type": "content_block_stop", "index": i})

    assert events == [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": "m",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    **NULL_FIELDS,
                    "usage": usage(5, 1),
                },
            },
        ),
        ("ping", {"type": "ping"}),
        start(0, {"type": "thinking", "thinking": "", "signature": ""}),
        delta(0, {"type": "thinking_delta", "thinking": "User wants "}),
        delta(0, {"type": "thinking_delta", "thinking": "weather."}),
        delta(0, {"type": "signature_delta", "signature": ""}),
        stop(0),
        start(1, {"type": "text", "text": "", "citations": None}),
        delta(1, {"type": "text_delta", "text": "Checking."}),
        stop(1),
        start(2, {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {}}),
        delta(2, {"type": "input_json_delta", "partial_json": '{"city": '}),
        delta(2, {"type": "input_json_delta", "partial_json": '"Paris"}'}),
        stop(2),
        start(3, {"type": "tool_use", "id": "toolu_2", "name": "get_weather", "input": {}}),
        delta(3, {"type": "input_json_delta", "partial_json": '{"city": "Rome"}'}),
        stop(3),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "tool_use", "stop_sequence": None, "stop_details": None, "container": None},
                "usage": delta_usage(5, 7),
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    assert engine.stream.aclose_calls >= 1


async def test_stream_text_only_and_stop_sequence():
    script = [out("Hi", completion=1, cached=2), out(" there", "stop", completion=2, cached=2, stop_sequence="##")]
    engine = ScriptedBackend(script)
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json={**BODY, "stream": True, "stop_sequences": ["##"]})
    events = sse_events(resp.content)
    assert [e for e, _ in events] == [
        "message_start",
        "ping",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert events[0][1]["message"]["usage"] == usage(3, 1, cached=2)
    assert events[6][1]["delta"] == {
        "stop_reason": "stop_sequence",
        "stop_sequence": "##",
        "stop_details": None,
        "container": None,
    }
    assert events[6][1]["usage"] == delta_usage(3, 2, cached=2)
    assert engine.request.sampling.stop == ["##"]


async def test_stream_reasoning_after_text_opens_a_new_block():
    script = [out("a"), out(reasoning="r"), out("b", "stop")]
    async with http(ScriptedBackend(script)) as client:
        resp = await client.post("/v1/messages", json={**BODY, "stream": True})
    starts = [d["content_block"]["type"] for e, d in sse_events(resp.content) if e == "content_block_start"]
    assert starts == ["text", "thinking", "text"]


async def test_stream_text_needing_escapes_stays_one_line():
    text = 'line1\nline2\r\n"quoted" \\ \u2028 é 😀'
    async with http(ScriptedBackend([out(text, "stop")])) as client:
        resp = await client.post("/v1/messages", json={**BODY, "stream": True})
    events = sse_events(resp.content)
    assert events[3][1]["delta"] == {"type": "text_delta", "text": text}


async def test_sdk_stream_final_message():
    engine = ScriptedBackend(WEATHER)
    async with sdk(engine) as client:
        async with client.messages.stream(
            model="m",
            max_tokens=4096,
            messages=USER,
            tools=TOOLS,
            thinking={"type": "enabled", "budget_tokens": 2048},
        ) as stream:
            texts = [text async for text in stream.text_stream]
            message = await stream.get_final_message()
    assert texts == ["Checking."]
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.content[0].thinking == "User wants weather." and message.content[0].signature == ""
    assert message.content[2].input == {"city": "Paris"}
    assert message.content[3].input == {"city": "Rome"}
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == 5 and message.usage.output_tokens == 7
    assert engine.stream.aclose_calls >= 1


async def test_sdk_raw_stream_events():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        stream = await client.messages.create(model="m", max_tokens=8, messages=USER, stream=True)
        types = [event.type async for event in stream]
    assert types == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_delta",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]


@pytest.mark.parametrize(
    "terminal, error_type",
    [
        (out(finish="error", error="boom", kind="internal"), "api_error"),
        (out(finish="error", kind="overloaded"), "overloaded_error"),
        (out(finish="error", kind="timeout"), "timeout_error"),
        (out(finish="abort"), "overloaded_error"),
    ],
)
async def test_mid_stream_error_frame(terminal, error_type):
    engine = ScriptedBackend([out("a"), terminal])
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json={**BODY, "stream": True})
    assert resp.status_code == 200
    events = sse_events(resp.content)
    assert [e for e, _ in events] == ["message_start", "ping", "content_block_start", "content_block_delta", "error"]
    assert events[-1][1]["error"]["type"] == error_type
    assert set(events[-1][1]["error"]) == {"type", "message"}
    assert engine.stream.aclose_calls >= 1


async def test_mid_stream_error_raises_in_sdk():
    engine = ScriptedBackend([out("a"), out(finish="error", error="boom", kind="internal")])
    async with sdk(engine) as client:
        with pytest.raises(anthropic.APIStatusError) as info:
            async with client.messages.stream(model="m", max_tokens=8, messages=USER) as stream:
                await stream.get_final_message()
    assert info.value.body["error"] == {"type": "api_error", "message": "boom"}


async def test_stream_ending_without_terminal_reports_error():
    engine = ScriptedBackend([out("a")])  # the stream stops with no final output
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json={**BODY, "stream": True})
    events = sse_events(resp.content)
    assert events[-1][0] == "error" and events[-1][1]["error"]["type"] == "overloaded_error"


async def test_error_output_with_text_is_streamed_before_the_error():
    engine = ScriptedBackend([out("a"), out("b", finish="error", kind="internal")])
    async with http(engine) as client:
        resp = await client.post("/v1/messages", json={**BODY, "stream": True})
    events = sse_events(resp.content)
    texts = [d["delta"]["text"] for e, d in events if e == "content_block_delta"]
    assert texts == ["a", "b"] and events[-1][0] == "error"


async def test_other_choice_outputs_are_ignored():
    engine = ScriptedBackend([out("x", index=1), out("a", "stop")])
    async with sdk(engine) as client:
        message = await client.messages.create(model="m", max_tokens=8, messages=USER)
    assert message.content[0].text == "a"


# --- count_tokens ---------------------------------------------------------------------------


async def test_count_tokens_via_sdk():
    engine = ScriptedBackend([out(finish="stop", prompt=17)])
    async with sdk(engine) as client:
        result = await client.messages.count_tokens(
            model="alias", messages=USER, system="Be brief.", tools=TOOLS, tool_choice={"type": "auto"}
        )
    assert result.input_tokens == 17
    model, request = engine.submitted[0]
    assert model == "m" and request.count_only is True
    assert request.messages[0].role == "system" and request.tools[0].name == "get_weather"
    assert engine.stream.aclose_calls >= 1


async def test_count_tokens_raw_shape_and_errors():
    engine = ScriptedBackend([out(finish="stop", prompt=3)])
    async with http(engine) as client:
        ok = await client.post("/v1/messages/count_tokens", json={"model": "m", "messages": USER})
        bad = await client.post("/v1/messages/count_tokens", json={**BODY})
        missing = await client.post("/v1/messages/count_tokens", json={"model": "x", "messages": USER})
    assert ok.status_code == 200 and ok.json() == {"input_tokens": 3}
    assert bad.status_code == 400 and bad.json()["error"]["message"] == "max_tokens: Extra inputs are not permitted"
    assert missing.status_code == 404


async def test_count_tokens_worker_error():
    engine = ScriptedBackend([out(finish="error", error="bad template", kind="invalid_request")])
    async with sdk(engine) as client:
        with pytest.raises(anthropic.BadRequestError):
            await client.messages.count_tokens(model="m", messages=USER)


# --- client disconnects ------------------------------------------------------------------------


@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
async def test_stream_disconnect_closes_request(spec_version):
    engine = ScriptedBackend([out("a"), out("b")], hang=True)
    client = Client({**BODY, "stream": True}, read_chunks=2, raise_on_send=True)
    await run_app(engine, client, spec_version=spec_version)
    assert engine.stream.aclose_calls >= 1
    starts = [m for m in client.messages if m["type"] == "http.response.start"]
    assert starts and starts[0]["status"] == 200


async def test_non_streaming_disconnect_closes_request():
    engine = ScriptedBackend([out("a")], hang=True)
    await run_app(engine, Client(BODY, read_chunks=0))
    assert engine.stream.aclose_calls >= 1


@pytest.mark.parametrize("stream", [False, True])
async def test_disconnect_before_first_output_closes_request(stream):
    engine = ScriptedBackend([], hang=True)
    await run_app(engine, Client({**BODY, "stream": stream}, read_chunks=0))
    assert engine.stream.aclose_calls >= 1
    assert engine.stream.delivered == 0


async def test_count_tokens_disconnect_closes_request():
    engine = ScriptedBackend([], hang=True)
    await run_app(engine, Client({"model": "m", "messages": USER}, read_chunks=0), "/v1/messages/count_tokens")
    assert engine.stream.aclose_calls >= 1


async def test_sdk_stops_reading_early():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        stream = await client.messages.create(model="m", max_tokens=8, messages=USER, stream=True)
        async for _ in stream:
            break
        await stream.close()
    assert engine.stream.aclose_calls >= 1


# --- dropped tools, context management -----------------------------------------------------

WEB_SEARCH = {"type": "web_search_20250305", "name": "web_search"}


async def test_dropped_tools_are_named_in_a_header_streamed_or_not():
    body = {**BODY, "tools": [*TOOLS, WEB_SEARCH, {**WEB_SEARCH, "name": "web_search"}]}
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        plain = await client.post("/v1/messages", json=body)
        streamed = await client.post("/v1/messages", json={**body, "stream": True})
        counted = await client.post(
            "/v1/messages/count_tokens", json={k: v for k, v in body.items() if k != "max_tokens"}
        )
        none = await client.post("/v1/messages", json={**BODY, "tools": TOOLS})
    for resp in (plain, streamed, counted):
        assert resp.headers["x-mlxd-dropped-tools"] == "web_search_20250305"
    assert "x-mlxd-dropped-tools" not in none.headers
    assert [t.name for t in engine.submitted[0][1].tools] == ["get_weather"]


async def test_context_management_is_reported_streamed_or_not():
    """An edit with nothing to clear is reported as no applied edits; a
    request without context management has no such field."""
    body = {**BODY, "context_management": {"edits": [{"type": "clear_thinking_20251015"}]}}
    async with http(ScriptedBackend(HELLO)) as client:
        plain = await client.post("/v1/messages", json=body)
        streamed = await client.post("/v1/messages", json={**body, "stream": True})
        without = await client.post("/v1/messages", json=BODY)
    assert plain.json()["context_management"] == {"applied_edits": []}
    events = dict(sse_events(streamed.content))
    assert events["message_start"]["message"]["context_management"] == {"applied_edits": []}
    assert events["message_delta"]["context_management"] == {"applied_edits": []}
    assert "context_management" not in without.json()


async def test_count_tokens_reports_the_original_count_with_context_management():
    body = {"model": "m", "messages": USER, "context_management": {"edits": [{"type": "clear_thinking_20251015"}]}}
    async with http(ScriptedBackend([out(prompt=7, finish="stop")])) as client:
        edited = await client.post("/v1/messages/count_tokens", json=body)
        plain = await client.post("/v1/messages/count_tokens", json={"model": "m", "messages": USER})
    assert edited.json() == {"input_tokens": 7, "context_management": {"original_input_tokens": 7}}
    assert plain.json() == {"input_tokens": 7}


async def test_thinking_display_omitted_empties_the_block():
    script = [out(reasoning="secret", completion=1), out("ok", "stop", completion=2)]
    body = {**BODY, "thinking": {"type": "adaptive", "display": "omitted"}}
    async with http(ScriptedBackend(script)) as client:
        plain = await client.post("/v1/messages", json=body)
        streamed = await client.post("/v1/messages", json={**body, "stream": True})
    assert plain.json()["content"][0] == {"type": "thinking", "thinking": "", "signature": ""}
    assert b"secret" not in streamed.content
