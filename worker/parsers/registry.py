"""The tool-call families the worker knows, collected from their declarations.

Each family module exports ``FAMILY`` (a
:class:`~worker.parsers.family.ToolFamily`); :data:`FAMILIES` lists them and
is the one place a new family is added (besides the config's accepted names,
``TOOL_PARSERS`` in :mod:`shared.config`, which a test keeps equal to
:data:`TOOL_FORMATS`). Parser composition (:mod:`~worker.parsers.compose`),
forced-call grammars (:mod:`~worker.parsers.tool_grammar`) and format
detection (:mod:`~worker.parsers.detect`) read only this module. Import-time
data, no I/O, no threads.
"""

from __future__ import annotations

from worker.parsers import deepseek_v3, glm45, harmony, hermes, json_format, llama3_json, mistral, qwen3_coder
from worker.parsers.family import ToolFamily

FAMILIES: tuple[ToolFamily, ...] = (
    hermes.FAMILY,
    qwen3_coder.FAMILY,
    llama3_json.FAMILY,
    mistral.FAMILY,
    deepseek_v3.FAMILY,
    glm45.FAMILY,
    harmony.FAMILY,
    json_format.FAMILY,
)
"""Every tool-call family, in the order their names are listed."""

TOOL_FORMATS: tuple[str, ...] = tuple(f.name for f in FAMILIES)
"""Tool-call formats :func:`~worker.parsers.make_parser` accepts (also valid
config overrides)."""

DETECTION_ORDER: tuple[ToolFamily, ...] = tuple(
    sorted((f for f in FAMILIES if f.detect is not None), key=lambda f: f.detect_rank)
)
"""The detectable families in the order detection tries them."""

_BY_NAME = {f.name: f for f in FAMILIES}


def tool_family(name: str) -> ToolFamily:
    """The family whose format is ``name``.

    Raises:
        ValueError: no family has that name.
    """
    found = _BY_NAME.get(name)
    if found is None:
        raise ValueError(f"unknown tool format {name!r}; expected one of {TOOL_FORMATS}")
    return found
