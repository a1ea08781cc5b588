"""The current Anthropic Messages surface through the real ``anthropic`` SDK
against a real gateway and worker: a Claude Code shaped request, every
accepted-with-meaning field showing its meaning, and responses of their
official types (:mod:`tests.shapes`)."""

from __future__ import annotations

import base64
import json
import shutil

import anthropic
import httpx
import pytest
from anthropic.types import Message, RawMessageStreamEvent
from anthropic.types.beta import BetaMessage

from tests.conftest import API_KEY, TINY, start_server
from tests.shapes.official import validate

ASK = [{"role": "user", "content": "What's the weather in Paris?"}]
GREEDY = {"extra_body": {"temperature": 0}}
TOOL = {
    "name": "get_weather",
    "description": "Current weather for a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 24}},
        "required": ["city"],
        "additionalProperties": False,
    },
}
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}


def check_message(data: dict, beta: bool = False) -> None:
    """``data`` is of the official message type (GA or beta; see
    :mod:`tests.shapes`; every response on the wire is also checked after
    the test) and carries the values mlxd promises where the schema leaves
    a choice."""
    validate(BetaMessage if beta else Message, data)
    assert data["usage"]["cache_creation"] == {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0}
    assert data["usage"]["service_tier"] == "standard"
    assert all(b["id"].startswith("toolu_") for b in data["content"] if b["type"] == "tool_use")


def sse(body: bytes) -> list[tuple[str, dict]]:
    events = []
    for frame in body.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in frame.splitlines() if ": " in line)
        if "data" in lines:
            events.append((lines.get("event", ""), json.loads(lines["data"])))
    return events


def check_stream(events: list[tuple[str, dict]]) -> dict:
    """Check a raw event stream: every event of its official type, tool-use
    ids ``toolu_…``, ``message_stop`` last; return the message_delta data."""
    for event, data in events:
        if event != "ping":
            validate(RawMessageStreamEvent, data)
    (delta,) = [d for e, d in events if e == "message_delta"]
    for e, d in events:
        if e == "content_block_start" and d["content_block"]["type"] == "tool_use":
            assert d["content_block"]["id"].startswith("toolu_")
    assert events[-1][0] == "message_stop"
    return delta


@pytest.fixture(scope="module")
def claude(tiny_server):
    return anthropic.Anthropic(base_url=tiny_server.url, api_key=API_KEY, max_retries=0, timeout=300)


def post(server, body: dict, path: str = "/v1/messages") -> httpx.Response:
    headers = {"x-api-key": API_KEY, "anthropic-version": "2023-06-01", "anthropic-beta": "made-up-beta-2099-01-01"}
    return httpx.post(f"{server.url}{path}", json=body, headers=headers, timeout=120)


# --- a Claude Code shaped turn ------------------------------------------------------------------


def claude_code_body(**extra) -> dict:
    """The shape Claude Code 2.1 sends (trimmed): adaptive thinking, effort,
    clear-thinking edits, a JSON-string user id, cached system blocks, a
    mid-conversation system turn, a thinking block with a foreign signature,
    parallel tool uses and a tool result holding an image."""
    return {
        "model": TINY,
        "max_tokens": 48,
        "stream": True,
        "thinking": {"type": "adaptive"},
        "output_config": {"effort": "high"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "metadata": {"user_id": json.dumps({"device_id": "d", "session_id": "s"})},
        "system": [
            {"type": "text", "text": "You are a coding agent."},
            {"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}},
        ],
        "tools": [
            TOOL,
            {"name": "Read", "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
        ],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Read a.txt and dot.png"}]},
            {"role": "system", "content": "Agent types: general."},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Read both.", "signature": "c2lnbmF0dXJl"},
                    {"type": "tool_use", "id": "toolu_01", "name": "Read", "input": {"path": "a.txt"}},
                    {"type": "tool_use", "id": "toolu_02", "name": "Read", "input": {"path": "dot.png"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01", "content": "1\thello"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_02",
                        "content": [IMAGE],
                        "cache_control": {"type": "ephemeral"},
                    },
                ],
            },
        ],
        **extra,
    }


def test_claude_code_turn_streams_and_validates(tiny_server):
    resp = post(tiny_server, claude_code_body())
    assert resp.status_code == 200, resp.text
    delta = check_stream(sse(resp.content))
    assert delta["context_management"] == {"applied_edits": []}  # keep "all": nothing cleared
    assert "x-mlxd-dropped-tools" not in resp.headers
    plain = post(tiny_server, claude_code_body(stream=False))
    assert plain.status_code == 200
    check_message(plain.json(), beta=True)


def test_non_streamed_and_sdk_streamed_messages_validate(claude):
    m = claude.messages.create(model=TINY, max_tokens=6, messages=ASK)
    check_message(m.model_dump(mode="json"))
    with claude.messages.stream(model=TINY, max_tokens=6, messages=ASK) as stream:
        final = stream.get_final_message()
    check_message(final.model_dump(mode="json"))


# --- tools ----------------------------------------------------------------------------------


def test_server_tools_are_dropped_and_named_in_a_header(claude):
    raw = claude.messages.with_raw_response.create(
        model=TINY,
        max_tokens=80,
        messages=ASK,
        tools=[TOOL, {"type": "web_search_20250305", "name": "web_search", "max_uses": 2}],
        tool_choice={"type": "any", "disable_parallel_tool_use": True},
    )
    assert raw.headers["x-mlxd-dropped-tools"] == "web_search_20250305"
    m = raw.parse()
    (call,) = [b for b in m.content if b.type == "tool_use"]
    assert call.name == "get_weather" and call.id.startswith("toolu_")
    check_message(m.model_dump(mode="json"))
    with pytest.raises(anthropic.BadRequestError, match="server tool"):
        claude.messages.create(
            model=TINY,
            max_tokens=8,
            messages=ASK,
            tools=[TOOL, {"type": "web_search_20250305", "name": "web_search"}],
            tool_choice={"type": "tool", "name": "web_search"},
        )


def test_streamed_tool_use_ids_have_the_toolu_prefix(tiny_server):
    body = {
        "model": TINY,
        "max_tokens": 80,
        "stream": True,
        "messages": ASK,
        "tools": [TOOL],
        "tool_choice": {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True},
    }
    resp = post(tiny_server, body)
    assert resp.status_code == 200
    assert check_stream(sse(resp.content))["delta"]["stop_reason"] == "tool_use"


# --- structured output ---------------------------------------------------------------------------

PERSON = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 99},
    },
    "required": ["name", "age"],
    "additionalProperties": False,
}


def test_output_config_format_is_enforced(claude):
    fmt = {"format": {"type": "json_schema", "schema": PERSON}}
    m = claude.messages.create(model=TINY, max_tokens=60, messages=ASK, output_config=fmt, **GREEDY)
    data = json.loads(m.content[0].text)
    assert set(data) == {"name", "age"} and isinstance(data["age"], int)
    with claude.messages.stream(model=TINY, max_tokens=60, messages=ASK, output_config=fmt, **GREEDY) as stream:
        final = stream.get_final_message()
    assert final.content[0].text == m.content[0].text and final.stop_reason == "end_turn"


# --- images, system turns ----------------------------------------------------------------------------


def test_images(claude):
    use = {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}
    turns = [
        *ASK,
        {"role": "assistant", "content": [use]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": [IMAGE]}]},
    ]
    m = claude.messages.create(model=TINY, max_tokens=4, messages=turns, tools=[TOOL])
    assert m.usage.output_tokens == 4
    with_image = claude.messages.count_tokens(model=TINY, messages=turns, tools=[TOOL]).input_tokens
    text = [*turns[:2], {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": ""}]}]
    assert with_image > claude.messages.count_tokens(model=TINY, messages=text, tools=[TOOL]).input_tokens
    with pytest.raises(anthropic.BadRequestError, match="no vision support"):
        claude.messages.create(model=TINY, max_tokens=4, messages=[{"role": "user", "content": [IMAGE]}])


def test_mid_conversation_system_turn_reaches_the_prompt(claude):
    base = [*ASK, {"role": "assistant", "content": "Let me check."}, {"role": "user", "content": "Go on."}]
    with_system = [*base[:2], {"role": "system", "content": "Answer in French."}, base[2]]
    plain = claude.messages.count_tokens(model=TINY, messages=base).input_tokens
    assert claude.messages.count_tokens(model=TINY, messages=with_system).input_tokens > plain
    cleared = [*base[:2], {"role": "system", "content": "Answer in French.", "clear_at": "next_user_message"}, base[2]]
    assert claude.messages.count_tokens(model=TINY, messages=cleared, extra_body={}).input_tokens == plain
    m = claude.messages.create(model=TINY, max_tokens=4, messages=with_system)
    assert m.stop_reason == "max_tokens"


# --- reasoning: adaptive thinking, effort, display, context management -----------------------------------

SWITCHABLE_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n{{ tools | tojson }}<|im_end|>\n{% endif %}"
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{% if message.reasoning_content %}<think>{{ message.reasoning_content }}</think>{% endif %}"
    "{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking %}<think>\n{% endif %}{% endif %}"
)
"""Reasoning off by default, a ``<think>`` block when ``enable_thinking``;
earlier reasoning is rendered (so clearing it shows in the token count)."""


@pytest.fixture(scope="module")
def thinking_server(tiny_model_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("switchable")
    model = tmp / "model"
    shutil.copytree(tiny_model_dir, model)
    config_path = model / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config["chat_template"] = SWITCHABLE_TEMPLATE
    config_path.write_text(json.dumps(config))
    srv = start_server(tmp, [{"name": TINY, "source": str(model)}])
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def thinker(thinking_server):
    return anthropic.Anthropic(base_url=thinking_server.url, api_key=API_KEY, max_retries=0, timeout=300)


def test_adaptive_thinking_turns_reasoning_on(thinker):
    off = thinker.messages.create(model=TINY, max_tokens=16, messages=ASK, **GREEDY)
    assert [b.type for b in off.content] == ["text"]
    on = thinker.messages.create(model=TINY, max_tokens=16, messages=ASK, thinking={"type": "adaptive"}, **GREEDY)
    assert on.content[0].type == "thinking" and on.content[0].thinking
    check_message(on.model_dump(mode="json"))


def test_effort_sets_the_thinking_budget(thinker):
    """The tiny model never closes its reasoning block: the effort's budget
    (low 1/8, high 1/2 of max_tokens) is where the worker closes it."""

    def run(effort: str):
        return thinker.messages.create(
            model=TINY,
            max_tokens=160,
            messages=ASK,
            thinking={"type": "adaptive"},
            output_config={"effort": effort},
            **GREEDY,
        )

    low, high = run("low"), run("high")
    assert [b.type for b in low.content] == ["thinking", "text"] == [b.type for b in high.content]
    assert len(low.content[0].thinking) < len(high.content[0].thinking)
    assert high.content[0].thinking.startswith(low.content[0].thinking)
    unbounded = run("max")
    assert [b.type for b in unbounded.content] == ["thinking"]


def test_thinking_display_omitted(thinker, thinking_server):
    thinking = {"type": "adaptive", "display": "omitted"}
    m = thinker.messages.create(model=TINY, max_tokens=8, messages=ASK, thinking=thinking)
    assert m.content[0].type == "thinking" and m.content[0].thinking == ""
    body = {"model": TINY, "max_tokens": 8, "messages": ASK, "thinking": thinking, "stream": True}
    events = sse(post(thinking_server, body).content)
    assert not [d for e, d in events if e == "content_block_delta" and d["delta"]["type"] == "thinking_delta"]


def test_clear_thinking_edit_is_applied_and_reported(thinker):
    def turn(thought: str) -> dict:
        return {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": thought, "signature": ""}, {"type": "text", "text": "ok"}],
        }

    history = [*ASK, turn("first long thought " * 8), *ASK, turn("second thought"), *ASK]
    edit = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
    m = thinker.beta.messages.create(
        model=TINY,
        max_tokens=4,
        messages=history,
        thinking={"type": "adaptive"},
        context_management={"edits": [edit]},
        betas=["context-management-2025-06-27"],
    )
    check_message(m.model_dump(mode="json"), beta=True)
    (applied,) = m.context_management.applied_edits
    assert applied.type == "clear_thinking_20251015" and applied.cleared_thinking_turns == 1
    assert applied.cleared_input_tokens > 0
    count = thinker.beta.messages.count_tokens(
        model=TINY, messages=history, thinking={"type": "adaptive"}, context_management={"edits": [edit]}
    )
    assert count.input_tokens == m.usage.input_tokens + m.usage.cache_read_input_tokens
    assert count.context_management.original_input_tokens == count.input_tokens + applied.cleared_input_tokens


def test_max_tokens_is_a_ceiling_within_the_context(claude, tiny_server):
    """Anthropic's required ``max_tokens`` is cut to the room the prompt
    leaves (clients send 32k-64k to any model); a prompt that leaves no room
    is still a 400."""
    context = tiny_server.worker(TINY)["context_length"]
    filler = [{"role": "user", "content": "word " * (context - 60)}]
    counted = claude.messages.count_tokens(model=TINY, messages=filler).input_tokens
    assert 0 < context - counted <= 120, counted  # little room left
    message = claude.messages.create(model=TINY, max_tokens=20000, messages=filler, **GREEDY)
    assert message.usage.input_tokens + message.usage.cache_read_input_tokens == counted
    assert message.usage.output_tokens <= context - counted
    too_long = [{"role": "user", "content": "word " * (context + 10)}]
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=TINY, max_tokens=20000, messages=too_long)
