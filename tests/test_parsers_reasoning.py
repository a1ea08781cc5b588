"""Reasoning split (think, think_mistral, harmony channels) on its own and
composed with tool parsing, under every chunking."""

from __future__ import annotations

import pytest

from tests.test_parsers import TOOLS, W, check_all_chunkings, chunkings, run
from worker.parsers import make_parser

CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "days": 3}}\n</tool_call>'


@pytest.mark.parametrize(
    "text,content,reasoning,kw",
    [
        ("<think>\nThe user wants X.\n</think>\n\nHere is X.", "\nHere is X.", "\nThe user wants X.\n", {}),
        ("No thinking at all.", "No thinking at all.", "", {}),
        ("<think></think>Answer", "Answer", "", {}),
        ("Intro <think>a</think>\nmiddle<think>b</think>end", "Intro middleend", "ab", {}),
        # the template opened the block: output starts inside reasoning
        ("The user wants X.\n</think>\n\nHere is X.", "\nHere is X.", "The user wants X.\n", {"thinking_open": True}),
        # a stray </think> without thinking_open: text before it stays content
        ("Partial answer</think>\nrest", "Partial answerrest", "", {}),
        # truncated inside reasoning: everything is reasoning, partial marker included
        ("<think>still thinking </thi", "", "still thinking </thi", {}),
        ("a <thinking> tag is content", "a <thinking> tag is content", "", {}),
        ("x < y and </b>", "x < y and </b>", "", {}),
    ],
)
def test_think(text, content, reasoning, kw):
    check_all_chunkings(text, content, [], reasoning=reasoning, reasoning_format="think", **kw)


def test_think_mistral():
    text = "[THINK]Let me see [x].[/THINK]\nThe answer is [1]."
    check_all_chunkings(text, "The answer is [1].", [], reasoning="Let me see [x].", reasoning_format="think_mistral")


def test_think_then_tool_call():
    text = "<think>\nI need the weather.\n</think>\n\nChecking.\n" + CALL
    check_all_chunkings(
        text, "\nChecking.", [W], reasoning="\nI need the weather.\n", reasoning_format="think", tool_format="hermes"
    )


def test_tool_markup_inside_reasoning_is_not_a_call():
    text = "<think>I could emit " + CALL + " here</think>No call."
    check_all_chunkings(
        text, "No call.", [], reasoning="I could emit " + CALL + " here", reasoning_format="think", tool_format="hermes"
    )


def test_thinking_open_with_tool_call():
    text = "plan: call it</think>\n" + CALL
    check_all_chunkings(
        text, "", [W], reasoning="plan: call it", reasoning_format="think", tool_format="hermes", thinking_open=True
    )


def test_think_mistral_with_mistral_calls():
    text = '[THINK]need weather[/THINK][TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}'
    check_all_chunkings(
        text, "", [W], reasoning="need weather", reasoning_format="think_mistral", tool_format="mistral"
    )


HARMONY = (
    "<|channel|>analysis<|message|>User asks weather. Use tool.<|end|>"
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"city": "Paris", "days": 3}<|call|>'
)


def test_harmony_reasoning_and_tools_compose():
    for rf in ("harmony", None):
        check_all_chunkings(
            HARMONY, "", [W], reasoning="User asks weather. Use tool.", reasoning_format=rf, tool_format="harmony"
        )


def test_harmony_reasoning_only_splits_channels():
    text = (
        "<|channel|>analysis<|message|>Think <b>.<|end|><|start|>assistant<|channel|>final"
        "<|message|>Final <i>answer</i>.<|return|>"
    )
    check_all_chunkings(text, "Final <i>answer</i>.", [], reasoning="Think <b>.", reasoning_format="harmony")
    # no tool parsing: a call body stays visible as content, markup does not
    r = run([HARMONY], reasoning_format="harmony", tool_format=None)
    assert r.reasoning == "User asks weather. Use tool."
    assert r.content == '{"city": "Paris", "days": 3}' and not r.calls


def test_harmony_thinking_open():
    text = "still thinking<|end|><|start|>assistant<|channel|>final<|message|>Done.<|return|>"
    check_all_chunkings(text, "Done.", [], reasoning="still thinking", reasoning_format="harmony", thinking_open=True)


def test_harmony_parallel_false_stops_after_call():
    p = make_parser(tool_format="harmony", reasoning_format="harmony", tools=TOOLS, max_tool_calls=1)
    d = p.feed(HARMONY)
    assert p.done and [t.name for t in d.tool_calls if t.name] == ["get_weather"]
    assert p.feed("<|start|>assistant<|channel|>final<|message|>more").empty


def test_reasoning_hold_back():
    p = make_parser(tool_format=None, reasoning_format="think", tools=None)
    d = p.feed("<thi")
    assert d.empty
    d = p.feed("nk>abc</th")
    assert d.reasoning == "abc" and d.content == ""
    d = p.feed("ink>\nok")
    assert d.content == "ok" and d.reasoning == ""


@pytest.mark.parametrize("seed", range(5))
def test_long_mixed_output_random_chunks(seed):
    text = "<think>\n" + "reason " * 200 + "\n</think>\n" + "word " * 100 + "\n" + CALL + "\n" + CALL
    whole = run([text], reasoning_format="think", tool_format="hermes")
    pieces = chunkings(text, seeds=(seed,))[f"random{seed}"]
    r = run(pieces, reasoning_format="think", tool_format="hermes")
    assert (r.content, r.reasoning, r.parsed_calls) == (whole.content, whole.reasoning, whole.parsed_calls)
    assert r.parsed_calls == [W, W]
