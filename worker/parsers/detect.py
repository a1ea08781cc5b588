"""Guessing a model's tool-call and reasoning formats from its chat template
and vocabulary.

The chat template is checked first and the vocabulary only if the template
shows nothing: a template names the format the model was tuned on, while a
vocabulary may carry tokens from a base model (DeepSeek-R1 distills of
Qwen keep Qwen's ``<tool_call>`` token but use DeepSeek's format).
Tool-call families declare their own detection
(:class:`~worker.parsers.family.ToolFamily`); this module applies them in
:data:`~worker.parsers.registry.DETECTION_ORDER`.
"""

from __future__ import annotations

from typing import Iterable

from shared.reasoning_markup import REASONING_MARKERS, reasoning_format_in
from worker.parsers.registry import DETECTION_ORDER


def _tool_format_in(text: str) -> str | None:
    """The first family, in detection order, whose markup occurs in
    ``text`` (None if none)."""
    for family in DETECTION_ORDER:
        assert family.detect is not None
        if family.detect(text):
            return family.name
    return None


def _reasoning_format_in(text: str) -> str | None:
    """The reasoning format whose markers occur in ``text`` (None if none):
    :func:`shared.reasoning_markup.reasoning_format_in`, the rule the
    gateway applies to the chat template too."""
    return reasoning_format_in(text)


_REASONING_VOCAB_MARKERS = tuple(marker for marker, _ in REASONING_MARKERS)

_VOCAB_MARKERS = ("<think>", "</think>", "[THINK]", "<|channel|>")

_VOCAB_MARKERS = frozenset(_REASONING_VOCAB_MARKERS).union(*(f.vocab_markers for f in DETECTION_ORDER))


def _vocab_text(vocab: Iterable[str]) -> str:
    """The marker tokens present in ``vocab``, joined, for the same checks."""
    return " ".join(t for t in vocab if t in _VOCAB_MARKERS)


def detect_tool_format(chat_template: str | None, vocab: Iterable[str]) -> str | None:
    """The tool-call format a model uses, from markers in its chat template
    (checked first) or, failing that, its vocabulary (token strings): the
    first family of :data:`~worker.parsers.registry.DETECTION_ORDER` whose
    ``detect`` accepts it (``<tool_call>`` with ``<arg_key>`` → glm45;
    ``<function=`` → qwen3_coder; ``<tool_call>`` → hermes;
    ``[TOOL_CALLS]`` → mistral; ``<｜tool▁calls▁begin｜>`` → deepseek_v3;
    ``<|channel|>`` → harmony; ``<|python_tag|>`` or a Llama 3 ``ipython``
    role → llama3_json); else None (the worker then uses
    :data:`GENERIC_TOOL_FORMAT` with its own instructions)."""
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
