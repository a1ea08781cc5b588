"""Decoding and checking of chat and completions bodies
(:mod:`gateway.openai.schema` has their shapes; the field rules are in its
docstring).

:func:`decode_chat_request` and :func:`decode_completion_request` decode a
body strictly (:func:`gateway.frontend.validation.decode_body`) and then check what
the types cannot express: finite floats, ``stream_options`` only with
``stream``, the fields accepted without effect (:func:`check_service_fields`),
pre-filled answers, ``response_format``, thinking, messages and their parts
(tools and ``tool_choice``: :mod:`gateway.openai.tool_checks`), and the
completions-only rules. :func:`check_limits` checks ``n`` against the
resolved model. Every refusal is an :class:`~gateway.core.errors.APIError` 400
naming the field. Pure functions, called on the event loop.

Around ~500 lines on purpose: the body's rules in the order they run, one
function each; the tools' rules are their own module.
"""

from __future__ import annotations

import math

import msgspec
from msgspec import Raw

from gateway.core.backend import ModelLimits
from gateway.core.errors import bad_request
from gateway.frontend.validation import check_finite, decode_body, is_null, not_supported, one_of
from gateway.openai.schema import (
    CacheControl,
    ChatCompletionRequest,
    ChatMessageParam,
    CompletionRequest,
    ContentPart,
    PromptCacheOptions,
    ResponseFormatParam,
    SamplingFields,
)
from gateway.openai.tool_checks import check_tools, tool_ref

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


def _check_common(req: SamplingFields) -> None:
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
    _check_min_tokens(req.min_tokens, chat_max_tokens(req))
    _check_response_format(req.response_format)
    check_tools(req)
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


ROLES = {
    "system": "system",
    "developer": "system",
    "user": "user",
    "assistant": "assistant",
    "tool": "tool",
    "function": "tool",
}
"""Accepted message roles, each with the worker role it becomes."""


def _check_message(message: ChatMessageParam, path: str) -> None:
    """Validate one message's role, content and role-specific fields.

    Raises:
        APIError: 400 naming e.g. ``messages[2].content[0].type``.
    """
    if message.role not in ROLES:
        raise bad_request(
            f"Invalid role '{message.role}'; expected one of {', '.join(ROLES)}",
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
        kinds = {"assistant": ("text", "refusal"), "user": ("text", "image_url", "video_url", "input_audio")}.get(
            message.role, ("text",)
        )
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
        tool_ref(call.type, call.function, call.custom, f"{path}.tool_calls[{index}]", "tool call")
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
    "image_url": ("image_url", "cache_control"),
    "video_url": ("video_url", "cache_control"),
    "input_audio": ("input_audio",),
}
"""The part types mlxd reads and the fields each may carry (the first is
required)."""


def _check_part(part: ContentPart, path: str, kinds: tuple[str, ...]) -> None:
    """Accept a part of one of ``kinds`` (``text``, ``refusal``,
    ``image_url``, ``video_url`` and ``input_audio``: user messages only; their values are
    checked when translated, :mod:`gateway.images.parts`) with its own fields only;
    other OpenAI types (audio, files, images elsewhere) are refused as not
    supported.

    Raises:
        APIError: 400 naming the part's field.
    """
    if part.type not in kinds:
        if part.type in ("image_url", "video_url", "input_audio"):
            raise not_supported(f"{path}.type", f"an '{part.type}' part outside a user message")
        if part.type == "file":
            raise not_supported(
                f"{path}.type", f"content part type '{part.type}' (mlxd reads text and images)", yet=True
            )
        raise bad_request(f"Invalid content part type '{part.type}' here; expected {', '.join(kinds)}", f"{path}.type")
    fields = _PART_FIELDS[part.type]
    for name in part.__struct_fields__:
        value = getattr(part, name)
        given = not is_null(value) if isinstance(value, Raw) else value is not None
        if name != "type" and name not in fields and given:
            raise bad_request(f"Unrecognized field '{name}' in a {part.type} part", f"{path}.{name}")
    required = getattr(part, fields[0])
    if required is None or (isinstance(required, Raw) and is_null(required)):
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


def chat_max_tokens(req: ChatCompletionRequest) -> int | None:
    """A chat request's token limit (``max_completion_tokens`` wins; the
    checks guarantee the two agree when both are set)."""
    return req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
