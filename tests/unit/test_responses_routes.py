"""``POST /v1/responses`` against a scripted ModelBackend (no MLX, no workers).

The ModelBackend (``ScriptedBackend`` of ``tests/unit/support.py``) replays
predetermined RequestOutputs and ends like a real RequestStream (after the
terminal output); with ``hang`` it blocks after the script until closed.
Requests go through httpx's ASGI transport (raw JSON and SSE), the official
``openai`` SDK, or a hand-driven ASGI call for disconnects.
"""

from __future__ import annotations

import openai
import pytest
from starlette.routing import Route

from gateway.core.errors import unavailable
from gateway.responses.routes import create_response
from shared.protocol import ResponseFormat
from tests.unit.support import HELLO, Client, Gateway, ScriptedBackend, call, out, sse_events

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


# --- scripts and clients ----------------------------------------------------------------


# reasoning, then text, then two tool calls whose arguments arrive in pieces
AGENT = [
    out(reasoning="Let me ", completion=1),
    out(reasoning="think.", completion=2),
    out("Checking.", completion=3),
    out(calls=[call(0, '{"city": ', id="call_a", name="weather")], completion=4),
    out(calls=[call(0, '"Paris"}')], completion=5),
    out(calls=[call(1, "{}", id="call_b", name="time")], completion=6),
    out(finish="tool_calls", completion=7, cached=2),
]


GATEWAY = Gateway(Route("/v1/responses", create_response, methods=["POST"]))
http, sdk, run_app = GATEWAY.http, GATEWAY.openai, GATEWAY.run


BODY = {"model": "m", "input": "hi"}
TOOLS = [
    {"type": "function", "name": "weather", "description": "Weather", "parameters": {"type": "object"}, "strict": True},
    {"type": "function", "name": "time", "parameters": None, "strict": None},
]


def usage_dict(prompt: int, completion: int, cached: int = 0) -> dict:
    return {
        "input_tokens": prompt,
        "input_tokens_details": {"cached_tokens": cached, "cache_write_tokens": 0},
        "output_tokens": completion,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt + completion,
    }


# --- non-streaming ---------------------------------------------------------------------------


async def test_non_streaming_text_shape():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/responses", json=BODY)
    assert resp.status_code == 200
    assert resp.headers["content-type"] == "application/json"
    body = resp.json()
    assert body["id"].startswith("resp_") and len(body["id"]) == len("resp_") + 32
    message = body["output"][0]
    assert message["id"].startswith("msg_")
    assert isinstance(body["created_at"], int) and isinstance(body["completed_at"], int)
    assert body == {
        "id": body["id"],
        "object": "response",
        "created_at": body["created_at"],
        "completed_at": body["completed_at"],
        "model": "m",
        "status": "completed",
        "error": None,
        "incomplete_details": None,
        "output": [
            {
                "type": "message",
                "id": message["id"],
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hello!", "annotations": [], "logprobs": []}],
            }
        ],
        "usage": usage_dict(5, 4),
        "instructions": None,
        "max_output_tokens": None,
        "max_tool_calls": None,
        "metadata": {},
        "parallel_tool_calls": True,
        "previous_response_id": None,
        "reasoning": {"effort": None, "summary": None},
        "service_tier": "default",
        "store": False,
        "background": False,
        "temperature": 1.0,
        "text": {"format": {"type": "text"}, "verbosity": "medium"},
        "tool_choice": "none",
        "tools": [],
        "top_logprobs": 0,
        "top_p": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "truncation": "disabled",
        "user": None,
        "safety_identifier": None,
        "prompt_cache_key": None,
        "prompt_cache_retention": None,
        "conversation": None,
        "prompt": None,
    }
    model, request = engine.submitted[0]
    assert model == "m" and request.request_id == body["id"] and request.n == 1
    assert engine.stream.aclose_calls >= 1


async def test_sdk_text_and_usage():
    engine = ScriptedBackend([out("Hi", completion=1, cached=3), out(" there", "stop", completion=2, cached=3)])
    async with sdk(engine) as client:
        result = await client.responses.create(model="alias", input="hello")
    assert result.object == "response" and result.status == "completed" and result.model == "m"
    assert result.output_text == "Hi there"
    assert result.usage.input_tokens == 5 and result.usage.output_tokens == 2 and result.usage.total_tokens == 7
    assert result.usage.input_tokens_details.cached_tokens == 3
    assert result.usage.output_tokens_details.reasoning_tokens == 0


async def test_sdk_reasoning_and_function_calls():
    engine = ScriptedBackend(AGENT)
    async with sdk(engine) as client:
        result = await client.responses.create(model="m", input="weather?", tools=TOOLS)
    assert [item.type for item in result.output] == ["reasoning", "message", "function_call", "function_call"]
    reasoning, message, first, second = result.output
    assert reasoning.id.startswith("rs_") and reasoning.summary == []
    assert [c.text for c in reasoning.content] == ["Let me think."] and reasoning.content[0].type == "reasoning_text"
    assert message.content[0].text == "Checking." and result.output_text == "Checking."
    assert (first.call_id, first.name, first.arguments, first.status) == (
        "call_a",
        "weather",
        '{"city": "Paris"}',
        "completed",
    )
    assert (second.call_id, second.name, second.arguments) == ("call_b", "time", "{}")
    assert first.id.startswith("fc_") and first.id != second.id
    assert result.status == "completed" and result.usage.output_tokens == 7
    assert result.usage.input_tokens_details.cached_tokens == 2
    assert result.tool_choice == "auto" and [t.name for t in result.tools] == ["weather", "time"]
    assert result.tools[0].strict is True and result.tools[0].parameters == {"type": "object"}
    request = engine.request
    assert [t.name for t in request.tools] == ["weather", "time"]
    assert request.tools[1].parameters == {} and request.tool_choice == "auto" and request.parallel_tool_calls


async def test_length_makes_response_incomplete():
    engine = ScriptedBackend([out(reasoning="hmm", completion=1), out("Onc", "length", completion=2)])
    async with sdk(engine) as client:
        result = await client.responses.create(model="m", input="story", max_output_tokens=2)
    assert result.status == "incomplete"
    assert result.incomplete_details.reason == "max_output_tokens"
    assert result.completed_at is None
    assert [(item.type, item.status) for item in result.output] == [
        ("reasoning", "completed"),
        ("message", "incomplete"),
    ]
    assert result.output_text == "Onc" and result.max_output_tokens == 2
    assert engine.request.sampling.max_tokens == 2


async def test_no_output_gives_empty_output_list():
    engine = ScriptedBackend([out(finish="stop", completion=1)])
    async with sdk(engine) as client:
        result = await client.responses.create(model="m", input="x")
    assert result.output == [] and result.output_text == "" and result.status == "completed"


async def test_settings_are_translated_and_echoed():
    engine = ScriptedBackend(HELLO)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    async with sdk(engine) as client:
        result = await client.responses.create(
            model="m",
            input=[{"role": "developer", "content": "be brief"}, {"role": "user", "content": "hi"}],
            instructions="You are terse.",
            temperature=0.5,
            top_p=0.9,
            tools=TOOLS,
            tool_choice={"type": "function", "name": "time"},
            parallel_tool_calls=False,
            text={"format": {"type": "json_schema", "name": "out", "schema": schema, "strict": True}},
            reasoning={"effort": "low"},
            metadata={"k": "v"},
            user="u1",
            store=True,
            truncation="disabled",
            service_tier="auto",
        )
    request = engine.request
    assert request.messages[0].role == "system" and request.messages[0].content == "You are terse.\n\nbe brief"
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.sampling.temperature == 0.5 and request.sampling.top_p == 0.9
    assert (request.tool_choice, request.tool_choice_name, request.parallel_tool_calls) == ("function", "time", False)
    assert request.response_format == ResponseFormat(type="json_schema", schema=schema, strict=True)
    assert request.thinking is True
    assert result.instructions == "You are terse." and result.temperature == 0.5 and result.top_p == 0.9
    assert result.tool_choice.type == "function" and result.tool_choice.name == "time"
    assert result.parallel_tool_calls is False
    assert result.text.format.type == "json_schema" and result.text.format.name == "out"
    assert result.text.format.schema_ == schema and result.text.format.strict is True
    assert result.reasoning.effort == "low" and result.metadata == {"k": "v"} and result.user == "u1"
    assert result.service_tier == "default"


async def test_function_call_output_history_is_translated():
    engine = ScriptedBackend(HELLO)
    history = [
        {"role": "user", "content": "weather in Paris?"},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "use tool"}]},
        {"type": "function_call", "call_id": "call_a", "name": "weather", "arguments": '{"city": "Paris"}'},
        {"type": "function_call", "call_id": "call_b", "name": "time", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_a", "output": "sunny"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "noon"}]},
    ]
    async with sdk(engine) as client:
        await client.responses.create(model="m", input=history, tools=TOOLS)
    messages = engine.request.messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool"]
    assistant = messages[1]
    assert assistant.content == "" and assistant.reasoning == "use tool"
    assert [(c.id, c.name, c.arguments) for c in assistant.tool_calls] == [
        ("call_a", "weather", '{"city": "Paris"}'),
        ("call_b", "time", "{}"),
    ]
    assert [(m.tool_call_id, m.name, m.content) for m in messages[2:]] == [
        ("call_a", "weather", "sunny"),
        ("call_b", "time", "noon"),
    ]


async def test_sdk_output_round_trips_as_input():
    """A response's output items, sent back as input, become the same turn."""
    engine = ScriptedBackend(AGENT)
    async with sdk(engine) as client:
        first = await client.responses.create(model="m", input="weather?", tools=TOOLS)
        outputs = [{"type": "function_call_output", "call_id": c.call_id, "output": "ok"} for c in first.output[2:]]
        history = [{"role": "user", "content": "weather?"}, *first.output, *outputs]
        await client.responses.create(model="m", input=history, tools=TOOLS)
    messages = engine.submitted[1][1].messages
    assert [m.role for m in messages] == ["user", "assistant", "tool", "tool"]
    assert messages[1].reasoning == "Let me think." and messages[1].content == "Checking."
    assert [c.id for c in messages[1].tool_calls] == ["call_a", "call_b"]


async def test_non_streaming_error_after_first_output():
    engine = ScriptedBackend(
        [out("partial", completion=1), out(finish="error", error="worker died", kind="unavailable")]
    )
    async with http(engine) as client:
        resp = await client.post("/v1/responses", json=BODY)
    assert resp.status_code == 503 and resp.headers["retry-after"] == "1"
    assert resp.json()["error"]["code"] == "model_unavailable"
    assert engine.stream.aclose_calls >= 1


# --- errors before the first output --------------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_context_length_is_400_naming_input(stream):
    engine = ScriptedBackend(
        [out(finish="error", error="input is 9000 tokens; limit 8192", kind="context_length_exceeded")]
    )
    async with http(engine) as client:
        resp = await client.post("/v1/responses", json={**BODY, "stream": stream})
    assert resp.status_code == 400 and resp.headers["content-type"] == "application/json"
    assert resp.json() == {
        "error": {
            "message": "input is 9000 tokens; limit 8192",
            "type": "invalid_request_error",
            "param": "input",
            "code": "context_length_exceeded",
        }
    }
    assert engine.stream.aclose_calls >= 1


async def test_previous_response_id_is_refused():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.responses.create(model="m", input="more", previous_response_id="resp_123")
    assert info.value.param == "previous_response_id"
    assert "stateless" in info.value.message and "send the full input" in info.value.message
    assert engine.submitted == []


@pytest.mark.parametrize(
    "tool,param",
    [
        ({"type": "teleport"}, "tools[0].type"),
        ({"type": "function"}, "tools[0].name"),
    ],
)
async def test_unsupported_tool_types_are_400(tool, param):
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        with pytest.raises(openai.BadRequestError) as info:
            await client.responses.create(model="m", input="x", tools=[tool])
    assert info.value.status_code == 400 and info.value.param == param
    assert engine.submitted == []


async def test_invalid_bodies_are_400_and_never_submitted():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        unknown = await client.post("/v1/responses", json={**BODY, "seed": 1})
        hot = await client.post("/v1/responses", json={**BODY, "temperature": 3})
        bad_json = await client.post("/v1/responses", content=b"{nope")
        image = await client.post(
            "/v1/responses",
            json={
                "model": "m",
                "input": [{"role": "user", "content": [{"type": "input_image", "image_url": "ftp://x"}]}],
            },
        )
    assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "seed"
    assert "Unrecognized request argument supplied: seed" in unknown.json()["error"]["message"]
    assert hot.status_code == 400 and hot.json()["error"]["param"] == "temperature"
    assert bad_json.status_code == 400 and bad_json.json()["error"]["type"] == "invalid_request_error"
    assert image.status_code == 400 and image.json()["error"]["param"] == "input[0].content[0].image_url"
    assert "data:image" in image.json()["error"]["message"]
    assert engine.submitted == []


async def test_unknown_model_404_and_submit_503():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/responses", json={**BODY, "model": "nope"})
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    engine = ScriptedBackend(HELLO, submit_error=unavailable("model is starting"))
    async with sdk(engine) as client:
        with pytest.raises(openai.InternalServerError) as info:
            await client.responses.create(**BODY)
    assert info.value.status_code == 503


# --- streaming -----------------------------------------------------------------------------


TEXT_EVENTS = [
    "response.created",
    "response.in_progress",
    "response.output_item.added",
    "response.content_part.added",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.delta",
    "response.output_text.done",
    "response.content_part.done",
    "response.output_item.done",
    "response.completed",
]


async def test_stream_frames_exact_sequence():
    engine = ScriptedBackend(HELLO)
    async with http(engine) as client:
        resp = await client.post("/v1/responses", json={**BODY, "stream": True})
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    assert resp.headers["cache-control"] == "no-cache"
    events = sse_events(resp.content)
    assert [name for name, _ in events] == TEXT_EVENTS
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    created, in_progress = events[0][1]["response"], events[1][1]["response"]
    assert created["status"] == in_progress["status"] == "in_progress"
    assert created["output"] == [] and created["usage"] is None and created["completed_at"] is None
    item = events[2][1]
    assert item["output_index"] == 0
    assert item["item"] == {
        "type": "message",
        "id": item["item"]["id"],
        "status": "in_progress",
        "role": "assistant",
        "content": [],
    }
    item_id = item["item"]["id"]
    assert events[3][1]["part"] == {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
    deltas = [data for name, data in events if name == "response.output_text.delta"]
    assert [d["delta"] for d in deltas] == ["Hel", "lo", "!"]
    assert all(
        d["item_id"] == item_id and d["output_index"] == 0 and d["content_index"] == 0 and d["logprobs"] == []
        for d in deltas
    )
    assert events[7][1]["text"] == "Hello!"
    assert events[8][1]["part"]["text"] == "Hello!"
    assert events[9][1]["item"]["status"] == "completed"
    completed = events[-1][1]["response"]
    assert completed["id"] == created["id"] and completed["status"] == "completed"
    assert completed["output"] == [events[9][1]["item"]] and completed["usage"] == usage_dict(5, 4)
    assert engine.stream.aclose_calls >= 1


async def test_stream_create_event_names_via_sdk():
    engine = ScriptedBackend(AGENT)
    async with sdk(engine) as client:
        stream = await client.responses.create(model="m", input="weather?", tools=TOOLS, stream=True)
        events = [event async for event in stream]
    assert [e.type for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    numbers = [e.sequence_number for e in events]
    assert all(a < b for a, b in zip(numbers, numbers[1:]))
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1, 2, 3]
    assert [e.arguments for e in events if e.type == "response.function_call_arguments.done"] == [
        '{"city": "Paris"}',
        "{}",
    ]
    added = [e.item for e in events if e.type == "response.output_item.added"]
    assert added[2].call_id == "call_a" and added[2].name == "weather" and added[2].status == "in_progress"


async def test_stream_helper_rebuilds_the_non_streamed_output():
    engine = ScriptedBackend(AGENT)
    async with sdk(engine) as client:
        plain = await client.responses.create(model="m", input="weather?", tools=TOOLS)
        async with client.responses.stream(model="m", input="weather?", tools=TOOLS) as stream:
            text_deltas, argument_snapshots = [], []
            async for event in stream:
                if event.type == "response.output_text.delta":
                    text_deltas.append((event.delta, event.snapshot))
                elif event.type == "response.function_call_arguments.delta":
                    argument_snapshots.append(event.snapshot)
            final = await stream.get_final_response()

    def shape(response):
        """The output without item ids (fresh per response) and without the
        stream helper's client-side ``parsed``/``parsed_arguments``."""
        items = [
            {k: v for k, v in item.to_dict().items() if k not in ("id", "parsed_arguments")} for item in response.output
        ]
        for item in items:
            for part in item.get("content", []):
                part.pop("parsed", None)
        return items

    assert shape(final) == shape(plain)
    assert final.output_text == "Checking." and final.status == "completed"
    assert final.usage.to_dict() == plain.usage.to_dict()
    assert text_deltas == [("Checking.", "Checking.")]
    assert argument_snapshots == ['{"city": ', '{"city": "Paris"}', "{}"]


async def test_stream_helper_text_deltas():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        async with client.responses.stream(model="m", input="hi") as stream:
            snapshots = [e.snapshot async for e in stream if e.type == "response.output_text.delta"]
            final = await stream.get_final_response()
    assert snapshots == ["Hel", "Hello", "Hello!"]
    assert final.output_text == "Hello!" and final.usage.output_tokens == 4


async def test_stream_length_ends_with_response_incomplete():
    engine = ScriptedBackend([out("ab", completion=1), out("c", "length", completion=2)])
    async with sdk(engine) as client:
        stream = await client.responses.create(model="m", input="x", max_output_tokens=2, stream=True)
        events = [event async for event in stream]
    assert events[-1].type == "response.incomplete"
    response = events[-1].response
    assert response.status == "incomplete" and response.incomplete_details.reason == "max_output_tokens"
    assert response.output[0].status == "incomplete" and response.output[0].content[0].text == "abc"
    done = [e for e in events if e.type == "response.output_item.done"]
    assert done[0].item.status == "incomplete"


async def test_first_output_may_be_terminal():
    engine = ScriptedBackend([out("all at once", "stop", completion=3)])
    async with http(engine) as client:
        resp = await client.post("/v1/responses", json={**BODY, "stream": True})
    names = [name for name, _ in sse_events(resp.content)]
    assert names == [n for n in TEXT_EVENTS if n != "response.output_text.delta"][:4] + [
        "response.output_text.delta",
        *TEXT_EVENTS[-4:],
    ]


@pytest.mark.parametrize(
    "terminal,code",
    [
        (out("tail", "error", error="worker died", kind="unavailable"), "model_unavailable"),
        (out(finish="error", error="bug", kind="internal"), "internal_error"),
        (out(finish="abort"), "aborted"),
        (out(finish="error", error="too slow", kind="timeout"), "timeout"),
    ],
)
async def test_mid_stream_error_frames(terminal, code):
    engine = ScriptedBackend([out("a", completion=1), terminal])
    async with http(engine) as client:
        resp = await client.post("/v1/responses", json={**BODY, "stream": True})
    assert resp.status_code == 200
    events = sse_events(resp.content)
    names = [name for name, _ in events]
    assert names[-2:] == ["error", "response.failed"]
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    error = events[-2][1]
    assert error["code"] == code and error["message"] and error["param"] is None
    assert error["error"] == {"type": "server_error", "code": code, "message": error["message"], "param": None}
    failed = events[-1][1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": error["message"]}
    assert failed["output"][0]["status"] == "incomplete"
    expected_text = "atail" if terminal.text else "a"
    assert failed["output"][0]["content"][0]["text"] == expected_text
    assert engine.stream.aclose_calls >= 1


async def test_mid_stream_error_raises_in_sdk():
    script = [out("a", completion=1), out(finish="error", error="worker died", kind="unavailable")]
    engine = ScriptedBackend(script)
    async with sdk(engine) as client:
        stream = await client.responses.create(**BODY, stream=True)
        seen = []
        with pytest.raises(openai.APIError) as info:
            async for event in stream:
                seen.append(event.type)
    assert "worker died" in str(info.value)
    assert seen[-1] == "response.output_text.delta"

    engine = ScriptedBackend(script)
    async with sdk(engine) as client:
        with pytest.raises(openai.APIError) as info:
            async with client.responses.stream(**BODY) as stream:
                await stream.get_final_response()
    assert "worker died" in str(info.value)


async def test_stream_ending_without_terminal_reports_error():
    engine = ScriptedBackend([out("a")])  # broken stream: no terminal output
    async with http(engine) as client:
        resp = await client.post("/v1/responses", json={**BODY, "stream": True})
    events = sse_events(resp.content)
    assert [name for name, _ in events][-2:] == ["error", "response.failed"]
    assert events[-2][1]["code"] == "model_unavailable"


async def test_out_of_range_choice_is_ignored():
    engine = ScriptedBackend([out("x", index=3), out("ok", "stop", completion=1)])
    async with sdk(engine) as client:
        result = await client.responses.create(**BODY)
    assert result.output_text == "ok"


async def test_tool_call_ids_are_made_unique():
    script = [
        out(calls=[call(0, "{}", id="dup", name="time")]),
        out(calls=[call(1, "{}", id="dup", name="time")]),
        out(calls=[call(2, "{}", name="time")]),
        out(finish="tool_calls", completion=3),
    ]
    engine = ScriptedBackend(script)
    async with sdk(engine) as client:
        async with client.responses.stream(model="m", input="x", tools=TOOLS) as stream:
            final = await stream.get_final_response()
    ids = [item.call_id for item in final.output]
    assert ids[0] == "dup" and len(set(ids)) == 3 and all(i.startswith("call_") for i in ids[1:])


# --- client disconnects ---------------------------------------------------------------------------


async def test_stream_disconnect_closes_request():
    engine = ScriptedBackend([out("a"), out("b")], hang=True)
    client = Client({**BODY, "stream": True}, read_chunks=2)
    await run_app(engine, client)
    assert engine.stream.aclose_calls >= 1
    starts = [m for m in client.messages if m["type"] == "http.response.start"]
    assert starts and starts[0]["status"] == 200


@pytest.mark.parametrize("stream", [False, True])
async def test_disconnect_before_first_output_closes_request(stream):
    engine = ScriptedBackend([], hang=True)
    client = Client({**BODY, "stream": stream}, read_chunks=0)
    await run_app(engine, client)
    assert engine.stream.aclose_calls >= 1 and engine.stream.delivered == 0


async def test_non_streaming_disconnect_closes_request():
    engine = ScriptedBackend([out("a")], hang=True)
    client = Client(BODY, read_chunks=0)
    await run_app(engine, client)
    assert engine.stream.aclose_calls >= 1


async def test_sdk_stops_reading_early():
    engine = ScriptedBackend(HELLO)
    async with sdk(engine) as client:
        stream = await client.responses.create(**BODY, stream=True)
        async for _ in stream:
            break
        await stream.close()
    assert engine.stream.aclose_calls >= 1


async def test_sdk_parse_with_text_format():
    """``responses.parse(text_format=...)`` sends a strict json_schema format,
    which reaches the worker as a ResponseFormat; the SDK parses the text."""
    from pydantic import BaseModel

    class City(BaseModel):
        name: str
        population: int

    engine = ScriptedBackend([out('{"name": "Paris", ', completion=1), out('"population": 2}', "stop", completion=2)])
    async with sdk(engine) as client:
        result = await client.responses.parse(model="m", input="a city", text_format=City)
    assert result.output_parsed == City(name="Paris", population=2)
    sent = engine.request.response_format
    assert sent.type == "json_schema" and sent.strict is True
    assert sent.schema["properties"].keys() == {"name", "population"}
    assert result.text.format.type == "json_schema" and result.text.format.name == "City"


async def test_stream_helper_final_response_needs_completed():
    """The SDK helper only builds a final response from ``response.completed``;
    an incomplete stream ends with ``response.incomplete`` instead."""
    engine = ScriptedBackend([out("ab", "length", completion=2)])
    async with sdk(engine) as client:
        async with client.responses.stream(model="m", input="x", max_output_tokens=2) as stream:
            names = [event.type async for event in stream]
            with pytest.raises(RuntimeError):
                await stream.get_final_response()
    assert names[-1] == "response.incomplete"
