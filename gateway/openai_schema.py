"""Request bodies of ``POST /v1/chat/completions`` and ``POST /v1/completions``.

Decoding is strict: the body must be one JSON object, no value is coerced
(``"1"`` is not a number, ``1.5`` is not an integer), every number has bounds,
every string and list has a maximum length, and unknown fields are refused by
name. Fields OpenAI defines that mlxd does not implement yet (tools,
structured output, ``best_of`` > 1, ``echo``, ...) are accepted only with their
neutral value and otherwise refused with a 400 that says so; nothing is
silently ignored. Every refusal is an :class:`~gateway.errors.APIError` 400
whose ``param`` is the offending field path, e.g. ``messages[0].content``.

Supported beyond the basics: ``n`` choices (bounded per model by
:func:`check_limits`, which needs the resolved model's limits), chat
``logprobs``/``top_logprobs`` (0..20 alternatives), completions
``logprobs`` (legacy: an int k in 0..20 turns log-probabilities on with k
alternatives) and the extensions ``ignore_eos`` and ``min_tokens``.

:func:`to_generate_request` turns a decoded request into the worker's
:class:`~shared.protocol.GenerateRequest`.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Union

import msgspec
from msgspec import Meta, Raw

from gateway.engine_api import ModelLimits
from gateway.errors import APIError, bad_request
from shared.protocol import ChatMessage, GenerateRequest, SamplingParams

MAX_MESSAGES = 2048
"""Most chat messages in one request."""
MAX_TEXT_CHARS = 8 * 1024 * 1024
"""Longest single text (message content, part text, prompt) in characters."""
MAX_CONTENT_PARTS = 1024
"""Most content parts in one message."""
MAX_NAME_CHARS = 256
"""Longest ``model``, ``user`` or message ``name``."""
MAX_STOP = 16
"""Most stop strings."""
MAX_STOP_CHARS = 512
"""Longest stop string."""
MAX_LOGIT_BIAS = 1024
"""Most ``logit_bias`` entries."""
MAX_PROMPT_TOKENS = 1_048_576
"""Most token ids in a completions ``prompt``."""
MAX_TOKEN_ID = 2**31 - 1
"""Largest token id accepted in ``prompt`` or ``logit_bias``."""
MAX_GENERATED_TOKENS = 1_000_000
"""Largest ``max_tokens`` / ``max_completion_tokens`` / ``min_tokens`` / ``top_k``."""
MAX_TOP_LOGPROBS = 20
"""Most log-probability alternatives per token (chat ``top_logprobs``,
completions ``logprobs``)."""
MAX_CHOICES = 2**31 - 1
"""Type bound of ``n``; the real limit is the model's ``max_n``."""

_NULL = Raw(b"null")

# --- field types (bounds live in the types) ---------------------------------

ModelName = Annotated[str, Meta(min_length=1, max_length=MAX_NAME_CHARS)]
ShortText = Annotated[str, Meta(max_length=MAX_NAME_CHARS)]
Text = Annotated[str, Meta(max_length=MAX_TEXT_CHARS)]
MaxTokens = Annotated[int, Meta(ge=1, le=MAX_GENERATED_TOKENS)]
MinTokens = Annotated[int, Meta(ge=0, le=MAX_GENERATED_TOKENS)]
Choices = Annotated[int, Meta(ge=1, le=MAX_CHOICES)]
TopLogprobs = Annotated[int, Meta(ge=0, le=MAX_TOP_LOGPROBS)]
Temperature = Annotated[float, Meta(ge=0.0, le=2.0)]
TopP = Annotated[float, Meta(gt=0.0, le=1.0)]
TopK = Annotated[int, Meta(ge=-1, le=MAX_GENERATED_TOKENS)]
MinP = Annotated[float, Meta(ge=0.0, le=1.0)]
Penalty = Annotated[float, Meta(ge=-2.0, le=2.0)]
RepetitionPenalty = Annotated[float, Meta(gt=0.0, le=10.0)]
Seed = Annotated[int, Meta(ge=-(2**63), le=2**63 - 1)]
TokenId = Annotated[int, Meta(ge=0, le=MAX_TOKEN_ID)]
StopString = Annotated[str, Meta(min_length=1, max_length=MAX_STOP_CHARS)]
Stop = Union[StopString, Annotated[list[StopString], Meta(max_length=MAX_STOP)], None]
LogitBias = Annotated[
    dict[TokenId, Annotated[float, Meta(ge=-100.0, le=100.0)]],
    Meta(max_length=MAX_LOGIT_BIAS),
]
TokenIds = Annotated[list[TokenId], Meta(max_length=MAX_PROMPT_TOKENS)]
PromptItem = Union[Text, TokenId, TokenIds]
Prompt = Union[Text, Annotated[list[PromptItem], Meta(max_length=MAX_PROMPT_TOKENS)]]


class StreamOptions(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """``stream_options``: ``include_usage`` adds a final usage chunk."""

    include_usage: bool | None = None


class ContentPart(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One element of a message's content array.

    Only ``{"type": "text", "text": ...}`` is supported; the other OpenAI
    part fields are recognised so that such parts are refused by their type
    rather than as unknown fields.
    """

    type: ShortText
    text: Text | None = None
    image_url: Raw = _NULL
    input_audio: Raw = _NULL
    file: Raw = _NULL
    refusal: Raw = _NULL


class ChatMessageParam(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """One message of a chat request.

    ``role`` is ``system``, ``developer`` (treated as ``system``), ``user``
    or ``assistant``. ``content`` is a string or a list of text parts; it may
    be null only for ``assistant``. ``refusal``, ``tool_calls``,
    ``function_call`` and ``tool_call_id`` are accepted only when null (or an
    empty ``tool_calls`` list), so a client can send back a response message
    as it received it.
    """

    role: ShortText
    content: Union[Text, Annotated[list[ContentPart], Meta(min_length=1, max_length=MAX_CONTENT_PARTS)], None] = None
    name: ShortText | None = None
    refusal: Raw = _NULL
    tool_calls: Raw = _NULL
    function_call: Raw = _NULL
    tool_call_id: Raw = _NULL


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
    response_format: Raw = _NULL
    tools: Raw = _NULL
    tool_choice: Raw = _NULL
    parallel_tool_calls: Raw = _NULL
    functions: Raw = _NULL
    function_call: Raw = _NULL


class CompletionRequest(_SamplingFields, forbid_unknown_fields=True, kw_only=True):
    """A decoded, validated ``POST /v1/completions`` body.

    Produced only by :func:`decode_completion_request`; ``prompt`` is then a
    non-empty string, a non-empty list of token ids, or a one-element list
    holding either.
    """

    prompt: Prompt
    echo: bool | None = None
    suffix: Text | None = None
    best_of: int | None = None
    logprobs: TopLogprobs | None = None


# --- decoding ----------------------------------------------------------------

_chat_decoder = msgspec.json.Decoder(ChatCompletionRequest)
_completion_decoder = msgspec.json.Decoder(CompletionRequest)

_AT = re.compile(r"^(?P<msg>.*?) - at (?P<key>`key` in )?`\$(?P<path>[^`]*)`$", re.DOTALL)
_FIELD = re.compile(r"^Object (?P<what>contains unknown|missing required) field `(?P<name>[^`]*)`$")


def _join_path(base: str, name: str) -> str:
    """Return ``base.name`` (or ``name`` when ``base`` is the root)."""
    return f"{base}.{name}" if base else name


def _validation_error(exc: msgspec.ValidationError) -> APIError:
    """Translate a msgspec validation error into a 400 naming its field.

    msgspec reports ``"<problem> - at `$.a[0].b`"``; the path becomes
    ``param`` (``a[0].b``), with ``[...]`` dict-value markers dropped.
    """
    text = str(exc)
    match = _AT.match(text)
    problem, path = (match["msg"], match["path"]) if match else (text, "")
    path = path.replace("[...]", "").lstrip(".")
    if match and match["key"]:
        problem = f"keys must be token ids (non-negative integers, as strings); {problem}"
    field = _FIELD.match(problem)
    if field is not None:
        param = _join_path(path, field["name"])
        if field["what"] == "contains unknown":
            return bad_request(f"Unrecognized request argument supplied: {param}", param)
        return bad_request(f"Missing required parameter: '{param}'", param)
    if not path and problem.startswith("Expected `object`"):
        return bad_request("The request body must be a JSON object")
    return bad_request(f"Invalid value for '{path}': {problem}", path or None)


def _decode(decoder: msgspec.json.Decoder, body: bytes) -> msgspec.Struct:
    """Decode ``body`` with ``decoder``.

    Raises:
        APIError: 400 for malformed JSON, a non-object, or invalid fields.
    """
    if not body.strip():
        raise bad_request("The request body is empty; expected a JSON object")
    try:
        return decoder.decode(body)
    except msgspec.ValidationError as exc:
        raise _validation_error(exc) from None
    except msgspec.DecodeError as exc:
        raise bad_request(f"The request body is not valid JSON ({exc})") from None


def decode_chat_request(body: bytes) -> ChatCompletionRequest:
    """Decode and fully validate a chat completions body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    req = _decode(_chat_decoder, body)
    _check_common(req)
    _check_chat(req)
    return req  # type: ignore[return-value]


def decode_completion_request(body: bytes) -> CompletionRequest:
    """Decode and fully validate a (legacy) completions body.

    Raises:
        APIError: 400 with ``param`` naming the first offending field.
    """
    req = _decode(_completion_decoder, body)
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


def _not_supported(param: str, what: str) -> APIError:
    """A 400 saying ``what`` is not supported yet."""
    return bad_request(f"{what} is not supported yet", param)


def _is_null(raw: Raw) -> bool:
    """Whether ``raw`` is the JSON ``null``."""
    return len(raw) == 4 and bytes(raw) == b"null"


def _raw_value(raw: Raw) -> object:
    """Decode ``raw`` (already known to be valid JSON) to Python values."""
    return msgspec.json.decode(raw)


def _check_common(req: _SamplingFields) -> None:
    """Checks shared by both endpoints.

    Raises:
        APIError: 400 for a non-finite float or ``stream_options`` without
        ``stream: true``.
    """
    for name in _FLOAT_FIELDS:
        value = getattr(req, name)
        if value is not None and not math.isfinite(value):
            raise bad_request(f"'{name}' must be a finite number", name)
    if req.logit_bias and not all(math.isfinite(v) for v in req.logit_bias.values()):
        raise bad_request("'logit_bias' values must be finite numbers", "logit_bias")
    if req.stream_options is not None and req.stream is not True:
        raise bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options")


def _check_chat(req: ChatCompletionRequest) -> None:
    """Chat-only checks: token limits, unsupported features, messages.

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
    for index, message in enumerate(req.messages):
        _check_message(message, f"messages[{index}]")


def _check_response_format(raw: Raw) -> None:
    """Accept only a null or ``{"type": "text"}`` response format."""
    if _is_null(raw):
        return
    value = _raw_value(raw)
    if value == {"type": "text"}:
        return
    kind = value.get("type") if isinstance(value, dict) else None
    what = f"response_format type '{kind}'" if isinstance(kind, str) else "this response_format"
    raise _not_supported("response_format", what)


def _check_tools(req: ChatCompletionRequest) -> None:
    """Accept tool fields only when absent/null (``tool_choice`` also "none")."""
    for name in ("tools", "parallel_tool_calls", "functions", "function_call"):
        if not _is_null(getattr(req, name)):
            raise _not_supported(name, f"'{name}' (tool calling)")
    if not _is_null(req.tool_choice) and _raw_value(req.tool_choice) != "none":
        raise _not_supported("tool_choice", "'tool_choice' (tool calling)")


_ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant"}


def _check_message(message: ChatMessageParam, path: str) -> None:
    """Validate one message's role, content and echo-only fields.

    Raises:
        APIError: 400 naming e.g. ``messages[2].content[0].type``.
    """
    if message.role == "tool":
        raise _not_supported(f"{path}.role", "role 'tool' (tool calling)")
    if message.role not in _ROLES:
        raise bad_request(
            f"Invalid role '{message.role}'; expected one of system, developer, user, assistant",
            f"{path}.role",
        )
    if not _is_null(message.refusal):
        raise _not_supported(f"{path}.refusal", "a non-null message 'refusal'")
    for name in ("function_call", "tool_call_id"):
        if not _is_null(getattr(message, name)):
            raise _not_supported(f"{path}.{name}", f"message '{name}' (tool calling)")
    if not _is_null(message.tool_calls) and _raw_value(message.tool_calls) != []:
        raise _not_supported(f"{path}.tool_calls", "message 'tool_calls' (tool calling)")
    if message.content is None and message.role != "assistant":
        raise bad_request(f"'content' is required for role '{message.role}'", f"{path}.content")
    if isinstance(message.content, list):
        for index, part in enumerate(message.content):
            _check_part(part, f"{path}.content[{index}]")


def _check_part(part: ContentPart, path: str) -> None:
    """Accept only a text part that has its ``text``."""
    if part.type != "text":
        raise _not_supported(f"{path}.type", f"content part type '{part.type}'")
    if part.text is None:
        raise bad_request("A text content part needs 'text'", f"{path}.text")
    for name in ("image_url", "input_audio", "file", "refusal"):
        if not _is_null(getattr(part, name)):
            raise bad_request(f"Unrecognized field '{name}' in a text part", f"{path}.{name}")


def _check_completion(req: CompletionRequest) -> None:
    """Completions-only checks: prompt shape and unsupported features.

    Raises:
        APIError: 400 naming the field.
    """
    if req.echo:
        raise _not_supported("echo", "echo")
    if req.suffix is not None:
        raise _not_supported("suffix", "suffix")
    if req.best_of is not None and req.best_of != 1:
        raise _not_supported("best_of", "best_of other than 1")
    if req.best_of is not None and (req.n or 1) > req.best_of:
        raise bad_request("'best_of' must be at least 'n'; leave 'best_of' out", "best_of")
    _check_min_tokens(req.min_tokens, req.max_tokens)
    prompt_input(req)


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
    return req.logprobs is not None, req.logprobs or 0


def _sampling(req: ChatCompletionRequest | CompletionRequest, max_tokens: int | None) -> SamplingParams:
    """Build the worker's sampling settings; unset fields take OpenAI's
    defaults (temperature 1, top_p 1, no penalties, no log-probabilities)."""
    logprobs, top_logprobs = _logprobs(req)
    top_k = req.top_k if req.top_k is not None and req.top_k > 0 else 0
    return SamplingParams(
        max_tokens=max_tokens,
        temperature=1.0 if req.temperature is None else req.temperature,
        top_p=1.0 if req.top_p is None else req.top_p,
        top_k=top_k,
        min_p=0.0 if req.min_p is None else req.min_p,
        seed=req.seed,
        presence_penalty=req.presence_penalty or 0.0,
        frequency_penalty=req.frequency_penalty or 0.0,
        repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
        logit_bias=dict(req.logit_bias or {}),
        stop=_stop_list(req.stop),
        logprobs=logprobs,
        top_logprobs=top_logprobs,
        ignore_eos=bool(req.ignore_eos),
        min_tokens=req.min_tokens or 0,
    )


def _flatten(content: str | list[ContentPart] | None) -> str:
    """Return message content as one string (text parts concatenated)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(part.text or "" for part in content)


def _chat_messages(req: ChatCompletionRequest) -> list[ChatMessage]:
    """The request's messages with roles normalised and content flattened."""
    return [
        ChatMessage(role=_ROLES[m.role], content=_flatten(m.content), name=m.name)
        for m in req.messages
    ]


def to_generate_request(
    req: ChatCompletionRequest | CompletionRequest, request_id: str
) -> GenerateRequest:
    """Translate a validated request into the worker's ``GenerateRequest``.

    Chat requests carry ``messages``; completions carry ``prompt`` or
    ``prompt_token_ids``. ``max_tokens`` stays None when the client set no
    limit (the worker applies its default). ``n`` defaults to 1; ``timeout``
    is left None for the engine to fill in.
    """
    n = req.n or 1
    if isinstance(req, ChatCompletionRequest):
        return GenerateRequest(
            request_id=request_id,
            sampling=_sampling(req, _chat_max_tokens(req)),
            messages=_chat_messages(req),
            n=n,
        )
    text, token_ids = prompt_input(req)
    return GenerateRequest(
        request_id=request_id,
        sampling=_sampling(req, req.max_tokens),
        prompt=text,
        prompt_token_ids=token_ids,
        n=n,
    )


def include_usage(req: ChatCompletionRequest | CompletionRequest) -> bool:
    """Whether a streamed response must end with a usage chunk."""
    return bool(req.stream and req.stream_options is not None and req.stream_options.include_usage)
