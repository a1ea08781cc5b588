"""Checks of a ``POST /v1/responses`` body's ``input``: every item and
content part (the rules are in :mod:`gateway.responses.schema`'s
docstring). Official item types mlxd cannot read are refused by type, with
a reason (:data:`_REFUSED_ITEMS`), even when msgspec could not decode them
(:func:`refuse_item_by_type`). Every refusal is an
:class:`~gateway.core.errors.APIError` 400 naming the field. Pure functions.
"""

from __future__ import annotations

import json
import re

from msgspec import UNSET

from gateway.core.errors import APIError, bad_request
from gateway.frontend.validation import is_given, not_supported
from gateway.openai.checks import check_cache_control
from gateway.openai.schema import CacheControl
from gateway.responses.encrypted_reasoning import SealError, unseal
from gateway.responses.schema import (
    ContentPartParam,
    InputItemParam,
)

_PART_FIELDS = {
    "input_text": ("text", "prompt_cache_breakpoint", "cache_control"),
    "output_text": ("text", "annotations", "logprobs"),
    "refusal": ("refusal",),
    "reasoning_text": ("text",),
    "summary_text": ("text",),
    "input_image": ("image_url", "detail", "file_id"),
    "input_audio": ("input_audio",),
    "input_file": ("file_data", "file_id", "file_url", "filename", "detail"),
}
"""Supported part types and the fields each may carry (the first is
required, but for ``input_file`` and ``input_image``, and holds a text part's text; ``prompt_cache_breakpoint`` and
``cache_control`` are accepted and have no effect: prefix caching is
automatic)."""

_MEDIA_PARTS = ("input_image", "input_file", "input_audio")
"""Part types refused as not supported (rather than as invalid)."""

_VIDEO_PARTS = ("input_video", "video_url")
"""Video part types other APIs use; the Responses API has none, so they are
refused pointing at chat completions' ``video_url`` parts."""

_USER_PARTS = ("input_text", "input_image", "input_audio")
_TOOL_OUTPUT_PARTS = ("input_text", "input_image", "input_file")
_ASSISTANT_PARTS = ("output_text", "refusal", "input_text")

_ITEM_FIELDS = {
    "message": ("type", "role", "content", "id", "status", "phase"),
    "function_call": ("type", "call_id", "name", "arguments", "id", "status", "namespace", "caller"),
    "function_call_output": ("type", "call_id", "output", "id", "status", "name", "namespace", "caller"),
    "custom_tool_call": ("type", "call_id", "name", "input", "id", "status", "namespace", "caller"),
    "custom_tool_call_output": ("type", "call_id", "output", "id", "status", "caller"),
    "reasoning": ("type", "id", "summary", "content", "encrypted_content", "status"),
    "additional_tools": ("type", "role", "tools", "id"),
}
"""Supported item types and the fields each may carry (``caller`` is
accepted and has no effect: every call is direct)."""

_REQUIRED_FIELDS = {
    "message": ("role", "content"),
    "function_call": ("call_id", "name", "arguments"),
    "function_call_output": ("call_id", "output"),
    "custom_tool_call": ("call_id", "name", "input"),
    "custom_tool_call_output": ("call_id", "output"),
    "reasoning": (),
    "additional_tools": ("role", "tools"),
}

_HOSTED_CALL = "it belongs to a hosted tool, and mlxd runs none (they are dropped from 'tools')"
_BUILTIN_CALL = "it belongs to the {} tool, which mlxd drops from 'tools' (its model never makes such calls)"
_MCP_ITEM = "MCP items are read only when 'tools' has an 'mcp' tool naming a configured MCP server"

_REFUSED_ITEMS = {
    "item_reference": "mlxd is stateless; send the item itself",
    "file_search_call": _HOSTED_CALL,
    "web_search_call": _HOSTED_CALL,
    "computer_call": _HOSTED_CALL,
    "computer_call_output": _HOSTED_CALL,
    "code_interpreter_call": _HOSTED_CALL,
    "image_generation_call": _HOSTED_CALL,
    "tool_search_call": _HOSTED_CALL,
    "tool_search_output": _HOSTED_CALL,
    "local_shell_call": _BUILTIN_CALL.format("'local_shell'"),
    "local_shell_call_output": _BUILTIN_CALL.format("'local_shell'"),
    "shell_call": _BUILTIN_CALL.format("'shell'"),
    "shell_call_output": _BUILTIN_CALL.format("'shell'"),
    "apply_patch_call": _BUILTIN_CALL.format("'apply_patch'"),
    "apply_patch_call_output": _BUILTIN_CALL.format("'apply_patch'"),
    "program": _BUILTIN_CALL.format("'programmatic_tool_calling'"),
    "program_output": _BUILTIN_CALL.format("'programmatic_tool_calling'"),
    "compaction": "its encrypted_content is OpenAI's compacted context, which mlxd cannot read; send the items it replaced",
    "compaction_trigger": "mlxd never compacts the input",
    "configuration_update": "not implemented; set 'reasoning' and 'text' on the request instead",
    "mcp_list_tools": _MCP_ITEM,
    "mcp_call": _MCP_ITEM,
    "mcp_approval_request": _MCP_ITEM,
    "mcp_approval_response": _MCP_ITEM,
}
"""The official input item types mlxd refuses, with the reason the 400 gives."""


def _unsupported_item(kind: str, param: str) -> APIError:
    """The 400 refusing an input item of type ``kind``, with its reason."""
    reason = _REFUSED_ITEMS.get(kind)
    if reason is None:
        return not_supported(param, f"input item type '{kind}'")
    return bad_request(f"input item type '{kind}' is not supported: {reason}", param)


def refuse_item_by_type(body: bytes, exc: APIError) -> None:
    """When decoding failed inside an input item whose type mlxd does not
    take (its fields are then unknown to :class:`InputItemParam`), raise the
    400 that refuses the item by type instead of naming one of its fields.

    Only runs on the error path. Raises:
        APIError: 400 naming ``input[i].type``.
    """
    match = re.match(r"input\[(\d+)\]", exc.param or "")
    if match is None:
        return
    try:
        item = json.loads(body)["input"][int(match.group(1))]
    except (ValueError, LookupError, TypeError):
        return
    kind = item.get("type", "message") if isinstance(item, dict) else None
    if isinstance(kind, str) and kind not in _ITEM_FIELDS:
        raise _unsupported_item(kind, f"{match.group(0)}.type") from None


ROLES = {"user": "user", "system": "system", "developer": "system", "assistant": "assistant"}
"""Accepted message roles, each with the worker role it becomes."""


def item_type(item: InputItemParam) -> str:
    """An item's type (``message`` when absent)."""
    return "message" if item.type is UNSET else item.type  # type: ignore[return-value]


def check_input(value: str | list[InputItemParam]) -> None:
    """Check every input item.

    Raises:
        APIError: 400 naming ``input`` (empty list) or the offending field.
    """
    if isinstance(value, str):
        return
    if not value:
        raise bad_request("'input' must not be empty", "input")
    for index, item in enumerate(value):
        _check_item(item, f"input[{index}]")


def _check_item(item: InputItemParam, path: str) -> None:
    """Check one input item's type, fields and content.

    Raises:
        APIError: 400 naming the item's offending field.
    """
    kind = item_type(item)
    if kind not in _ITEM_FIELDS:
        raise _unsupported_item(kind, f"{path}.type")
    allowed = _ITEM_FIELDS[kind]
    for name in item.__struct_fields__:
        if name not in allowed and is_given(getattr(item, name)):
            raise bad_request(f"Unrecognized field '{name}' in a '{kind}' item", f"{path}.{name}")
    for name in _REQUIRED_FIELDS[kind]:
        if not is_given(getattr(item, name)):
            raise bad_request(f"Missing required parameter: '{path}.{name}'", f"{path}.{name}")
    check = _ITEM_CHECKS.get(kind)
    if check is not None:
        check(item, path)


def _check_message(item: InputItemParam, path: str) -> None:
    """A message's role and content parts."""
    if item.role not in ROLES:
        raise bad_request(f"Invalid role '{item.role}'; expected one of {', '.join(ROLES)}", f"{path}.role")
    allowed = {"assistant": _ASSISTANT_PARTS, "user": _USER_PARTS}.get(item.role, ("input_text",))  # type: ignore[arg-type]
    _check_parts(item.content, allowed, f"{path}.content")  # type: ignore[arg-type]


def _check_function_output(item: InputItemParam, path: str) -> None:
    """A tool call's output is text or parts: ``input_text``, and
    ``input_image`` / ``input_file`` (which the model sees as a
    placeholder, :data:`MEDIA_PLACEHOLDER`)."""
    _check_parts(item.output, _TOOL_OUTPUT_PARTS, f"{path}.output")  # type: ignore[arg-type]


def _check_reasoning_item(item: InputItemParam, path: str) -> None:
    """Reasoning in the history: ``reasoning_text`` content, ``summary_text``
    summary, and an ``encrypted_content`` that is mlxd's own
    (:mod:`gateway.responses.encrypted_reasoning`) or foreign (then unused)."""
    if is_given(item.encrypted_content):
        try:
            unseal(item.encrypted_content)  # type: ignore[arg-type]
        except SealError as exc:
            raise bad_request(str(exc), f"{path}.encrypted_content") from None
    if isinstance(item.content, str):
        raise bad_request("A reasoning item's 'content' must be a list of reasoning_text parts", f"{path}.content")
    for name, kind in (("content", "reasoning_text"), ("summary", "summary_text")):
        parts = getattr(item, name)
        _check_parts(parts if is_given(parts) else [], (kind,), f"{path}.{name}")


def _check_additional_tools(item: InputItemParam, path: str) -> None:
    """Only the ``developer`` role adds tools."""
    if item.role != "developer":
        raise bad_request("An 'additional_tools' item's role must be 'developer'", f"{path}.role")


_ITEM_CHECKS = {
    "additional_tools": _check_additional_tools,
    "message": _check_message,
    "function_call_output": _check_function_output,
    "custom_tool_call_output": _check_function_output,
    "reasoning": _check_reasoning_item,
}


def _check_parts(content: str | list[ContentPartParam], allowed: tuple[str, ...], path: str) -> None:
    """Check the parts of ``content`` (a string is always fine) against the
    part types ``allowed`` here.

    Raises:
        APIError: 400 naming ``path[i].type`` or a field of the part.
    """
    if isinstance(content, str):
        return
    for index, part in enumerate(content):
        where = f"{path}[{index}]"
        if part.type in _VIDEO_PARTS:
            raise not_supported(
                f"{where}.type",
                f"content part type '{part.type}' (the Responses API has no video part; "
                "send videos as 'video_url' parts to /v1/chat/completions)",
            )
        if part.type in _MEDIA_PARTS and part.type not in allowed:
            raise not_supported(f"{where}.type", f"content part type '{part.type}' here (mlxd reads text and images)")
        if part.type not in allowed:
            raise bad_request(
                f"Invalid content part type '{part.type}' here; expected {', '.join(allowed)}", f"{where}.type"
            )
        fields = _PART_FIELDS[part.type]
        for name in part.__struct_fields__:
            if name != "type" and name not in fields and is_given(getattr(part, name)):
                raise bad_request(f"Unrecognized field '{name}' in a '{part.type}' part", f"{where}.{name}")
        if part.type not in ("input_file", "input_image") and getattr(part, fields[0]) is UNSET:
            raise bad_request(f"Missing required parameter: '{where}.{fields[0]}'", f"{where}.{fields[0]}")
        if isinstance(part.cache_control, CacheControl):
            check_cache_control(part.cache_control, where)
