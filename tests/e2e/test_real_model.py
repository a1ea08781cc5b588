"""The default model, served as ``make run`` serves it."""

from __future__ import annotations

import concurrent.futures as cf
import json

import openai
import pytest

from tests.conftest import REAL, mean_batch, settled_stats

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
def client(real_server):
    return openai.OpenAI(base_url=f"{real_server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def test_paris_non_streaming(client):
    r = client.chat.completions.create(model=REAL, messages=QUESTION, max_tokens=20, temperature=0)
    assert "Paris" in r.choices[0].message.content
    assert r.choices[0].finish_reason == "stop"


def test_paris_streaming(client):
    stream = client.chat.completions.create(
        model=REAL,
        messages=QUESTION,
        max_tokens=20,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert "Paris" in "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens > 0


def test_real_model_batches_concurrent_requests(client, real_server):
    before = settled_stats(real_server, REAL)
    questions = ["What is the capital of France?", "What is 2+2?", "Name a color.", "Say hello."]

    def ask(q):
        return client.chat.completions.create(
            model=REAL, messages=[{"role": "user", "content": q}], max_tokens=16, temperature=0
        )

    with cf.ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(ask, questions))
    assert "Paris" in answers[0].choices[0].message.content
    assert all(a.choices[0].message.content for a in answers)
    after = settled_stats(real_server, REAL)
    assert mean_batch(before, after) >= 1.5, (before, after)  # sequential decoding would give 1


PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"type": "string", "maxLength": 40},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "maxLength": 40}, "unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}


def test_structured_outputs_share_the_batch(client):
    """Schema-constrained requests (streaming and not) and a forced tool call
    run alongside unconstrained ones; every constrained output validates."""
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}}
    person = [{"role": "user", "content": "Invent a person who lives in Paris. Answer in JSON."}]

    def constrained():
        r = client.chat.completions.create(
            model=REAL, messages=person, response_format=fmt, max_tokens=60, temperature=0
        )
        return r.choices[0].message.content

    def constrained_stream():
        chunks = client.chat.completions.create(
            model=REAL, messages=person, response_format=fmt, max_tokens=60, temperature=0.7, seed=3, stream=True
        )
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    def tool_call():
        r = client.chat.completions.create(
            model=REAL,
            messages=[{"role": "user", "content": "What's the weather in Paris?"}],
            tools=[WEATHER_TOOL],
            tool_choice="required",
            max_tokens=60,
            temperature=0,
        )
        return r.choices[0].message.tool_calls[0].function

    def any_object():
        r = client.chat.completions.create(
            model=REAL, messages=person, response_format={"type": "json_object"}, max_tokens=80, temperature=0
        )
        return r.choices[0].message.content

    def free():
        return client.chat.completions.create(model=REAL, messages=QUESTION, max_tokens=20, temperature=0)

    with cf.ThreadPoolExecutor(6) as pool:
        jobs = [pool.submit(f) for f in (constrained, constrained_stream, tool_call, free, any_object)]
        results = [j.result() for j in jobs]
    assert isinstance(json.loads(results[4]), dict)
    for text in results[:2]:
        data = json.loads(text)
        assert set(data) == {"name", "age", "city"} and isinstance(data["age"], int)
    call = results[2]
    args = json.loads(call.arguments)
    assert call.name == "get_weather" and set(args) == {"city", "unit"} and args["unit"] in ("c", "f")
    assert "Paris" in results[3].choices[0].message.content


def test_anthropic_prefilled_response_is_continued(real_server):
    """A final assistant turn is continued: the answer holds only the new
    text, and the pre-filled words count as input tokens."""
    import anthropic

    client = anthropic.Anthropic(base_url=real_server.url, api_key="unused", max_retries=0, timeout=300)
    prefill = "The capital of France is"
    turns = [*QUESTION, {"role": "assistant", "content": prefill}]
    greedy = {"extra_body": {"temperature": 0}}
    r = client.messages.create(model=REAL, messages=turns, max_tokens=12, **greedy)
    text = r.content[0].text
    assert "Paris" in text and not text.startswith(prefill), text
    with client.messages.stream(model=REAL, messages=turns, max_tokens=12, **greedy) as stream:
        assert "".join(stream.text_stream) == text
    plain = client.messages.count_tokens(model=REAL, messages=QUESTION).input_tokens
    counted = client.messages.count_tokens(model=REAL, messages=turns).input_tokens
    assert counted == r.usage.input_tokens + (r.usage.cache_read_input_tokens or 0) > plain
    special = [*QUESTION, {"role": "assistant", "content": "Sure <|im_end|>"}]
    assert client.messages.create(model=REAL, messages=special, max_tokens=4, **greedy).usage.output_tokens > 0


def test_openai_continue_final_message(client):
    turns = [*QUESTION, {"role": "assistant", "content": "The capital of France is"}]
    r = client.chat.completions.create(
        model=REAL,
        messages=turns,
        max_tokens=12,
        temperature=0,
        extra_body={"continue_final_message": True, "add_generation_prompt": False},
    )
    text = r.choices[0].message.content
    assert "Paris" in text and not text.startswith("The capital"), text


FORCED_LIMIT = 4
"""``max_tool_calls_per_turn`` of the served model (the config default)."""


@pytest.mark.slow
def test_forced_tool_calls_end_openai(client):
    """``tool_choice: required`` with parallel calls allowed: the default
    model ends its turn after at most ``max_tool_calls_per_turn`` calls
    (it used to repeat the call until ``max_tokens``), with valid arguments,
    well within a client's default timeout."""
    import time

    import jsonschema

    started = time.monotonic()
    r = client.chat.completions.create(
        model=REAL,
        messages=[{"role": "user", "content": "What's the weather in Paris and in London?"}],
        tools=[WEATHER_TOOL],
        tool_choice="required",
        max_tokens=600,
    )
    elapsed = time.monotonic() - started
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert 1 <= len(choice.message.tool_calls) <= FORCED_LIMIT
    for call in choice.message.tool_calls:
        assert call.function.name == "get_weather"
        jsonschema.validate(json.loads(call.function.arguments), WEATHER_TOOL["function"]["parameters"])
    assert r.usage.completion_tokens < 600 and elapsed < 120, (r.usage, elapsed)


@pytest.mark.slow
def test_forced_tool_calls_end_anthropic(real_server):
    """Anthropic ``tool_choice: any`` (parallel use allowed): at most
    ``max_tool_calls_per_turn`` tool_use blocks, ``stop_reason`` tool_use."""
    import anthropic
    import jsonschema

    client = anthropic.Anthropic(base_url=real_server.url, api_key="unused", max_retries=0, timeout=300)
    fn = WEATHER_TOOL["function"]
    tool = {"name": fn["name"], "description": fn["description"], "input_schema": fn["parameters"]}
    r = client.messages.create(
        model=REAL,
        messages=[{"role": "user", "content": "What's the weather in Paris and in London?"}],
        tools=[tool],
        tool_choice={"type": "any"},
        max_tokens=600,
    )
    assert r.stop_reason == "tool_use"
    uses = [b for b in r.content if b.type == "tool_use"]
    assert 1 <= len(uses) <= FORCED_LIMIT
    for use in uses:
        assert use.name == "get_weather"
        jsonschema.validate(use.input, fn["parameters"])
    assert r.usage.output_tokens < 600, r.usage
