"""Streaming output parsers: a model's raw output text → content,
reasoning and tool calls, for many model families.

Build one parser per request choice with :func:`make_parser`, call
``feed(text)`` with every new piece of decoded text (any size, markers may
be split anywhere) and ``finish()`` once at the end; each returns a
:class:`ParsedDelta` of what is safe to emit. Tool-call and reasoning
markup never reaches ``content``; text that could still be the start of a
marker is held back until it is known not to be. Tool-call arguments
stream as JSON text whose concatenation per call is the arguments object.

:func:`detect_tool_format` and :func:`detect_reasoning_format` pick the
formats from a model's chat template and vocabulary;
:func:`tool_call_grammar` gives llguidance grammars that force calls
(``tool_choice`` ``required`` / a named function).

Conventions (all families):

- Whitespace inside content is kept exactly, with two exceptions, both as
  vLLM does: the single newline right after a closing reasoning marker
  (``</think>``, ``[/THINK]``) and the single newline right before a
  ``<tool_call>``/``<function=`` opener are markup. Whitespace-only content
  held back after the last tool call is dropped at ``finish()``.
- Tool-call ids are ``call_`` + 24 random hex characters. A call's first
  piece carries index, id, name and maybe the first arguments text; later
  pieces only index and arguments. Arguments stream only in prefixes that
  can still be closed into valid JSON, so a call cut off at any point is
  completed at ``finish()`` from the longest such prefix (open strings and
  containers closed; a half-written key, literal or number tail dropped).
- Markup that breaks off before a call's name was emitted goes out as
  content unchanged (nothing is lost); a JSON object or array counts as a
  call in the ``json`` and untagged ``llama3_json`` formats only if its
  first member is ``name`` naming one of the request's tools.
- Harmony output is always split into channels when the Harmony parser is
  used (as reasoning or tool format): analysis is reasoning.
- ``max_tool_calls`` N (1 when parallel calls are off): after the N-th
  complete call the parser is ``done`` and drops everything else.
- Markers must reach the parser as text: the detokenizer has to render
  special tokens (``<|channel|>``, ``[TOOL_CALLS]``, ...) rather than skip
  them.

Formats: tool calls — see :data:`TOOL_FORMATS` (one module each:
``hermes``, ``qwen3_coder``, ``llama3_json``, ``mistral``, ``deepseek_v3``,
``glm45``, ``harmony``, ``json_format``; each declares itself once as a
:class:`ToolFamily` that :mod:`~worker.parsers.registry` collects in
:data:`FAMILIES`); reasoning — see
:data:`REASONING_FORMATS` (:mod:`~worker.parsers.reasoning_splitter`, and
:mod:`~worker.parsers.harmony` for gpt-oss channels).
"""

from worker.parsers.base import OutputParser, ParsedDelta, ToolCallSink, new_call_id
from worker.parsers.compose import GENERIC_TOOL_FORMAT, REASONING_FORMATS, ComposedParser, make_parser
from worker.parsers.detect import detect_reasoning_format, detect_tool_format
from worker.parsers.family import ToolFamily
from worker.parsers.registry import FAMILIES, TOOL_FORMATS, tool_family
from worker.parsers.tool_grammar import grammar_markers, special_token_ids, tool_call_grammar

__all__ = [
    "FAMILIES",
    "GENERIC_TOOL_FORMAT",
    "REASONING_FORMATS",
    "TOOL_FORMATS",
    "ComposedParser",
    "OutputParser",
    "ParsedDelta",
    "ToolCallSink",
    "ToolFamily",
    "detect_reasoning_format",
    "detect_tool_format",
    "grammar_markers",
    "make_parser",
    "new_call_id",
    "special_token_ids",
    "tool_call_grammar",
    "tool_family",
]
