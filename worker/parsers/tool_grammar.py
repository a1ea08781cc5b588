"""llguidance Lark grammars that force tool calls in a family's markup
(``tool_choice`` ``required`` or a named function).

Each family declares a ``grammar(tools, max_calls=..., lit=...)`` and its
markers (:class:`~worker.parsers.family.ToolFamily`, collected in
:mod:`worker.parsers.registry`); this module picks the tools, bounds the
number of calls and renders markers.
The bound is what ends a forced turn: once the last allowed call is
written, the grammar admits only end-of-sequence, so a model that would
repeat calls until its token limit stops instead. Arguments are embedded as
``%json`` schemas, written compactly or with ``json.dumps`` spacing.

Markers that are special tokens in a model's tokenizer cannot be matched
by grammar text (llguidance keeps special tokens out of terminals), so a
caller may pass ``special_tokens`` (marker text → token id, for markers of
:func:`grammar_markers` that are special tokens in its tokenizer, as
:func:`special_token_ids` computes); those are written as ``<[id]>``.
Without it, a family's ``special_markers`` (Harmony's) are written as
``<|name|>`` token references (they are special tokens in every gpt-oss
tokenizer) and every other marker
as plain text, which is right for tokenizers where they are ordinary
(possibly added, non-special) tokens.

Every family has a grammar; none raises NotImplementedError. Harmony's
allows one analysis message before the call and always exactly one call.
A named function (``choice`` ``function``) is always exactly one call, as
the official APIs make it.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

from worker.parsers.family import ToolFamily
from worker.parsers.registry import tool_family


def grammar_markers(tool_format: str) -> tuple[str, ...]:
    """The markers :func:`tool_call_grammar` writes for ``tool_format`` that
    may be single special tokens (keys for its ``special_tokens``)."""
    return tool_family(tool_format).grammar_markers


def special_token_ids(tool_format: str, tokenizer: Any) -> dict[str, int]:
    """The ``special_tokens`` map for :func:`tool_call_grammar`: those of
    ``tool_format``'s markers that are special added tokens of ``tokenizer``
    (a Hugging Face tokenizer, or a wrapper exposing one as ``_tokenizer``),
    with their ids. Empty when the tokenizer shows no added tokens."""
    decoder = getattr(tokenizer, "added_tokens_decoder", None)
    if decoder is None and hasattr(tokenizer, "_tokenizer"):
        decoder = getattr(tokenizer._tokenizer, "added_tokens_decoder", None)
    specials = {
        getattr(tok, "content", str(tok)): int(i)
        for i, tok in (decoder or {}).items()
        if getattr(tok, "special", False)
    }
    return {m: specials[m] for m in grammar_markers(tool_format) if m in specials}


class _Markers:
    """Renders a marker as a Lark literal or a special-token reference."""

    def __init__(self, family: ToolFamily, special_tokens: Mapping[str, int] | None) -> None:
        self.family = family
        self.special_tokens = special_tokens

    def special(self, marker: str) -> bool:
        """True when ``marker`` is written as a token reference."""
        if self.special_tokens is not None:
            return marker in self.special_tokens
        return marker in self.family.special_markers

    def __call__(self, marker: str) -> str:
        """Lark for ``marker``."""
        if self.special_tokens is not None and marker in self.special_tokens:
            return f"<[{int(self.special_tokens[marker])}]>"
        if self.special(marker):
            return marker
        return json.dumps(marker, ensure_ascii=False)


def tool_call_grammar(
    tool_format: str,
    tools: list[Any],
    *,
    choice: str,
    name: str | None,
    max_calls: int,
    special_tokens: Mapping[str, int] | None = None,
) -> str:
    """A llguidance Lark grammar forcing the output to be 1..``max_calls``
    tool calls in ``tool_format``'s markup, each call's arguments
    constrained by its tool's JSON schema, and nothing after them.

    ``choice`` ``required`` allows any of ``tools``; ``function`` exactly one
    call of the tool ``name`` (whatever ``max_calls`` says). ``special_tokens`` maps markers to token ids for markers
    that are special tokens (see the module docstring). Harmony allows one
    analysis message before the call and always a single call. Raises
    ValueError for an unknown format or choice, no tools, an unknown
    ``name``, or ``max_calls`` below 1. Compile the result with ``llguidance.grammar_from("lark", g)``.
    """
    family = tool_family(tool_format)
    if choice == "function":
        chosen = [t for t in tools or () if t.name == name]
        if not chosen:
            raise ValueError(f"tool_choice names {name!r}, which is not among the tools")
        chosen, max_calls = chosen[:1], 1
    elif choice == "required":
        chosen = list(tools or ())
        if not chosen:
            raise ValueError("tool_choice 'required' needs at least one tool")
    else:
        raise ValueError(f"a tool-call grammar needs choice 'required' or 'function', not {choice!r}")
    if max_calls < 1:
        raise ValueError(f"max_calls must be at least 1, not {max_calls}")
    return family.grammar(chosen, max_calls=max_calls, lit=_Markers(family, special_tokens))
