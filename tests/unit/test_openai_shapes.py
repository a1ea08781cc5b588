"""Every OpenAI answer (chat, completions, Responses; whole and streamed)
validates against the official ``openai`` SDK types and carries every field
the official schemas require, with the right null/empty values.

The SDK's pydantic models mark many required-but-nullable fields as
optional, so besides ``model_validate`` each object is checked against an
explicit list of required fields (:data:`CHAT_REQUIRED` ...), and the
checker itself is shown to fail when one is missing. Answers come from the
route handlers over a scripted engine (see ``tests/unit/support.py``).
"""

from __future__ import annotations

import json

import pydantic
import pytest
from openai.types import Completion
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from openai.types.responses import Response, ResponseStreamEvent
from starlette.routing import Route

from gateway.openai.routes import chat_completions, completions
from gateway.responses.routes import create_response
from shared.protocol import TokenLogprob, TopLogprob
from tests.unit.support import Gateway, ScriptedBackend, call, out, sse_events

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend():
    return "asyncio"


GATEWAY = Gateway(
    Route("/v1/chat/completions", chat_completions, methods=["POST"]),
    Route("/v1/completions", completions, methods=["POST"]),
    Route("/v1/responses", create_response, methods=["POST"]),
)

# reasoning, text, then two tool calls (the first in two pieces)
AGENT = [
    out(reasoning="Let me think.", completion=1),
    out("Checking.", completion=2),
    out(calls=[call(0, '{"city": ', id="call_a", name="weather")], completion=3),
    out(calls=[call(0, '"Paris"}')], completion=4),
    out(calls=[call(1, '{"input": "*** Begin Patch"}', id="call_b", name="apply_patch")], completion=5),
    out(calls=[call(2, "{}", id="call_c", name="close_agent")], completion=6),
    out(finish="tool_calls", completion=7, cached=2),
]
TEXT = [out("Hel", completion=1), out("lo", "length", completion=2)]

# --- required fields (official API reference; null allowed where noted) ------------------

USAGE_REQUIRED = {"prompt_tokens", "completion_tokens", "total_tokens", "prompt_tokens_details"}
USAGE_REQUIRED |= {"completion_tokens_details"}
CHAT_REQUIRED = {"id", "object", "created", "model", "choices", "usage", "service_tier", "system_fingerprint"}
CHAT_CHOICE_REQUIRED = {"index", "message", "logprobs", "finish_reason"}
MESSAGE_REQUIRED = {"role", "content", "refusal", "annotations"}
CHUNK_REQUIRED = {"id", "object", "created", "model", "choices", "service_tier", "system_fingerprint"}
CHUNK_CHOICE_REQUIRED = {"index", "delta", "finish_reason"}
COMPLETION_REQUIRED = {"id", "object", "created", "model", "choices", "usage", "system_fingerprint"}
COMPLETION_CHOICE_REQUIRED = {"text", "index", "logprobs", "finish_reason"}
RESPONSE_REQUIRED = {
    "id",
    "object",
    "created_at",
    "status",
    "error",
    "incomplete_details",
    "instructions",
    "model",
    "output",
    "usage",
    "parallel_tool_calls",
    "tool_choice",
    "tools",
    "metadata",
    "temperature",
    "top_p",
    "top_logprobs",
    "presence_penalty",
    "frequency_penalty",
    "max_output_tokens",
    "max_tool_calls",
    "previous_response_id",
    "reasoning",
    "service_tier",
    "store",
    "background",
    "text",
    "truncation",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "completed_at",
}
RESPONSE_STRINGS = ("service_tier", "truncation")
"""Response fields that must be strings, never null."""
RESPONSE_USAGE_REQUIRED = {
    "input_tokens",
    "input_tokens_details",
    "output_tokens",
    "output_tokens_details",
    "total_tokens",
}


def missing(obj: dict, required: set[str]) -> set[str]:
    """The ``required`` keys ``obj`` lacks."""
    return required - set(obj)


def check_chat(body: dict) -> None:
    """A ``chat.completion`` validates and has every required field."""
    ChatCompletion.model_validate(body)
    assert not missing(body, CHAT_REQUIRED)
    assert isinstance(body["service_tier"], str) and isinstance(body["system_fingerprint"], str)
    assert not missing(body["usage"], USAGE_REQUIRED)
    for choice in body["choices"]:
        assert not missing(choice, CHAT_CHOICE_REQUIRED)
        assert not missing(choice["message"], MESSAGE_REQUIRED)
        assert choice["message"]["annotations"] == [] and choice["message"]["refusal"] is None


def check_chunks(chunks: list[dict]) -> None:
    """Every ``chat.completion.chunk`` validates and has every required field."""
    for chunk in chunks:
        ChatCompletionChunk.model_validate(chunk)
        assert not missing(chunk, CHUNK_REQUIRED)
        for choice in chunk["choices"]:
            assert not missing(choice, CHUNK_CHOICE_REQUIRED)
        if chunk.get("usage"):
            assert not missing(chunk["usage"], USAGE_REQUIRED)


def check_completion(body: dict) -> None:
    """A ``text_completion`` (whole or a chunk) validates and has every
    required field (a chunk may lack usage). The SDK's type, shared by
    whole answers and chunks, has no null ``finish_reason``, which every
    chunk but a choice's last carries (as OpenAI's do): it is validated as
    ``stop`` there."""
    choices = [{**c, "finish_reason": c["finish_reason"] or "stop"} for c in body["choices"]]
    Completion.model_validate({**body, "choices": choices})
    required = COMPLETION_REQUIRED if "usage" in body else COMPLETION_REQUIRED - {"usage"}
    assert not missing(body, required)
    for choice in body["choices"]:
        assert not missing(choice, COMPLETION_CHOICE_REQUIRED)


def check_response(body: dict) -> None:
    """A ``response`` object validates and has every required field."""
    Response.model_validate(body)
    assert not missing(body, RESPONSE_REQUIRED)
    for name in RESPONSE_STRINGS:
        assert isinstance(body[name], str), name
    assert isinstance(body["text"]["verbosity"], str)
    assert set(body["reasoning"]) >= {"effort", "summary"}
    if body["usage"] is not None:
        assert not missing(body["usage"], RESPONSE_USAGE_REQUIRED)
        assert "cached_tokens" in body["usage"]["input_tokens_details"]
        assert "reasoning_tokens" in body["usage"]["output_tokens_details"]


_event = pydantic.TypeAdapter(ResponseStreamEvent)


def check_events(events: list[tuple[str, dict]]) -> None:
    """Every Responses stream event validates as its SDK event type (all of
    whose fields are required there), numbered 0, 1, 2, ..."""
    for number, (_, data) in enumerate(events):
        parsed = _event.validate_python(data)
        assert parsed.type == data["type"]
        declared = {field.alias or name for name, field in type(parsed).model_fields.items() if field.is_required()}
        assert not missing(data, declared)
        assert data["sequence_number"] == number
        if "response" in data:
            check_response(data["response"])


def sse_data(body: bytes) -> list[dict]:
    """The JSON of each ``data:`` frame of an OpenAI stream, ``[DONE]`` excluded."""
    frames = [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    return [json.loads(frame) for frame in frames[:-1]]


# --- the checkers fail on a missing field ---------------------------------------------------


def test_checkers_fail_when_a_required_field_is_missing():
    body = {
        "id": "c",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "service_tier": "default",
        "system_fingerprint": "fp",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "x", "refusal": None, "annotations": []},
                "logprobs": None,
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": 1,
            "completion_tokens": 1,
            "total_tokens": 2,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        },
    }
    check_chat(body)
    for name in CHAT_REQUIRED:
        with pytest.raises((AssertionError, pydantic.ValidationError)):
            check_chat({k: v for k, v in body.items() if k != name})
    message = body["choices"][0]["message"]
    for name in MESSAGE_REQUIRED:
        broken = {
            **body,
            "choices": [{**body["choices"][0], "message": {k: v for k, v in message.items() if k != name}}],
        }
        with pytest.raises((AssertionError, pydantic.ValidationError)):
            check_chat(broken)
    with pytest.raises(pydantic.ValidationError):
        _event.validate_python({"type": "response.output_text.delta", "item_id": "i", "delta": "x"})


# --- chat and completions --------------------------------------------------------------------


@pytest.mark.parametrize("logprobs", [False, True])
async def test_chat_whole_and_streamed(logprobs):
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"type": "function", "function": {"name": name, "parameters": {"type": "object"}}}
            for name in ("weather", "apply_patch", "close_agent")
        ],
    }
    if logprobs:
        body["logprobs"] = True
    async with GATEWAY.http(ScriptedBackend(AGENT)) as client:
        whole = (await client.post("/v1/chat/completions", json=body)).json()
        options = {"stream": True, "stream_options": {"include_usage": True}}
        streamed = await client.post("/v1/chat/completions", json={**body, **options})
    check_chat(whole)
    assert [c["function"]["name"] for c in whole["choices"][0]["message"]["tool_calls"]] == [
        "weather",
        "apply_patch",
        "close_agent",
    ]
    chunks = sse_data(streamed.content)
    check_chunks(chunks)
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


async def test_completions_whole_and_streamed():
    body = {"model": "m", "prompt": "x"}
    async with GATEWAY.http(ScriptedBackend(TEXT)) as client:
        whole = (await client.post("/v1/completions", json=body)).json()
        streamed = await client.post("/v1/completions", json={**body, "stream": True})
    check_completion(whole)
    for chunk in sse_data(streamed.content):
        check_completion(chunk)


# --- Responses --------------------------------------------------------------------------------

CODEX_LIKE = {
    "model": "m",
    "input": "hi",
    "tools": [
        {"type": "function", "name": "weather", "parameters": {"type": "object"}, "strict": False},
        {"type": "custom", "name": "apply_patch", "format": {"type": "grammar", "syntax": "lark", "definition": "s"}},
        {
            "type": "namespace",
            "name": "multi_agent",
            "description": "Agents.",
            "tools": [{"type": "function", "name": "close_agent", "parameters": {"type": "object"}}],
        },
        {"type": "web_search", "external_web_access": False},
    ],
    "reasoning": {"summary": "auto", "effort": "high"},
    "include": ["reasoning.encrypted_content"],
    "text": {"verbosity": "low"},
    "service_tier": "flex",
    "prompt_cache_key": "k",
    "safety_identifier": "s",
    "store": False,
    "client_metadata": {"x-codex-turn-metadata": "{}"},
}


@pytest.mark.parametrize(
    "fields,script",
    [({}, AGENT), ({}, TEXT), (CODEX_LIKE, AGENT), ({"reasoning": {"effort": "low"}}, AGENT)],
    ids=["plain-agent", "plain-incomplete", "codex-like", "reasoning-content"],
)
async def test_responses_whole_and_streamed(fields, script):
    body = {"model": "m", "input": "hi", **fields}
    async with GATEWAY.http(ScriptedBackend(script)) as client:
        whole = await client.post("/v1/responses", json=body)
        streamed = await client.post("/v1/responses", json={**body, "stream": True})
    assert whole.status_code == 200, whole.text
    check_response(whole.json())
    events = sse_events(streamed.content)
    check_events(events)
    final = events[-1][1]["response"]
    assert [item["type"] for item in final["output"]] == [item["type"] for item in whole.json()["output"]]


async def test_codex_like_output_items():
    async with GATEWAY.http(ScriptedBackend(AGENT)) as client:
        resp = await client.post("/v1/responses", json=CODEX_LIKE)
    assert resp.headers["x-mlxd-dropped-tools"] == "web_search"
    output = resp.json()["output"]
    assert [item["type"] for item in output] == [
        "reasoning",
        "message",
        "function_call",
        "custom_tool_call",
        "function_call",
    ]
    reasoning = output[0]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "Let me think."}]
    assert reasoning["encrypted_content"].startswith("mlxd1.")
    assert output[3]["name"] == "apply_patch" and output[3]["input"] == "*** Begin Patch"
    assert output[4]["name"] == "close_agent" and output[4]["namespace"] == "multi_agent"
    assert output[2]["namespace"] is None


def lp(token: str, logprob: float) -> TokenLogprob:
    """A sampled token with one alternative (itself)."""
    return TokenLogprob(
        len(token), token, token.encode(), logprob, [TopLogprob(len(token), token, token.encode(), logprob)]
    )


async def test_responses_logprobs():
    """With ``include: message.output_text.logprobs`` the text carries its
    tokens' log-probabilities (reasoning tokens' are left out), streamed and
    not."""
    script = [
        out(reasoning="hmm", completion=1, logprobs=[lp("hmm", -0.1)]),
        out("Hi", completion=2, logprobs=[lp("Hi", -0.5)]),
        out("", completion=3, logprobs=[lp("!", -0.25)]),
        out("!", "stop", completion=3),
    ]
    body = {"model": "m", "input": "hi", "include": ["message.output_text.logprobs"], "top_logprobs": 1}
    async with GATEWAY.http(ScriptedBackend(script)) as client:
        whole = (await client.post("/v1/responses", json=body)).json()
        streamed = await client.post("/v1/responses", json={**body, "stream": True})
    check_response(whole)
    part = whole["output"][1]["content"][0]
    assert [(t["token"], t["logprob"]) for t in part["logprobs"]] == [("Hi", -0.5), ("!", -0.25)]
    assert part["logprobs"][0]["top_logprobs"] == [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}]
    events = sse_events(streamed.content)
    check_events(events)
    deltas = [data for kind, data in events if kind == "response.output_text.delta"]
    assert [[t["token"] for t in d["logprobs"]] for d in deltas] == [["Hi"], ["!"]]
    assert whole["top_logprobs"] == 1


async def test_legacy_functions_answer_in_the_legacy_shape():
    """A ``functions`` request gets its call as the message's
    ``function_call`` (the first call only) and finish ``function_call``,
    streamed as ``function_call`` deltas."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "functions": [{"name": n, "parameters": {"type": "object"}} for n in ("weather", "apply_patch", "close_agent")],
    }
    async with GATEWAY.http(ScriptedBackend(AGENT)) as client:
        whole = (await client.post("/v1/chat/completions", json=body)).json()
        streamed = await client.post("/v1/chat/completions", json={**body, "stream": True})
    check_chat(whole)
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "function_call" and "tool_calls" not in choice["message"]
    assert choice["message"]["function_call"] == {"name": "weather", "arguments": '{"city": "Paris"}'}
    chunks = sse_data(streamed.content)
    check_chunks(chunks)
    calls = [c["choices"][0]["delta"]["function_call"] for c in chunks if "function_call" in c["choices"][0]["delta"]]
    assert calls[0] == {"name": "weather", "arguments": ""}
    assert "".join(c["arguments"] for c in calls) == '{"city": "Paris"}'
    assert chunks[-1]["choices"][0]["finish_reason"] == "function_call"


async def test_chat_custom_tool_calls():
    """Calls of a custom tool come back as ``custom`` tool calls (input from
    the function form's ``{"input": ...}``), beside function calls."""
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}},
            {"type": "custom", "custom": {"name": "apply_patch"}},
        ],
    }
    async with GATEWAY.http(ScriptedBackend(AGENT)) as client:
        whole = (await client.post("/v1/chat/completions", json=body)).json()
    check_chat(whole)
    calls = whole["choices"][0]["message"]["tool_calls"]
    assert calls[1] == {"id": "call_b", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch"}}
    assert calls[0]["type"] == "function" and calls[0]["function"]["name"] == "weather"
