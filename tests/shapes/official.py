"""Strict validation of one JSON object against an official response type.

The official types are the pydantic models of the pinned ``openai``,
``anthropic`` and ``ollama`` Python packages (see ``pyproject.toml``).
:func:`validate` runs pydantic in strict JSON mode, so besides a missing
field the model declares required, a wrong type or an unknown literal (a
``type`` discriminator no union member has) it also rejects what lax mode
would coerce (``"3"`` for an integer).

Those models type a field the official schema *requires but allows to be
null* exactly like an optional one (``Optional[...] = None``), so pydantic
alone accepts an object that leaves it out (Anthropic's ``caller`` on a
``tool_use`` block, ``stop_sequence``, OpenAI's ``refusal``). The table
``required_fields.json``, generated from the sources that keep the
difference (see :mod:`tests.shapes.required_fields_gen`), lists such fields
per model class; :func:`validate` requires them at every depth of the
validated object.
"""

from __future__ import annotations

import functools
import json
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pydantic

TABLE_PATH = Path(__file__).with_name("required_fields.json")
PINNED_PACKAGES = ("openai", "anthropic", "ollama")
"""The Python packages whose models are the official types (pinned exactly in pyproject.toml)."""


def _load_table() -> tuple[dict[str, Any], dict[str, tuple[str, ...]]]:
    raw = json.loads(TABLE_PATH.read_text())
    source = raw.pop("_source")
    return source, {name: tuple(keys) for name, keys in raw.items()}


SOURCE, REQUIRED = _load_table()
"""Where the table came from (package versions), and per model class (dotted
``module.QualName``) the wire keys its objects must carry beyond what the
model itself requires."""


def table_is_current() -> list[str]:
    """How the installed official packages differ from those the table was
    generated for (empty when they match): a bumped SDK needs a regenerated
    table before its new required fields count."""
    recorded = SOURCE.get("python", {})
    return [
        f"{name}: table made for {recorded.get(name)}, installed {version(name)}"
        for name in PINNED_PACKAGES
        if recorded.get(name) != version(name)
    ]


def class_key(cls: type) -> str:
    """The table key of a model class: ``module.QualName``."""
    return f"{cls.__module__}.{cls.__qualname__}"


@functools.cache
def _adapter(model_type: Any) -> pydantic.TypeAdapter:
    return pydantic.TypeAdapter(model_type)


def validate(model_type: Any, data: Any) -> Any:
    """Validate ``data`` (parsed JSON, or JSON text) as ``model_type`` (a
    model class or an annotated union such as ``ResponseStreamEvent``) and
    return the validated object.

    Raises ``pydantic.ValidationError`` for what the model rejects in strict
    JSON mode, and ``AssertionError`` naming the path of a field the official
    schema requires (it may be null) that ``data`` leaves out.
    """
    text = data if isinstance(data, str) else json.dumps(data)
    raw = json.loads(text) if isinstance(data, str) else data
    obj = _adapter(model_type).validate_json(text, strict=True)
    missing_required(obj, raw, "$")
    return obj


def missing_required(obj: Any, data: Any, path: str) -> None:
    """Assert that ``data`` carries every key :data:`REQUIRED` lists for the
    model class of ``obj``, recursively through nested models, lists and
    dicts (``obj`` is ``data`` validated)."""
    if isinstance(obj, pydantic.BaseModel) and isinstance(data, dict):
        cls = type(obj)
        for key in REQUIRED.get(class_key(cls), ()):
            assert key in data, f"{path}: missing required field {key!r} ({cls.__name__}; it may be null)"
        for name, field in cls.model_fields.items():
            key = field.alias or name
            if key in data:
                missing_required(getattr(obj, name), data[key], f"{path}.{key}")
    elif isinstance(obj, list) and isinstance(data, list):
        for i, (item, raw) in enumerate(zip(obj, data, strict=False)):
            missing_required(item, raw, f"{path}[{i}]")
    elif isinstance(obj, dict) and isinstance(data, dict):
        for key, item in obj.items():
            if key in data:
                missing_required(item, data[key], f"{path}.{key}")
