"""Decoding, validation and translation of Anthropic Messages request bodies."""

from __future__ import annotations

import json

import pytest

from gateway.anthropic.checks import decode_count_tokens_request, decode_messages_request
from gateway.anthropic.translate import IMAGE_PLACEHOLDER, TOOL_ERROR_PREFIX, to_count_request, to_generate_request
from gateway.core.errors import APIError
from shared.protocol import ChatMessage, SamplingParams, Tool, ToolCall

USER = [{"role": "user", "content": "hi"}]
WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Weather for a city",
    "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}},
}
CLOCK_TOOL = {"name": "now", "input_schema": {"type": "object"}}


def body(**fields) -> bytes:
    data = {"model": "m", "max_tokens": 64, "messages": USER}
    data.update(fields)
    return json.dumps(data).encode()


def generate(**fields):
    return to_generate_request(decode_messages_request(body(**fields)), "msg_1")


def refused(param: str | None, data: bytes | None = None, **fields) -> APIError:
    with pytest.raises(APIError) as info:
        decode_messages_request(body(**fields) if data is None else data)
    err = info.value
    assert err.status == 400
    assert err.param == param, err.message
    if param:
        assert err.message.startswith(f"{param}: "), err.message
    return err


# --- body shape ------------------------------------------------------------------------


@pytest.mark.parametrize("data", [b"{", b"[1]", b"", b"\xff", b'"x"'])
def test_malformed_bodies(data):
    refused(None, data)


def test_unknown_fields_are_named():
    assert refused("betas", betas=["x"]).message == "betas: Extra inputs are not permitted"
    refused("messages[0].name", messages=[{"role": "user", "content": "x", "name": "bob"}])
    refused("metadata.email", metadata={"email": "a@b"})
    extra = {"type": "text", "text": "x", "foo": 1}
    refused("messages[0].content[0].foo", messages=[{"role": "user", "content": [extra]}])


def test_required_fields():
    err = refused("max_tokens", json.dumps({"model": "m", "messages": USER}).encode())
    assert err.message == "max_tokens: Field required"
    refused("model", json.dumps({"max_tokens": 5, "messages": USER}).encode())
    refused("messages", json.dumps({"model": "m", "max_tokens": 5}).encode())


@pytest.mark.parametrize(
    "param, value",
    [
        ("max_tokens", 0),
        ("max_tokens", "5"),
        ("max_tokens", 1.5),
        ("max_tokens", 10**7),
        ("temperature", 1.5),
        ("temperature", -0.1),
        ("top_p", 0),
        ("top_p", 1.01),
        ("top_k", -1),
        ("stream", "yes"),
        ("model", ""),
        ("stop_sequences", ["x"] * 17),
        ("stop_sequences", "x"),
    ],
)
def test_bounds_and_types(param, value):
    refused(param, **{param: value})


def test_stop_sequence_bounds():
    refused("stop_sequences[0]", stop_sequences=[""])
    refused("stop_sequences[1]", stop_sequences=["a", "x" * 513])


def test_messages_bounds():
    refused("messages", messages=[])
    refused("messages", messages=USER * 2049)
    refused("messages[0].content", messages=[{"role": "user", "content": []}])


# --- messages ------------------------------------------------------------------------------


def test_roles():
    err = refused("messages[0].role", messages=[{"role": "developer", "content": "x"}])
    assert "'system'" in err.message
    refused("messages[0].clear_at", messages=[{"role": "user", "content": "x", "clear_at": "never"}])
    refused("messages[0].content", messages=[{"role": "user"}])
    refused("messages[0].content", messages=[{"role": "system"}, *USER])
    refused("messages[0].content[0].type", messages=[{"role": "system", "content": [{"type": "image", "source": {}}]}])


def test_prefilled_final_assistant_turn():
    req = generate(messages=[*USER, {"role": "assistant", "content": [{"type": "text", "text": "Sure,"}]}])
    assert req.continue_final is True
    assert req.messages[-1] == ChatMessage(role="assistant", content="Sure,")
    assert generate().continue_final is False
    count = to_count_request(
        decode_count_tokens_request(
            json.dumps({"model": "m", "messages": [*USER, {"role": "assistant", "content": "A"}]}).encode()
        ),
        "c",
    )
    assert count.continue_final is True and count.count_only is True
    err = refused("messages[1].content", messages=[*USER, {"role": "assistant", "content": "Sure, "}])
    assert "trailing whitespace" in err.message
    use = {"type": "tool_use", "id": "t1", "name": "now", "input": {}}
    err = refused("messages[1].content[0].type", messages=[*USER, {"role": "assistant", "content": [use]}])
    assert "not supported" in err.message
    prefill = [*USER, {"role": "assistant", "content": "Sure"}]
    refused("thinking", messages=prefill, thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=2048)
    err = refused("tool_choice", messages=prefill, tools=[CLOCK_TOOL], tool_choice={"type": "any"})
    assert "not supported" in err.message


def test_user_images_go_to_the_model():
    """A user turn's image is placed on its own line after the text; a bad
    source is a 400 naming it; an image in an assistant turn is refused."""
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    turns = [{"role": "user", "content": [{"type": "text", "text": "x"}, image]}]
    (message,) = generate(messages=turns).messages
    assert message.content == "x\n" and message.images[0].offset == 2 and message.images[0].data == b"\x00\x00\x00"
    bad = {"type": "image", "source": {"type": "base64", "media_type": "image/bmp", "data": "AAAA"}}
    with pytest.raises(APIError) as caught:
        generate(messages=[{"role": "user", "content": [bad]}])
    assert caught.value.param == "messages[0].content[0].source.media_type"
    refused("messages[1].content[0].type", messages=[*USER, {"role": "assistant", "content": [image]}])


def test_text_documents_and_search_results_are_rendered():
    doc = {"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "D"}, "title": "T"}
    content_doc = {"type": "document", "source": {"type": "content", "content": [{"type": "text", "text": "C"}]}}
    search = {"type": "search_result", "source": "s", "title": "R", "content": [{"type": "text", "text": "body"}]}
    turns = [{"role": "user", "content": [{"type": "text", "text": "a"}, doc, content_doc, search]}]
    assert generate(messages=turns).messages == [ChatMessage(role="user", content="a\nT\n\nD\nC\nR\ns\n\nbody")]
    pdf = {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": "AA"}}
    err = refused("messages[0].content[0].source.type", messages=[{"role": "user", "content": [pdf]}])
    assert "'base64'" in err.message
    image = {"type": "image", "source": {}}
    with_image = {"type": "document", "source": {"type": "content", "content": [image]}}
    refused("messages[0].content[0].source.content[0].type", messages=[{"role": "user", "content": [with_image]}])


def test_redacted_thinking_is_left_out():
    redacted = {"type": "redacted_thinking", "data": "abc"}
    turns = [*USER, {"role": "assistant", "content": [redacted, {"type": "text", "text": "ok"}]}, *USER]
    assert generate(messages=turns).messages[1] == ChatMessage(role="assistant", content="ok")
    refused("messages[0].content[0].type", messages=[{"role": "user", "content": [redacted]}])


@pytest.mark.parametrize(
    "tag, reason",
    [
        ("server_tool_use", "server tools"),
        ("web_search_tool_result", "server tools"),
        ("mcp_tool_use", "MCP"),
        ("container_upload", "containers"),
        ("tool_addition", "tool changes"),
    ],
)
def test_server_blocks_are_refused_with_a_reason(tag, reason):
    err = refused("messages[0].content[0].type", messages=[{"role": "user", "content": [{"type": tag, "x": 1}]}])
    assert reason in err.message and tag in err.message


def test_unknown_block_type():
    refused("messages[0].content[0].type", messages=[{"role": "user", "content": [{"type": "bogus"}]}])


def test_compaction_block_is_its_summary():
    compaction = {"type": "compaction", "content": "Summary.", "signature": None}
    turns = [*USER, {"role": "assistant", "content": [compaction]}, *USER]
    assert generate(messages=turns).messages[1] == ChatMessage(role="assistant", content="Summary.")
    unreadable = [*USER, {"role": "assistant", "content": [{"type": "compaction", "encrypted_content": "x"}]}, *USER]
    refused("messages[1].content[0].content", messages=unreadable)


def test_blocks_per_role():
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    refused("messages[0].content[0].type", messages=[{"role": "user", "content": [use]}])
    thinking = {"type": "thinking", "thinking": "hm", "signature": ""}
    refused("messages[0].content[0].type", messages=[{"role": "user", "content": [thinking]}])
    result = {"type": "tool_result", "tool_use_id": "t1", "content": "x"}
    turns = [*USER, {"role": "assistant", "content": [use, result]}, *USER]
    refused("messages[1].content[1].type", messages=turns)


def test_tool_use_caller_and_toolset():
    def turns(**extra):
        use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}, **extra}
        return [*USER, {"role": "assistant", "content": [use]}, *USER]

    decode_messages_request(body(messages=turns(caller=None, toolset_name=None)))
    decode_messages_request(body(messages=turns(caller={"type": "direct"})))
    server_caller = {"type": "code_execution_20250825", "tool_id": "x"}
    refused("messages[1].content[0].caller", messages=turns(caller=server_caller))
    refused("messages[1].content[0].toolset_name", messages=turns(toolset_name="fs"))


def test_tool_result_needs_an_earlier_tool_use():
    result = {"type": "tool_result", "tool_use_id": "t9", "content": "x"}
    err = refused("messages[0].content[0].tool_use_id", messages=[{"role": "user", "content": [result]}])
    assert "t9" in err.message


def _image_result(**extra):
    use = {"type": "tool_use", "id": "t1", "name": "f", "input": {}}
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}
    content = [{"type": "text", "text": "a"}, image, {"type": "tool_reference", "tool_name": "g"}]
    result = {"type": "tool_result", "tool_use_id": "t1", "content": content, **extra}
    return [*USER, {"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]


def test_tool_result_images_become_a_placeholder_or_a_400():
    req = decode_messages_request(body(messages=_image_result()))
    tool = to_generate_request(req, "m").messages[2]
    assert tool.role == "tool" and tool.content == f"a\n{IMAGE_PLACEHOLDER}\nTool: g"
    with pytest.raises(APIError) as info:
        to_generate_request(req, "m", images="refuse")
    assert info.value.param == "messages[2].content[0].content[1].type"
    assert "no vision" in info.value.message
    browser = [
        *_image_result()[:2],
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "browser_state", "tabs": []}]}
            ],
        },
    ]
    refused("messages[2].content[0].content[0].type", messages=browser)
    refused("messages[2].content[0].toolset_name", messages=_image_result(toolset_name="fs"))


def test_citations_are_accepted_and_not_rendered():
    cite = [
        {
            "type": "char_location",
            "cited_text": "c",
            "document_index": 0,
            "document_title": None,
            "start_char_index": 0,
            "end_char_index": 1,
        }
    ]
    turns = [{"role": "user", "content": [{"type": "text", "text": "x", "citations": cite}]}]
    assert generate(messages=turns).messages == [ChatMessage(role="user", content="x")]


def test_cache_control_accepted_everywhere_documented():
    cc = {"type": "ephemeral"}
    req = generate(
        system=[{"type": "text", "text": "S", "cache_control": cc}],
        messages=[{"role": "user", "content": [{"type": "text", "text": "x", "cache_control": {**cc, "ttl": "1h"}}]}],
        tools=[{**WEATHER_TOOL, "cache_control": cc}],
        cache_control=cc,
    )
    assert req.messages[0] == ChatMessage(role="system", content="S")
    refused("cache_control.type", cache_control={"type": "persistent"})
    refused("cache_control.ttl", cache_control={"type": "ephemeral", "ttl": "2h"})


# --- translation ---------------------------------------------------------------------------


def test_defaults():
    req = generate()
    assert req.request_id == "msg_1" and req.n == 1
    assert req.sampling == SamplingParams(max_tokens=64, stop=[])
    assert (req.sampling.temperature, req.sampling.top_p, req.sampling.top_k) == (None, None, None)
    assert req.messages == [ChatMessage(role="user", content="hi")]
    assert req.tools is None and req.tool_choice == "auto" and req.parallel_tool_calls is True
    assert req.thinking is None and req.count_only is False


def test_sampling_fields():
    req = generate(temperature=0, top_p=0.5, top_k=40, stop_sequences=["END", "##"], metadata={"user_id": "u1"})
    assert req.sampling.temperature == 0.0 and req.sampling.top_p == 0.5 and req.sampling.top_k == 40
    assert req.sampling.stop == ["END", "##"]


@pytest.mark.parametrize("system", ["Be brief.", [{"type": "text", "text": "Be "}, {"type": "text", "text": "brief."}]])
def test_system_becomes_a_leading_message(system):
    req = generate(system=system)
    assert req.messages[0] == ChatMessage(role="system", content="Be brief.")
    assert req.messages[1].role == "user"


def test_empty_system_is_no_message():
    assert generate(system="").messages == [ChatMessage(role="user", content="hi")]


def test_text_blocks_are_joined():
    turns = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    assert generate(messages=turns).messages == [ChatMessage(role="user", content="ab")]


def test_tool_history_translation():
    turns = [
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Two cities.", "signature": ""},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}},
                {"type": "tool_use", "id": "t2", "name": "get_weather", "input": {"city": "Rome"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "18C"},
                {"type": "text", "text": "Also, thanks."},
                {
                    "type": "tool_result",
                    "tool_use_id": "t2",
                    "content": [{"type": "text", "text": "no data"}],
                    "is_error": True,
                },
            ],
        },
    ]
    req = generate(messages=turns, tools=[WEATHER_TOOL])
    assert req.messages == [
        ChatMessage(role="user", content="Weather in Paris and Rome?"),
        ChatMessage(
            role="assistant",
            content="Checking.",
            reasoning="Two cities.",
            tool_calls=[
                ToolCall(id="t1", name="get_weather", arguments='{"city":"Paris"}'),
                ToolCall(id="t2", name="get_weather", arguments='{"city":"Rome"}'),
            ],
        ),
        ChatMessage(role="tool", content="18C", tool_call_id="t1", name="get_weather"),
        ChatMessage(role="tool", content=TOOL_ERROR_PREFIX + "no data", tool_call_id="t2", name="get_weather"),
        ChatMessage(role="user", content="Also, thanks."),
    ]
    assert json.loads(req.messages[1].tool_calls[0].arguments) == {"city": "Paris"}


def test_tool_result_without_content_and_no_text():
    turns = [
        *USER,
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "now", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1"}]},
    ]
    messages = generate(messages=turns, tools=[CLOCK_TOOL]).messages
    assert messages[-1] == ChatMessage(role="tool", content="", tool_call_id="t1", name="now")
    assert messages[1].tool_calls == [ToolCall(id="t1", name="now", arguments="{}")] and messages[1].content == ""


def test_tools_translate():
    req = generate(tools=[WEATHER_TOOL, {**CLOCK_TOOL, "type": "custom"}])
    assert req.tools == [
        Tool(name="get_weather", description="Weather for a city", parameters=WEATHER_TOOL["input_schema"]),
        Tool(name="now", description="", parameters={"type": "object"}),
    ]


@pytest.mark.parametrize(
    "choice, expected, name, parallel",
    [
        ({"type": "auto"}, "auto", None, True),
        ({"type": "auto", "disable_parallel_tool_use": True}, "auto", None, False),
        ({"type": "any"}, "required", None, True),
        ({"type": "any", "disable_parallel_tool_use": True}, "required", None, False),
        ({"type": "tool", "name": "now"}, "function", "now", True),
        ({"type": "tool", "name": "now", "disable_parallel_tool_use": False}, "function", "now", True),
        ({"type": "none"}, "none", None, True),
    ],
)
def test_tool_choice_variants(choice, expected, name, parallel):
    req = generate(tools=[WEATHER_TOOL, CLOCK_TOOL], tool_choice=choice)
    assert (req.tool_choice, req.tool_choice_name, req.parallel_tool_calls) == (expected, name, parallel)


def test_tool_choice_errors():
    refused("tool_choice", tool_choice={"type": "any"})
    refused("tool_choice.name", tools=[WEATHER_TOOL], tool_choice={"type": "tool", "name": "other"})
    refused("tool_choice.name", tools=[WEATHER_TOOL], tool_choice={"type": "tool"})
    refused("tool_choice.type", tools=[WEATHER_TOOL], tool_choice={"type": "sometimes"})
    refused("tool_choice", tools=[WEATHER_TOOL], tool_choice="auto")
    none_parallel = {"type": "none", "disable_parallel_tool_use": True}
    refused("tool_choice.disable_parallel_tool_use", tools=[WEATHER_TOOL], tool_choice=none_parallel)


def test_tool_errors():
    err = refused("tools[0].type", tools=[{"type": "web_search_29990101", "name": "web_search"}])
    assert "unknown tool type" in err.message
    refused("tools[1].name", tools=[WEATHER_TOOL, WEATHER_TOOL])
    refused("tools[0].name", tools=[{**WEATHER_TOOL, "name": "has space"}])
    refused("tools[0].input_schema", tools=[{"name": "f"}])
    refused("tools[0].input_schema.type", tools=[{"name": "f", "input_schema": {"type": "string"}}])
    refused("tools[0].name", tools=[{"type": "bash_20250124", "name": "shell"}])
    refused("tools[0]", tools=["get_weather"])
    refused("tools", tools=[CLOCK_TOOL] * 513)


def test_thinking():
    assert generate(max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 1024}).thinking is True
    assert generate(thinking={"type": "disabled"}).thinking is False
    refused("thinking.budget_tokens", max_tokens=4096, thinking={"type": "enabled", "budget_tokens": 0})
    assert generate(max_tokens=300, thinking={"type": "enabled", "budget_tokens": 299}).thinking_budget == 299
    err = refused("thinking.budget_tokens", max_tokens=2048, thinking={"type": "enabled", "budget_tokens": 2048})
    assert "max_tokens" in err.message
    refused("thinking.budget_tokens", thinking={"type": "enabled"})
    refused("thinking.type", thinking={"type": "sometimes"})
    refused("thinking.display", thinking={"type": "adaptive", "display": "loud"})
    refused("thinking.budget_tokens", thinking={"type": "disabled", "budget_tokens": 2000})


# --- count_tokens ------------------------------------------------------------------------------


def test_count_tokens_request():
    data = {"model": "m", "messages": USER, "system": "S", "tools": [CLOCK_TOOL], "tool_choice": {"type": "any"}}
    req = to_count_request(decode_count_tokens_request(json.dumps(data).encode()), "count_1")
    assert req.count_only is True and req.request_id == "count_1" and req.n == 1
    assert req.messages == [ChatMessage(role="system", content="S"), ChatMessage(role="user", content="hi")]
    assert req.tools == [Tool(name="now", parameters={"type": "object"})] and req.tool_choice == "required"
    thinking = {**data, "thinking": {"type": "enabled", "budget_tokens": 5000}}
    assert to_count_request(decode_count_tokens_request(json.dumps(thinking).encode()), "c").thinking is True


@pytest.mark.parametrize("field, value", [("max_tokens", 5), ("stream", True), ("temperature", 0.5)])
def test_count_tokens_refuses_generation_fields(field, value):
    data = {"model": "m", "messages": USER, field: value}
    with pytest.raises(APIError) as info:
        decode_count_tokens_request(json.dumps(data).encode())
    assert info.value.param == field


def test_thinking_refuses_forced_tool_use():
    thinking = {"type": "enabled", "budget_tokens": 1024}
    for choice in ({"type": "any"}, {"type": "tool", "name": "now"}):
        err = refused("tool_choice", tools=[CLOCK_TOOL], tool_choice=choice, thinking=thinking, max_tokens=2048)
        assert "thinking" in err.message
    assert generate(tools=[CLOCK_TOOL], tool_choice={"type": "auto"}, thinking=thinking, max_tokens=2048).thinking
