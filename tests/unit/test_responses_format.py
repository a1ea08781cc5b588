"""Output items, events and frames of the Responses API builder."""

from __future__ import annotations

import json

from gateway.openai_format import usage
from gateway.responses_format import (
    ResponseBuilder,
    ResponseHead,
    ResponseSettings,
    encode,
    frames,
)
from shared.protocol import RequestOutput, ToolCallDelta


def out(text="", reasoning="", calls=None) -> RequestOutput:
    return RequestOutput(request_id="r", text=text, reasoning=reasoning, tool_calls=calls)


def builder() -> ResponseBuilder:
    return ResponseBuilder(ResponseHead(id="resp_1", created_at=7, model="m"), ResponseSettings(), clock=lambda: 9.5)


def types(events) -> list[str]:
    return [e.type for e in events]


def test_sequence_numbers_are_contiguous_across_calls():
    b = builder()
    events = b.start() + b.add(out("a")) + b.add(out(reasoning="r")) + b.add(out("b")) + b.finish("stop", usage(1, 3))
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert [item.type for item in b.final.output] == ["message", "reasoning", "message"]
    assert [e.output_index for e in events if e.type == "response.output_item.added"] == [0, 1, 2]
    assert b.final.completed_at == 9 and b.final.created_at == 7 and b.final.status == "completed"


def test_reasoning_text_and_call_in_one_output_keep_that_order():
    b = builder()
    b.start()
    events = b.add(out("t", "r", [ToolCallDelta(index=0, id="c", name="f", arguments="{}")]))
    assert types(events) == [
        "response.output_item.added",
        "response.content_part.added",
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
    ]


def test_late_piece_of_a_finished_call_is_dropped_and_name_filled_in():
    b = builder()
    b.add(out(calls=[ToolCallDelta(index=0, id="c0", arguments="{")]))
    b.add(out(calls=[ToolCallDelta(index=0, name="f", arguments="}")]))
    b.add(out(calls=[ToolCallDelta(index=1, id="c1", name="g", arguments="[]")]))
    assert b.add(out(calls=[ToolCallDelta(index=0, arguments="late")])) == []
    b.finish("tool_calls", usage(1, 1))
    calls = [(i.call_id, i.name, i.arguments, i.status) for i in b.final.output]
    assert calls == [("c0", "f", "{}", "completed"), ("c1", "g", "[]", "completed")]


def test_empty_pieces_start_nothing():
    b = builder()
    assert b.add(out()) == []
    assert b.add(out(calls=[])) == []
    b.finish("stop", usage(2, 0))
    assert b.final.output == [] and b.final.usage.total_tokens == 2


def test_call_without_arguments_piece_still_gets_an_item():
    b = builder()
    events = b.add(out(calls=[ToolCallDelta(index=0, id="c", name="f")]))
    assert types(events) == ["response.output_item.added"]
    events = b.finish("tool_calls", usage(1, 1))
    assert types(events) == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert b.final.output[0].arguments == ""


def test_length_marks_the_open_item_incomplete():
    b = builder()
    b.add(out("a"))
    b.add(out(reasoning="r"))
    events = b.finish("length", usage(1, 2))
    assert events[-1].type == "response.incomplete"
    assert [(i.type, i.status) for i in b.final.output] == [("message", "completed"), ("reasoning", "incomplete")]
    assert b.final.incomplete_details.reason == "max_output_tokens" and b.final.completed_at is None


def test_fail_keeps_the_items_so_far():
    b = builder()
    b.start()
    b.add(out("a"))
    events = b.fail("gone", "model_unavailable", None, 503, usage(1, 1))
    assert types(events) == ["error", "response.failed"]
    error = json.loads(encode(events[0]))
    assert error == {
        "type": "error",
        "code": "model_unavailable",
        "message": "gone",
        "param": None,
        "error": {"type": "server_error", "code": "model_unavailable", "message": "gone", "param": None},
        "sequence_number": 5,
    }
    failed = json.loads(encode(events[1]))["response"]
    assert failed["status"] == "failed" and failed["error"] == {"code": "server_error", "message": "gone"}
    assert failed["output"][0]["status"] == "incomplete" and failed["output"][0]["content"][0]["text"] == "a"
    assert b.fail("bad", None, "input", 400, usage(1, 1))[0].error.type == "invalid_request_error"


def test_frames_are_single_line_event_frames():
    b = builder()
    text = 'a"\\\n\r\u2028🙂'
    data = frames(b.add(out(text)))
    chunks = data.decode().split("\n\n")[:-1]
    assert len(chunks) == 3
    for chunk in chunks:
        event, payload = chunk.split("\n")
        assert json.loads(payload[len("data: ") :])["type"] == event[len("event: ") :]
    assert json.loads(chunks[2].split("\n")[1][6:])["delta"] == text
