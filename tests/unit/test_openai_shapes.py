"""Every OpenAI answer (chat, completions, Responses; whole and streamed),
for agent-like scripts (reasoning, text, several tool calls, logprobs,
legacy functions, custom tools), is of its official type
(:mod:`tests.shapes`: the pinned ``openai`` SDK's models in strict mode plus
the fields the official schema requires though they may be null), with the
values mlxd promises where the schema leaves a choice. Answers come from
the route handlers over a scripted engine (see ``tests/unit/support.py``).
"""

from __future__ import annotations

import json

import pytest
from starlette.routing import Route

from gateway.openai.routes import chat_completions, completions
from gateway.responses.routes import create_response
from shared.protocol import TokenLogprob, TopLogprob
from tests.shapes.routes import Exchange, check_exchange
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

# --- checks ----------------------------------------------------------------------------------


def check(method_path: str, resp, beta: bool = False) -> None:
    """``resp`` (an httpx response of this gateway) is of its route's official
    type, body or every stream event (:mod:`tests.shapes.routes`; the
    autouse check does the same after the test, this names the response)."""
    method, path = method_path.split(" ")
    content_type = resp.headers.get("content-type", "")
    check_exchange(Exchange(method, path, beta, resp.status_code, content_type, resp.text))


def check_echo(response: dict) -> None:
    """What a ``response`` object echoes where the schema allows null but
    mlxd always says: the service tier, truncation and verbosity as
    strings, the reasoning settings, and usage details."""
    assert isinstance(response["service_tier"], str) and isinstance(response["truncation"], str)
    assert isinstance(response["text"]["verbosity"], str)
    assert set(response["reasoning"]) >= {"effort", "summary"}
    if response["usage"] is not None:
        assert "cached_tokens" in response["usage"]["input_tokens_details"]
        assert "reasoning_tokens" in response["usage"]["output_tokens_details"]


def sse_data(body: bytes) -> list[dict]:
    """The JSON of each ``data:`` frame of an OpenAI stream, ``[DONE]`` excluded."""
    frames = [line[6:] for line in body.decode().split("\n") if line.startswith("data: ")]
    assert frames[-1] == "[DONE]"
    return [json.loads(frame) for frame in frames[:-1]]


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
        resp = await client.post("/v1/chat/completions", json=body)
        options = {"stream": True, "stream_options": {"include_usage": True}}
        streamed = await client.post("/v1/chat/completions", json={**body, **options})
    check("POST /v1/chat/completions", resp)
    check("POST /v1/chat/completions", streamed)
    whole = resp.json()
    message = whole["choices"][0]["message"]
    assert message["annotations"] == [] and message["refusal"] is None
    assert isinstance(whole["service_tier"], str) and isinstance(whole["system_fingerprint"], str)
    assert whole["usage"]["prompt_tokens_details"]["cached_tokens"] == 2
    assert [c["function"]["name"] for c in message["tool_calls"]] == [
        "weather",
        "apply_patch",
        "close_agent",
    ]
    chunks = sse_data(streamed.content)
    assert chunks[-1]["usage"]["completion_tokens_details"]["reasoning_tokens"] == 0


async def test_completions_whole_and_streamed():
    body = {"model": "m", "prompt": "x"}
    async with GATEWAY.http(ScriptedBackend(TEXT)) as client:
        whole = await client.post("/v1/completions", json=body)
        streamed = await client.post("/v1/completions", json={**body, "stream": True})
    check("POST /v1/completions", whole)
    check("POST /v1/completions", streamed)
    assert whole.json()["choices"][0]["text"] == "Hello"
    assert [c["choices"][0]["finish_reason"] for c in sse_data(streamed.content)] == [None, "length"]


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
    check("POST /v1/responses", whole)
    check("POST /v1/responses", streamed)
    check_echo(whole.json())
    events = sse_events(streamed.content)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    final = events[-1][1]["response"]
    check_echo(final)
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
        resp = await client.post("/v1/responses", json=body)
        streamed = await client.post("/v1/responses", json={**body, "stream": True})
    check("POST /v1/responses", resp)
    check("POST /v1/responses", streamed)
    whole = resp.json()
    part = whole["output"][1]["content"][0]
    assert [(t["token"], t["logprob"]) for t in part["logprobs"]] == [("Hi", -0.5), ("!", -0.25)]
    assert part["logprobs"][0]["top_logprobs"] == [{"token": "Hi", "logprob": -0.5, "bytes": [72, 105]}]
    events = sse_events(streamed.content)
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
        resp = await client.post("/v1/chat/completions", json=body)
        streamed = await client.post("/v1/chat/completions", json={**body, "stream": True})
    check("POST /v1/chat/completions", resp)
    check("POST /v1/chat/completions", streamed)
    whole = resp.json()
    choice = whole["choices"][0]
    assert choice["finish_reason"] == "function_call" and "tool_calls" not in choice["message"]
    assert choice["message"]["function_call"] == {"name": "weather", "arguments": '{"city": "Paris"}'}
    chunks = sse_data(streamed.content)
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
        resp = await client.post("/v1/chat/completions", json=body)
    check("POST /v1/chat/completions", resp)
    calls = resp.json()["choices"][0]["message"]["tool_calls"]
    assert calls[1] == {"id": "call_b", "type": "custom", "custom": {"name": "apply_patch", "input": "*** Begin Patch"}}
    assert calls[0]["type"] == "function" and calls[0]["function"]["name"] == "weather"
