"""The answer driver (:mod:`gateway.frontend.answer_driver`) and the one tool-call
assembler (:mod:`gateway.frontend.tool_calls`), without a worker."""

from __future__ import annotations

import logging

import pytest

from gateway.frontend.answer_driver import AnswerRun, TokenTally
from gateway.frontend.tool_calls import (
    ANTHROPIC_CALL_IDS,
    OLLAMA_CALL_IDS,
    OPENAI_CALL_IDS,
    RESPONSES_CALL_IDS,
    ToolCallAssembler,
)
from shared.protocol import RequestOutput, ToolCallDelta

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


def out(text="", finish=None, index=0, completion=0) -> RequestOutput:
    return RequestOutput(request_id="r", text=text, finish_reason=finish, index=index, completion_tokens=completion)


class Stream:
    def __init__(self, outputs) -> None:
        self.outputs = list(outputs)
        self.closed = 0

    async def __anext__(self) -> RequestOutput:
        if self.outputs:
            return self.outputs.pop(0)
        raise StopAsyncIteration

    async def aclose(self) -> None:
        self.closed += 1


class Recorder:
    """A builder that records the calls it gets, as one-letter batches."""

    def __init__(self, choices: int) -> None:
        self.choices = choices

    def start(self, first):
        return ["s"]

    def add(self, output):
        return [output.text] if output.text else []

    def finish(self):
        return ["F"]

    def fail(self, output):
        return ["X:" + (output.error or "")]

    def frames(self, batch):
        return "".join(batch).encode()


async def test_run_feeds_every_choice_and_finishes_once_all_ended(caplog):
    outputs = [out("b", index=1), out("c", index=7), out("d", "stop", index=1), out("", "length", index=0)]
    stream = Stream(outputs)
    run = AnswerRun(Recorder(2), stream, "r")
    with caplog.at_level(logging.ERROR, logger="mlxd.gateway.answer"):
        batches = [b async for b in run.batches(out("a"))]
    assert batches == [["s", "a"], ["b"], ["d"], ["F"]]
    assert run.failed is None and "choice 7 of 2 ignored" in caplog.text
    assert stream.closed == 0  # the caller owns the stream


async def test_run_fails_at_a_request_end_and_stream_frames_close_the_stream():
    failing = RequestOutput(request_id="r", finish_reason="error", error="boom", error_kind="internal")
    stream = Stream([failing])
    run = AnswerRun(Recorder(1), stream, "r")
    assert b"".join([f async for f in run.stream_frames(out("a"))]) == b"saX:boom"
    assert run.failed is failing and stream.closed == 1
    drained = AnswerRun(Recorder(1), Stream([failing]), "r")
    assert await drained.drain(out("a")) is failing
    finished = AnswerRun(Recorder(1), Stream([out("", "stop")]), "r")
    assert await finished.drain(out("a")) is finished.builder


async def test_a_stream_that_ends_early_fails_as_unavailable():
    run = AnswerRun(Recorder(1), Stream([]), "r")
    batches = [b async for b in run.batches(out("a"))]
    assert batches[-1][-1].startswith("X:") and run.failed.error_kind == "unavailable"


def test_token_tally_counts_the_prompt_once_and_sums_choices():
    tally = TokenTally()
    for output in (
        RequestOutput(request_id="r", prompt_tokens=5, cached_tokens=2, completion_tokens=1, index=0),
        RequestOutput(request_id="r", prompt_tokens=5, cached_tokens=2, completion_tokens=3, index=0),
        RequestOutput(request_id="r", prompt_tokens=5, completion_tokens=2, index=1),
    ):
        tally.add(output)
    assert (tally.prompt, tally.cached, tally.completion) == (5, 2, 5)


def test_assembler_numbers_calls_by_first_piece_and_fills_late_names():
    calls = ToolCallAssembler(OPENAI_CALL_IDS)
    first, started = calls.add(ToolCallDelta(index=3, id="call_x", name=None, arguments='{"a"'))
    assert started and first.position == 0 and first.id == "call_x"
    assert calls.add(ToolCallDelta(index=3, name="f", arguments=": 1}"))[1] is False
    second, _ = calls.add(ToolCallDelta(index=1, id="call_x", name="g"))  # a repeated id gets a fresh one
    assert second.position == 1 and second.id.startswith("call_") and len(second.id) == 5 + 24
    assert second.id != "call_x"
    assert [(c.name, c.arguments) for c in calls.calls()] == [("f", '{"a": 1}'), ("g", "")]


def test_call_ids_per_protocol():
    assert len(RESPONSES_CALL_IDS(None)) == 5 + 32 and RESPONSES_CALL_IDS("abc") == "abc"
    assert ANTHROPIC_CALL_IDS("call_abc") == "toolu_abc" and ANTHROPIC_CALL_IDS("toolu_1") == "toolu_1"
    assert ANTHROPIC_CALL_IDS(None).startswith("toolu_") and len(ANTHROPIC_CALL_IDS(None)) == 6 + 32
    assert OLLAMA_CALL_IDS(None) is None and OLLAMA_CALL_IDS("c1") == "c1"
