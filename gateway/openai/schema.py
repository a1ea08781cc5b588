"""Request bodies of ``POST /v1/chat/completions`` and ``POST /v1/completions``:
the msgspec Struct shapes (declarative; the checks are in
:mod:`gateway.openai.checks` and :mod:`gateway.openai.tool_checks`, the
translation to the worker's request in :mod:`gateway.openai.translate`).

Decoding is strict: the body must be one JSON object, no value is coerced
(``"1"`` is not a number, ``1.5`` is not an integer), every number has bounds,
every string and list has a maximum length, and unknown fields are refused by
name. Every field of OpenAI's current request types is honoured, accepted
with a stated local meaning, or refused with a 400 that says why
(``docs/api/chat-completions.md`` and ``completions.md`` list them all);
nothing is silently ignored. Every refusal is an
:class:`~gateway.core.errors.APIError` 400 whose ``param`` is the offending
field path, e.g. ``messages[0].content``.

Accepted without an effect on the answer, by design (:func:`gateway.openai.checks.check_service_fields`
checks their values): ``store``, ``metadata``, ``service_tier`` (answers say
``default``), ``prompt_cache_key`` / ``prompt_cache_options`` /
``prompt_cache_retention`` and text parts' ``prompt_cache_breakpoint`` /
``cache_control`` (prefix caching is automatic), ``safety_identifier``,
``user``, ``verbosity``, ``prediction`` (it only ever speeds OpenAI up),
``modalities: ["text"]`` and ``stream_options.include_obfuscation``.
``web_search_options`` is accepted and reported as a dropped tool
(:func:`gateway.openai.checks.dropped_tools`). The legacy ``functions`` / ``function_call``
work like tools (:func:`gateway.openai.tool_checks.legacy_functions`; the answer then uses the legacy
shape); ``custom`` tools are offered in their function form
(:mod:`gateway.frontend.custom_tools`) and answered as custom tool calls, but not
streamed. Refused: audio output (``audio``, ``modalities`` with ``audio``),
``moderation``, streamed custom tools, completions ``suffix``,
``best_of`` > ``n`` with ``stream``, and ``echo`` with token ids or
``logprobs`` (``echo`` on a text prompt is honoured,
:func:`gateway.openai.checks.echoed_prompt`; ``best_of`` generates
:func:`gateway.openai.checks.candidates` choices).

Supported beyond the basics: ``n`` choices (bounded per model by
:func:`gateway.openai.checks.check_limits`, which needs the resolved model's limits), chat
``logprobs``/``top_logprobs`` (0..20 alternatives), completions
``logprobs`` (legacy: an int k in 0..20 turns log-probabilities on with k
alternatives) and the extensions ``ignore_eos``, ``min_tokens`` and
``speculative`` (false: opt out of the model's speculative decoding).

Chat only (the completions endpoint refuses these fields as unknown):

- ``tools``: up to 128 ``{"type": "function", "function": {"name",
  "description", "parameters", "strict"}}`` or ``{"type": "custom",
  "custom": {"name", "description", "format"}}``; names are 1..64
  characters of ``[A-Za-z0-9_-]`` and unique; ``parameters`` must be a
  JSON object (absent: ``{}``). Other tool types are refused. An empty list means no
  tools. ``strict`` is accepted but not forwarded (the wire has no field).
- ``tool_choice``: ``"none"``, ``"auto"``, ``"required"``, ``{"type":
  "function", "function": {"name"}}`` naming one of ``tools``, or
  ``{"type": "allowed_tools", "allowed_tools": {"mode", "tools"}}`` (only
  the listed function tools are offered; ``mode`` ``auto`` or
  ``required``); anything but ``"none"`` needs ``tools``. Default:
  ``"auto"`` with tools, else ``"none"``. ``parallel_tool_calls`` (default
  true) is forwarded. The legacy ``functions`` / ``function_call`` take
  their place when sent (see above).
- Messages: role ``tool`` (needs ``tool_call_id`` and ``content``; its
  ``name`` defaults to the name of the earlier call with that id), assistant
  ``tool_calls`` (``content`` may then be null) and assistant reasoning
  under ``reasoning_content`` or ``reasoning`` (either name; both only if
  equal) become :class:`~shared.protocol.ChatMessage` fields.
- ``response_format``: ``{"type": "text"}`` (no constraint),
  ``{"type": "json_object"}`` or ``{"type": "json_schema", "json_schema":
  {"name", "description", "schema", "strict"}}`` (``name`` 1..64
  characters, ``schema`` a JSON object, required) becomes a
  :class:`~shared.protocol.ResponseFormat`.
- Thinking: ``reasoning_effort`` ``"none"``/``"minimal"`` turn the model's
  reasoning mode off, ``"low"``/``"medium"``/``"high"``/``"xhigh"``/``"max"``
  on (there is no budget); ``chat_template_kwargs`` accepts only ``{"enable_thinking":
  bool}``. If both are set they must agree. Neither: the template default.
- Pre-filled answers (vLLM's extension): ``continue_final_message`` true
  makes the model continue the final message, which must then be an
  assistant message with text only and no tool calls, instead of starting
  a new one; ``add_generation_prompt`` may only be true (the default) or,
  with ``continue_final_message``, false. ``n`` > 1, forced tool calls and
  a structured ``response_format`` are refused with it.

:func:`gateway.openai.translate.to_generate_request` turns a decoded
request into the worker's :class:`~shared.protocol.GenerateRequest`.

The bounded field types, body decoding and the wording of refusals are
shared by every protocol (:mod:`gateway.frontend.validation`). The Responses body
(:mod:`gateway.responses.schema`) also reuses what applies to it from here:
:class:`CacheControl`, :class:`PromptCacheOptions`,
:func:`gateway.openai.tool_checks.check_tool_choice`,
:func:`~gateway.openai.checks.check_service_fields`,
:func:`~gateway.openai.checks.check_cache_control` and
:data:`~gateway.openai.checks.THINKING_BY_EFFORT`.
"""

from __future__ import annotations

from typing import Annotated, Union

import msgspec
from msgspec import Meta, Raw

from gateway.frontend.validation import (
    MAX_CONTENT_PARTS,
    MAX_MESSAGES,
    MAX_TOOLS,
    NULL,
    Choices,
    Identifier,
    JSONObject,
    LogitBias,
    MaxTokens,
    Metadata,
    MinP,
    MinTokens,
    ModelName,
    Penalty,
    Prompt,
    RepetitionPenalty,
    SchemaName,
    Seed,
    ShortText,
    Stop,
    Temperature,
    Text,
    ToolName,
    TopK,
    TopLogprobs,
    TopP,
)


class StreamOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``stream_options``: ``include_usage`` adds a final usage chunk;
    ``include_obfuscation`` is accepted (mlxd never adds obfuscation)."""

    include_usage: bool | None = None
    include_obfuscation: bool | None = None


class CacheControl(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``cache_control`` on a text part (chat and Responses): not in
    OpenAI's spec, but sent by clients that follow the Anthropic /
    OpenRouter convention. Only ``{"type": "ephemeral", "ttl"?}`` is
    accepted; it has no effect, since mlxd's prefix cache is automatic."""

    type: ShortText
    ttl: ShortText | None = None


class PromptCacheBreakpoint(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``prompt_cache_breakpoint`` on a text part: accepted, no effect
    (prefix caching is automatic)."""

    mode: ShortText
    ttl: ShortText | None = None


class ContentPart(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One element of a message's content array.

    ``{"type": "text", "text"}`` (with ``prompt_cache_breakpoint`` or
    ``cache_control``, which have no effect) and, in assistant messages,
    ``{"type": "refusal", "refusal"}`` are supported, and in user messages
    ``image_url``, ``video_url`` (``{"url"}``, the shape vLLM and
    mlx-vlm's server read) and ``input_audio``; the other OpenAI part fields are recognised so
    that such parts are refused by their type rather than as unknown
    fields.
    """

    type: ShortText
    text: Text | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None
    cache_control: CacheControl | None = None
    image_url: Raw = NULL
    input_audio: Raw = NULL
    file: Raw = NULL
    refusal: Text | None = None
    video_url: Raw = NULL


class CalledFunction(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``function`` of a tool call in the history: its name and its
    arguments (JSON text, passed on as sent)."""

    name: Identifier
    arguments: Text


class CalledCustom(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``custom`` of a custom tool call in the history: the tool's name and
    the free-form input it was given."""

    name: Identifier
    input: Text


class ToolCallParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One element of an assistant message's ``tool_calls``: ``type:
    "function"`` with its ``function``, or ``type: "custom"`` with its
    ``custom``."""

    id: Identifier
    type: ShortText
    function: CalledFunction | None = None
    custom: CalledCustom | None = None


class ChatMessageParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One message of a chat request.

    ``role`` is ``system``, ``developer`` (treated as ``system``), ``user``,
    ``assistant`` or ``tool``. ``content`` is a string or a list of text
    parts (an assistant's may also hold refusal parts); it may be null only
    for ``assistant``. An assistant's ``audio`` (a reference to an earlier
    audio answer, which mlxd never gives) is accepted only when null. Only
    an assistant message may carry ``tool_calls`` (an empty list is the
    same as none), the legacy ``function_call`` and reasoning
    (``reasoning_content`` or its alias ``reasoning``); only a ``tool``
    message, and always, ``tool_call_id``. The legacy role ``function``
    (the result of a ``function_call``) needs ``name``. ``refusal`` is
    accepted only when null, so a client can send back a response message
    as it received it.
    """

    role: ShortText
    content: Union[Text, Annotated[list[ContentPart], Meta(min_length=1, max_length=MAX_CONTENT_PARTS)], None] = None
    name: ShortText | None = None
    refusal: Raw = NULL
    tool_calls: Annotated[list[ToolCallParam], Meta(max_length=MAX_TOOLS)] | None = None
    function_call: CalledFunction | None = None
    tool_call_id: Identifier | None = None
    reasoning_content: Text | None = None
    reasoning: Text | None = None
    audio: Raw = NULL


class FunctionParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``function`` of a tool definition; ``parameters`` is its JSON Schema."""

    name: ToolName
    description: Text | None = None
    parameters: JSONObject | None = None
    strict: bool | None = None


class CustomGrammarParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``grammar`` of a custom tool's format: its ``syntax`` (``lark`` or
    ``regex``) and ``definition``."""

    definition: Text
    syntax: ShortText


class CustomFormatParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A custom tool's ``format``: ``{"type": "text"}`` or ``{"type":
    "grammar", "grammar"}``."""

    type: ShortText
    grammar: CustomGrammarParam | None = None


class CustomToolParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``custom`` of a custom tool definition (see
    :mod:`gateway.frontend.custom_tools` for what the model sees)."""

    name: ToolName
    description: Text | None = None
    format: CustomFormatParam | None = None


class ToolParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One element of ``tools``: ``type: "function"`` with its
    ``function``, or ``type: "custom"`` with its ``custom``."""

    type: ShortText
    function: FunctionParam | None = None
    custom: CustomToolParam | None = None


class ChosenFunction(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``function`` of an object ``tool_choice``: the tool to call."""

    name: Identifier


class AllowedToolRef(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One entry of ``allowed_tools.tools``: ``{"type": "function",
    "function": {"name"}}`` or ``{"type": "custom", "custom": {"name"}}``."""

    type: ShortText
    function: ChosenFunction | None = None
    custom: ChosenFunction | None = None


class AllowedToolsParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``allowed_tools`` of a tool choice: the tools the model may use and
    whether it must (``required``) or may (``auto``) call one."""

    mode: ShortText
    tools: Annotated[list[AllowedToolRef], Meta(max_length=MAX_TOOLS)]


class ToolChoiceParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """An object ``tool_choice``: ``{"type": "function", "function":
    {"name"}}``, ``{"type": "custom", "custom": {"name"}}`` or ``{"type":
    "allowed_tools", "allowed_tools": {"mode", "tools"}}``."""

    type: ShortText
    function: ChosenFunction | None = None
    custom: ChosenFunction | None = None
    allowed_tools: AllowedToolsParam | None = None


class JSONSchemaParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``response_format.json_schema``; ``schema`` is required by mlxd (the
    grammar needs it) and must be a JSON object."""

    name: SchemaName
    description: Text | None = None
    schema: JSONObject | None = None
    strict: bool | None = None


class ResponseFormatParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``response_format``: ``type`` ``text``, ``json_object`` or
    ``json_schema`` (the latter, and only it, with ``json_schema``)."""

    type: ShortText
    json_schema: JSONSchemaParam | None = None


MAX_MODALITIES = 2
"""Most ``modalities`` entries."""


class PromptCacheOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``prompt_cache_options`` (chat and Responses): accepted, no effect;
    mlxd's prefix cache is automatic and keeps entries as long as memory
    allows."""

    mode: ShortText | None = None
    ttl: ShortText | None = None
    prewarm: bool | None = None
    comparison_response_id: ShortText | None = None


class PredictionParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``prediction``: ``{"type": "content", "content": text or text
    parts}``. Accepted, no effect: a predicted output only speeds up an
    answer on OpenAI, it never changes it, and mlxd does not use it."""

    type: ShortText
    content: Union[Text, Annotated[list[ContentPart], Meta(max_length=MAX_CONTENT_PARTS)]]


class WebSearchOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``web_search_options``: asks for OpenAI's hosted web search, which
    mlxd cannot run; the request is answered without it and the answer
    says so in the ``x-mlxd-dropped-tools`` header (see
    :mod:`gateway.frontend.dropped_tools`)."""

    search_context_size: ShortText | None = None
    user_location: Raw = NULL


class ChatTemplateKwargs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``chat_template_kwargs``: only ``enable_thinking`` is accepted (any
    other key is refused by name)."""

    enable_thinking: bool | None = None


class SamplingFields(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Fields shared by both endpoints (see the subclasses)."""

    model: ModelName
    max_tokens: MaxTokens | None = None
    temperature: Temperature | None = None
    top_p: TopP | None = None
    top_k: TopK | None = None
    min_p: MinP | None = None
    stop: Stop = None
    seed: Seed | None = None
    presence_penalty: Penalty | None = None
    frequency_penalty: Penalty | None = None
    repetition_penalty: RepetitionPenalty | None = None
    logit_bias: LogitBias | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: ShortText | None = None
    n: Choices | None = None
    ignore_eos: bool | None = None
    min_tokens: MinTokens | None = None
    speculative: bool | None = None


class ChatCompletionRequest(SamplingFields, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/chat/completions`` body.

    Produced only by :func:`gateway.openai.checks.decode_chat_request`, which guarantees every
    constraint in the module docstring; unsupported features hold their
    neutral value.
    """

    messages: Annotated[list[ChatMessageParam], Meta(min_length=1, max_length=MAX_MESSAGES)]
    max_completion_tokens: MaxTokens | None = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None
    response_format: ResponseFormatParam | None = None
    tools: Annotated[list[ToolParam], Meta(max_length=MAX_TOOLS)] | None = None
    tool_choice: Union[ShortText, ToolChoiceParam, None] = None
    parallel_tool_calls: bool | None = None
    functions: Annotated[list[FunctionParam], Meta(max_length=MAX_TOOLS)] | None = None
    function_call: Union[ShortText, ChosenFunction, None] = None
    reasoning_effort: ShortText | None = None
    chat_template_kwargs: ChatTemplateKwargs | None = None
    continue_final_message: bool | None = None
    add_generation_prompt: bool | None = None
    store: bool | None = None
    metadata: Metadata | None = None
    service_tier: ShortText | None = None
    prompt_cache_key: ShortText | None = None
    prompt_cache_options: PromptCacheOptions | None = None
    prompt_cache_retention: ShortText | None = None
    safety_identifier: ShortText | None = None
    verbosity: ShortText | None = None
    prediction: PredictionParam | None = None
    modalities: Annotated[list[ShortText], Meta(max_length=MAX_MODALITIES)] | None = None
    audio: Raw = NULL
    web_search_options: WebSearchOptions | None = None
    moderation: Raw = NULL


class CompletionRequest(SamplingFields, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/completions`` body.

    Produced only by :func:`gateway.openai.checks.decode_completion_request`; ``prompt`` is then a
    non-empty string, a non-empty list of token ids, or a one-element list
    holding either.
    """

    prompt: Prompt
    echo: bool | None = None
    suffix: Text | None = None
    best_of: Choices | None = None
    logprobs: TopLogprobs | None = None
