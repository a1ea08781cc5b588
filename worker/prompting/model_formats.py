"""A model's output markup: which tool-call and reasoning formats it writes.

:func:`model_formats` resolves the configured ``tool_parser`` and
``reasoning_parser`` (or detects them from the chat template and
vocabulary) once, when the model loads; :class:`ModelFormats` is the
result the prompt builder uses. No MLX.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class ModelFormats:
    """A model's output markup: ``tool_format`` and ``reasoning_format`` as
    detected from its chat template (or set in the config), the marker
    that opens a reasoning block (to notice prompts that end inside one) and
    the one that closes it (to end a block whose budget is used up)."""

    tool_format: str
    reasoning_format: str | None
    reasoning_open_marker: str | None
    reasoning_close_marker: str | None = None


REASONING_OPEN_MARKERS = {"think": "<think>", "think_mistral": "[THINK]"}
"""The text that opens a reasoning block, per reasoning format."""

REASONING_CLOSE_MARKERS = {"think": "</think>", "think_mistral": "[/THINK]"}
"""The text that closes a reasoning block, per reasoning format (formats
without one cannot have a thinking budget enforced)."""


def model_formats(tokenizer: Any, tool_parser: str, reasoning_parser: str) -> ModelFormats:
    """The model's output markup: the configured formats, or (``auto``) the
    ones its chat template and vocabulary show; ``none`` disables one.

    Raises:
        ValueError: a configured format name is unknown.
    """
    from worker.parsers import (
        GENERIC_TOOL_FORMAT,
        REASONING_FORMATS,
        TOOL_FORMATS,
        detect_reasoning_format,
        detect_tool_format,
    )

    template = getattr(tokenizer, "chat_template", None)
    vocab = list(getattr(tokenizer, "get_vocab", lambda: {})().keys())
    if tool_parser == "auto":
        tool = detect_tool_format(template, vocab) or GENERIC_TOOL_FORMAT
    elif tool_parser in TOOL_FORMATS:
        tool = tool_parser
    else:
        raise ValueError(f"unknown tool_parser {tool_parser!r}; one of auto, {', '.join(TOOL_FORMATS)}")
    if reasoning_parser == "auto":
        reasoning = detect_reasoning_format(template, vocab)
    elif reasoning_parser == "none":
        reasoning = None
    elif reasoning_parser in REASONING_FORMATS:
        reasoning = reasoning_parser
    else:
        raise ValueError(
            f"unknown reasoning_parser {reasoning_parser!r}; one of auto, none, {', '.join(REASONING_FORMATS)}"
        )
    return ModelFormats(
        tool,
        reasoning,
        REASONING_OPEN_MARKERS.get(reasoning or ""),
        REASONING_CLOSE_MARKERS.get(reasoning or ""),
    )
