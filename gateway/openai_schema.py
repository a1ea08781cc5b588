"""Request bodies of ``POST /v1/chat/completions`` and ``POST /v1/completions``.

Decoding is strict: the body must be one JSON object, no value is coerced
(``"1"`` is not a number, ``1.5`` is not an integer), every number has bounds,
every string and list has a maximum length, and unknown fields are refused by
name. Every field of OpenAI's current request types is honoured, accepted
with a stated local meaning, or refused with a 400 that says why
(``docs/api/chat-completions.md`` and ``completions.md`` list them all);
nothing is silently ignored. Every refusal is an
:class:`~gateway.errors.APIError` 400 whose ``param`` is the offending
field path, e.g. ``messages[0].content``.

Accepted without an effect on the answer, by design (:func:`_check_services`
checks their values): ``store``, ``metadata``, ``service_tier`` (answers say
``default``), ``prompt_cache_key`` / ``prompt_cache_options`` /
``prompt_cache_retention`` and text parts' ``prompt_cache_breakpoint`` /
``cache_control`` (prefix caching is automatic), ``safety_identifier``,
``user``, ``verbosity``, ``prediction`` (it only ever speeds OpenAI up),
``modalities: ["text"]`` and ``stream_options.include_obfuscation``.
``web_search_options`` is accepted and reported as a dropped tool
(:func:`dropped_tools`). The legacy ``functions`` / ``function_call``
work like tools (:func:`legacy_functions`; the answer then uses the legacy
shape); ``custom`` tools are offered in their function form
(:mod:`gateway.custom_tools`) and answered as custom tool calls, but not
streamed. Refused: audio output (``audio``, ``modalities`` with ``audio``),
``moderation``, streamed custom tools, completions ``suffix``,
``best_of`` > ``n`` with ``stream``, and ``echo`` with token ids or
``logprobs`` (``echo`` on a text prompt is honoured,
:func:`echoed_prompt`; ``best_of`` generates :func:`candidates` choices).

Supported beyond the basics: ``n`` choices (bounded per model by
:func:`check_limits`, which needs the resolved model's limits), chat
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

:func:`to_generate_request` turns a decoded request into the worker's
:class:`~shared.protocol.GenerateRequest`.

The bounded field types, body decoding and the wording of refusals are
shared by every protocol (:mod:`gateway.validation`). The Responses body
(:mod:`gateway.responses_schema`) also reuses what applies to it from here:
:class:`CacheControl`, :class:`PromptCacheOptions`,
:func:`check_tool_choice`, :func:`check_service_fields`,
:func:`check_cache_control` and :data:`THINKING_BY_EFFORT`.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Callable, Collection, Mapping, TypeVar, Union

import msgspec
from msgspec import Meta, Raw

from gateway.custom_tools import custom_arguments, custom_tool
from gateway.engine_api import ModelLimits
from gateway.errors import bad_request
from gateway.validation import (
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
    check_finite,
    decode_body,
    is_null,
    not_supported,
    one_of,
)
from shared.protocol import (
    ChatMessage,
    GenerateRequest,
    ResponseFormat,
    SamplingParams,
    Tool,
    ToolCall,
    ToolChoice,
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
    ``{"type": "refusal", "refusal"}`` are supported; the other OpenAI part
    fields are recognised so that such parts are refused by their type
    rather than as unknown fields.
    """

    type: ShortText
    text: Text | None = None
    prompt_cache_breakpoint: PromptCacheBreakpoint | None = None
    cache_control: CacheControl | None = None
    image_url: Raw = NULL
    input_audio: Raw = NULL
    file: Raw = NULL
    refusal: Text | None = None


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
    :mod:`gateway.custom_tools` for what the model sees)."""

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
    :mod:`gateway.dropped_tools`)."""

    search_context_size: ShortText | None = None
    user_location: Raw = NULL


class ChatTemplateKwargs(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``chat_template_kwargs``: only ``enable_thinking`` is accepted (any
    other key is refused by name)."""

    enable_thinking: bool | None = None


class _SamplingFields(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
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


class ChatCompletionRequest(_SamplingFields, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/chat/completions`` body.

    Produced only by :func:`decode_chat_request`, which guarantees every
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


class CompletionRequest(_SamplingFields, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/completions`` body.

    Produced only by :func:`decode_completion_request`; ``prompt`` is then a
    non-empty string, a non-empty list of token ids, or a one-element list
    holding either.
    """

    prompt: Prompt
    echo: bool | None = None
    suffix: Text | None = None
    best_of: Choices | None = None
    logprobs: TopLogprobs | None = None


# --- decoding ----------------------------------------------------------------

_chat_decoder = msgspec.json.Decoder(ChatCompletionRequest)
_completion_decoder = msgspec.json.Decoder(CompletionRequest)


def decode_chat_request(body: bytes) -> ChatCompletionRequest:
    """Decode and fully validate a chat completions body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    req = decode_body(_chat_decoder, body)
    _check_common(req)
    _check_chat(req)
    return req  # type: ignore[return-value]


def decode_completion_request(body: bytes) -> CompletionRequest:
    """Decode and fully validate a (legacy) completions body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    req = decode_body(_completion_decoder, body)
    _check_common(req)
    _check_completion(req)
    return req  # type: ignore[return-value]


# --- checks beyond what the types express -------------------------------------

_FLOAT_FIELDS = (
    "temperature",
    "top_p",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)


SERVICE_TIERS = ("auto", "default", "flex", "scale", "priority", "fast")
"""Accepted ``service_tier`` values (chat and Responses): every request is
served the same way, and responses say ``default``."""

VERBOSITIES = ("low", "medium", "high")
"""Accepted ``verbosity`` / ``text.verbosity`` values (no effect)."""


def check_service_fields(
    service_tier: str | None,
    options: PromptCacheOptions | None,
    retention: str | None,
    verbosity: str | None,
    verbosity_param: str,
) -> None:
    """Check the fields chat and Responses accept without an effect on the
    answer: ``service_tier``, ``prompt_cache_options``,
    ``prompt_cache_retention`` and the verbosity (named
    ``verbosity_param``).

    Raises:
        APIError: 400 naming the first field holding a value outside its
        official set.
    """
    one_of(service_tier, SERVICE_TIERS, "service_tier")
    one_of(retention, ("in_memory", "24h"), "prompt_cache_retention")
    if options is not None:
        one_of(options.mode, ("implicit", "explicit"), "prompt_cache_options.mode")
        one_of(options.ttl, ("30m", "12h"), "prompt_cache_options.ttl")
    one_of(verbosity, VERBOSITIES, verbosity_param)


def check_cache_control(cache_control: CacheControl | None, path: str) -> None:
    """A part's ``cache_control`` is ``{"type": "ephemeral"}`` (``ttl``
    ``5m`` or ``1h``), or absent.

    Raises:
        APIError: 400 naming ``path.cache_control.type`` or ``.ttl``.
    """
    if cache_control is None:
        return
    one_of(cache_control.type, ("ephemeral",), f"{path}.cache_control.type")
    one_of(cache_control.ttl, ("5m", "1h"), f"{path}.cache_control.ttl")


def _check_common(req: _SamplingFields) -> None:
    """Checks shared by both endpoints.

    Raises:
        APIError: 400 for a non-finite float or ``stream_options`` without
        ``stream: true``.
    """
    check_finite(req, _FLOAT_FIELDS)
    if req.logit_bias and not all(math.isfinite(v) for v in req.logit_bias.values()):
        raise bad_request("'logit_bias' values must be finite numbers", "logit_bias")
    if req.stream_options is not None and req.stream is not True:
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")


def _check_chat(req: ChatCompletionRequest) -> None:
    """Chat-only checks: token limits, response format, tools, thinking,
    messages.

    Raises:
        APIError: 400 naming the field.
    """
    if (
        req.max_tokens is not None
        and req.max_completion_tokens is not None
        and req.max_tokens != req.max_completion_tokens
    ):
        raise bad_request(
            "'max_tokens' and 'max_completion_tokens' disagree; send only one",
            "max_completion_tokens",
        )
    if req.top_logprobs is not None and req.logprobs is not True:
        raise bad_request("'top_logprobs' requires 'logprobs' to be true", "top_logprobs")
    _check_min_tokens(req.min_tokens, _chat_max_tokens(req))
    _check_response_format(req.response_format)
    _check_tools(req)
    _check_thinking(req)
    _check_services(req)
    for index, message in enumerate(req.messages):
        _check_message(message, f"messages[{index}]")
    _check_continuation(req)


def _check_services(req: ChatCompletionRequest) -> None:
    """The fields without an effect on the answer hold official values;
    refuse what mlxd cannot do: audio output (``modalities`` with
    ``audio``, ``audio``) and ``moderation``.

    Raises:
        APIError: 400 naming the field.
    """
    check_service_fields(
        req.service_tier, req.prompt_cache_options, req.prompt_cache_retention, req.verbosity, "verbosity"
    )
    for index, modality in enumerate(req.modalities or ()):
        one_of(modality, ("text", "audio"), f"modalities[{index}]")
        if modality == "audio":
            raise not_supported(f"modalities[{index}]", "audio output (mlxd generates text only)", yet=True)
    if not is_null(req.audio):
        raise not_supported("audio", "audio output (mlxd generates text only)", yet=True)
    if not is_null(req.moderation):
        raise bad_request("'moderation' is not supported (mlxd runs no moderation model)", "moderation")
    if req.prediction is not None:
        one_of(req.prediction.type, ("content",), "prediction.type")
        for index, part in enumerate(req.prediction.content if isinstance(req.prediction.content, list) else ()):
            _check_part(part, f"prediction.content[{index}]", ("text",))
    if req.web_search_options is not None:
        size = req.web_search_options.search_context_size
        one_of(size, VERBOSITIES, "web_search_options.search_context_size")


def dropped_tools(req: ChatCompletionRequest) -> list[str]:
    """The hosted tools a chat request asked for that mlxd cannot run
    (``web_search`` for ``web_search_options``)."""
    return ["web_search"] if req.web_search_options is not None else []


def _check_continuation(req: ChatCompletionRequest) -> None:
    """``continue_final_message`` needs a final assistant message of text
    only, one choice and no forced tool call; ``add_generation_prompt``
    false needs ``continue_final_message``.

    Raises:
        APIError: 400 naming the field.
    """
    if req.add_generation_prompt is False and not req.continue_final_message:
        raise not_supported(
            "add_generation_prompt", "'add_generation_prompt': false without 'continue_final_message'", yet=True
        )
    if not req.continue_final_message:
        return
    if req.add_generation_prompt is True:
        raise bad_request(
            "'continue_final_message' cannot be combined with 'add_generation_prompt': true", "add_generation_prompt"
        )
    last = req.messages[-1]
    path = f"messages[{len(req.messages) - 1}]"
    if last.role != "assistant":
        raise bad_request("'continue_final_message' needs a final assistant message", f"{path}.role")
    if last.tool_calls is not None:
        raise not_supported(f"{path}.tool_calls", "continuing a final message with tool calls", yet=True)
    if (req.n or 1) > 1:
        raise not_supported("n", "'n' > 1 with 'continue_final_message'", yet=True)
    if req.tool_choice is not None and req.tool_choice not in ("auto", "none"):
        raise not_supported("tool_choice", "a forced tool call with 'continue_final_message'", yet=True)
    if req.response_format is not None and req.response_format.type != "text":
        raise not_supported("response_format", "a structured response_format with 'continue_final_message'", yet=True)


def _check_response_format(fmt: ResponseFormatParam | None) -> None:
    """Accept a ``text``, ``json_object`` or ``json_schema`` response format.

    Raises:
        APIError: 400 naming ``response_format.type`` (unknown type),
        ``response_format.json_schema`` (missing for, or sent without, type
        ``json_schema``) or ``response_format.json_schema.schema`` (missing).
    """
    if fmt is None:
        return
    if fmt.type not in ("text", "json_object", "json_schema"):
        raise bad_request(
            f"Invalid response_format type '{fmt.type}'; expected text, json_object or json_schema",
            "response_format.type",
        )
    if fmt.type != "json_schema":
        if fmt.json_schema is not None:
            raise bad_request(
                "'json_schema' is only allowed with response_format type 'json_schema'",
                "response_format.json_schema",
            )
        return
    if fmt.json_schema is None:
        raise bad_request("Missing required parameter: 'response_format.json_schema'", "response_format.json_schema")
    if fmt.json_schema.schema is None:
        raise bad_request(
            "Missing required parameter: 'response_format.json_schema.schema'",
            "response_format.json_schema.schema",
        )


def _check_tools(req: ChatCompletionRequest) -> None:
    """Check ``tools`` and ``tool_choice``, or the legacy ``functions`` and
    ``function_call`` (:func:`_check_functions`).

    Raises:
        APIError: 400 naming ``tools[i].type`` (``custom``, or another
        type), ``tools[i].function``, ``tools[i].function.name``
        (duplicate), the offending part of ``tool_choice``, or the legacy
        field at fault.
    """
    if legacy_functions(req):
        _check_functions(req)
        return
    kinds: dict[str, str] = {}
    for index, tool in enumerate(req.tools or ()):
        path = f"tools[{index}]"
        kind, name = _tool_ref(tool.type, tool.function, tool.custom, path, "tool")
        if kind == "custom":
            _check_custom(tool.custom, req, path)  # type: ignore[arg-type]
        if name in kinds:
            raise bad_request(f"Tool name '{name}' is used twice", f"{path}.{kind}.name")
        kinds[name] = kind
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam) and choice.type == "allowed_tools":
        _allowed_names(choice, kinds)
        return
    custom = isinstance(choice, ToolChoiceParam) and choice.type == "custom"
    name_param = "tool_choice.custom.name" if custom else "tool_choice.function.name"
    check_tool_choice(choice, kinds, lambda c: _chosen_tool(c, kinds), name_param)


def _check_custom(tool: CustomToolParam, req: ChatCompletionRequest, path: str) -> None:
    """A custom tool has a ``text`` or complete ``grammar`` format and is
    not streamed.

    Raises:
        APIError: 400 naming ``path.type`` (``stream`` is true: OpenAI's
        chat stream schema has no custom tool-call delta) or the format
        field at fault.
    """
    if req.stream:
        raise bad_request(
            "custom tools cannot be streamed on chat completions: OpenAI's chat stream schema has no custom "
            "tool-call delta; send stream: false, or use /v1/responses",
            f"{path}.type",
        )
    fmt = tool.format
    if fmt is None:
        return
    one_of(fmt.type, ("text", "grammar"), f"{path}.custom.format.type")
    if fmt.type == "grammar" and fmt.grammar is None:
        raise bad_request(
            f"Missing required parameter: '{path}.custom.format.grammar'", f"{path}.custom.format.grammar"
        )
    if fmt.type == "text" and fmt.grammar is not None:
        raise bad_request("A text format has no 'grammar'", f"{path}.custom.format.grammar")
    if fmt.grammar is not None:
        one_of(fmt.grammar.syntax, ("lark", "regex"), f"{path}.custom.format.grammar.syntax")


def _tool_ref(kind: str, function: Any, custom: Any, path: str, what: str) -> tuple[str, str]:
    """``(kind, name)`` of a tool, tool call or tool reference at ``path``:
    ``type: "function"`` with its ``function`` or ``type: "custom"`` with
    its ``custom``.

    Raises:
        APIError: 400 param ``path.type`` (another type) or
        ``path.function`` / ``path.custom`` (missing).
    """
    if kind == "custom":
        if custom is None:
            raise bad_request(f"Missing required parameter: '{path}.custom'", f"{path}.custom")
        return kind, custom.name
    _check_function_type(kind, function, path, what)
    return kind, function.name


def custom_tool_names(req: ChatCompletionRequest) -> frozenset[str]:
    """The names of the request's custom tools (their calls are answered
    as ``custom`` tool calls)."""
    return frozenset(tool.custom.name for tool in req.tools or () if tool.type == "custom" and tool.custom)


def legacy_functions(req: ChatCompletionRequest) -> bool:
    """Whether ``req`` uses the legacy ``functions`` / ``function_call``
    (its answer then has a message ``function_call`` instead of
    ``tool_calls``, and finish reason ``function_call``)."""
    return req.functions is not None or req.function_call is not None


def _check_functions(req: ChatCompletionRequest) -> None:
    """The legacy ``functions`` (unique names) and ``function_call``
    (``none``, ``auto`` or ``{"name"}`` of one of them); neither mixed
    with ``tools`` / ``tool_choice``.

    Raises:
        APIError: 400 naming the field.
    """
    for name in ("tools", "tool_choice"):
        if getattr(req, name) is not None:
            raise bad_request(f"'{name}' cannot be combined with the legacy 'functions' / 'function_call'", name)
    seen: set[str] = set()
    for index, function in enumerate(req.functions or ()):
        if function.name in seen:
            raise bad_request(f"Function name '{function.name}' is used twice", f"functions[{index}].name")
        seen.add(function.name)
    choice = req.function_call
    if isinstance(choice, str) and choice not in ("none", "auto"):
        raise bad_request(
            f"Invalid value for 'function_call': '{choice}'; expected none, auto or {{\"name\"}}", "function_call"
        )
    if choice is not None and choice != "none" and not seen:
        raise bad_request("'function_call' is only allowed when 'functions' are specified", "function_call")
    if isinstance(choice, ChosenFunction) and choice.name not in seen:
        raise bad_request(f"function_call names '{choice.name}', which is not among 'functions'", "function_call.name")


def _allowed_names(choice: ToolChoiceParam, tool_names: Mapping[str, str]) -> set[str]:
    """The tool names an ``allowed_tools`` choice keeps.

    Raises:
        APIError: 400 param ``tool_choice.allowed_tools`` (missing, or no
        tools at all), ``tool_choice.allowed_tools.mode`` (not ``auto`` or
        ``required``) or ``tool_choice.allowed_tools.tools[i]...`` (not a
        tool of that kind among ``tools``, whose names map to their kinds
        in ``tool_names``).
    """
    allowed = choice.allowed_tools
    if allowed is None:
        raise bad_request("Missing required parameter: 'tool_choice.allowed_tools'", "tool_choice.allowed_tools")
    if not tool_names:
        raise bad_request("'tool_choice' is only allowed when 'tools' are specified", "tool_choice")
    one_of(allowed.mode, ("auto", "required"), "tool_choice.allowed_tools.mode")
    names: set[str] = set()
    for index, ref in enumerate(allowed.tools):
        path = f"tool_choice.allowed_tools.tools[{index}]"
        kind, name = _tool_ref(ref.type, ref.function, ref.custom, path, "allowed tool")
        if tool_names.get(name) != kind:
            raise bad_request(f"allowed_tools names {kind} '{name}', which is not among 'tools'", f"{path}.{kind}.name")
        names.add(name)
    return names


def _check_function_type(kind: str, function: object, path: str, what: str) -> None:
    """Require a ``type: "function"`` item (a tool or a tool call at ``path``)
    that has its ``function``.

    Raises:
        APIError: 400 param ``path.type`` or ``path.function``.
    """
    if kind != "function":
        raise not_supported(f"{path}.type", f"{what} type '{kind}'", yet=True)
    if function is None:
        raise bad_request(f"Missing required parameter: '{path}.function'", f"{path}.function")


TOOL_CHOICES = ("none", "auto", "required")
"""The string values of ``tool_choice`` (chat and Responses)."""

_Choice = TypeVar("_Choice")


def check_tool_choice(
    choice: str | _Choice | None,
    tool_names: Collection[str],
    chosen: Callable[[_Choice], str],
    name_param: str,
) -> None:
    """Check a request's ``tool_choice`` against the names of its tools.

    ``choice`` is absent (None), one of :data:`TOOL_CHOICES`, or an object
    choice, which ``chosen`` checks (raising its own 400 for a malformed
    one) and reduces to the name of the function it forces; ``name_param``
    is the field path such a name is reported at when it is not among
    ``tool_names``. Absent and ``"none"`` are always fine.

    Raises:
        APIError: 400 param ``tool_choice`` for an unknown string value or
        for a choice other than ``"none"`` when there are no tools; the
        400 of ``chosen``; 400 param ``name_param`` for a function name not
        among the tools. Checked in that order.
    """
    if choice is None or choice == "none":
        return
    name: str | None = None
    if isinstance(choice, str):
        if choice not in TOOL_CHOICES:
            raise bad_request(
                f"Invalid value for 'tool_choice': '{choice}'; expected none, auto, required or a function",
                "tool_choice",
            )
    else:
        name = chosen(choice)
    if not tool_names:
        raise bad_request("'tool_choice' is only allowed when 'tools' are specified", "tool_choice")
    if name is not None and name not in tool_names:
        raise bad_request(f"tool_choice names function '{name}', which is not among 'tools'", name_param)


def _chosen_tool(choice: ToolChoiceParam, kinds: Mapping[str, str]) -> str:
    """The tool an object ``tool_choice`` forces: ``{"type": "function",
    "function": {"name"}}`` or ``{"type": "custom", "custom": {"name"}}``
    (``kinds`` maps the tools' names to their kinds).

    Raises:
        APIError: 400 param ``tool_choice.type`` (another type, or a name
        of a tool of the other kind), ``tool_choice.function`` or
        ``tool_choice.custom``.
    """
    kind, name = _tool_ref(choice.type, choice.function, choice.custom, "tool_choice", "tool_choice")
    if name in kinds and kinds[name] != kind:
        raise bad_request(f"tool_choice names '{name}', which is a {kinds[name]} tool", "tool_choice.type")
    return name


THINKING_BY_EFFORT = {
    "none": False,
    "minimal": False,
    "low": True,
    "medium": True,
    "high": True,
    "xhigh": True,
    "max": True,
}
"""``reasoning_effort`` (and Responses ``reasoning.effort``) -> whether the
model's reasoning mode is on (there is no budget)."""


def _check_thinking(req: ChatCompletionRequest) -> None:
    """Check ``reasoning_effort`` and that it agrees with
    ``chat_template_kwargs.enable_thinking``.

    Raises:
        APIError: 400 param ``reasoning_effort`` (unknown value) or
        ``chat_template_kwargs.enable_thinking`` (contradicts it).
    """
    effort = req.reasoning_effort
    if effort is not None and effort not in THINKING_BY_EFFORT:
        raise bad_request(
            f"Invalid value for 'reasoning_effort': '{effort}'; expected one of {', '.join(THINKING_BY_EFFORT)}",
            "reasoning_effort",
        )
    enabled = req.chat_template_kwargs.enable_thinking if req.chat_template_kwargs else None
    if effort is not None and enabled is not None and enabled != THINKING_BY_EFFORT[effort]:
        raise bad_request(
            f"'chat_template_kwargs.enable_thinking' ({str(enabled).lower()}) contradicts "
            f"'reasoning_effort' ('{effort}'); send only one",
            "chat_template_kwargs.enable_thinking",
        )


_ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}


def _check_message(message: ChatMessageParam, path: str) -> None:
    """Validate one message's role, content and role-specific fields.

    Raises:
        APIError: 400 naming e.g. ``messages[2].content[0].type``.
    """
    if message.role not in _ROLES:
        raise bad_request(
            f"Invalid role '{message.role}'; expected one of {', '.join(_ROLES)}",
            f"{path}.role",
        )
    if not is_null(message.refusal):
        raise not_supported(f"{path}.refusal", "a non-null message 'refusal'", yet=True)
    if message.function_call is not None and message.role != "assistant":
        raise bad_request("Only assistant messages may have 'function_call'", f"{path}.function_call")
    if message.function_call is not None and message.tool_calls:
        raise bad_request("Send either 'tool_calls' or the legacy 'function_call'", f"{path}.function_call")
    if message.role == "function" and message.name is None:
        raise bad_request("Missing required parameter: 'name' (role 'function')", f"{path}.name")
    if not is_null(message.audio):
        raise not_supported(f"{path}.audio", "a message 'audio' (mlxd never produces audio)", yet=True)
    _check_tool_fields(message, path)
    _check_reasoning(message, path)
    if message.content is None and message.role != "assistant":
        raise bad_request(f"'content' is required for role '{message.role}'", f"{path}.content")
    if isinstance(message.content, list):
        kinds = ("text", "refusal") if message.role == "assistant" else ("text",)
        for index, part in enumerate(message.content):
            _check_part(part, f"{path}.content[{index}]", kinds)


def _check_tool_fields(message: ChatMessageParam, path: str) -> None:
    """``tool_calls`` only on assistant messages, each a function call;
    ``tool_call_id`` on, and only on, tool messages.

    Raises:
        APIError: 400 naming the field.
    """
    if message.tool_calls and message.role != "assistant":
        raise bad_request("Only assistant messages may have 'tool_calls'", f"{path}.tool_calls")
    for index, call in enumerate(message.tool_calls or ()):
        _tool_ref(call.type, call.function, call.custom, f"{path}.tool_calls[{index}]", "tool call")
    if message.role == "tool" and message.tool_call_id is None:
        raise bad_request("Missing required parameter: 'tool_call_id' (role 'tool')", f"{path}.tool_call_id")
    if message.role != "tool" and message.tool_call_id is not None:
        raise bad_request("Only tool messages may have 'tool_call_id'", f"{path}.tool_call_id")


def _check_reasoning(message: ChatMessageParam, path: str) -> None:
    """Reasoning only on assistant messages, under one name (or both names
    with the same text).

    Raises:
        APIError: 400 naming the field.
    """
    for name in ("reasoning_content", "reasoning"):
        if getattr(message, name) is not None and message.role != "assistant":
            raise bad_request(f"Only assistant messages may have '{name}'", f"{path}.{name}")
    both = message.reasoning_content is not None and message.reasoning is not None
    if both and message.reasoning_content != message.reasoning:
        raise bad_request("'reasoning_content' and 'reasoning' disagree; send only one", f"{path}.reasoning")


_PART_FIELDS = {
    "text": ("text", "prompt_cache_breakpoint", "cache_control"),
    "refusal": ("refusal",),
}
"""The part types mlxd reads and the fields each may carry (the first is
required)."""


def _check_part(part: ContentPart, path: str, kinds: tuple[str, ...]) -> None:
    """Accept a part of one of ``kinds`` (``text``, ``refusal``) with its
    text and only its own fields; other OpenAI types (images, audio,
    files) are refused as not supported.

    Raises:
        APIError: 400 naming the part's field.
    """
    if part.type not in kinds:
        if part.type in ("image_url", "input_audio", "file"):
            raise not_supported(f"{path}.type", f"content part type '{part.type}' (mlxd is text-only)", yet=True)
        raise bad_request(f"Invalid content part type '{part.type}' here; expected {', '.join(kinds)}", f"{path}.type")
    fields = _PART_FIELDS[part.type]
    for name in part.__struct_fields__:
        value = getattr(part, name)
        given = not is_null(value) if isinstance(value, Raw) else value is not None
        if name != "type" and name not in fields and given:
            raise bad_request(f"Unrecognized field '{name}' in a {part.type} part", f"{path}.{name}")
    if getattr(part, fields[0]) is None:
        raise bad_request(f"A {part.type} content part needs '{fields[0]}'", f"{path}.{fields[0]}")
    check_cache_control(part.cache_control, path)


def _check_completion(req: CompletionRequest) -> None:
    """Completions-only checks: prompt shape and unsupported features.

    Raises:
        APIError: 400 naming the field.
    """
    if req.echo and req.logprobs is not None:
        raise not_supported("echo", "'echo' with 'logprobs' (log-probabilities of prompt tokens)", yet=True)
    if req.suffix is not None:
        raise not_supported("suffix", "suffix", yet=True)
    if req.best_of is not None and (req.n or 1) > req.best_of:
        raise bad_request("'best_of' must be at least 'n'; leave 'best_of' out", "best_of")
    if candidates(req) > (req.n or 1) and req.stream:
        raise bad_request("'best_of' greater than 'n' cannot be streamed", "best_of")
    _check_min_tokens(req.min_tokens, req.max_tokens)
    text, _ = prompt_input(req)
    if req.echo and text is None:
        raise not_supported("echo", "'echo' with a token-id prompt (the gateway does not detokenize)", yet=True)


def echoed_prompt(req: CompletionRequest) -> str:
    """The text each choice of a completions answer starts with: the
    prompt when ``echo`` is true (the checks guarantee a text prompt),
    else nothing."""
    if not req.echo:
        return ""
    text, _ = prompt_input(req)
    return text or ""


def _check_min_tokens(min_tokens: int | None, max_tokens: int | None) -> None:
    """Refuse a ``min_tokens`` above the request's token limit.

    Raises:
        APIError: 400 param ``min_tokens``.
    """
    if min_tokens is not None and max_tokens is not None and min_tokens > max_tokens:
        raise bad_request(
            f"'min_tokens' ({min_tokens}) must not exceed the token limit ({max_tokens})",
            "min_tokens",
        )


def check_limits(req: ChatCompletionRequest | CompletionRequest, model: str, limits: ModelLimits) -> None:
    """Check ``req`` against the limits of its resolved model ``model``.

    Raises:
        APIError: 400 param ``n`` when ``n`` exceeds ``limits.max_n``; the
        message names the limit.
    """
    if req.n is not None and req.n > limits.max_n:
        raise bad_request(
            f"'n' is {req.n} but model '{model}' allows at most {limits.max_n} choice(s) per request",
            "n",
        )
    best_of = req.best_of if isinstance(req, CompletionRequest) else None
    if best_of is not None and best_of > limits.max_n:
        raise bad_request(
            f"'best_of' is {best_of} but model '{model}' allows at most {limits.max_n} choice(s) per request",
            "best_of",
        )


def candidates(req: CompletionRequest) -> int:
    """How many completions a completions request generates: ``best_of``
    (the answer keeps the ``n`` with the highest mean token
    log-probability), else ``n``."""
    return max(req.best_of or 1, req.n or 1)


def prompt_input(req: CompletionRequest) -> tuple[str | None, list[int] | None]:
    """Return ``(text, None)`` or ``(None, token_ids)`` for ``req.prompt``.

    Raises:
        APIError: 400 param ``prompt`` for an empty prompt, several prompts
        ("batched prompts are not supported") or a mixed list.
    """
    prompt = req.prompt
    if isinstance(prompt, str):
        return _non_empty_text(prompt), None
    if not prompt:
        raise bad_request("'prompt' must not be empty", "prompt")
    if all(type(item) is int for item in prompt):
        return None, prompt  # type: ignore[return-value]
    if any(type(item) is int for item in prompt):
        raise bad_request("'prompt' mixes token ids with other values", "prompt")
    if len(prompt) > 1:
        raise bad_request("batched prompts are not supported", "prompt")
    only = prompt[0]
    if isinstance(only, str):
        return _non_empty_text(only), None
    if not only:
        raise bad_request("'prompt' must not be empty", "prompt")
    return None, only


def _non_empty_text(text: str) -> str:
    """Return ``text``; refuse an empty prompt string."""
    if not text:
        raise bad_request("'prompt' must not be empty", "prompt")
    return text


# --- translation ---------------------------------------------------------------


def _stop_list(stop: str | list[str] | None) -> list[str]:
    """Normalise ``stop`` to a list."""
    if stop is None:
        return []
    return [stop] if isinstance(stop, str) else list(stop)


def _chat_max_tokens(req: ChatCompletionRequest) -> int | None:
    """A chat request's token limit (``max_completion_tokens`` wins; the
    checks guarantee the two agree when both are set)."""
    return req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens


def _logprobs(req: ChatCompletionRequest | CompletionRequest) -> tuple[bool, int]:
    """``(on, alternatives)`` for the worker: chat ``logprobs`` and
    ``top_logprobs``, or the legacy completions ``logprobs`` count."""
    if isinstance(req, ChatCompletionRequest):
        return bool(req.logprobs), req.top_logprobs or 0
    ranked = candidates(req) > (req.n or 1)  # ranking the candidates needs their log-probabilities
    return req.logprobs is not None or ranked, req.logprobs or 0


def _sampling(req: ChatCompletionRequest | CompletionRequest, max_tokens: int | None) -> SamplingParams:
    """Build the worker's sampling settings. Unset ``temperature``,
    ``top_p``, ``top_k``, ``min_p`` and ``repetition_penalty`` stay None
    (the worker applies the model's defaults); ``top_k`` -1 means off (0);
    other unset fields take OpenAI's defaults (no penalties, no
    log-probabilities)."""
    logprobs, top_logprobs = _logprobs(req)
    top_k = None if req.top_k is None else max(req.top_k, 0)
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=req.temperature,
        top_p=req.top_p,
        top_k=top_k,
        min_p=req.min_p,
        seed=req.seed,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=req.repetition_penalty,
        logit_bias=dict(req.logit_bias or {}),
        stop=_stop_list(req.stop),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        ignore_eos=bool(req.ignore_eos),
        min_tokens=req.min_tokens or 0,
        speculative=req.speculative is not False,
    )


def _flatten(content: str | list[ContentPart] | None) -> str:
    """Return message content as one string (text and refusal parts
    concatenated)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text or part.refusal or "" for part in content)


def _tool_calls(message: ChatMessageParam, index: int) -> list[ToolCall] | None:
    """An assistant message's tool calls for the worker (None when none);
    a legacy ``function_call`` becomes one call with id
    ``call_function_<index>`` (``index``: the message's position)."""
    if message.function_call is not None:
        called = message.function_call
        return [ToolCall(id=f"call_function_{index}", name=called.name, arguments=called.arguments)]
    if not message.tool_calls:
        return None
    return [
        ToolCall(id=call.id, name=call.custom.name, arguments=custom_arguments(call.custom.input))
        if call.custom is not None
        else ToolCall(id=call.id, name=call.function.name, arguments=call.function.arguments)  # type: ignore[union-attr]
        for call in message.tool_calls
    ]


def _chat_messages(req: ChatCompletionRequest) -> list[ChatMessage]:
    """The request's messages for the worker: roles normalised, content
    flattened, tool calls and reasoning carried over, and a tool message's
    missing ``name`` filled in from the earlier call it answers."""
    call_names: dict[str, str] = {}
    unanswered: dict[str, str] = {}  # legacy function name -> id of its latest call
    messages = []
    for index, m in enumerate(req.messages):
        calls = _tool_calls(m, index)
        call_names.update((call.id, call.name) for call in calls or ())
        if m.function_call is not None and calls:
            unanswered[calls[0].name] = calls[0].id
        name, call_id = m.name, m.tool_call_id
        if m.role == "tool" and name is None:
            name = call_names.get(m.tool_call_id or "")
        if m.role == "function":
            call_id = unanswered.pop(m.name or "", f"call_function_{index}")
        messages.append(
            ChatMessage(
                role=_ROLES[m.role],
                content=_flatten(m.content),
                name=name,
                tool_calls=calls,
                tool_call_id=call_id,
                reasoning=m.reasoning_content if m.reasoning_content is not None else m.reasoning,
            )
        )
    return messages


def _tools(req: ChatCompletionRequest) -> list[Tool] | None:
    """The request's tools for the worker (None when it has none): all of
    them, or those an ``allowed_tools`` choice keeps; the legacy
    ``functions``."""
    if req.functions:
        return [
            Tool(name=f.name, description=f.description or "", parameters=f.parameters or {}) for f in req.functions
        ]
    if not req.tools:
        return None
    keep: set[str] | None = None
    choice = req.tool_choice
    if isinstance(choice, ToolChoiceParam) and choice.allowed_tools is not None:
        keep = {(ref.custom or ref.function).name for ref in choice.allowed_tools.tools}  # type: ignore[union-attr]
    tools = [_worker_tool(tool) for tool in req.tools]
    return [tool for tool in tools if keep is None or tool.name in keep] or None


def _worker_tool(tool: ToolParam) -> Tool:
    """One checked tool as the worker sees it (a custom tool in its
    function form)."""
    if tool.custom is not None and tool.type == "custom":
        grammar = tool.custom.format.grammar if tool.custom.format is not None else None
        syntax = None if grammar is None else grammar.syntax
        definition = None if grammar is None else grammar.definition
        return custom_tool(tool.custom.name, tool.custom.description, syntax, definition)
    function = tool.function
    return Tool(name=function.name, description=function.description or "", parameters=function.parameters or {})  # type: ignore[union-attr]


def _tool_choice(req: ChatCompletionRequest) -> tuple[ToolChoice, str | None]:
    """``(tool_choice, tool_choice_name)`` for the worker. Unset:
    ``"auto"`` with tools, ``"none"`` without."""
    if legacy_functions(req):
        legacy = req.function_call
        if isinstance(legacy, ChosenFunction):
            return "function", legacy.name
        return (legacy or ("auto" if req.functions else "none")), None  # type: ignore[return-value]
    choice = req.tool_choice
    if choice is None:
        return ("auto" if req.tools else "none"), None
    if isinstance(choice, ToolChoiceParam):
        if choice.allowed_tools is not None:
            mode = choice.allowed_tools.mode if choice.allowed_tools.tools else "none"
            return mode, None  # type: ignore[return-value]
        return "function", (choice.custom or choice.function).name  # type: ignore[union-attr]
    return choice, None  # type: ignore[return-value]


def _response_format(req: ChatCompletionRequest) -> ResponseFormat | None:
    """The worker's output constraint (None for none or ``text``)."""
    fmt = req.response_format
    if fmt is None or fmt.type == "text":
        return None
    if fmt.type == "json_object":
        return ResponseFormat(type="json_object")
    schema = fmt.json_schema
    return ResponseFormat(type="json_schema", schema=schema.schema, strict=bool(schema.strict))  # type: ignore[union-attr]


def _thinking(req: ChatCompletionRequest) -> bool | None:
    """Whether the model's reasoning mode is on (None: template default);
    the checks guarantee both sources agree when both are set."""
    if req.chat_template_kwargs is not None and req.chat_template_kwargs.enable_thinking is not None:
        return req.chat_template_kwargs.enable_thinking
    if req.reasoning_effort is not None:
        return THINKING_BY_EFFORT[req.reasoning_effort]
    return None


def _chat_generate_request(req: ChatCompletionRequest, request_id: str) -> GenerateRequest:
    """:func:`to_generate_request` for a chat request."""
    tool_choice, tool_choice_name = _tool_choice(req)
    return GenerateRequest(
        request_id=request_id,
        sampling=_sampling(req, _chat_max_tokens(req)),
        messages=_chat_messages(req),
        n=req.n or 1,
        tools=_tools(req),
        tool_choice=tool_choice,
        tool_choice_name=tool_choice_name,
        parallel_tool_calls=req.parallel_tool_calls is not False and not legacy_functions(req),
        response_format=_response_format(req),
        thinking=_thinking(req),
        continue_final=bool(req.continue_final_message),
    )


def to_generate_request(req: ChatCompletionRequest | CompletionRequest, request_id: str) -> GenerateRequest:
    """Translate a validated request into the worker's ``GenerateRequest``.

    Chat requests carry ``messages`` plus tools, tool choice, response
    format and thinking (see the module docstring); completions carry
    ``prompt`` or ``prompt_token_ids``. ``max_tokens`` stays None when the
    client set no limit (the worker applies its default). ``n`` defaults to
    1; ``timeout`` is left None for the engine to fill in.
    """
    if isinstance(req, ChatCompletionRequest):
        return _chat_generate_request(req, request_id)
    text, token_ids = prompt_input(req)
    return GenerateRequest(
        request_id=request_id,
        sampling=_sampling(req, req.max_tokens),
        prompt=text,
        prompt_token_ids=token_ids,
        n=candidates(req),
    )


def include_usage(req: ChatCompletionRequest | CompletionRequest) -> bool:
    """Whether a streamed response must end with a usage chunk."""
    return bool(req.stream and req.stream_options is not None and req.stream_options.include_usage)
