"""Regenerate ``required_fields.json``: per official Python model class, the
wire fields the official schema requires but the Python model leaves
optional.

The Python SDKs type a required-but-nullable field and an optional field the
same way (``Optional[...] = None``), so pydantic accepts an object that
leaves out, say, Anthropic's ``stop_sequence`` or a ``tool_use`` block's
``caller``. The sources used here keep the difference:

* OpenAI and Anthropic: their TypeScript SDKs, generated from the same
  OpenAPI specs as the Python ones, write ``field: T | null`` for a required
  field and ``field?: T`` for an optional one. Each ``interface`` is matched
  to the Python class of the same place (``ChatCompletion.Choice.Logprobs``
  is ``ChoiceLogprobs`` in ``chat_completion.py``), falling back to the
  interface of the same name with mostly the same fields.
* Ollama: the server's own wire types (``api/types.go``): a field is always
  sent unless its JSON tag says ``omitempty``/``omitzero`` (which never
  drops a struct value such as a time). Go structs map to the Python
  client's classes through :data:`OLLAMA_CLASSES`.

Every class reachable from the types of :mod:`tests.shapes.routes` is
covered. A required field the Python class does not know at all (the other
source is newer) is listed too when the match is exact, so it is required
on the wire all the same.

Usage (needs npm and an Ollama source checkout; not part of any test run)::

    npm install --prefix /tmp/tssdk @anthropic-ai/sdk@VERSION openai@VERSION
    git -C OLLAMA show vX.Y.Z:api/types.go > /tmp/ollama-types.go
    python -m tests.shapes.required_fields_gen /tmp/tssdk/node_modules /tmp/ollama-types.go vX.Y.Z

The SDK versions to install are the TypeScript releases made from the same
spec as the pinned Python ones (the newest of each when both are newest).
"""

from __future__ import annotations

import inspect
import json
import re
import sys
import typing
from collections import defaultdict
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import pydantic

from tests.shapes.official import PINNED_PACKAGES, TABLE_PATH, class_key

# --- TypeScript ---------------------------------------------------------------------------


@dataclass
class Interface:
    """One TypeScript interface: its path (namespaces, then its name), its
    own fields (name -> optional?) and the names it extends."""

    path: tuple[str, ...]
    fields: dict[str, bool]
    extends: tuple[str, ...]


_OPEN = re.compile(r"^(\s*)(?:export )?(?:declare )?(interface|namespace) (\w+)(?: extends ([^{]+))? \{$")


def typescript_interfaces(files: list[Path]) -> list[Interface]:
    """Every interface in ``files``, with the namespaces around it."""
    found: list[Interface] = []
    for path in files:
        lines = path.read_text().split("\n")
        spaces: list[tuple[str, str]] = []  # (indent, name) of the open namespaces
        i = 0
        while i < len(lines):
            line = lines[i]
            while spaces and line == spaces[-1][0] + "}":
                spaces.pop()
                i += 1
                line = lines[i] if i < len(lines) else ""
            head = _OPEN.match(line)
            if head and head.group(2) == "namespace":
                spaces.append((head.group(1), head.group(3)))
            elif head:
                indent, fields, i = head.group(1), {}, i + 1
                while i < len(lines) and lines[i] != indent + "}":
                    field = re.match("^" + indent + r"    (\w+)(\?)?:", lines[i])
                    if field:
                        fields[field.group(1)] = bool(field.group(2))
                    i += 1
                bases = tuple(b.strip().split(".")[-1] for b in (head.group(4) or "").split(",") if b.strip())
                found.append(Interface((*(s[1] for s in spaces), head.group(3)), fields, bases))
            i += 1
    return found


def with_bases(interfaces: list[Interface]) -> list[Interface]:
    """``interfaces`` with each one's inherited fields merged in (a base is
    found by name among the top-level interfaces; generic or unknown bases
    are skipped)."""
    top = {i.path[-1]: i for i in interfaces if len(i.path) == 1}

    def fields(iface: Interface, depth: int = 0) -> dict[str, bool]:
        merged: dict[str, bool] = {}
        for base in iface.extends:
            if base in top and depth < 8:
                merged.update(fields(top[base], depth + 1))
        merged.update(iface.fields)
        return merged

    return [Interface(i.path, fields(i), i.extends) for i in interfaces]


def camel(module: str) -> str:
    """``chat_completion`` -> ``ChatCompletion``: a module's main class."""
    return "".join(part[:1].upper() + part[1:] for part in module.split("_"))


def overlap(python: set[str], ts: dict[str, bool]) -> float:
    """How alike two field sets are (Jaccard)."""
    return len(python & set(ts)) / len(python | set(ts) or {""})


def match(cls: type[pydantic.BaseModel], interfaces: list[Interface]) -> tuple[Interface | None, bool]:
    """The TypeScript interface of ``cls`` and whether the match is exact
    (same place) rather than by name and fields (an interface of the same
    name, or one in the same module whose name ends the Python name: the
    Python SDK prefixes a union member with its field, ``CallerDirect`` for
    ``ResponseFunctionToolCall.Direct``)."""
    keys = wire_keys(cls)
    main = camel(cls.__module__.rsplit(".", 1)[-1])
    name = cls.__name__

    def place(i: Interface) -> bool:
        if len(i.path) == 1:
            return i.path[0] == name
        return i.path[0] == main and "".join(i.path[1:]) == name

    exact = [i for i in interfaces if place(i) and overlap(keys, i.fields) >= 0.5]
    if exact:
        return max(exact, key=lambda i: overlap(keys, i.fields)), True
    named = [i for i in interfaces if i.path[-1] == name or "".join(i.path[1:]) == name]
    named += [i for i in interfaces if len(i.path) > 1 and i.path[0] == main and name.endswith(i.path[-1])]
    best = max(named, key=lambda i: overlap(keys, i.fields), default=None)
    if best is None or overlap(keys, best.fields) < 0.5:
        return None, False
    return best, False


# --- Go (Ollama) --------------------------------------------------------------------------

OLLAMA_CLASSES = {
    "ChatResponse": "ChatResponse",
    "GenerateResponse": "GenerateResponse",
    "Message": "Message",
    "ToolCall": "Message.ToolCall",
    "ToolCallFunction": "Message.ToolCall.Function",
    "TokenLogprob": "TokenLogprob",
    "Logprob": "Logprob",
    "EmbedResponse": "EmbedResponse",
    "EmbeddingResponse": "EmbeddingsResponse",
    "ListResponse": "ListResponse",
    "ListModelResponse": "ListResponse.Model",
    "ProcessResponse": "ProcessResponse",
    "ProcessModelResponse": "ProcessResponse.Model",
    "ShowResponse": "ShowResponse",
    "ModelDetails": "ModelDetails",
}
"""Ollama's Go wire struct -> the Python client's class (in ``ollama._types``)."""


def go_structs(source: str) -> dict[str, list[tuple[str, str, str]]]:
    """Each struct of a Go file: [(field type, json key, tag options)];
    an embedded struct is ``("", its name, "embed")``."""
    structs: dict[str, list[tuple[str, str, str]]] = {}
    for head in re.finditer(r"^type (\w+) struct \{\n(.*?)^\}", source, re.M | re.S):
        fields = []
        for line in head.group(2).split("\n"):
            line = line.split("//")[0].strip()
            named = re.match(r'^([A-Z]\w*)\s+(\S+)\s+`json:"([^"]*)"', line)
            embedded = re.match(r"^([A-Z]\w*)$", line)
            if named:
                key, _, options = named.group(3).partition(",")
                if key != "-":
                    fields.append((named.group(2), key or named.group(1), options))
            elif embedded:
                fields.append(("", embedded.group(1), "embed"))
        structs[head.group(1)] = fields
    return structs


def go_required(structs: dict[str, list[tuple[str, str, str]]], name: str) -> set[str]:
    """The JSON keys struct ``name`` always sends: no ``omitempty`` or
    ``omitzero``, or ``omitempty`` on a struct value (which Go never omits);
    embedded structs' keys included."""
    keys: set[str] = set()
    for go_type, key, options in structs.get(name, []):
        if options == "embed":
            keys |= go_required(structs, key)
            continue
        flags = set(options.split(","))
        is_struct = go_type == "time.Time" or go_type in structs
        if "omitzero" in flags or ("omitempty" in flags and not is_struct):
            continue
        keys.add(key)
    return keys


# --- Python -------------------------------------------------------------------------------


def wire_keys(cls: type[pydantic.BaseModel]) -> set[str]:
    """The JSON keys of a model class (aliases applied)."""
    return {f.alias or n for n, f in cls.model_fields.items()}


def required_keys(cls: type[pydantic.BaseModel]) -> set[str]:
    """The JSON keys the model class itself requires."""
    return {f.alias or n for n, f in cls.model_fields.items() if f.is_required()}


def models_in(annotation: typing.Any, out: list[type[pydantic.BaseModel]]) -> list[type[pydantic.BaseModel]]:
    """The pydantic classes an annotation mentions (through unions, lists, Annotated)."""
    if inspect.isclass(annotation) and issubclass(annotation, pydantic.BaseModel):
        out.append(annotation)
        return out
    for arg in typing.get_args(annotation):
        models_in(arg, out)
    return out


def reachable(roots: list[typing.Any]) -> dict[str, type[pydantic.BaseModel]]:
    """Every pydantic class reachable from ``roots``, by table key."""
    todo: list[type[pydantic.BaseModel]] = []
    for root in roots:
        models_in(root, todo)
    seen: dict[str, type[pydantic.BaseModel]] = {}
    while todo:
        cls = todo.pop()
        key = class_key(cls)
        if key not in seen:
            seen[key] = cls
            for field in cls.model_fields.values():
                models_in(field.annotation, todo)
    return seen


def main(node_modules: Path, ollama_types_go: Path, ollama_release: str) -> None:
    """Write ``required_fields.json`` and print what was matched how."""
    from tests.shapes.routes import roots

    ts_files = [
        *(node_modules / "@anthropic-ai/sdk/resources").rglob("*.d.ts"),
        *(node_modules / "openai/resources").rglob("*.d.ts"),
    ]
    interfaces = with_bases(typescript_interfaces(ts_files))
    structs = go_structs(ollama_types_go.read_text())
    go_of = {f"ollama._types.{py}": go for go, py in OLLAMA_CLASSES.items()}
    table: dict[str, list[str]] = {}
    report: dict[str, list[str]] = defaultdict(list)
    for key, cls in sorted(reachable(roots()).items()):
        if cls.__module__ == "ollama._types":
            if key not in go_of:
                report["no Go struct"].append(key)
                continue
            required, exact = go_required(structs, go_of[key]), True
        elif cls.__module__.startswith(("openai.", "anthropic.")):
            iface, exact = match(cls, interfaces)
            if iface is None:
                report["no interface"].append(key)
                continue
            required = {f for f, optional in iface.fields.items() if not optional}
            report["exact" if exact else "by name"].append(key)
        else:
            continue  # the checker's own wrappers: their fields are all required already
        # a name the Python class has as a property is the SDKs' own convenience
        # (Response.output_text), computed by the client, never sent
        extra = {k for k in required - required_keys(cls) if not isinstance(getattr(cls, k, None), property)}
        if not exact:
            extra &= wire_keys(cls)
        unknown = extra - wire_keys(cls)
        if unknown:
            report["required, unknown to the Python class"].append(f"{key}: {sorted(unknown)}")
        if extra:
            table[key] = sorted(extra)
    versions = {
        "python": {name: version(name) for name in PINNED_PACKAGES},
        "typescript": {
            name: json.loads((node_modules / name / "package.json").read_text())["version"]
            for name in ("@anthropic-ai/sdk", "openai")
        },
        "ollama_server": ollama_release,
    }
    TABLE_PATH.write_text(json.dumps({"_source": versions, **table}, indent=1) + "\n")
    for kind, keys in report.items():
        print(f"{kind}: {len(keys)}")
        if kind not in ("exact", "by name"):
            for k in keys:
                print("   ", k)


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3])
