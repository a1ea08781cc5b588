"""Strict checks of response bodies and SSE streams against the official
response types of the installed ``anthropic`` and ``openai`` SDKs.

Validation runs in pydantic's strict JSON mode, so besides a missing
required field, a wrong type or an unknown literal it also rejects what lax
mode would coerce (``"3"`` for an integer). The SDK types still accept an
object that leaves out a field the official schema requires *and allows to
be null* (the SDKs type both ``Optional[...] = None``). ``required_fields.json`` lists those fields
per SDK class (see ``required_fields_gen.py``); :func:`validate` checks them
too, at every depth of the validated object.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pydantic

_REQUIRED: dict[str, list[str]] = {
    k: v for k, v in json.loads(Path(__file__).with_name("required_fields.json").read_text()).items() if k != "_source"
}


def validate(model_type: Any, data: Any) -> Any:
    """Validate ``data`` (parsed JSON) as ``model_type`` (an SDK class or an
    annotated union such as ``ResponseStreamEvent``) and return the object.

    Raises ``pydantic.ValidationError`` for what the SDK type rejects in
    strict JSON mode and
    ``AssertionError`` naming the path of a required-but-nullable field that
    ``data`` leaves out.
    """
    obj = pydantic.TypeAdapter(model_type).validate_json(json.dumps(data), strict=True)
    missing_required(obj, data, "$")
    return obj


def missing_required(obj: Any, data: Any, path: str) -> None:
    """Assert that ``data`` carries every field the official schema requires
    for the validated ``obj`` (recursively through models and lists)."""
    if isinstance(obj, pydantic.BaseModel) and isinstance(data, dict):
        cls = type(obj)
        fields = cls.model_fields
        for name in _REQUIRED.get(f"{cls.__module__}.{cls.__qualname__}", []):
            key = fields[name].alias or name
            assert key in data, f"{path}: missing required field {key!r} ({cls.__name__}; it may be null)"
        for name, field in fields.items():
            key = field.alias or name
            if key in data:
                missing_required(getattr(obj, name), data[key], f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(data, list):
        for i, (item, raw) in enumerate(zip(obj, data, strict=False)):
            missing_required(item, raw, f"{path}[{i}]")


def sse_events(text: str) -> list[tuple[str | None, str]]:
    """``(event, data)`` of each SSE frame in ``text``; comment lines
    (keep-alives) are skipped, multi-line ``data:`` joined with newlines.

    Raises ``AssertionError`` for a line that is neither a field nor a
    comment, or a frame with no ``data:`` line.
    """
    events: list[tuple[str | None, str]] = []
    for frame in text.replace("\r\n", "\n").split("\n\n"):
        event, data = None, []
        for line in frame.split("\n"):
            if not line or line.startswith(":"):
                continue
            field, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            assert field in ("event", "data", "id", "retry"), f"not an SSE line: {line!r}"
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
        if event is not None or data:
            assert data, f"SSE frame without data: {frame!r}"
            events.append((event, "\n".join(data)))
    return events
