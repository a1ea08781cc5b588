"""Anthropic Messages, OpenAI Responses, tool calling, reasoning and
structured outputs through the real gateway and worker, with the official
SDKs as clients. The tiny model drives the parsers (its tool calls are
forced by grammar); the reasoning cases use a tiny model whose template
opens a ``<think>`` block."""

from __future__ import annotations

import json

import anthropic
import httpx
import jsonschema
import openai
import pytest

from tests.conftest import API_KEY, TINY, start_server

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 24},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
            },
            "required": ["city", "days"],
            "additionalProperties": False,
        },
    },
}
TIME = {
    "type": "function",
    "function": {
        "name": "get_time",
        "description": "Current time in a timezone",
        "parameters": {"type": "object", "properties": {"tz": {"type": "string", "maxLength": 24}}, "required": ["tz"]},
    },
}
ASK = [{"role": "user", "content": "What's the weather in Paris?"}]


def valid_for(tool: dict, args: dict) -> bool:
    """Whether ``args`` validate against ``tool``'s parameter schema (raises
    jsonschema.ValidationError, naming the violation, when not)."""
    jsonschema.validate(args, tool["function"]["parameters"])
    return True


def valid_weather(args: dict) -> bool:
    return valid_for(WEATHER, args)


@pytest.fixture(scope="module")
def oai(tiny_server):
    return openai.OpenAI(base_url=f"{tiny_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


@pytest.fixture(scope="module")
def claude(tiny_server):
    return anthropic.Anthropic(base_url=tiny_server.url, api_key=API_KEY, max_retries=0, timeout=300)


# -- OpenAI chat tool calling -----------------------------------------------------


def test_required_tool_call_validates(oai):
    r = oai.chat.completions.create(
        model=TINY,
        messages=ASK,
        tools=[WEATHER, TIME],
        tool_choice="required",
        max_tokens=120,
        temperature=0,
        parallel_tool_calls=False,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.content in (None, "")
    call = choice.message.tool_calls[0]
    assert call.id.startswith("call_") and call.type == "function"
    tools = {"get_weather": WEATHER, "get_time": TIME}
    assert call.function.name in tools
    args = json.loads(call.function.arguments)
    assert isinstance(args, dict) and valid_for(tools[call.function.name], args)
    assert len(choice.message.tool_calls) == 1  # parallel_tool_calls=False


def test_named_tool_call_streams_incrementally(oai):
    with oai.chat.completions.stream(
        model=TINY,
        messages=ASK,
        tools=[WEATHER, TIME],
        max_tokens=80,
        temperature=0,
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
        parallel_tool_calls=False,
    ) as stream:
        fragments = 0
        for event in stream:
            if event.type == "tool_calls.function.arguments.delta":
                fragments += 1
        final = stream.get_final_completion()
    calls = final.choices[0].message.tool_calls
    assert len(calls) == 1 and calls[0].function.name == "get_weather"
    assert valid_weather(json.loads(calls[0].function.arguments))
    assert fragments >= 2  # arguments arrived in pieces
    assert final.choices[0].finish_reason == "tool_calls"


def test_raw_tool_call_frames(tiny_server):
    body = {
        "model": TINY,
        "messages": ASK,
        "tools": [WEATHER],
        "tool_choice": "required",
        "max_tokens": 80,
        "temperature": 0,
        "stream": True,
    }
    with httpx.stream(
        "POST", f"{tiny_server.url}/v1/chat/completions", json=body, headers=tiny_server.headers, timeout=60
    ) as r:
        frames = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    deltas = [f["choices"][0]["delta"] for f in frames if f["choices"]]
    calls = [d["tool_calls"][0] for d in deltas if d.get("tool_calls")]
    assert calls[0]["id"].startswith("call_") and calls[0]["type"] == "function"
    assert calls[0]["function"]["name"] == "get_weather"
    assert all(set(c) == {"index", "function"} and set(c["function"]) == {"arguments"} for c in calls[1:])
    assert all("<tool_call>" not in (d.get("content") or "") for d in deltas)
    assert frames[-1]["choices"][0]["finish_reason"] == "tool_calls"


def test_tool_results_round_trip(oai):
    first = oai.chat.completions.create(
        model=TINY, messages=ASK, tools=[WEATHER], tool_choice="required", max_tokens=80, temperature=0
    )
    call = first.choices[0].message.tool_calls[0]
    follow = ASK + [
        {"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
        {"role": "tool", "tool_call_id": call.id, "content": '{"temp_c": 18}'},
    ]
    r = oai.chat.completions.create(model=TINY, messages=follow, tools=[WEATHER], max_tokens=5)
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens > first.usage.prompt_tokens


def test_tool_choice_none_offers_no_tools(oai):
    with_tools = oai.chat.completions.create(
        model=TINY, messages=ASK, tools=[WEATHER], tool_choice="none", max_tokens=2
    )
    without = oai.chat.completions.create(model=TINY, messages=ASK, max_tokens=2)
    assert with_tools.usage.prompt_tokens == without.usage.prompt_tokens


# -- structured outputs -------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 20},
        "age": {"type": "integer", "minimum": 0, "maximum": 120},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_json_schema_on_tiny_model(oai):
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}
    r = oai.chat.completions.create(model=TINY, messages=ASK, response_format=fmt, max_tokens=60, temperature=0)
    data = json.loads(r.choices[0].message.content)
    assert set(data) == {"name", "age"} and 0 <= data["age"] <= 120


def test_invalid_schema_is_400(oai):
    bad = {
        "type": "json_schema",
        "json_schema": {"name": "x", "schema": {"type": "object", "properties": {"a": {"type": "nonsense"}}}},
    }
    with pytest.raises(openai.BadRequestError):
        oai.chat.completions.create(model=TINY, messages=ASK, response_format=bad, max_tokens=5)
    again = oai.chat.completions.create(model=TINY, messages=ASK, max_tokens=2)
    assert again.usage.completion_tokens == 2


# -- Anthropic Messages -----------------------------------------------------------------

ANTHROPIC_TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": WEATHER["function"]["parameters"],
}


def test_anthropic_text(claude):
    m = claude.messages.create(
        model=TINY, max_tokens=8, system="Be brief.", messages=[{"role": "user", "content": "Hi"}]
    )
    assert m.type == "message" and m.role == "assistant"
    assert m.content[0].type == "text" and m.content[0].text
    assert m.stop_reason == "max_tokens" and m.usage.output_tokens == 8


def test_anthropic_stream_and_tool_use(claude):
    with claude.messages.stream(
        model=TINY,
        max_tokens=80,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[ANTHROPIC_TOOL],
        tool_choice={"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    ) as stream:
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    block = [b for b in final.content if b.type == "tool_use"][0]
    assert block.name == "get_weather" and valid_weather(block.input)
    follow = claude.messages.create(
        model=TINY,
        max_tokens=4,
        tools=[ANTHROPIC_TOOL],
        messages=[
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [b.model_dump() for b in final.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "18C"}]},
        ],
    )
    assert follow.usage.input_tokens > 0


def test_anthropic_count_tokens_and_errors(claude):
    counted = claude.messages.count_tokens(model=TINY, messages=[{"role": "user", "content": "Hello there"}])
    created = claude.messages.create(model=TINY, max_tokens=1, messages=[{"role": "user", "content": "Hello there"}])
    assert counted.input_tokens == created.usage.input_tokens + created.usage.cache_read_input_tokens
    with pytest.raises(anthropic.NotFoundError):
        claude.messages.create(model="nope", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(
            model=TINY, max_tokens=1, messages=[{"role": "user", "content": "x"}], extra_body={"temperature": 3}
        )
    bad = anthropic.Anthropic(base_url=claude.base_url, api_key="wrong", max_retries=0, timeout=300)
    with pytest.raises(anthropic.AuthenticationError):
        bad.messages.create(model=TINY, max_tokens=1, messages=[{"role": "user", "content": "x"}])


# -- OpenAI Responses ---------------------------------------------------------------------


def test_responses_text_and_stream(oai):
    r = oai.responses.create(model=TINY, input="Say hi", instructions="Be brief.", max_output_tokens=6)
    assert r.status == "incomplete" and r.output_text
    events = list(oai.responses.create(model=TINY, input="Say hi", max_output_tokens=6, temperature=0, stream=True))
    names = [e.type for e in events]
    assert names[:2] == ["response.created", "response.in_progress"]
    assert names[-1] == "response.incomplete"  # the token limit ended it
    streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    again = oai.responses.create(model=TINY, input="Say hi", max_output_tokens=6, temperature=0)
    assert streamed == again.output_text
    assert events[-1].response.output_text == again.output_text


def test_responses_function_call_round_trip(oai):
    tool = {"type": "function", **WEATHER["function"]}
    r = oai.responses.create(
        model=TINY, input="Weather in Paris?", tools=[tool], tool_choice="required", max_output_tokens=80
    )
    call = [item for item in r.output if item.type == "function_call"][0]
    assert valid_weather(json.loads(call.arguments))
    follow = oai.responses.create(
        model=TINY,
        tools=[tool],
        max_output_tokens=4,
        input=[
            {"role": "user", "content": "Weather in Paris?"},
            {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
            {"type": "function_call_output", "call_id": call.call_id, "output": "18C"},
        ],
    )
    assert follow.usage.input_tokens > r.usage.input_tokens
    with pytest.raises(openai.BadRequestError):
        oai.responses.create(model=TINY, input="x", previous_response_id="resp_123")


def test_responses_json_schema(oai):
    fmt = {"format": {"type": "json_schema", "name": "person", "schema": SCHEMA, "strict": True}}
    r = oai.responses.create(model=TINY, input="A person", max_output_tokens=60, text=fmt, temperature=0)
    data = json.loads(r.output_text)
    assert set(data) == {"name", "age"}
    with oai.responses.stream(model=TINY, input="A person", max_output_tokens=60, text=fmt, temperature=0) as stream:
        final = stream.get_final_response()  # the grammar ends the JSON, so the response completes
    assert final.status == "completed" and final.output_text == r.output_text


# -- reasoning --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def thinking_server(tiny_model_dir, tmp_path_factory):
    from tests.tiny_model import build_thinking_model

    tmp = tmp_path_factory.mktemp("thinking")
    model = build_thinking_model(tmp / "model", tiny_model_dir)
    srv = start_server(tmp, [{"name": TINY, "source": str(model)}])
    yield srv
    srv.stop()


def test_reasoning_is_split_out(thinking_server):
    client = openai.OpenAI(base_url=f"{thinking_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
    r = client.chat.completions.create(model=TINY, messages=ASK, max_tokens=12, temperature=0)
    message = r.choices[0].message
    assert message.content in (None, "")
    assert message.model_extra["reasoning_content"]
    chunks = list(client.chat.completions.create(model=TINY, messages=ASK, max_tokens=12, temperature=0, stream=True))
    streamed = "".join(c.choices[0].delta.model_extra.get("reasoning_content") or "" for c in chunks if c.choices)
    assert streamed == message.model_extra["reasoning_content"]
    assert all(not c.choices[0].delta.content for c in chunks if c.choices)

    claude = anthropic.Anthropic(base_url=thinking_server.url, api_key=API_KEY, max_retries=0, timeout=300)
    with claude.messages.stream(model=TINY, max_tokens=12, messages=ASK) as stream:
        final = stream.get_final_message()
    assert final.content[0].type == "thinking" and final.content[0].thinking

    resp = client.responses.create(model=TINY, input="Weather?", max_output_tokens=12)
    assert resp.output[0].type == "reasoning"


def test_thinking_budget_closes_the_reasoning_block(thinking_server):
    """The template opens a reasoning block the tiny model never closes by
    itself; with a budget the worker closes it and an answer follows."""
    claude = anthropic.Anthropic(base_url=thinking_server.url, api_key=API_KEY, max_retries=0, timeout=300)
    greedy = {"extra_body": {"temperature": 0}}
    unbounded = claude.messages.create(model=TINY, max_tokens=1100, messages=ASK, **greedy)
    assert [b.type for b in unbounded.content] == ["thinking"]
    m = claude.messages.create(
        model=TINY,
        max_tokens=1100,
        messages=ASK,
        thinking={"type": "enabled", "budget_tokens": 1024},
        **greedy,
    )
    assert [b.type for b in m.content] == ["thinking", "text"]
    assert m.content[1].text and m.usage.output_tokens == 1100
    # the same reasoning as without the cap, cut where the budget ended
    assert unbounded.content[0].thinking.startswith(m.content[0].thinking)
    assert len(m.content[0].thinking) < len(unbounded.content[0].thinking)
