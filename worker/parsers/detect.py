"""Guessing a model's tool-call and reasoning formats from its chat template
and vocabulary.

The chat template is checked first and the vocabulary only if the template
shows nothing: a template names the format the model was tuned on, while a
vocabulary may carry tokens from a base model (DeepSeek-R1 distills of
Qwen keep Qwen's ``<tool_call>`` token but use DeepSeek's format).
"""

from __future__ import annotations

import re
from typing import Iterable

from worker.parsers.deepseek_v3 import CALLS_BEGIN

_IPYTHON_ROLE = re.compile(r"""['"]ipython['"]|<\|start_header_id\|>ipython""")


def _tool_format_in(text: str) -> str | None:
    """The tool format whose markers occur in ``text`` (None if none)."""
    if "<tool_call>" in text and "<arg_key>" in text:
        return "glm45"
    if "<function=" in text:
        return "qwen3_coder"
    if "<tool_call>" in text:
        return "hermes"
    if "[TOOL_CALLS]" in text:
        return "mistral"
    if CALLS_BEGIN in text:
        return "deepseek_v3"
    if "<|channel|>" in text:
        return "harmony"
    if "<|python_tag|>" in text or ("<|start_header_id|>" in text and _IPYTHON_ROLE.search(text)):
        return "llama3_json"
    return None


def _reasoning_format_in(text: str) -> str | None:
    """The reasoning format whose markers occur in ``text`` (None if none)."""
    if "<think>" in text or "</think>" in text:
        return "think"
    if "[THINK]" in text:
        return "think_mistral"
    if "<|channel|>" in text:
        return "harmony"
    return None


_VOCAB_MARKERS = (
    "<tool_call>",
    "<arg_key>",
    "<function=",
    "[TOOL_CALLS]",
    CALLS_BEGIN,
    "<|channel|>",
    "<|python_tag|>",
    "<|start_header_id|>",
    "<think>",
    "</think>",
    "[THINK]",
)


def _vocab_text(vocab: Iterable[str]) -> str:
    """The marker tokens present in ``vocab``, joined, for the same checks."""
    wanted = set(_VOCAB_MARKERS)
    return " ".join(t for t in vocab if t in wanted)


def detect_tool_format(chat_template: str | None, vocab: Iterable[str]) -> str | None:
    """The tool-call format a model uses, from markers in its chat template
    (checked first) or, failing that, its vocabulary (token strings):
    ``<tool_call>`` with ``<arg_key>`` → glm45; ``<function=`` →
    qwen3_coder; ``<tool_call>`` → hermes; ``[TOOL_CALLS]`` → mistral;
    ``<｜tool▁calls▁begin｜>`` → deepseek_v3; ``<|channel|>`` → harmony;
    ``<|python_tag|>`` or a Llama 3 ``ipython`` role → llama3_json; else
    None (the worker then uses :data:`GENERIC_TOOL_FORMAT` with its own
    instructions)."""
    found = _tool_format_in(chat_template or "")
    if found is None:
        found = _tool_format_in(_vocab_text(vocab))
    return found


def detect_reasoning_format(chat_template: str | None, vocab: Iterable[str]) -> str | None:
    """The reasoning format a model uses, from its chat template (checked
    first) or vocabulary: ``<think>`` → think; ``[THINK]`` → think_mistral;
    ``<|channel|>`` → harmony; else None."""
    found = _reasoning_format_in(chat_template or "")
    if found is None:
        found = _reasoning_format_in(_vocab_text(vocab))
    return found
