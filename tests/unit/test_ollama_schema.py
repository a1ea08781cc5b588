"""Ollama request decoding and translation (:mod:`gateway.ollama.translate`)
and reply building (:mod:`gateway.ollama.builder`), without a worker."""

from __future__ import annotations

import json

import pytest

from gateway.core.errors import APIError
from gateway.ollama.builder import ReplyBuilder, Timing, line
from gateway.ollama.routes import expiry
from gateway.ollama.schema import OllamaChatRequest, OllamaGenerateRequest
from gateway.ollama.translate import chat_request, check_generate, decode, generate_request, keep_alive_seconds
from shared.protocol import RequestOutput, ToolCallDelta


def chat(**fields) -> OllamaChatRequest:
    """A decoded chat body with ``fields``."""
    return decode(OllamaChatRequest, json.dumps({"model": "m", **fields}).encode())


def refused(kind: type, **fields) -> APIError:
    """The 400 a body with ``fields`` gets."""
    with pytest.raises(APIError) as err:
        body = decode(kind, json.dumps({"model": "m", **fields}).encode())
        if kind is OllamaChatRequest:
            chat_request(body, "r")
        else:
            check_generate(body)
            generate_request(body, "r")
    assert err.value.status == 400
    return err.value


def test_options_map_field_by_field():
    options = {
        "num_predict": 12,
        "temperature": 0.3,
        "top_p": 0.9,
        "top_k": 5,
        "min_p": 0.05,
        "seed": 7,
        "stop": ["END"],
        "repeat_penalty": 1.2,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "num_thread": 8,
        "use_mmap": False,
        "mirostat": 0,
    }
    s = chat_request(chat(messages=[{"role": "user", "content": "hi"}], options=options), "r").sampling
    assert (s.max_tokens, s.temperature, s.top_p, s.top_k, s.min_p, s.seed) == (12, 0.3, 0.9, 5, 0.05, 7)
    assert (s.stop, s.repetition_penalty, s.presence_penalty, s.frequency_penalty) == (["END"], 1.2, 0.5, 0.25)
    unset = chat_request(chat(messages=[{"role": "user", "content": "hi"}], options={"num_predict": -1}), "r")
    assert unset.sampling.max_tokens is None and unset.sampling.temperature is None


@pytest.mark.parametrize(
    ("option", "value"),
    [("mirostat", 1), ("mirostat_eta", 0.1), ("tfs_z", 0.5), ("typical_p", 0.7), ("repeat_last_n", 10)]
    + [("num_predict", 0), ("temperature", -1), ("top_p", 2), ("num_ctx", 0), ("unknown_option", 1)],
)
def test_refused_options_name_themselves(option, value):
    err = refused(OllamaChatRequest, messages=[{"role": "user", "content": "x"}], options={option: value})
    assert option in err.message


def test_keep_alive_forms():
    assert keep_alive_seconds(None) is None
    assert keep_alive_seconds(0) == 0 and keep_alive_seconds("0") == 0
    assert keep_alive_seconds(90) == 90 and keep_alive_seconds("5m") == 300 and keep_alive_seconds("1h") == 3600
    assert keep_alive_seconds(-1) < 0 and keep_alive_seconds("-1m") < 0 and keep_alive_seconds("-1") < 0
    with pytest.raises(APIError):
        keep_alive_seconds("later")


def test_format_and_think():
    ask = [{"role": "user", "content": "x"}]
    assert chat_request(chat(messages=ask, format="json"), "r").response_format.type == "json_object"
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    fmt = chat_request(chat(messages=ask, format=schema), "r").response_format
    assert fmt.type == "json_schema" and fmt.schema == schema
    assert chat_request(chat(messages=ask, format=""), "r").response_format is None
    assert chat_request(chat(messages=ask, think=False), "r").thinking is False
    assert chat_request(chat(messages=ask, think="high"), "r").thinking is True
    assert "format" in refused(OllamaChatRequest, messages=ask, format="xml").message


def test_tool_history_gets_ids_and_names():
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "",
            "thinking": "need a tool",
            "tool_calls": [
                {"function": {"name": "a", "arguments": {"x": 1}}},
                {"function": {"name": "b", "arguments": {}}},
            ],
        },
        {"role": "tool", "tool_name": "b", "content": "B"},
        {"role": "tool", "content": "A"},
    ]
    tools = [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}}]
    req = chat_request(chat(messages=messages, tools=tools), "r")
    assistant, tool_b, tool_a = req.messages[1:]
    assert assistant.reasoning == "need a tool"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in assistant.tool_calls] == [
        ("call_1_0", "a", {"x": 1}),
        ("call_1_1", "b", {}),
    ]
    assert (tool_b.tool_call_id, tool_b.name) == ("call_1_1", "b")
    assert (tool_a.tool_call_id, tool_a.name) == ("call_1_0", "a")
    assert req.tools[0].name == "a" and req.tool_choice == "auto"


def test_generate_translation_and_refusals():
    body = decode(OllamaGenerateRequest, b'{"model": "m", "prompt": "p", "system": "s"}')
    req = generate_request(body, "r")
    assert [(m.role, m.content) for m in req.messages] == [("system", "s"), ("user", "p")]
    raw = generate_request(decode(OllamaGenerateRequest, b'{"model": "m", "prompt": "p", "raw": true}'), "r")
    assert raw.prompt == "p" and raw.messages is None
    fim = generate_request(decode(OllamaGenerateRequest, b'{"model": "m", "prompt": "p", "suffix": "s"}'), "r")
    assert (fim.prompt, fim.suffix, fim.messages) == ("p", "s", None)
    empty = generate_request(decode(OllamaGenerateRequest, b'{"model": "m", "prompt": "p", "suffix": ""}'), "r")
    assert empty.suffix is None and empty.messages is not None  # as Ollama: an empty suffix is no suffix
    for field, value, words in [
        ("template", "t", "template"),
        ("context", [1], "context"),
        ("width", 8, "image-generation"),
    ]:
        assert words in refused(OllamaGenerateRequest, prompt="p", **{field: value}).message
    assert "raw" in refused(OllamaGenerateRequest, prompt="p", raw=True, system="s").message
    assert "raw" in refused(OllamaGenerateRequest, prompt="p", raw=True, images=["aGk="]).message
    pictured = generate_request(
        decode(OllamaGenerateRequest, b'{"model": "m", "prompt": "p", "images": ["aGk="]}'), "r"
    )
    (turn,) = pictured.messages
    assert turn.images[0].data == b"hi" and turn.images[0].offset == 0 and turn.images[0].param == "images[0]"
    assert "raw" in refused(OllamaGenerateRequest, prompt="p", raw=True, suffix="s").message
    assert "no system turn" in refused(OllamaGenerateRequest, prompt="p", system="x", suffix="s").message


def test_builder_streams_text_then_calls_then_final():
    builder = ReplyBuilder("chat", "m", Timing())
    first = builder.add(RequestOutput(request_id="r", text="He", reasoning="hm", prompt_tokens=5, completion_tokens=1))
    assert first[0]["message"] == {"role": "assistant", "content": "He", "thinking": "hm"}
    deltas = [ToolCallDelta(index=0, id="c1", name="f", arguments='{"a"'), ToolCallDelta(index=0, arguments=": 1}")]
    assert builder.add(RequestOutput(request_id="r", tool_calls=deltas, completion_tokens=4)) == []
    builder.add(RequestOutput(request_id="r", finish_reason="tool_calls", completion_tokens=4))
    end = builder.finish()
    assert end[0]["message"]["tool_calls"] == [
        {"function": {"index": 0, "name": "f", "arguments": {"a": 1}}, "id": "c1"}
    ]
    final = end[-1]
    assert final["done"] and final["done_reason"] == "stop"
    assert (final["prompt_eval_count"], final["eval_count"]) == (5, 4)
    whole = builder.final
    assert whole["message"]["content"] == "He" and whole["message"]["tool_calls"][0]["function"]["name"] == "f"
    assert line(final).endswith(b"\n") and line(final).count(b"\n") == 1


def test_generate_builder_and_expiry():
    builder = ReplyBuilder("generate", "m", Timing())
    assert builder.add(RequestOutput(request_id="r", text="ok", completion_tokens=1))[0]["response"] == "ok"
    builder.add(RequestOutput(request_id="r", finish_reason="length", completion_tokens=1))
    assert builder.finish()[-1]["done_reason"] == "length"
    assert builder.final["response"] == "ok"
    assert expiry(None).startswith("2318") and expiry(0).startswith("1970-01-01T00:00:00")


class _Outputs:
    """A request stream that yields fixed outputs."""

    def __init__(self, outputs: list[RequestOutput]) -> None:
        self._outputs = list(outputs)
        self.closed = False

    async def __anext__(self) -> RequestOutput:
        if not self._outputs:
            raise StopAsyncIteration
        return self._outputs.pop(0)

    async def aclose(self) -> None:
        self.closed = True


@pytest.fixture
def anyio_backend():
    return "asyncio"


@pytest.mark.anyio
async def test_a_failure_mid_stream_is_an_error_line():
    from gateway.core.errors import worker_error
    from gateway.frontend.answer_driver import AnswerRun

    stream = _Outputs(
        [RequestOutput(request_id="r", finish_reason="error", error="ran past its deadline", error_kind="timeout")]
    )
    builder = ReplyBuilder("chat", "m", Timing(), error_of=lambda output: worker_error(output, "messages"))
    run = AnswerRun(builder, stream, "r")
    first = RequestOutput(request_id="r", text="Hi", completion_tokens=1)
    lines = [
        json.loads(chunk)
        for body in [b"".join([c async for c in run.stream_frames(first)])]
        for chunk in body.splitlines()
    ]
    assert lines[0]["message"]["content"] == "Hi" and lines[0]["done"] is False
    assert lines[-1] == {"error": "ran past its deadline"}
    assert stream.closed
