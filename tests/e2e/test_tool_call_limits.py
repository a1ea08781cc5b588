"""Forced tool calls end: the grammar bounds the number of calls of a
forced turn, so a model that would repeat calls until its token limit ends
its turn with ``tool_calls`` / ``tool_use`` instead.

The tiny random model is pushed to keep calling (end-of-sequence biased
away with ``logit_bias``): only the grammar's bound can end the turn, so
these tests fail if the bound is missing. Its arguments are bounded
(an enum), so one call is a few dozen tokens."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from tests.conftest import API_KEY, TINY

UNIT = {
    "type": "function",
    "function": {
        "name": "set_unit",
        "description": "Choose the temperature unit",
        "parameters": {
            "type": "object",
            "properties": {"unit": {"type": "string", "enum": ["c", "f"]}},
            "required": ["unit"],
            "additionalProperties": False,
        },
    },
}
OTHER = {
    "type": "function",
    "function": {
        "name": "set_mode",
        "description": "Choose a mode",
        "parameters": {
            "type": "object",
            "properties": {"mode": {"type": "string", "enum": ["fast", "slow"]}},
            "required": ["mode"],
            "additionalProperties": False,
        },
    },
}
ASK = [{"role": "user", "content": "Set the unit."}]
NO_END = {"0": -100, "2": -100}
"""``logit_bias`` against the tiny model's end-of-sequence tokens."""

PER_TURN = 4
"""The served model's ``max_tool_calls_per_turn`` (the config default)."""


@pytest.fixture(scope="module")
def oai(tiny_server):
    return openai.OpenAI(base_url=f"{tiny_server.url}/v1", api_key=API_KEY, max_retries=0, timeout=300)


def _calls(message) -> list[tuple[str, dict]]:
    return [(c.function.name, json.loads(c.function.arguments)) for c in message.tool_calls or []]


def test_required_stops_after_max_tool_calls_per_turn(oai):
    r = oai.chat.completions.create(
        model=TINY, messages=ASK, tools=[UNIT, OTHER], tool_choice="required", max_tokens=600, logit_bias=NO_END
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = _calls(choice.message)
    # at most the configured number; a repeat of an earlier call ends the turn sooner
    assert 1 <= len(calls) <= PER_TURN, calls
    assert len({json.dumps(c, sort_keys=True) for c in calls}) == len(calls), calls
    assert all(name in ("set_unit", "set_mode") for name, _ in calls)
    assert r.usage.completion_tokens < 600


@pytest.mark.parametrize("stream", [False, True])
def test_named_choice_is_exactly_one_call(oai, stream):
    kwargs = dict(
        model=TINY,
        messages=ASK,
        tools=[UNIT, OTHER],
        tool_choice={"type": "function", "function": {"name": "set_unit"}},
        max_tokens=600,
        logit_bias=NO_END,
    )
    if stream:
        with oai.chat.completions.stream(**kwargs) as s:
            final = s.get_final_completion()
    else:
        final = oai.chat.completions.create(**kwargs)
    choice = final.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = _calls(choice.message)
    assert len(calls) == 1 and calls[0][0] == "set_unit" and calls[0][1]["unit"] in ("c", "f")


def test_parallel_off_is_one_call(oai):
    r = oai.chat.completions.create(
        model=TINY,
        messages=ASK,
        tools=[UNIT, OTHER],
        tool_choice="required",
        parallel_tool_calls=False,
        max_tokens=600,
        logit_bias=NO_END,
    )
    assert r.choices[0].finish_reason == "tool_calls" and len(_calls(r.choices[0].message)) == 1


@pytest.mark.parametrize("limit", [1, 2])
def test_responses_max_tool_calls(oai, limit):
    """Responses ``max_tool_calls`` caps a forced turn; it ends
    ``completed`` (not ``incomplete``) and echoes the limit. (That the
    worker enforces the request's limit over ``max_tool_calls_per_turn``
    is shown without a model in tests/test_parsers_grammar.py.)"""
    tools = [{"type": "function", **t["function"]} for t in (UNIT, OTHER)]
    r = oai.responses.create(
        model=TINY,
        input="Set the unit.",
        tools=tools,
        tool_choice="required",
        max_tool_calls=limit,
        max_output_tokens=600,
    )
    calls = [item for item in r.output if item.type == "function_call"]
    assert r.status == "completed" and r.max_tool_calls == limit
    assert 1 <= len(calls) <= limit


def test_anthropic_any_and_tool(tiny_server):
    client = anthropic.Anthropic(base_url=tiny_server.url, api_key=API_KEY, max_retries=0, timeout=300)
    tools = [{"name": t["function"]["name"], "input_schema": t["function"]["parameters"]} for t in (UNIT, OTHER)]
    common = dict(model=TINY, max_tokens=600, messages=ASK, tools=tools, extra_body={"temperature": 0})
    r = client.messages.create(tool_choice={"type": "any"}, **common)
    uses = [b for b in r.content if b.type == "tool_use"]
    assert r.stop_reason == "tool_use" and 1 <= len(uses) <= PER_TURN
    r = client.messages.create(tool_choice={"type": "tool", "name": "set_mode"}, **common)
    uses = [b for b in r.content if b.type == "tool_use"]
    assert r.stop_reason == "tool_use" and [u.name for u in uses] == ["set_mode"]
