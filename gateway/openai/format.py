"""OpenAI response objects, as bytes: the shapes of whole answers.

Whole responses (``chat.completion``, ``text_completion``, model objects)
are msgspec Structs encoded in one call; the stream chunks are built by
:mod:`gateway.openai.builder` and log-probabilities by
:mod:`gateway.openai.logprobs`. Mostly declarative (Struct shapes).

Choices: a request has ``n`` choices; every choice object names its
``index``. Usage counts the prompt once and sums the completion tokens of
all choices (:func:`usage_of` a :class:`~gateway.frontend.answer_driver.TokenTally`);
it always carries ``prompt_tokens_details.cached_tokens``.

Tool calls: a whole chat message holds them as ``tool_calls`` (and
``content`` is null when the choice produced tool calls but no text); a
legacy ``functions`` request gets its first call as ``function_call``.
Reasoning text goes under the configured reasoning field
(``reasoning_content`` or ``reasoning``), only when non-empty (the key is
omitted otherwise).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Iterable, Sequence, Union

import msgspec

from gateway.core.backend import ModelInfo
from gateway.frontend.answer_driver import TokenTally
from gateway.frontend.custom_tools import custom_input
from gateway.frontend.request_flow import FinalReason
from gateway.openai.logprobs import ChatLogprobs, CompletionLogprobs, chat_logprobs, completion_logprobs
from shared.model_kind import capabilities
from shared.protocol import TokenLogprob, ToolCall

OWNED_BY = "mlxd"
"""The ``owned_by`` of every model object."""

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""The names the reasoning text may go by (``server.reasoning_field``)."""

DEFAULT_REASONING_FIELD = "reasoning_content"
"""The reasoning field when none is configured."""

SERVICE_TIER = "default"
"""The ``service_tier`` every chat answer reports: mlxd serves every request
the same way, whatever tier it asked for."""

SYSTEM_FINGERPRINT = "fp_mlxd"
"""The ``system_fingerprint`` of every chat and completions answer."""

_encoder = msgspec.json.Encoder()


def encode(obj: object) -> bytes:
    """Return ``obj`` as compact JSON bytes (msgspec)."""
    return _encoder.encode(obj)


# --- usage -------------------------------------------------------------------------


class PromptTokensDetails(msgspec.Struct, kw_only=True):
    """``usage.prompt_tokens_details``: prompt tokens reused from the cache
    (no audio input: ``audio_tokens`` is 0). ``disk_cached_tokens`` is an
    mlxd extension, present only when part of ``cached_tokens`` was loaded
    from the prefix cache's disk tier."""

    cached_tokens: int = 0
    audio_tokens: int = 0
    disk_cached_tokens: int | msgspec.UnsetType = msgspec.UNSET


class CompletionTokensDetails(msgspec.Struct, kw_only=True):
    """``usage.completion_tokens_details``: all 0. The worker does not
    count reasoning tokens apart from the rest, there is no audio, and
    ``prediction`` is never used."""

    reasoning_tokens: int = 0
    audio_tokens: int = 0
    accepted_prediction_tokens: int = 0
    rejected_prediction_tokens: int = 0


class Usage(msgspec.Struct, kw_only=True):
    """Token counts of one request; ``total_tokens`` is prompt + completion."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails
    completion_tokens_details: CompletionTokensDetails = msgspec.field(default_factory=CompletionTokensDetails)


def usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0, disk_cached_tokens: int = 0) -> Usage:
    """Return the usage object for these counts (``disk_cached_tokens``
    appears only when positive)."""
    details = PromptTokensDetails(cached_tokens=cached_tokens)
    if disk_cached_tokens > 0:
        details.disk_cached_tokens = disk_cached_tokens
    return Usage(
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        total_tokens=prompt_tokens + completion_tokens,
        prompt_tokens_details=details,
    )


def usage_of(tally: TokenTally) -> Usage:
    """The usage object for the counts of ``tally``."""
    return usage(tally.prompt, tally.completion, tally.cached, tally.disk_cached)


# --- whole responses ---------------------------------------------------------------


@dataclass(frozen=True)
class ChoiceResult:
    """One finished choice of a non-streamed response.

    ``logprobs`` holds every token the choice sampled when the request asked
    for log-probabilities, and is None when it did not. ``reasoning`` is the
    choice's whole reasoning text and ``tool_calls`` its complete calls (chat
    only).
    """

    index: int
    text: str
    finish_reason: FinalReason
    logprobs: list[TokenLogprob] | None = None
    reasoning: str = ""
    tool_calls: tuple[ToolCall, ...] = ()


class FunctionCall(msgspec.Struct, kw_only=True):
    """``function`` of a tool call: its name and arguments (JSON text)."""

    name: str
    arguments: str


class ToolCallObject(msgspec.Struct, kw_only=True):
    """One element of a chat message's ``tool_calls``."""

    id: str
    type: str = "function"
    function: FunctionCall


class CustomCall(msgspec.Struct, kw_only=True):
    """``custom`` of a custom tool call: the tool's name and its input."""

    name: str
    input: str


class CustomToolCallObject(msgspec.Struct, kw_only=True):
    """A call of a custom tool in a chat message's ``tool_calls``."""

    id: str
    type: str = "custom"
    custom: CustomCall


class AssistantMessage(msgspec.Struct, kw_only=True, omit_defaults=True):
    """The ``message`` of a chat choice.

    ``role``, ``content`` (null when the choice made only tool calls),
    ``refusal`` (always null) and ``annotations`` (always empty: there are
    no web-search citations) are always present; ``tool_calls`` and the
    reasoning field (one of the last two, see :data:`REASONING_FIELDS`) only
    when non-empty. A legacy ``functions`` request gets its one call as
    ``function_call`` instead of ``tool_calls``.
    """

    role: str
    content: str | None
    refusal: None
    annotations: list[Any]
    tool_calls: list[Union[ToolCallObject, CustomToolCallObject]] | None = None
    function_call: FunctionCall | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


def _call_object(call: ToolCall, custom_tools: Collection[str]) -> ToolCallObject | CustomToolCallObject:
    """A finished call as the message lists it (a call of one of
    ``custom_tools`` as a custom tool call, its input from the function
    form's arguments)."""
    if call.name in custom_tools:
        return CustomToolCallObject(id=call.id, custom=CustomCall(name=call.name, input=custom_input(call.arguments)))
    return ToolCallObject(id=call.id, function=FunctionCall(name=call.name, arguments=call.arguments))


def assistant_message(
    result: ChoiceResult,
    reasoning_field: str = DEFAULT_REASONING_FIELD,
    legacy_functions: bool = False,
    custom_tools: Collection[str] = (),
) -> AssistantMessage:
    """The chat ``message`` for one finished choice, with its reasoning (if
    any) under ``reasoning_field``; with ``legacy_functions`` its first
    call as the legacy ``function_call``; calls of ``custom_tools`` as
    custom tool calls."""
    calls = [_call_object(c, custom_tools) for c in result.tool_calls]
    reasoning = {reasoning_field: result.reasoning} if result.reasoning else {}
    first = calls[0] if calls else None
    legacy = {"function_call": first.function} if legacy_functions and isinstance(first, ToolCallObject) else {}
    return AssistantMessage(
        role="assistant",
        content=None if calls and not result.text else result.text,
        refusal=None,
        annotations=[],
        tool_calls=None if legacy_functions else calls or None,
        **legacy,
        **reasoning,
    )


def legacy_finish(reason: str, legacy_functions: bool) -> str:
    """The finish reason a client sees: ``tool_calls`` is ``function_call``
    for a legacy ``functions`` request."""
    return "function_call" if legacy_functions and reason == "tool_calls" else reason


class ChatChoice(msgspec.Struct, kw_only=True):
    """One choice of a ``chat.completion``."""

    index: int = 0
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str


class ChatCompletion(msgspec.Struct, kw_only=True):
    """A complete, non-streamed ``chat.completion`` object."""

    id: str
    object: str = "chat.completion"
    created: int
    model: str
    service_tier: str = SERVICE_TIER
    system_fingerprint: str = SYSTEM_FINGERPRINT
    choices: list[ChatChoice]
    usage: Usage


class CompletionChoice(msgspec.Struct, kw_only=True):
    """One choice of a ``text_completion``."""

    text: str
    index: int = 0
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None


class TextCompletion(msgspec.Struct, kw_only=True):
    """A complete, non-streamed ``text_completion`` object."""

    id: str
    object: str = "text_completion"
    created: int
    model: str
    system_fingerprint: str = SYSTEM_FINGERPRINT
    choices: list[CompletionChoice]
    usage: Usage


class ModelCard(msgspec.Struct, kw_only=True):
    """One entry of ``GET /v1/models`` (and ``GET /v1/models/{id}``).

    Beyond OpenAI's fields, ``state`` is the model's worker state
    (unloaded, starting, loading, ready, draining, restarting, failed),
    ``aliases`` the other names it answers to and ``sampling_defaults`` the
    sampling settings it uses where a request sets none (null until the
    model has been loaded), ``vision`` whether it takes images (null when
    not known before its worker loads it, e.g. a Hugging Face repo id),
    ``kind`` what it serves (``generate``, ``vision``, ``embedding``,
    ``rerank``, ``speech``, ``transcription``; null when not known yet) and ``capabilities`` that kind's
    capabilities in Ollama's names (``completion``, ``vision``,
    ``embedding``, ``rerank``, ``speech``, ``transcription``; ``/api/show`` adds ``tools`` and ``thinking``
    from the chat template).
    """

    id: str
    object: str = "model"
    created: int
    owned_by: str = OWNED_BY
    state: str = "ready"
    aliases: list[str] = []
    sampling_defaults: dict[str, float] | None = None
    vision: bool | None = None
    kind: str | None = None
    capabilities: list[str] = []


class ModelList(msgspec.Struct, kw_only=True):
    """The ``GET /v1/models`` body."""

    object: str = "list"
    data: list[ModelCard]


def _chat_choice(
    result: ChoiceResult, reasoning_field: str, legacy_functions: bool, custom_tools: Collection[str]
) -> ChatChoice:
    """The ``chat.completion`` choice for one finished choice."""
    logprobs = None if result.logprobs is None else chat_logprobs(result.logprobs)
    return ChatChoice(
        index=result.index,
        message=assistant_message(result, reasoning_field, legacy_functions, custom_tools),
        logprobs=logprobs,
        finish_reason=legacy_finish(result.finish_reason, legacy_functions),
    )


def chat_completion_body(
    *,
    request_id: str,
    created: int,
    model: str,
    choices: Sequence[ChoiceResult],
    usage: Usage,
    reasoning_field: str = DEFAULT_REASONING_FIELD,
    legacy_functions: bool = False,
    custom_tools: Collection[str] = (),
) -> bytes:
    """Return the JSON of a ``chat.completion`` with ``choices`` (ordered by
    index) and ``usage``; reasoning goes under ``reasoning_field``; calls
    in the legacy form with ``legacy_functions``; calls of
    ``custom_tools`` as custom tool calls."""
    ordered = sorted(choices, key=lambda c: c.index)
    return encode(
        ChatCompletion(
            id=request_id,
            created=created,
            model=model,
            choices=[_chat_choice(c, reasoning_field, legacy_functions, custom_tools) for c in ordered],
            usage=usage,
        )
    )


def _completion_choice(result: ChoiceResult, alternatives: int, echo: str = "") -> CompletionChoice:
    """The ``text_completion`` choice for one finished choice (its text
    after the echoed prompt ``echo``)."""
    logprobs = None
    if result.logprobs is not None:
        logprobs, _ = completion_logprobs(result.logprobs, alternatives)
    text = echo + result.text
    return CompletionChoice(text=text, index=result.index, logprobs=logprobs, finish_reason=result.finish_reason)


def text_completion_body(
    *,
    request_id: str,
    created: int,
    model: str,
    choices: Sequence[ChoiceResult],
    usage: Usage,
    alternatives: int = 0,
    echo: str = "",
) -> bytes:
    """Return the JSON of a ``text_completion`` with ``choices`` (ordered by
    index) and ``usage``; ``alternatives`` is the legacy ``logprobs`` count
    and ``echo`` the prompt each choice's text starts with (``echo``)."""
    ordered = sorted(choices, key=lambda c: c.index)
    return encode(
        TextCompletion(
            id=request_id,
            created=created,
            model=model,
            choices=[_completion_choice(c, alternatives, echo) for c in ordered],
            usage=usage,
        )
    )


def model_card(info: ModelInfo) -> ModelCard:
    """Return the OpenAI model object for a configured model."""
    return ModelCard(
        id=info.name,
        created=info.created,
        state=info.state,
        aliases=list(info.aliases),
        sampling_defaults=info.sampling_defaults,
        vision=None if info.kind is None else info.kind == "vision",
        kind=info.kind,
        capabilities=capabilities(info.kind),
    )


def model_body(info: ModelInfo) -> bytes:
    """Return the JSON of one model object."""
    return encode(model_card(info))


def model_list_body(infos: Iterable[ModelInfo]) -> bytes:
    """Return the JSON of the model list (canonical names only, in order)."""
    return encode(ModelList(data=[model_card(info) for info in infos]))
