"""The declaration a tool-call family makes of itself: :class:`ToolFamily`.

Each family module (``hermes``, ``qwen3_coder``, ...) exports one
``FAMILY = ToolFamily(...)`` naming everything the rest of the worker needs
from it: its format name, how to build its streaming parser, its forced-call
grammar and the markers that grammar writes, and how to recognise the family
in a chat template or vocabulary. :mod:`worker.parsers.registry` collects
the declarations; parser composition, grammars and detection read only the
registry. Pure data, no I/O, no threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from worker.parsers.base import ToolCallSink


@dataclass(frozen=True)
class ToolFamily:
    """One tool-call family, declared once (see the module docstring).

    Attributes:
        name: the format name (``models[].tool_parser`` in the config, and
            what :func:`~worker.parsers.make_parser` accepts).
        parser: builds the family's streaming parser for one choice:
            ``parser(sink, tools, thinking_open)`` where ``tools`` are the
            request's tools (with ``name`` and ``parameters``) and
            ``thinking_open`` says the prompt opened a reasoning block that
            no reasoning stage handles (only Harmony uses it).
        grammar: ``grammar(tools, *, max_calls, lit)`` → a llguidance Lark
            grammar forcing 1..``max_calls`` calls of ``tools`` in the
            family's markup; ``lit(marker)`` renders a marker.
        grammar_markers: the markers ``grammar`` writes that may be single
            special tokens of a tokenizer.
        special_markers: markers that are special tokens in every tokenizer
            of the family, written as token references when the caller gives
            no token map (Harmony's).
        detect: True when a chat template (or the vocabulary's marker tokens
            joined by spaces) shows the family's markup; None: never detected
            (the generic ``json`` format).
        detect_rank: detection tries families in ascending rank; a family
            whose markup contains another's marker (GLM-4.5's and
            Qwen3-Coder's over Hermes' ``<tool_call>``) needs the lower rank.
        vocab_markers: tokens ``detect`` looks for when it is given the
            vocabulary instead of a chat template.
    """

    name: str
    parser: Callable[[ToolCallSink, list[Any], bool], Any]
    grammar: Callable[..., str]
    grammar_markers: tuple[str, ...] = ()
    special_markers: tuple[str, ...] = ()
    detect: Callable[[str], bool] | None = None
    detect_rank: int = 0
    vocab_markers: tuple[str, ...] = ()
