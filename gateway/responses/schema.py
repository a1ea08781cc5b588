"""Request bodies of ``POST /v1/responses`` (the OpenAI Responses API): the
msgspec Struct shapes (declarative; decoding and the checks are in
:mod:`gateway.responses.checks`, the translation and the echoed settings in
:mod:`gateway.responses.translate`).

Decoding is as strict as for chat (:mod:`gateway.frontend.validation`): one JSON
object, no coercion, bounds on every number, string and list, unknown
fields refused by name; every refusal is an :class:`~gateway.core.errors.APIError`
400 whose ``param`` is the offending field path (e.g. ``input[2].content``).

mlxd is stateless: nothing is stored, so ``previous_response_id``,
``conversation``, ``background`` (and ``background_options``) and stored
``prompt`` templates are refused and the client sends the whole
conversation as ``input`` every time (``store`` is accepted, either value,
and the response says ``store: false``; ``GET /v1/responses/{id}`` does not
exist). ``docs/api/responses.md`` lists every field with its status; in
short:

- ``input``: a string (one user message) or a non-empty list of items:
  messages (``"type": "message"`` optional; user/system/developer parts
  are ``input_text``; assistant parts ``output_text``, ``refusal`` or
  ``input_text``), ``function_call`` / ``custom_tool_call`` items and their
  ``function_call_output`` / ``custom_tool_call_output`` (text or parts;
  an image or file in a tool's output reaches the model as a text
  placeholder, :data:`MEDIA_PLACEHOLDER`), ``reasoning`` items (text from
  mlxd's own ``encrypted_content``, else ``reasoning_text`` content, else
  the ``summary_text`` summary) and ``additional_tools`` items (their
  tools join ``tools``). Images and files elsewhere are refused; so is
  every other official item type, by type and with a reason
  (``responses_input_checks._REFUSED_ITEMS``: ``item_reference``, the hosted and dropped built-in
  tools' call items, compaction, ``configuration_update``, MCP items
  outside :mod:`gateway.responses.mcp`).
- ``tools`` and ``tool_choice``: see :mod:`gateway.responses.tools`
  (function, custom and namespace tools; hosted ones dropped). An object
  ``tool_choice`` forces a ``function`` or ``custom`` tool by name, or
  restricts the tools (``allowed_tools``, mode ``auto`` / ``required``);
  one forcing a hosted tool is refused.
- Honoured: ``instructions``, ``max_output_tokens``, ``temperature``,
  ``top_p``, ``parallel_tool_calls``, ``text.format``, ``reasoning.effort``
  (``none``/``minimal`` off, the rest on; no budget), ``reasoning.summary``
  / ``generate_summary`` (the reasoning text becomes the reasoning item's
  summary), ``include: ["reasoning.encrypted_content"]`` (reasoning items
  carry :func:`gateway.responses.encrypted_reasoning.seal` of their text),
  ``stream``, ``truncation: "disabled"``.
- Accepted, echoed or without effect by design: ``metadata``, ``user``,
  ``safety_identifier``, ``prompt_cache_key``, ``prompt_cache_options``,
  ``prompt_cache_retention`` (prefix caching is automatic),
  ``service_tier`` (the response says ``default``), ``text.verbosity``,
  ``reasoning.context`` / ``mode``, ``context_management`` (mlxd never
  compacts), ``client_metadata`` (Codex's; not in OpenAI's spec, accepted
  because Codex always sends it), ``access_programs``, ``image``, the other
  ``include`` values (nothing of theirs is ever produced),
  ``stream_options.include_obfuscation``, ``cache_control`` /
  ``prompt_cache_breakpoint`` on text parts.
- Log-probabilities: ``include`` of ``message.output_text.logprobs`` puts
  them on the output text, with ``top_logprobs`` (0..20) alternatives per
  token.
- ``max_tool_calls`` (>= 1) caps the function calls of one response: a
  forced choice ends the turn after that many (without it, the model's
  ``max_tool_calls_per_turn``), and under ``auto`` later calls are dropped.
- Refused (400 naming the field): ``truncation: "auto"`` (mlxd never drops
  input to fit), ``moderation``, and every field in no official spec.

:func:`gateway.responses.translate.to_generate_request` turns a decoded
request into the worker's :class:`~shared.protocol.GenerateRequest` (one
choice); :func:`~gateway.responses.translate.response_settings` gives the
settings the response echoes, :func:`~gateway.responses.translate.output_options`
how it renders its items and :func:`~gateway.responses.translate.dropped_tools`
which tools were dropped.
"""

from __future__ import annotations

from typing import Annotated, Union

import msgspec
from msgspec import UNSET, Meta, Raw, UnsetType

from gateway.frontend.validation import (
    MAX_CONTENT_PARTS,
    MAX_METADATA_VALUE_CHARS,
    MAX_TEXT_CHARS,
    MAX_TOOLS,
    MAX_TOP_LOGPROBS,
    Identifier,
    JSONObject,
    MaxTokens,
    Metadata,
    ModelName,
    SchemaName,
    ShortText,
    Temperature,
    Text,
    TopP,
)
from gateway.openai.schema import CacheControl, PromptCacheOptions
from gateway.responses.tools import ToolParam

MAX_INPUT_ITEMS = 4096
"""Most items in ``input``."""
MAX_TOOL_CALLS = 2**31 - 1
"""Type bound of ``max_tool_calls``."""
MAX_INCLUDE = 64
"""Most ``include`` (and ``context_management``) entries."""
MAX_CLIENT_METADATA = 64
"""Most ``client_metadata`` pairs."""

# --- field types (the rest from gateway.frontend.validation) -------------------

ClientMetadata = Annotated[
    dict[Annotated[str, Meta(max_length=MAX_METADATA_VALUE_CHARS)], Annotated[str, Meta(max_length=MAX_TEXT_CHARS)]],
    Meta(max_length=MAX_CLIENT_METADATA),
]


class ContentPartParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One content part of an input item (message content, reasoning
    content or summary, function-call output).

    Every field of the OpenAI part types is recognised so a part is judged
    by its ``type`` (see :data:`_PART_FIELDS`); images and audio where a
    message may not carry them, and files, are refused by type, and so is a video part (``input_video`` / ``video_url``
    with a ``video_url``), which the Responses API does not have.
    """

    type: ShortText
    text: Text | UnsetType = UNSET
    refusal: Text | UnsetType = UNSET
    annotations: Raw | UnsetType = UNSET
    logprobs: Raw | UnsetType = UNSET
    prompt_cache_breakpoint: Raw | UnsetType = UNSET
    cache_control: CacheControl | None | UnsetType = UNSET
    image_url: Raw | UnsetType = UNSET
    file_id: Raw | UnsetType = UNSET
    detail: Raw | UnsetType = UNSET
    file_data: Raw | UnsetType = UNSET
    file_url: Raw | UnsetType = UNSET
    filename: Raw | UnsetType = UNSET
    input_audio: Raw | UnsetType = UNSET
    video_url: Raw | UnsetType = UNSET


Parts = Annotated[list[ContentPartParam], Meta(max_length=MAX_CONTENT_PARTS)]


class InputItemParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One element of ``input``: the union of the fields of the supported
    item types, judged by ``type`` (absent: a message) against
    ``responses_input_checks._ITEM_FIELDS``; a null field counts as absent."""

    type: ShortText | UnsetType = UNSET
    role: ShortText | UnsetType = UNSET
    content: Union[Text, Parts, None, UnsetType] = UNSET
    id: ShortText | None | UnsetType = UNSET
    status: ShortText | None | UnsetType = UNSET
    phase: ShortText | None | UnsetType = UNSET
    call_id: Identifier | None | UnsetType = UNSET
    name: ShortText | None | UnsetType = UNSET
    arguments: Text | UnsetType = UNSET
    output: Union[Text, Parts, UnsetType] = UNSET
    summary: Parts | UnsetType = UNSET
    encrypted_content: Text | None | UnsetType = UNSET
    input: Text | UnsetType = UNSET
    namespace: ShortText | None | UnsetType = UNSET
    caller: Raw | UnsetType = UNSET
    tools: Annotated[list[ToolParam], Meta(max_length=MAX_TOOLS)] | UnsetType = UNSET


class ToolChoiceParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An object ``tool_choice``: only ``{"type": "function", "name"}`` is
    supported; the fields of the other OpenAI forms are recognised so they
    are refused by type."""

    type: ShortText
    name: ShortText | UnsetType = UNSET
    mode: Raw | UnsetType = UNSET
    tools: Raw | UnsetType = UNSET
    server_label: Raw | UnsetType = UNSET


class TextFormatParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``text.format``: ``type`` ``text``, ``json_object`` or ``json_schema``
    (only the latter with ``name``, ``schema``, ``description``, ``strict``)."""

    type: ShortText
    name: SchemaName | UnsetType = UNSET
    schema: JSONObject | UnsetType = UNSET
    description: Text | None | UnsetType = UNSET
    strict: bool | None | UnsetType = UNSET


class TextParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``text``: the output ``format``; ``verbosity`` (``low``, ``medium``,
    ``high``) is echoed and has no effect."""

    format: TextFormatParam | None = None
    verbosity: ShortText | None = None


class ReasoningParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``reasoning``: ``effort`` picks thinking on/off; ``summary`` (or the
    deprecated ``generate_summary``) puts the reasoning text in the
    reasoning item's summary; ``context`` and ``mode`` are echoed."""

    effort: ShortText | None = None
    summary: ShortText | None = None
    generate_summary: ShortText | None = None
    context: ShortText | None = None
    mode: ShortText | None = None


class ContextManagementParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One ``context_management`` entry: accepted, no effect (mlxd never
    compacts; an input too long for the context is a 400)."""

    type: ShortText
    compact_threshold: Annotated[int, Meta(ge=0)] | None = None


class StreamOptionsParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``stream_options``: ``include_obfuscation`` is accepted; mlxd never
    adds obfuscation."""

    include_obfuscation: bool | None = None


class ResponsesRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/responses`` body.

    Produced only by :func:`decode_responses_request`, which guarantees
    every constraint in the module docstring.
    """

    model: ModelName
    input: Union[Text, Annotated[list[InputItemParam], Meta(max_length=MAX_INPUT_ITEMS)]]
    instructions: Text | None = None
    max_output_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    tools: Annotated[list[ToolParam], Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: Union[ShortText, ToolChoiceParam, None] = None
    parallel_tool_calls: bool | None = None
    max_tool_calls: Annotated[int, Meta(ge=1, le=MAX_TOOL_CALLS)] | None = None
    text: TextParam | None = None
    reasoning: ReasoningParam | None = None
    stream: bool | None = None
    stream_options: StreamOptionsParam | None = None
    store: bool | None = None
    background: bool | None = None
    previous_response_id: ShortText | None = None
    conversation: Raw | None = None
    prompt: Raw | None = None
    metadata: Metadata | None = None
    user: ShortText | None = None
    safety_identifier: ShortText | None = None
    prompt_cache_key: ShortText | None = None
    truncation: ShortText | None = None
    include: Annotated[list[ShortText], Meta(max_length=MAX_INCLUDE)] | None = None
    top_logprobs: Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    service_tier: ShortText | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: ShortText | None = None
    context_management: Annotated[list[ContextManagementParam], Meta(max_length=MAX_INCLUDE)] | None = None
    client_metadata: ClientMetadata | None = None
    moderation: Raw | None = None
    background_options: Raw | None = None
    access_programs: Raw | None = None
    image: Raw | None = None
