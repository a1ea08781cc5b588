"""The current Messages API request surface: each field's decision
(honoured, accepted with a local meaning, refused), the tool sorting, the
context-management edits and late system turns."""

from __future__ import annotations

import asyncio
import json

import pytest

from gateway.anthropic.checks import decode_count_tokens_request, decode_messages_request, tool_set
from gateway.anthropic.context import CLEARED_RESULT, ClearToolUses, apply_edits
from gateway.anthropic.tools import CLIENT_TOOL_SCHEMAS
from gateway.anthropic.translate import (
    context_edits,
    effort_budget,
    omit_thinking,
    to_count_request,
    to_generate_request,
)
from gateway.core.errors import APIError
from shared.protocol import ChatMessage, ResponseFormat, ToolCall
from worker.prompting.chat_render import fold_late_system

USER = [{"role": "user", "content": "hi"}]
TOOL = {"name": "get_weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def body(**fields) -> bytes:
    return json.dumps({"model": "m", "max_tokens": 800, "messages": USER, **fields}).encode()


def decoded(**fields):
    return decode_messages_request(body(**fields))


def generate(**fields):
    return to_generate_request(decoded(**fields), "msg_1")


def refused(param: str, **fields) -> APIError:
    with pytest.raises(APIError) as info:
        decoded(**fields)
    assert info.value.status == 400 and info.value.param == param, info.value.message
    return info.value


# --- thinking and effort ------------------------------------------------------------------


def test_adaptive_thinking_turns_reasoning_on_with_the_effort_budget():
    req = generate(thinking={"type": "adaptive"})
    assert req.thinking is True and req.thinking_budget == 400 and req.thinking_budget_best_effort  # high: 1/2
    low = generate(thinking={"type": "adaptive"}, output_config={"effort": "low"})
    assert low.thinking_budget == 100
    assert generate(thinking={"type": "adaptive"}, output_config={"effort": "max"}).thinking_budget is None
    assert generate(thinking={"type": "between_tools"}).thinking is True


def test_effort_without_thinking_caps_a_reasoning_template_default():
    req = generate(output_config={"effort": "medium"})
    assert req.thinking is None and req.thinking_budget == 200 and req.thinking_budget_best_effort
    plain = generate()
    assert plain.thinking is None and plain.thinking_budget is None and not plain.thinking_budget_best_effort


def test_enabled_budget_wins_and_disabled_has_none():
    req = generate(
        thinking={"type": "enabled", "budget_tokens": 1024}, max_tokens=4096, output_config={"effort": "low"}
    )
    assert req.thinking_budget == 1024 and req.thinking_budget_best_effort
    off = generate(thinking={"type": "disabled"}, output_config={"effort": "high"})
    assert off.thinking is False and off.thinking_budget is None


def test_effort_levels():
    assert [effort_budget(level, 1000) for level in ("low", "medium", "high", "xhigh", "max")] == [
        125,
        250,
        500,
        750,
        None,
    ]
    assert effort_budget("low", 4) == 1
    refused("output_config.effort", output_config={"effort": "extreme"})


def test_system_turn_effort_overrides():
    turns = [*USER, {"role": "system", "output_config": {"effort": "low"}}]
    assert (
        generate(messages=turns, thinking={"type": "adaptive"}, output_config={"effort": "high"}).thinking_budget == 100
    )


def test_thinking_display_and_block_binding():
    assert omit_thinking(decoded(thinking={"type": "adaptive", "display": "omitted"}))
    assert not omit_thinking(decoded(thinking={"type": "adaptive", "display": "summarized"}))
    binding = {"prefix_mismatch_behavior": "drop_block"}
    assert generate(thinking={"type": "adaptive", "block_binding": binding}).thinking is True
    prefill = [*USER, {"role": "assistant", "content": "Sure"}]
    refused("thinking", messages=prefill, thinking={"type": "adaptive"})


# --- structured output --------------------------------------------------------------------


def test_output_config_format_is_a_json_schema_grammar():
    fmt = {"type": "json_schema", "schema": SCHEMA}
    expected = ResponseFormat(type="json_schema", schema=SCHEMA, strict=True)
    assert generate(output_config={"format": fmt}).response_format == expected
    assert generate(output_format=fmt).response_format == expected
    refused("output_format", output_format=fmt, output_config={"format": fmt})
    refused("output_config.format.type", output_config={"format": {"type": "json_object", "schema": SCHEMA}})
    assert generate().response_format is None


# --- system turns -------------------------------------------------------------------------


def test_system_turns():
    turns = [
        {"role": "system", "content": "Lead."},
        *USER,
        {"role": "assistant", "content": "ok"},
        {"role": "system", "content": [{"type": "text", "text": "Mid."}]},
        {"role": "system", "content": "Gone.", "clear_at": "next_user_message"},
        {"role": "user", "content": "more"},
        {"role": "system", "content": "Kept.", "clear_at": "next_user_message"},
    ]
    assert generate(system="Top.", messages=turns).messages == [
        ChatMessage(role="system", content="Top.\n\nLead."),
        ChatMessage(role="user", content="hi"),
        ChatMessage(role="assistant", content="ok"),
        ChatMessage(role="system", content="Mid."),
        ChatMessage(role="user", content="more"),
        ChatMessage(role="system", content="Kept."),
    ]


def test_late_system_folds_into_the_next_user_turn():
    messages = [
        ChatMessage(role="system", content="S"),
        ChatMessage(role="user", content="a"),
        ChatMessage(role="system", content="mid"),
        ChatMessage(role="user", content="b"),
        ChatMessage(role="system", content="end"),
    ]
    assert fold_late_system(messages) == [
        ChatMessage(role="system", content="S"),
        ChatMessage(role="user", content="a"),
        ChatMessage(role="user", content="System: mid\n\nb\n\nSystem: end"),
    ]


def test_late_system_renders_in_place_or_folds_when_the_template_refuses():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from worker.prompting.chat_render import render

    tokenizer = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(models.WordLevel({"x": 0}, unk_token="x")))
    messages = [ChatMessage(role="user", content="a"), ChatMessage(role="system", content="mid")]
    tokenizer.chat_template = "{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    assert render(tokenizer, messages, tools=None, thinking=None) == "[user]a[system]mid"
    tokenizer.chat_template = (
        "{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
        "{{ raise_exception('system only first') }}{% endif %}[{{ m.role }}]{{ m.content }}{% endfor %}"
    )
    assert render(tokenizer, messages, tools=None, thinking=None) == "[user]a\n\nSystem: mid"


# --- tools ---------------------------------------------------------------------------------


def test_client_tools_are_offered_and_server_tools_dropped():
    tools = [
        TOOL,
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool", "max_characters": 100},
        {"type": "memory_20250818", "name": "memory"},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        {"type": "code_execution_20250825", "name": "code_execution"},
        {"type": "computer_20250124", "name": "computer", "display_width_px": 1, "display_height_px": 1},
    ]
    toolset = tool_set(decoded(tools=tools))
    assert [t.name for t in toolset.tools] == ["get_weather", "bash", "str_replace_based_edit_tool", "memory"]
    assert toolset.tools[1].parameters == CLIENT_TOOL_SCHEMAS["bash_20250124"][2]
    assert toolset.dropped == ["web_search_20250305", "code_execution_20250825", "computer_20250124"]
    err = refused("tool_choice.name", tools=tools, tool_choice={"type": "tool", "name": "web_search"})
    assert "dropped" in err.message
    only_server = [{"type": "web_search_20250305", "name": "web_search"}]
    assert generate(tools=only_server).tools is None
    refused("tool_choice", tools=only_server, tool_choice={"type": "any"})


def test_custom_tool_options():
    tool = {
        **TOOL,
        "description": "Weather.",
        "strict": True,
        "defer_loading": True,
        "eager_input_streaming": True,
        "allowed_callers": ["direct"],
        "input_examples": [{"city": "Paris"}],
        "cache_control": {"type": "ephemeral", "ttl": "1h"},
    }
    (offered,) = generate(tools=[tool]).tools
    assert offered.description == 'Weather.\n\nExample inputs:\n{"city":"Paris"}'


# --- context management ---------------------------------------------------------------------


def _count(messages: list[ChatMessage]) -> int:
    return sum(
        len(m.content) + len(m.reasoning or "") + sum(len(c.arguments) for c in m.tool_calls or ()) for m in messages
    )


async def _counter(messages):
    return _count(messages)


def run_edits(messages, edits):
    return asyncio.run(apply_edits(messages, edits, _counter))


def test_clear_thinking_edit():
    history = [
        *USER,
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "one", "signature": ""}, {"type": "text", "text": "a"}],
        },
        *USER,
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "two", "signature": ""}, {"type": "text", "text": "b"}],
        },
        *USER,
    ]
    req = decoded(messages=history, context_management={"edits": [{"type": "clear_thinking_20251015"}]})
    messages, applied = run_edits(to_generate_request(req, "m").messages, context_edits(req))
    assert [m.reasoning for m in messages if m.role == "assistant"] == [None, "two"]
    assert applied == [{"type": "clear_thinking_20251015", "cleared_thinking_turns": 1, "cleared_input_tokens": 3}]
    keep_all = decoded(
        messages=history, context_management={"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]}
    )
    same, applied = run_edits(to_generate_request(keep_all, "m").messages, context_edits(keep_all))
    assert applied == [] and [m.reasoning for m in same if m.role == "assistant"] == ["one", "two"]


def _tool_history(uses: int) -> list[ChatMessage]:
    out = [ChatMessage(role="user", content="go")]
    for i in range(uses):
        name = "keep_me" if i == 0 else "f"
        out.append(
            ChatMessage(role="assistant", content="", tool_calls=[ToolCall(id=f"t{i}", name=name, arguments='{"x":1}')])
        )
        out.append(ChatMessage(role="tool", content="result" * 20, tool_call_id=f"t{i}"))
    return out


def test_clear_tool_uses_edit():
    edit = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 3},
        "keep": {"type": "tool_uses", "value": 1},
        "exclude_tools": ["keep_me"],
        "clear_tool_inputs": ["f"],
    }
    edits = context_edits(decoded(context_management={"edits": [edit]}))
    assert isinstance(edits[0], ClearToolUses)
    messages, applied = run_edits(_tool_history(5), edits)
    results = [m.content for m in messages if m.role == "tool"]
    assert results == ["result" * 20, CLEARED_RESULT, CLEARED_RESULT, CLEARED_RESULT, "result" * 20]
    assert [c.arguments for m in messages for c in m.tool_calls or ()] == ['{"x":1}', "{}", "{}", "{}", '{"x":1}']
    assert applied[0]["type"] == "clear_tool_uses_20250919" and applied[0]["cleared_tool_uses"] == 3
    assert applied[0]["cleared_input_tokens"] == _count(_tool_history(5)) - _count(messages)
    untriggered, applied = run_edits(_tool_history(3), edits)
    assert applied == [] and untriggered == _tool_history(3)
    by_tokens = context_edits(decoded(context_management={"edits": [{"type": "clear_tool_uses_20250919"}]}))
    assert run_edits(_tool_history(5), by_tokens)[1] == []  # far below the default 100,000-token trigger
    at_least = {**edit, "clear_at_least": {"type": "input_tokens", "value": 10_000}}
    assert run_edits(_tool_history(5), context_edits(decoded(context_management={"edits": [at_least]})))[1] == []


def test_compaction_is_refused_but_ignored_by_count_tokens():
    refused("context_management.edits[0].type", context_management={"edits": [{"type": "compact_20260112"}]})
    refused("compaction", compaction={"type": "summarize"})
    count = decode_count_tokens_request(
        json.dumps({"model": "m", "messages": USER, "compaction": {"type": "summarize"}}).encode()
    )
    assert to_count_request(count, "c").count_only


# --- accepted without effect, and refused ------------------------------------------------------


def test_fields_accepted_without_effect():
    req = generate(
        metadata={"user_id": "u"},
        service_tier="standard_only",
        speed="fast",
        inference_geo="us",
        container={"id": "c", "skills": [{"skill_id": "s", "type": "custom", "version": "1"}]},
        diagnostics={"previous_message_id": "msg_0"},
        user_profile_id="p",
        workspace_id="w",
        billing_policy={"type": "billing_policy", "bill_to": "self"},
        fallbacks="default",
        fallback_credit_token={"token": "t", "mode": "strict"},
        output_config={"task_budget": {"type": "tokens", "total": 1000, "remaining": 10}},
        cache_control={"type": "ephemeral"},
        stop_sequences=["##"],
        top_k=5,
        top_p=0.9,
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        tools=[TOOL],
    )
    assert req == generate(
        stop_sequences=["##"],
        top_k=5,
        top_p=0.9,
        tools=[TOOL],
        tool_choice={"type": "auto", "disable_parallel_tool_use": True},
    )
    assert generate(container="container_1").messages == generate().messages


def test_fields_refused_with_a_reason():
    err = refused("mcp_servers", mcp_servers=[{"type": "url", "url": "https://x", "name": "x"}])
    assert "MCP" in err.message
    assert generate(mcp_servers=[]).tools is None
    err = refused("thread", thread={"type": "create"})
    assert "state" in err.message
    refused("service_tier", service_tier="priority")
    refused("speed", speed="ludicrous")
