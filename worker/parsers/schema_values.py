"""Typing tool parameters by their JSON schemas, for the tag-based
families (``qwen3_coder``, ``glm45``), which write every argument value as
plain text: :func:`coerce_value` turns such a value into the JSON value its
schema asks for, :func:`schema_types` tells which JSON types a schema
allows (also used to pick a value's grammar in
:mod:`~worker.parsers.lark_rules`), and :func:`tool_params` maps a request's
tools to their parameters' schemas. Pure functions.
"""

from __future__ import annotations

import json
from typing import Any, Iterable


def tool_params(tools: Iterable[Any] | None) -> dict[str, dict[str, Any]]:
    """Map each tool's name to its parameters' ``properties`` schemas."""
    out: dict[str, dict[str, Any]] = {}
    for t in tools or ():
        props = (t.parameters or {}).get("properties")
        out[t.name] = props if isinstance(props, dict) else {}
    return out


def schema_types(schema: Any) -> set[str]:
    """The JSON types a (sub)schema allows, looking through ``type``,
    ``anyOf``/``oneOf``, ``enum`` and ``const``; empty when unknown."""
    if not isinstance(schema, dict):
        return set()
    types: set[str] = set()
    t = schema.get("type")
    if isinstance(t, str):
        types.add(t)
    elif isinstance(t, list):
        types.update(x for x in t if isinstance(x, str))
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            types |= schema_types(sub)
    values = list(schema.get("enum") or ())
    if "const" in schema:
        values.append(schema["const"])
    for v in values:
        types.add(_json_type(v))
    return types


def _json_type(value: Any) -> str:
    """The JSON schema type name of a Python value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def coerce_value(text: str, schema: Any) -> Any:
    """Type a parameter value written as plain text, by its JSON schema.

    Strings (and parameters with no known type) stay text, except that
    ``null`` becomes None when the schema allows null. Other types
    (number, integer, boolean, object, array) are parsed as JSON; a value
    that does not parse stays text.
    """
    types = schema_types(schema)
    if "null" in types and text.strip() == "null":
        return None
    if not types or "string" in types:
        return text
    try:
        return json.loads(text)
    except ValueError:
        low = text.strip().lower()
        if "boolean" in types and low in ("true", "false"):
            return low == "true"
        return text
