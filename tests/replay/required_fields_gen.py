"""Regenerate ``required_fields.json``: the fields the official API schemas
require but the Python SDK types declare ``Optional[...] = None``.

The Python SDKs (Stainless-generated) type a required-but-nullable field and
an optional field the same way, so ``model_validate`` accepts an object that
leaves out, say, ``stop_sequence``. The TypeScript SDKs, generated from the
same OpenAPI specs, keep the difference (``field: T | null`` versus
``field?: T``). This script reads their ``.d.ts`` files and, for every
pydantic class reachable from the response and stream-event types the replay
tests check, lists the fields that are required there but optional in
Python. Classes with no TypeScript interface of the same name and mostly
the same fields are left out (only pydantic's own checks apply to them).

Usage (needs npm; not part of any test run)::

    npm install --prefix /tmp/tssdk @anthropic-ai/sdk openai
    python -m tests.replay.required_fields_gen /tmp/tssdk/node_modules
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import typing
from collections import defaultdict
from pathlib import Path

import pydantic

OUT = Path(__file__).with_name("required_fields.json")


def typescript_interfaces(node_modules: Path) -> dict[str, list[dict[str, bool]]]:
    """Every ``interface`` of the two SDKs: name -> [{field: is_optional}]."""
    found: dict[str, list[dict[str, bool]]] = defaultdict(list)
    files = [
        *(node_modules / "@anthropic-ai/sdk/resources").rglob("*.d.ts"),
        *(node_modules / "openai/resources").rglob("*.d.ts"),
    ]
    for path in files:
        lines = path.read_text().split("\n")
        i = 0
        while i < len(lines):
            head = re.match(r"^(\s*)(?:export )?interface (\w+)(?: extends [^{]+)? \{$", lines[i])
            if head:
                indent, fields, i = head.group(1), {}, i + 1
                while i < len(lines) and lines[i] != indent + "}":
                    field = re.match("^" + indent + r"    (\w+)(\?)?:", lines[i])
                    if field:
                        fields[field.group(1)] = bool(field.group(2))
                    i += 1
                found[head.group(2)].append(fields)
            i += 1
    return found


def models_in(annotation: typing.Any, out: list[type[pydantic.BaseModel]]) -> list[type[pydantic.BaseModel]]:
    """The pydantic classes an annotation mentions (through unions, lists, Annotated)."""
    if inspect.isclass(annotation) and issubclass(annotation, pydantic.BaseModel):
        out.append(annotation)
        return out
    for arg in typing.get_args(annotation):
        models_in(arg, out)
    return out


def reachable(roots: list[typing.Any]) -> dict[str, type[pydantic.BaseModel]]:
    """Every pydantic class reachable from ``roots``, by dotted name."""
    todo: list[type[pydantic.BaseModel]] = []
    for root in roots:
        models_in(root, todo)
    seen: dict[str, type[pydantic.BaseModel]] = {}
    while todo:
        cls = todo.pop()
        key = f"{cls.__module__}.{cls.__qualname__}"
        if key not in seen:
            seen[key] = cls
            for field in cls.model_fields.values():
                models_in(field.annotation, todo)
    return seen


def main(node_modules: Path) -> None:
    """Write ``required_fields.json`` from the TypeScript SDKs under ``node_modules``."""
    import anthropic.types.beta as anthropic_beta
    import openai.types.responses as responses

    interfaces = typescript_interfaces(node_modules)
    roots = [
        anthropic_beta.BetaMessage,
        anthropic_beta.BetaRawMessageStreamEvent,
        responses.Response,
        responses.ResponseStreamEvent,
    ]
    table: dict[str, list[str]] = {}
    for key, cls in sorted(reachable(roots).items()):
        fields = set(cls.model_fields)

        def overlap(ts: dict[str, bool], fields: set[str] = fields) -> float:
            return len(fields & set(ts)) / len(fields | set(ts))

        best = max(interfaces.get(cls.__name__, []), key=overlap, default=None)
        if best is None or overlap(best) < 0.5:
            continue
        extra = sorted(
            f for f, optional in best.items() if not optional and f in fields and not cls.model_fields[f].is_required()
        )
        if extra:
            table[key] = extra
    versions = {
        name: json.loads((node_modules / name / "package.json").read_text())["version"]
        for name in ("@anthropic-ai/sdk", "openai")
    }
    OUT.write_text(json.dumps({"_source": {"typescript_sdks": versions}, **table}, indent=1) + "\n")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
