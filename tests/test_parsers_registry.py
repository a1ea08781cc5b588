"""The tool-call family registry (worker.parsers.registry): every family
declares itself once and composition, grammars and detection use that
declaration."""

from __future__ import annotations

import pytest

from tests.test_parsers import TOOLS
from worker.parsers import (
    FAMILIES,
    TOOL_FORMATS,
    ToolFamily,
    detect_tool_format,
    grammar_markers,
    make_parser,
    tool_call_grammar,
    tool_family,
)
from worker.parsers.registry import DETECTION_ORDER


def test_formats_are_the_declared_families():
    assert TOOL_FORMATS == tuple(f.name for f in FAMILIES)
    assert all(isinstance(f, ToolFamily) for f in FAMILIES)
    assert [tool_family(name) for name in TOOL_FORMATS] == list(FAMILIES)


def test_unknown_family_is_a_value_error():
    with pytest.raises(ValueError, match="unknown tool format 'xml'"):
        tool_family("xml")
    with pytest.raises(ValueError, match="unknown tool format"):
        make_parser(tool_format="xml", reasoning_format=None, tools=TOOLS)
    with pytest.raises(ValueError, match="unknown tool format"):
        grammar_markers("xml")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_each_family_builds_a_parser_and_a_grammar(family):
    parser = make_parser(tool_format=family.name, reasoning_format=None, tools=TOOLS)
    out = parser.feed("plain words")
    out.extend(parser.finish())
    assert out.content == "plain words" and not out.tool_calls
    assert grammar_markers(family.name) == family.grammar_markers
    source = tool_call_grammar(family.name, TOOLS, choice="required", name=None, max_calls=1)
    assert source.startswith("start:")


@pytest.mark.parametrize("family", DETECTION_ORDER, ids=lambda f: f.name)
def test_a_family_is_detected_from_its_own_vocabulary_markers(family):
    assert family.vocab_markers
    assert detect_tool_format(None, ["hello", *family.vocab_markers]) == family.name


def test_detection_order_puts_overlapping_families_first():
    order = [f.name for f in DETECTION_ORDER]
    assert order.index("glm45") < order.index("hermes")
    assert order.index("qwen3_coder") < order.index("hermes")
    assert "json" not in order
