"""Output items, events and frames of the Responses API builder."""

from __future__ import annotations

import json

from gateway.responses.builder import ResponseBuilder, ResponseHead
from gateway.responses.format import ResponseSettings, encode, frames
from gateway.responses.submit import error_of
from shared.protocol import RequestOutput, ToolCallDelta


def out(text="", reasoning="", calls=None) -> RequestOutput:
    return RequestOutput(request_id="r", text=text, reasoning=reasoning, tool_calls=calls)


def builder() -> ResponseBuilder:
    head = ResponseHead(id="resp_1", created_at=7, model="m")
    return ResponseBuilder(head, ResponseSettings(), clock=lambda: 9.5, error_of=error_of)


def end(b: ResponseBuilder, reason: str, prompt: int, completion: int) -> list:
    """Feed ``b`` a final output with ``reason`` and these token counts,
    then finish it; the events of both."""
    last = RequestOutput(request_id="r", finish_reason=reason, prompt_tokens=prompt, completion_tokens=completion)
    return b.add(last) + b.finish()


def types(events) -> list[str]:
    return [e.type for e in events]


def test_sequence_numbers_are_contiguous_across_calls():
    b = builder()
    events = b.start() + b.add(out("a")) + b.add(out(reasoning="r")) + b.add(out("b")) + end(b, "stop", 1, 3)
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
    end(b, "tool_calls", 1, 1)
    calls = [(i.call_id, i.name, i.arguments, i.status) for i in b.final.output]
    assert calls == [("c0", "f", "{}", "completed"), ("c1", "g", "[]", "completed")]


def test_empty_pieces_start_nothing():
    b = builder()
    assert b.add(out()) == []
    assert b.add(out(calls=[])) == []
    end(b, "stop", 2, 0)
    assert b.final.output == [] and b.final.usage.total_tokens == 2


def test_call_without_arguments_piece_still_gets_an_item():
    b = builder()
    events = b.add(out(calls=[ToolCallDelta(index=0, id="c", name="f")]))
    assert types(events) == ["response.output_item.added"]
    events = end(b, "tool_calls", 1, 1)
    assert types(events) == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    assert b.final.output[0].arguments == ""


def test_length_marks_the_open_item_incomplete():
    b = builder()
    b.add(out("a"))
    b.add(out(reasoning="r"))
    events = end(b, "length", 1, 2)
    assert events[-1].type == "response.incomplete"
    assert [(i.type, i.status) for i in b.final.output] == [("message", "completed"), ("reasoning", "incomplete")]
    assert b.final.incomplete_details.reason == "max_output_tokens" and b.final.completed_at is None


def test_fail_keeps_the_items_so_far():
    b = builder()
    b.start()
    b.add(out("a"))
    events = b.fail(RequestOutput(request_id="r", finish_reason="error", error="gone", error_kind="unavailable"))
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
    bad = RequestOutput(
        request_id="r", finish_reason="error", error="bad", error_kind="invalid_request", error_param="prompt"
    )
    assert b.fail(bad)[0].error.type == "invalid_request_error"


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
