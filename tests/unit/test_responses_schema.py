"""Decoding, validation, translation and echo of ``POST /v1/responses`` bodies."""

from __future__ import annotations

import json

import pytest

from gateway.core.errors import APIError
from gateway.frontend.error_shapes import openai_error_type
from gateway.responses.checks import decode_responses_request
from gateway.responses.format import TextFormatEcho
from gateway.responses.translate import response_settings, to_generate_request
from shared.protocol import ChatMessage, ResponseFormat, SamplingParams, Tool, ToolCall

FN = {"type": "function", "name": "f", "parameters": {"type": "object"}}


def body(**fields) -> bytes:
    data = {"model": "m", "input": "hi"}
    data.update(fields)
    return json.dumps(data).encode()


def decode(**fields):
    return decode_responses_request(body(**fields))


def refused(param: str | None, **fields) -> APIError:
    with pytest.raises(APIError) as info:
        decode(**fields)
    err = info.value
    assert err.status == 400 and openai_error_type(err.status) == "invalid_request_error"
    assert err.param == param, err.message
    return err


def messages(**fields) -> list[ChatMessage]:
    return to_generate_request(decode(**fields), "resp_x").messages


# --- refusals ----------------------------------------------------------------------------


def test_body_shape():
    with pytest.raises(APIError) as info:
        decode_responses_request(b"[1]")
    assert info.value.status == 400
    with pytest.raises(APIError) as info:
        decode_responses_request(b'{"model": "m"}')
    assert info.value.param == "input" and "Missing required parameter" in info.value.message


@pytest.mark.parametrize(
    "fields,param",
    [
        ({"seed": 1}, "seed"),
        ({"temperature": 2.5}, "temperature"),
        ({"temperature": "1"}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_output_tokens": 0}, "max_output_tokens"),
        ({"max_output_tokens": 1.5}, "max_output_tokens"),
        ({"input": []}, "input"),
        ({"input": [{"role": "user", "content": "x", "foo": 1}]}, "input[0].foo"),
        ({"input": [{"role": "user", "content": "x", "call_id": "c"}]}, "input[0].call_id"),
        ({"input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user"}]}, "input[0].content"),
        ({"input": [{"role": "user", "content": None}]}, "input[0].content"),
        ({"input": [{"content": "x"}]}, "input[0].role"),
        (
            {"input": [{"role": "system", "content": [{"type": "input_image", "image_url": "u"}]}]},
            "input[0].content[0].type",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "input[0].content[0].type",
        ),
        ({"input": [{"role": "user", "content": [{"type": "output_text", "text": "x"}]}]}, "input[0].content[0].type"),
        ({"input": [{"role": "user", "content": [{"type": "input_text"}]}]}, "input[0].content[0].text"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": "x", "refusal": "r"}]}]},
            "input[0].content[0].refusal",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_text", "text": "x", "nope": 1}]}]},
            "input[0].content[0].nope",
        ),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0].type"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, "input[0].type"),
        ({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}, "input[0].call_id"),
        ({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}, "input[0].name"),
        ({"input": [{"type": "function_call_output", "call_id": "c"}]}, "input[0].output"),
        ({"input": [{"type": "function_call_output", "output": "x"}]}, "input[0].call_id"),
        (
            {"input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_audio"}]}]},
            "input[0].output[0].type",
        ),
        (
            {"input": [{"type": "reasoning", "summary": [], "encrypted_content": "mlxd1.%%%"}]},
            "input[0].encrypted_content",
        ),
        ({"input": [{"type": "reasoning", "summary": [], "content": "x"}]}, "input[0].content"),
        (
            {"input": [{"type": "reasoning", "summary": [{"type": "reasoning_text", "text": "x"}]}]},
            "input[0].summary[0].type",
        ),
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"background": True}, "background"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"stream_options": {"include_obfuscation": False}}, "stream_options"),
        ({"stream": True, "stream_options": {"other": 1}}, "stream_options.other"),
        ({"truncation": "auto"}, "truncation"),
        ({"include": ["reasoning.everything"]}, "include[0]"),
        ({"top_logprobs": 21}, "top_logprobs"),
        ({"max_tool_calls": 0}, "max_tool_calls"),
        ({"service_tier": "turbo"}, "service_tier"),
        ({"moderation": {"model": "omni-moderation-latest"}}, "moderation"),
        ({"metadata": {str(i): "v" for i in range(17)}}, "metadata"),
        ({"metadata": {"k": "v" * 513}}, "metadata"),
        ({"metadata": {"k": 1}}, "metadata"),
        ({"reasoning": {"effort": "huge"}}, "reasoning.effort"),
        ({"reasoning": {"summary": "verbose"}}, "reasoning.summary"),
        ({"reasoning": {"summary": "auto", "generate_summary": "concise"}}, "reasoning.generate_summary"),
        ({"reasoning": {"context": "everything"}}, "reasoning.context"),
        ({"text": {"verbosity": "loud"}}, "text.verbosity"),
        ({"text": {"format": {"type": "xml"}}}, "text.format.type"),
        ({"text": {"format": {"type": "json_schema", "name": "n"}}}, "text.format.schema"),
        ({"text": {"format": {"type": "json_schema", "schema": {}}}}, "text.format.name"),
        ({"text": {"format": {"type": "json_object", "name": "n"}}}, "text.format.name"),
        ({"text": {"format": {"type": "json_schema", "name": "n", "schema": []}}}, "text.format.schema"),
        ({"tool_choice": "required", "tools": [{"type": "web_search"}]}, "tool_choice"),
        (
            {
                "tools": [
                    {"type": "custom", "name": "c", "format": {"type": "grammar", "syntax": "ebnf", "definition": "x"}}
                ]
            },
            "tools[0].format.syntax",
        ),
        ({"tools": [{"type": "function"}]}, "tools[0].name"),
        ({"tools": [{**FN, "name": "bad name"}]}, "tools[0].name"),
        ({"tools": [{**FN, "name": "x" * 65}]}, "tools[0].name"),
        ({"tools": [{**FN, "extra": 1}]}, "tools[0].extra"),
        ({"tools": [{**FN, "parameters": "{}"}]}, "tools[0].parameters"),
        ({"tools": [FN, FN]}, "tools[1].name"),
        ({"tools": [FN] * 129}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": "sometimes", "tools": [FN]}, "tool_choice"),
        ({"tool_choice": {"type": "function", "name": "g"}, "tools": [FN]}, "tool_choice.name"),
        ({"tool_choice": {"type": "function"}, "tools": [FN]}, "tool_choice"),
        ({"tool_choice": {"type": "file_search"}, "tools": [FN]}, "tool_choice.type"),
        (
            {"tool_choice": {"type": "allowed_tools", "mode": "sometimes", "tools": []}, "tools": [FN]},
            "tool_choice.mode",
        ),
    ],
)
def test_refused(fields, param):
    refused(param, **fields)


def test_refusal_messages():
    assert "stateless" in refused("previous_response_id", previous_response_id="resp_1").message
    assert "moderation" in refused("moderation", moderation={"model": "m"}).message
    assert "Unrecognized request argument supplied: seed" in refused("seed", seed=1).message
    err = refused("input[0].content[0].type", input=[{"role": "system", "content": [{"type": "input_image"}]}])
    assert "not supported" in err.message
    for part, param, words in (
        ({"type": "input_image"}, "image_url", "Missing required parameter"),
        ({"type": "input_image", "image_url": "u"}, "image_url", "data:image"),
        ({"type": "input_image", "file_id": "f"}, "file_id", "Files API"),
        ({"type": "input_image", "image_url": "data:image/png;base64,AA==", "detail": "max"}, "detail", "'detail'"),
    ):
        with pytest.raises(APIError) as caught:
            messages(input=[{"role": "user", "content": [part]}])
        assert caught.value.param == f"input[0].content[0].{param}" and words in caught.value.message


@pytest.mark.parametrize(
    "fields",
    [
        {"store": True},
        {"store": False},
        {"truncation": "disabled"},
        {"include": []},
        {"top_logprobs": 0},
        {"service_tier": "auto"},
        {"max_tool_calls": None},
        {"stream": True, "stream_options": {"include_obfuscation": True}},
        {"text": {"format": {"type": "text"}, "verbosity": None}},
        {"reasoning": {"effort": None, "summary": None}},
        {"tool_choice": "none"},
        {"tools": []},
        {"metadata": {"k" * 64: "v" * 512}},
        {"user": "u", "safety_identifier": "s", "prompt_cache_key": "p"},
        {"input": ""},
    ],
)
def test_accepted(fields):
    decode(**fields)


# --- translation ----------------------------------------------------------------------------


def test_string_input_defaults():
    request = to_generate_request(decode(), "resp_1")
    assert request.request_id == "resp_1" and request.n == 1
    assert request.messages == [ChatMessage(role="user", content="hi")]
    assert request.sampling == SamplingParams(max_tokens=None)
    assert (request.sampling.temperature, request.sampling.top_p) == (None, None)  # the model's defaults
    assert request.tools is None and request.tool_choice == "none" and request.tool_choice_name is None
    assert request.parallel_tool_calls is True
    assert request.response_format is None and request.thinking is None


def test_sampling_and_tools():
    request = to_generate_request(
        decode(
            max_output_tokens=7,
            temperature=0.0,
            top_p=0.5,
            tools=[{**FN, "description": "d"}],
            parallel_tool_calls=False,
        ),
        "r",
    )
    assert request.sampling == SamplingParams(max_tokens=7, temperature=0.0, top_p=0.5)
    assert request.tools == [Tool(name="f", description="d", parameters={"type": "object"})]
    assert request.tool_choice == "auto" and request.parallel_tool_calls is False


def test_max_tool_calls_is_forwarded_and_echoed():
    request = to_generate_request(decode(tools=[FN], tool_choice="required", max_tool_calls=2), "r")
    assert request.max_tool_calls == 2
    assert to_generate_request(decode(tools=[FN]), "r").max_tool_calls is None
    assert response_settings(decode(tools=[FN], max_tool_calls=3)).max_tool_calls == 3
    assert response_settings(decode()).max_tool_calls is None


@pytest.mark.parametrize(
    "choice,expected",
    [
        ("none", ("none", None)),
        ("auto", ("auto", None)),
        ("required", ("required", None)),
        ({"type": "function", "name": "f"}, ("function", "f")),
    ],
)
def test_tool_choice(choice, expected):
    request = to_generate_request(decode(tools=[FN], tool_choice=choice), "r")
    assert (request.tool_choice, request.tool_choice_name) == expected


@pytest.mark.parametrize(
    "fmt,expected",
    [
        ({"type": "text"}, None),
        ({"type": "json_object"}, ResponseFormat(type="json_object")),
        (
            {"type": "json_schema", "name": "n", "schema": {"type": "object"}},
            ResponseFormat(type="json_schema", schema={"type": "object"}),
        ),
        (
            {"type": "json_schema", "name": "n", "schema": {"type": "object"}, "strict": True, "description": "d"},
            ResponseFormat(type="json_schema", schema={"type": "object"}, strict=True),
        ),
    ],
)
def test_text_format(fmt, expected):
    assert to_generate_request(decode(text={"format": fmt}), "r").response_format == expected


@pytest.mark.parametrize(
    "effort,thinking",
    [
        ("none", False),
        ("minimal", False),
        ("low", True),
        ("medium", True),
        ("high", True),
        ("xhigh", True),
        (None, None),
    ],
)
def test_reasoning_effort(effort, thinking):
    assert to_generate_request(decode(reasoning={"effort": effort}), "r").thinking is thinking


def test_instructions_lead_and_merge_with_a_leading_system_message():
    assert messages(instructions="Be terse.") == [
        ChatMessage(role="system", content="Be terse."),
        ChatMessage(role="user", content="hi"),
    ]
    history = [{"role": "system", "content": "Use French."}, {"role": "user", "content": "hi"}]
    merged = messages(instructions="Be terse.", input=history)
    assert merged == [
        ChatMessage(role="system", content="Be terse.\n\nUse French."),
        ChatMessage(role="user", content="hi"),
    ]


def test_message_items_and_parts():
    result = messages(
        input=[
            {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "rules"}]},
            {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {
                "type": "message",
                "id": "msg_1",
                "status": "completed",
                "role": "assistant",
                "content": [
                    {"type": "output_text", "text": "yes", "annotations": [], "logprobs": []},
                    {"type": "refusal", "refusal": "!"},
                ],
            },
        ]
    )
    assert result == [
        ChatMessage(role="system", content="rules"),
        ChatMessage(role="user", content="ab"),
        ChatMessage(role="assistant", content="yes!"),
    ]


def test_assistant_turns_group_reasoning_text_and_calls():
    fc = lambda i: {"type": "function_call", "call_id": f"c{i}", "name": "f", "arguments": str(i)}  # noqa: E731
    rs = lambda t: {"type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": t}]}  # noqa: E731
    result = messages(
        input=[
            {"role": "user", "content": "q"},
            rs("r1"),
            {"role": "assistant", "content": "a1"},
            fc(1),
            fc(2),
            {"type": "function_call_output", "call_id": "c1", "output": "o1"},
            {"type": "function_call_output", "call_id": "c2", "output": "o2", "name": "g"},
            rs("r2"),
            rs("r3"),
            {"role": "assistant", "content": "a2"},
            {"role": "assistant", "content": "a3"},
            fc(3),
            rs("r4"),
            {"type": "function_call_output", "call_id": "unknown", "output": "o3"},
        ]
    )
    assert result == [
        ChatMessage(role="user", content="q"),
        ChatMessage(
            role="assistant",
            content="a1",
            reasoning="r1",
            tool_calls=[ToolCall(id="c1", name="f", arguments="1"), ToolCall(id="c2", name="f", arguments="2")],
        ),
        ChatMessage(role="tool", content="o1", tool_call_id="c1", name="f"),
        ChatMessage(role="tool", content="o2", tool_call_id="c2", name="g"),
        ChatMessage(role="assistant", content="a2", reasoning="r2\nr3"),
        ChatMessage(role="assistant", content="a3", tool_calls=[ToolCall(id="c3", name="f", arguments="3")]),
        ChatMessage(role="assistant", content="", reasoning="r4"),
        ChatMessage(role="tool", content="o3", tool_call_id="unknown", name=None),
    ]


def test_reasoning_summary_is_used_without_content():
    summary = [{"type": "summary_text", "text": "s1"}, {"type": "summary_text", "text": "s2"}]
    item = {"type": "reasoning", "id": "rs_1", "summary": summary}
    result = messages(input=[{"role": "user", "content": "q"}, item, {"role": "assistant", "content": "a"}])
    assert result[1] == ChatMessage(role="assistant", content="a", reasoning="s1\ns2")


# --- echo ---------------------------------------------------------------------------------------


def test_echo_defaults():
    settings = response_settings(decode())
    assert settings.tool_choice == "none" and settings.tools == [] and settings.parallel_tool_calls is True
    assert settings.text.format == TextFormatEcho(type="text") and settings.reasoning.effort is None
    assert settings.temperature == 1.0 and settings.top_p == 1.0 and settings.metadata == {}
    assert settings.store is False and settings.truncation == "disabled"


def test_echo_uses_the_model_sampling_defaults():
    settings = response_settings(decode(), {"temperature": 0.6, "top_p": 0.95, "top_k": 20})
    assert (settings.temperature, settings.top_p) == (0.6, 0.95)
    settings = response_settings(decode(temperature=0.2), {"temperature": 0.6})
    assert (settings.temperature, settings.top_p) == (0.2, 1.0)


def test_echo_values():
    schema = {"type": "object"}
    settings = response_settings(
        decode(
            instructions="i",
            max_output_tokens=9,
            temperature=0.2,
            top_p=0.3,
            tools=[FN],
            tool_choice={"type": "function", "name": "f"},
            text={"format": {"type": "json_schema", "name": "n", "schema": schema, "strict": False}},
            reasoning={"effort": "high"},
            metadata={"a": "b"},
            user="u",
            store=True,
        )
    )
    assert settings.instructions == "i" and settings.max_output_tokens == 9
    assert (settings.temperature, settings.top_p) == (0.2, 0.3)
    assert settings.tools == [
        {"type": "function", "name": "f", "description": None, "parameters": schema, "strict": None}
    ]
    assert settings.tool_choice == {"type": "function", "name": "f"}
    assert settings.text.format == TextFormatEcho(type="json_schema", name="n", schema=schema, strict=False)
    assert settings.reasoning.effort == "high" and settings.metadata == {"a": "b"} and settings.user == "u"
    assert settings.store is False
    assert response_settings(decode(tools=[FN])).tool_choice == "auto"


# --- today's request surface (issue #20) ---------------------------------------------------------

CUSTOM = {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark", "definition": "s"}}
NAMESPACE = {"type": "namespace", "name": "crm", "description": "CRM tools.", "tools": [FN, {**FN, "name": "g"}]}


def test_sealed_reasoning_round_trips():
    from gateway.responses.encrypted_reasoning import SealError, seal, unseal

    text = "Let me think: 🙂 " * 50
    assert unseal(seal(text)) == text and unseal("gAAAAB-openai") is None
    for broken in ("mlxd1.%%%", "mlxd1." + seal(text)[6:-4], "mlxd1.YWJj"):
        with pytest.raises(SealError):
            unseal(broken)


def test_encrypted_reasoning_items_are_read_back():
    from gateway.responses.encrypted_reasoning import seal

    item = {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": seal("secret plan")}
    result = messages(input=[{"role": "user", "content": "q"}, item, {"role": "assistant", "content": "a"}])
    assert result[1] == ChatMessage(role="assistant", content="a", reasoning="secret plan")
    foreign = {**item, "encrypted_content": "gAAAA", "summary": [{"type": "summary_text", "text": "sum"}]}
    result = messages(input=[{"role": "user", "content": "q"}, foreign, {"role": "assistant", "content": "a"}])
    assert result[1].reasoning == "sum"


def test_namespace_and_custom_tools_are_flattened():
    from gateway.responses.translate import output_options

    req = decode(tools=[CUSTOM, NAMESPACE, {"type": "function", "name": "g"}, {"type": "web_search"}])
    tools = to_generate_request(req, "r").tools
    assert [t.name for t in tools] == ["apply_patch", "f", "crm__g", "g"]
    assert tools[0].parameters["properties"] == {"input": {"type": "string"}}
    assert "lark grammar" in tools[0].description and tools[1].description.startswith("[crm: CRM tools.]")
    refs = output_options(req).tools
    assert (refs["apply_patch"].kind, refs["f"].namespace, refs["crm__g"].name) == ("custom", "crm", "g")
    settings = response_settings(req)
    assert [t["type"] for t in settings.tools] == ["custom", "namespace", "function"]


def test_dropped_tools_are_listed():
    from gateway.responses.translate import dropped_tools

    req = decode(
        tools=[FN, {"type": "web_search"}, {"type": "file_search", "vector_store_ids": []}], tool_choice="auto"
    )
    assert dropped_tools(req) == ["web_search", "file_search"]
    only = decode(tools=[{"type": "web_search"}], tool_choice="auto")
    assert to_generate_request(only, "r").tools is None and to_generate_request(only, "r").tool_choice == "none"


def test_custom_and_namespaced_calls_in_the_history():
    history = [
        {"role": "user", "content": "q"},
        {"type": "custom_tool_call", "call_id": "c1", "name": "apply_patch", "input": "*** Begin"},
        {"type": "custom_tool_call_output", "call_id": "c1", "output": [{"type": "input_text", "text": "ok"}]},
        {"type": "function_call", "call_id": "c2", "name": "f", "namespace": "crm", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_image", "detail": "high"}]},
    ]
    result = messages(input=history, tools=[CUSTOM, NAMESPACE])
    assert result[1].tool_calls == [ToolCall(id="c1", name="apply_patch", arguments='{"input": "*** Begin"}')]
    assert result[2] == ChatMessage(role="tool", content="ok", tool_call_id="c1", name="apply_patch")
    assert result[3].tool_calls[0].name == "f"
    assert result[4].content == "[image not shown: this model reads text only]"


def test_additional_tools_items_add_tools():
    item = {"type": "additional_tools", "role": "developer", "id": "at_1", "tools": [NAMESPACE, {"type": "web_search"}]}
    req = decode(input=[item, {"role": "user", "content": "q"}])
    gen = to_generate_request(req, "r")
    assert [t.name for t in gen.tools] == ["f", "g"] and [m.role for m in gen.messages] == ["user"]
    refused("input[0].role", input=[{**item, "role": "user"}])


def test_tool_choice_forms():
    gen = to_generate_request(
        decode(tools=[CUSTOM, NAMESPACE], tool_choice={"type": "custom", "name": "apply_patch"}), "r"
    )
    assert (gen.tool_choice, gen.tool_choice_name) == ("function", "apply_patch")
    gen = to_generate_request(decode(tools=[CUSTOM, NAMESPACE], tool_choice={"type": "function", "name": "g"}), "r")
    assert (gen.tool_choice, gen.tool_choice_name) == ("function", "g")
    choice = {
        "type": "allowed_tools",
        "mode": "required",
        "tools": [{"type": "function", "name": "f"}, {"type": "web_search"}],
    }
    gen = to_generate_request(decode(tools=[CUSTOM, NAMESPACE], tool_choice=choice), "r")
    assert [t.name for t in gen.tools] == ["f"] and gen.tool_choice == "required"
    refused("tool_choice.type", tools=[CUSTOM], tool_choice={"type": "function", "name": "apply_patch"})
    refused("tool_choice.type", tools=[FN], tool_choice={"type": "web_search_preview"})
    refused(
        "tool_choice.tools[0].name", tools=[FN], tool_choice={**choice, "tools": [{"type": "function", "name": "x"}]}
    )


@pytest.mark.parametrize(
    "fields",
    [
        {"client_metadata": {"x-codex-turn-metadata": "{}"}},
        {"include": ["reasoning.encrypted_content", "web_search_call.action.sources"]},
        {"reasoning": {"summary": "auto", "effort": "xhigh", "context": "all_turns", "mode": "standard"}},
        {"reasoning": {"generate_summary": "concise"}},
        {"text": {"verbosity": "low"}},
        {"service_tier": "priority", "prompt_cache_retention": "24h", "prompt_cache_options": {"mode": "implicit"}},
        {"context_management": [{"type": "compaction", "compact_threshold": 1000}]},
        {
            "input": [
                {
                    "role": "user",
                    "content": [{"type": "input_text", "text": "x", "cache_control": {"type": "ephemeral"}}],
                }
            ]
        },
    ],
)
def test_todays_fields_are_accepted(fields):
    decode(**fields)


def test_logprobs_follow_include():
    sampling = to_generate_request(decode(include=["message.output_text.logprobs"], top_logprobs=3), "r").sampling
    assert (sampling.logprobs, sampling.top_logprobs) == (True, 3)
    sampling = to_generate_request(decode(top_logprobs=3), "r").sampling
    assert (sampling.logprobs, sampling.top_logprobs) == (False, 0)
    assert response_settings(decode(top_logprobs=3)).top_logprobs == 3


def test_offered_tools_are_bounded():
    spaces = [
        {
            "type": "namespace",
            "name": f"n{k}",
            "description": "d",
            "tools": [{**FN, "name": f"f{k}_{i}"} for i in range(128)],
        }
        for k in range(5)
    ]
    refused("tools", tools=spaces)


OFFICIAL_REFUSED_ITEMS = [
    {"type": "file_search_call", "id": "fs_1", "queries": ["q"], "status": "completed"},
    {"type": "computer_call", "id": "cu_1", "call_id": "c1", "action": {"type": "screenshot"}, "status": "completed"},
    {"type": "computer_call_output", "call_id": "c1", "output": {"type": "computer_screenshot", "image_url": "x"}},
    {"type": "web_search_call", "id": "ws_1", "status": "completed", "action": {"type": "search", "query": "q"}},
    {"type": "tool_search_call", "arguments": {}, "call_id": "c1"},
    {"type": "tool_search_output", "tools": [], "call_id": "c1"},
    {"type": "configuration_update", "reasoning": {"effort": "low"}},
    {"type": "compaction", "encrypted_content": "abc"},
    {"type": "image_generation_call", "id": "ig_1", "result": None, "status": "completed"},
    {"type": "code_interpreter_call", "id": "ci_1", "code": "x", "container_id": "c", "status": "completed"},
    {"type": "local_shell_call", "id": "l1", "call_id": "c1", "action": {"type": "exec", "command": ["ls"], "env": {}}},
    {"type": "local_shell_call_output", "id": "c1", "output": "ok"},
    {"type": "shell_call", "call_id": "c1", "action": {"commands": ["ls"]}},
    {"type": "shell_call_output", "call_id": "c1", "output": []},
    {"type": "apply_patch_call", "call_id": "c1", "operation": {"type": "delete_file", "path": "a"}},
    {"type": "apply_patch_call_output", "call_id": "c1", "status": "completed"},
    {"type": "mcp_list_tools", "id": "ml_1", "server_label": "s", "tools": []},
    {"type": "mcp_approval_request", "id": "mr_1", "server_label": "s", "name": "t", "arguments": "{}"},
    {"type": "mcp_approval_response", "approval_request_id": "mr_1", "approve": True},
    {"type": "mcp_call", "id": "mc_1", "server_label": "s", "name": "t", "arguments": "{}"},
    {"type": "compaction_trigger"},
    {"type": "item_reference", "id": "msg_1"},
    {"type": "program", "id": "p1", "call_id": "c1", "code": "x", "fingerprint": "f"},
    {"type": "program_output", "id": "p1", "call_id": "c1", "result": "x", "status": "completed"},
]


@pytest.mark.parametrize("item", OFFICIAL_REFUSED_ITEMS, ids=lambda item: item["type"])
def test_official_items_mlxd_cannot_take_are_refused_by_type_with_a_reason(item):
    """Each official input item type that mlxd refuses is named by type
    (``input[1].type``), with a reason, even when its fields are unknown to
    the decoder (docs/api/responses.md, "Input items")."""
    err = refused("input[1].type", input=[{"role": "user", "content": "hi"}, item])
    assert f"input item type '{item['type']}' is not supported: " in err.message


def test_every_official_input_item_type_is_taken_or_refused_and_documented():
    """Each item type of the installed openai SDK's ``ResponseInputItemParam``
    is either decoded or refused with a reason, and has a row in
    docs/api/responses.md, so an SDK upgrade that adds one fails here."""
    import typing
    from pathlib import Path

    from openai.types.responses import response_input_item_param as sdk

    from gateway.responses import input_checks as schema

    kinds = set()
    for member in typing.get_args(sdk.ResponseInputItemParam):
        hint = typing.get_type_hints(member, include_extras=True).get("type")
        kinds |= {arg for arg in _literals(hint) if isinstance(arg, str)}
    assert "item_reference" in kinds and "function_call" in kinds
    unknown = kinds - set(schema._ITEM_FIELDS) - set(schema._REFUSED_ITEMS)
    assert not unknown, f"official input item types neither decoded nor refused with a reason: {sorted(unknown)}"
    docs = (Path(__file__).resolve().parents[2] / "docs" / "api" / "responses.md").read_text()
    section = docs.split("### Input items", 1)[1].split("\n### ", 1)[0]
    undocumented = {
        k
        for k in kinds - {"message"}
        if f"`{k}`" not in section and f"`{k.rsplit('_', 1)[0]}` / `_output`" not in section
    }
    assert not undocumented, f"input item types without a row in docs/api/responses.md: {sorted(undocumented)}"


def _literals(hint) -> list:
    """The values of the ``Literal`` inside ``hint`` (through Required / Optional)."""
    import typing

    if typing.get_origin(hint) is typing.Literal:
        return list(typing.get_args(hint))
    return [value for arg in typing.get_args(hint) for value in _literals(arg)]
