"""Anthropic response building: stop reasons, usage, errors, stream blocks."""

from __future__ import annotations

import json
import logging

import pytest

from gateway.anthropic import format as fmt
from gateway.anthropic.builder import MessageBuilder
from gateway.core.errors import APIError
from gateway.frontend.answer_driver import TokenTally
from shared.protocol import RequestOutput, ToolCallDelta


def out(text="", finish=None, *, reasoning="", calls=None, prompt=5, completion=0, cached=0, **extra):
    return RequestOutput(
        request_id="r",
        text=text,
        finish_reason=finish,
        reasoning=reasoning,
        tool_calls=calls,
        prompt_tokens=prompt,
        completion_tokens=completion,
        cached_tokens=cached,
        **extra,
    )


def frames(data: bytes) -> list[tuple[str, dict]]:
    result = []
    for frame in data.decode().split("\n\n")[:-1]:
        event, payload = frame.split("\n")
        assert event.startswith("event: ") and payload.startswith("data: ")
        result.append((event[7:], json.loads(payload[6:])))
    return result


@pytest.mark.parametrize(
    "finish, sequence, expected",
    [
        ("tool_calls", None, ("tool_use", None)),
        ("length", None, ("max_tokens", None)),
        ("length", "END", ("max_tokens", None)),
        ("stop", "END", ("stop_sequence", "END")),
        ("stop", None, ("end_turn", None)),
    ],
)
def test_stop_reason(finish, sequence, expected):
    assert fmt.stop_reason(finish, sequence) == expected


def test_usage_splits_cached_prompt_tokens():
    tally = TokenTally()
    tally.add(out(prompt=10, cached=4, completion=1))
    tally.add(out(prompt=10, cached=4, completion=3))
    assert fmt.usage_of(tally) == fmt.Usage(input_tokens=6, output_tokens=3, cache_read_input_tokens=4)


def test_tool_input():
    assert fmt.tool_input("") == {} and fmt.tool_input(' {"a": [1]} ') == {"a": [1]}
    for bad in ("[1]", "{", '"x"'):
        with pytest.raises(APIError) as info:
            fmt.tool_input(bad)
        assert info.value.status == 500


def test_collector_orders_blocks_and_calls():
    collector = MessageBuilder("msg_1", "m")
    collector.add(out("Hi ", reasoning="think"))
    collector.add(out(calls=[ToolCallDelta(index=1, id="b", name="g", arguments='{"y": 2}')]))
    collector.add(out("there", calls=[ToolCallDelta(index=0, id="a", name="f", arguments="{}")]))
    collector.add(out(finish="tool_calls", completion=9))
    body = json.loads(collector.body())
    assert body["content"] == [
        {"type": "thinking", "thinking": "think", "signature": ""},
        {"type": "text", "text": "Hi there", "citations": None},
        {"type": "tool_use", "id": "toolu_a", "name": "f", "input": {}},
        {"type": "tool_use", "id": "toolu_b", "name": "g", "input": {"y": 2}},
    ]
    assert body["stop_reason"] == "tool_use" and body["usage"]["output_tokens"] == 9


def test_stream_closes_thinking_with_signature_at_finish():
    stream = MessageBuilder("msg_1", "m")
    stream.start(out())
    data = stream.add(out(reasoning="hmm")) + stream.add(out(finish="length")) + stream.finish()
    assert [(e, d.get("delta", {}).get("type")) for e, d in frames(data)] == [
        ("content_block_start", None),
        ("content_block_delta", "thinking_delta"),
        ("content_block_delta", "signature_delta"),
        ("content_block_stop", None),
        ("message_delta", None),
        ("message_stop", None),
    ]
    assert frames(data)[-2][1]["delta"] == {
        "stop_reason": "max_tokens",
        "stop_sequence": None,
        "stop_details": None,
        "container": None,
    }


def test_stream_tool_call_without_id_gets_one(caplog):
    stream = MessageBuilder("msg_1", "m")
    with caplog.at_level(logging.ERROR, logger="mlxd.gateway.anthropic"):
        data = stream.add(out(calls=[ToolCallDelta(index=0, arguments="{}")]))
    block = frames(data)[0][1]["content_block"]
    assert block["type"] == "tool_use" and block["id"].startswith("toolu_") and block["input"] == {}
    assert "without its id or name" in caplog.text


def test_stream_late_piece_goes_to_its_own_block(caplog):
    stream = MessageBuilder("msg_1", "m")
    first = ToolCallDelta(index=0, id="a", name="f", arguments='{"x": ')
    second = ToolCallDelta(index=1, id="b", name="g", arguments="{}")
    with caplog.at_level(logging.ERROR, logger="mlxd.gateway.anthropic"):
        data = stream.add(out(calls=[first, second, ToolCallDelta(index=0, arguments="1}")]))
    events = frames(data)
    assert events[-1] == (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": "1}"}},
    )
    assert "continued after a later block" in caplog.text


def test_error_frame_shape():
    ((event, data),) = frames(
        MessageBuilder("msg_1", "m").fail(out(finish="error", error="busy", error_kind="overloaded"))
    )
    assert event == "error" and data == {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
