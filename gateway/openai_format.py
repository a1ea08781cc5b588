"""OpenAI response objects and stream chunks, as bytes.

Whole responses (``chat.completion``, ``text_completion``, model objects)
are msgspec Structs encoded in one call. Stream chunks are on the per-token
path, so :class:`ChatChunkStream` and :class:`CompletionChunkStream` build,
once per request, the constant bytes around a chunk's variable parts and
then emit each frame as ``head + json(text) + tail``; only chunks that carry
log-probabilities encode an object. Every frame they emit is a complete SSE
``data:`` frame (see :mod:`gateway.sse`); the JSON inside is byte-for-byte
what encoding the equivalent object would give.

Choices: a request has ``n`` choices; every choice object and chunk names
its ``index``. Usage counts the prompt once and sums the completion tokens
of all choices (:class:`UsageTally`); it always carries
``prompt_tokens_details.cached_tokens``.

Tool calls arrive as :class:`~shared.protocol.ToolCallDelta` pieces and are
numbered per choice by :class:`ToolCallTracker`. A whole chat message holds
them as ``tool_calls`` (and ``content`` is null when the choice produced
tool calls but no text); a stream sends each call's first piece as
``{"index", "id", "type": "function", "function": {"name", "arguments":
""}}`` and every argument piece as ``{"index", "function": {"arguments"}}``
(one chunk each). Reasoning text goes under the configured reasoning field
(``reasoning_content`` or ``reasoning``): in a whole message only when
non-empty (the key is omitted otherwise), in a stream as ``delta:
{"<field>": text}`` chunks.

Log-probabilities come from the worker as
:class:`~shared.protocol.TokenLogprob` lists and are rendered as chat
``{"content": [...], "refusal": null}`` or as the legacy completions object
``{"tokens", "token_logprobs", "top_logprobs", "text_offset"}``. A
log-probability below ``-9999`` (or not finite) is reported as ``-9999.0``,
OpenAI's "very unlikely" value, so the JSON never holds ``null`` there.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Collection, Iterable, Sequence, Union

import msgspec

from gateway.custom_tools import custom_input
from gateway.engine_api import ModelInfo
from gateway.request_flow import FinalReason
from gateway.sse import DATA_PREFIX, FRAME_END
from shared.protocol import RequestOutput, TokenLogprob, ToolCall, ToolCallDelta

OWNED_BY = "mlxd"
"""The ``owned_by`` of every model object."""

REASONING_FIELDS = ("reasoning_content", "reasoning")
"""The names the reasoning text may go by (``server.reasoning_field``)."""

DEFAULT_REASONING_FIELD = "reasoning_content"
"""The reasoning field when none is configured."""

MIN_LOGPROB = -9999.0
"""The lowest log-probability reported (OpenAI's "very unlikely")."""

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


class UsageTally:
    """Running token counts of one request across all its choices.

    Feed it every output of the request (:meth:`add`); :meth:`usage` then
    counts the prompt once (the largest ``prompt_tokens``/``cached_tokens``
    seen, as those are running values) and the sum over choices of each
    choice's latest ``completion_tokens``.
    """

    def __init__(self) -> None:
        self._prompt = 0
        self._cached = 0
        self._disk = 0
        self._completion: dict[int, int] = {}

    def add(self, output: RequestOutput) -> None:
        """Account for one output."""
        self._prompt = max(self._prompt, output.prompt_tokens)
        self._cached = max(self._cached, output.cached_tokens)
        self._disk = max(self._disk, output.disk_cached_tokens)
        seen = self._completion.get(output.index, 0)
        self._completion[output.index] = max(seen, output.completion_tokens)

    def usage(self) -> Usage:
        """The usage object for everything added so far."""
        return usage(self._prompt, sum(self._completion.values()), self._cached, self._disk)


# --- log-probabilities --------------------------------------------------------------


def _clamped(logprob: float) -> float:
    """``logprob``, or :data:`MIN_LOGPROB` when lower or not finite."""
    return logprob if MIN_LOGPROB <= logprob < math.inf else MIN_LOGPROB


class ChatTopLogprob(msgspec.Struct, kw_only=True):
    """One alternative of a chat token: text, log-probability, UTF-8 bytes."""

    token: str
    logprob: float
    bytes: list[int]


class ChatTokenLogprob(msgspec.Struct, kw_only=True):
    """A sampled chat token with its most likely alternatives."""

    token: str
    logprob: float
    bytes: list[int]
    top_logprobs: list[ChatTopLogprob]


class ChatLogprobs(msgspec.Struct, kw_only=True):
    """A chat choice's ``logprobs`` (``refusal`` is always null)."""

    content: list[ChatTokenLogprob]
    refusal: None = None


def chat_logprobs(tokens: Iterable[TokenLogprob]) -> ChatLogprobs:
    """Return the chat ``logprobs`` object for these sampled tokens."""
    return ChatLogprobs(
        content=[
            ChatTokenLogprob(
                token=t.token,
                logprob=_clamped(t.logprob),
                bytes=list(t.raw),
                top_logprobs=[
                    ChatTopLogprob(token=a.token, logprob=_clamped(a.logprob), bytes=list(a.raw)) for a in t.top
                ],
            )
            for t in tokens
        ]
    )


class CompletionLogprobs(msgspec.Struct, kw_only=True):
    """A completions choice's legacy ``logprobs`` object.

    Parallel lists, one entry per sampled token: its text, log-probability,
    a ``{text: logprob}`` map of the alternatives (``top_logprobs`` is null
    when none were asked for) and the character offset where the token
    starts in the choice's text.
    """

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


def _top_map(token: TokenLogprob, alternatives: int) -> dict[str, float]:
    """The legacy ``{text: logprob}`` map of one position: the ``alternatives``
    most likely tokens plus the sampled one (so up to ``alternatives + 1``
    entries, as OpenAI documents); on duplicate texts the likelier wins."""
    top: dict[str, float] = {}
    for alt in token.top[:alternatives]:
        top.setdefault(alt.token, _clamped(alt.logprob))
    top.setdefault(token.token, _clamped(token.logprob))
    return top


def completion_logprobs(
    tokens: Sequence[TokenLogprob], alternatives: int, offset: int = 0
) -> tuple[CompletionLogprobs, int]:
    """Return the legacy ``logprobs`` object for ``tokens`` and the offset
    after them.

    ``offset`` is where the first token starts in the choice's text; each
    next token starts after the previous token's text (token texts are the
    worker's per-token decoding, so offsets count their characters).
    ``alternatives`` 0 gives ``top_logprobs: null``.
    """
    offsets = []
    for t in tokens:
        offsets.append(offset)
        offset += len(t.token)
    tops = [_top_map(t, alternatives) for t in tokens] if alternatives > 0 else None
    result = CompletionLogprobs(
        tokens=[t.token for t in tokens],
        token_logprobs=[_clamped(t.logprob) for t in tokens],
        top_logprobs=tops,
        text_offset=offsets,
    )
    return result, offset


# --- tool calls -------------------------------------------------------------------


def new_call_id() -> str:
    """A fresh tool call id, for a call whose first piece came without one."""
    return "call_" + uuid.uuid4().hex[:24]


@dataclass
class _TrackedCall:
    """One tool call being assembled: its OpenAI index, id, name and the
    argument pieces so far."""

    position: int
    id: str
    name: str
    arguments: list[str] = field(default_factory=list)


class ToolCallTracker:
    """The tool calls of one choice, assembled from their pieces.

    Calls are numbered 0, 1, ... in the order their first piece arrives
    (OpenAI's per-choice ``index``), whatever ``index`` the worker used, so
    the numbering is always dense. A call's ``id`` and ``name`` are taken
    from its first piece; a first piece missing them gets a fresh id
    (:func:`new_call_id`) or an empty name. Later pieces only add arguments.
    """

    def __init__(self) -> None:
        self._calls: dict[int, _TrackedCall] = {}

    def add(self, piece: ToolCallDelta) -> tuple[int, ToolCall | None]:
        """Account for ``piece``; return its call's OpenAI index and, when
        ``piece`` starts the call, the call's id and name (as a
        :class:`~shared.protocol.ToolCall` with empty ``arguments``)."""
        call = self._calls.get(piece.index)
        started = None
        if call is None:
            call = _TrackedCall(len(self._calls), piece.id or new_call_id(), piece.name or "")
            self._calls[piece.index] = call
            started = ToolCall(id=call.id, name=call.name, arguments="")
        if piece.arguments:
            call.arguments.append(piece.arguments)
        return call.position, started

    def calls(self) -> list[ToolCall]:
        """Every call so far, in index order, with its full arguments."""
        return [ToolCall(id=c.id, name=c.name, arguments="".join(c.arguments)) for c in self._calls.values()]


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
    model has been loaded).
    """

    id: str
    object: str = "model"
    created: int
    owned_by: str = OWNED_BY
    state: str = "ready"
    aliases: list[str] = []
    sampling_defaults: dict[str, float] | None = None


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
    )


def model_body(info: ModelInfo) -> bytes:
    """Return the JSON of one model object."""
    return encode(model_card(info))


def model_list_body(infos: Iterable[ModelInfo]) -> bytes:
    """Return the JSON of the model list (canonical names only, in order)."""
    return encode(ModelList(data=[model_card(info) for info in infos]))


# --- stream chunks -----------------------------------------------------------------


def _head(request_id: str, obj: str, created: int, model: str) -> bytes:
    """The constant start of every chunk of one stream, up to ``"choices":``
    (chat chunks also carry ``service_tier``; both ``system_fingerprint``)."""
    tier = b',"service_tier":' + encode(SERVICE_TIER) if obj == "chat.completion.chunk" else b""
    return b"".join(
        (
            b'{"id":',
            encode(request_id),
            b',"object":',
            encode(obj),
            b',"created":',
            encode(created),
            b',"model":',
            encode(model),
            tier,
            b',"system_fingerprint":',
            encode(SYSTEM_FINGERPRINT),
            b',"choices":',
        )
    )


class _ChunkStream:
    """Shared part of the two chunk builders.

    Built from the response ``request_id``, ``created`` timestamp, ``model``,
    whether ``include_usage`` was requested, the number of choices ``n`` and
    whether ``logprobs`` were requested. ``include_usage`` adds
    ``"usage":null`` to every chunk and makes :meth:`final_usage` return the
    usage chunk (``choices: []``).

    Use: :meth:`start` once; then, for every output of a choice in
    ``0 .. n-1`` that does not end the whole request, :meth:`output`; for
    an ``error``/``abort`` output, :meth:`deltas` (whatever it still
    carries) before the error frame; after every choice finished,
    :meth:`final_usage`.
    """

    _object = ""

    def __init__(
        self,
        request_id: str,
        created: int,
        model: str,
        include_usage: bool,
        *,
        n: int = 1,
        logprobs: bool = False,
    ) -> None:
        self._head = DATA_PREFIX + _head(request_id, self._object, created, model)
        self._end = (b',"usage":null}' if include_usage else b"}") + FRAME_END
        self._include_usage = include_usage
        self._n = n
        self._logprobs = logprobs

    def start(self) -> bytes:
        """Return the frames that open the stream (none by default)."""
        return b""

    def deltas(self, output: RequestOutput) -> bytes:
        """Return the chunks of what ``output`` carries, without any finish
        reason (nothing when it carries nothing)."""
        raise NotImplementedError

    def output(self, output: RequestOutput) -> bytes:
        """Return the frames of one output of a choice (a choice's last
        output includes its finish)."""
        raise NotImplementedError

    def _has_content(self, output: RequestOutput) -> bool:
        """Whether ``output`` has text, or tokens whose logprobs were asked."""
        return bool(output.text) or (self._logprobs and bool(output.logprobs))

    def usage(self, counts: Usage) -> bytes:
        """Return the usage chunk frame (``choices: []``)."""
        return self._head + b'[],"usage":' + encode(counts) + b"}" + FRAME_END

    def final_usage(self, counts: Usage) -> bytes:
        """The usage chunk when ``include_usage`` was set, else nothing."""
        return self.usage(counts) if self._include_usage else b""


class ChatChunkStream(_ChunkStream):
    """Builds the ``chat.completion.chunk`` frames of one streamed response.

    See :class:`_ChunkStream` for construction and order of use;
    ``reasoning_field`` names the reasoning delta. Every chunk holds one
    choice ``{"index", "delta", "finish_reason"}``, plus ``logprobs`` (null
    where it has no tokens to carry) only when log-probabilities were
    requested, exactly as in ``wire-formats.md``. :meth:`start` gives each
    choice its ``delta: {"role": "assistant", "content": ""}`` chunk. An
    output then gives, in this order and each only when present: a
    ``{"<reasoning_field>": text}`` chunk; a ``{"content": text}`` chunk
    (carrying the output's ``logprobs`` when requested, even with empty
    text); one ``{"tool_calls": [...]}`` chunk per tool-call header and per
    argument piece (see the module docstring; indexes per choice); and, for
    a choice's last output, a ``delta: {}`` chunk with its ``finish_reason``.
    With ``legacy_functions`` a call streams as ``{"function_call": {"name",
    "arguments": ""}}`` then ``{"function_call": {"arguments"}}`` pieces,
    and ``tool_calls`` finishes as ``function_call``.
    """

    _object = "chat.completion.chunk"

    def __init__(
        self,
        request_id: str,
        created: int,
        model: str,
        include_usage: bool,
        *,
        n: int = 1,
        logprobs: bool = False,
        reasoning_field: str = DEFAULT_REASONING_FIELD,
        legacy_functions: bool = False,
    ) -> None:
        super().__init__(request_id, created, model, include_usage, n=n, logprobs=logprobs)
        self._legacy = legacy_functions
        self._choice_heads = [self._head + b'[{"index":%d,"delta":' % i for i in range(n)]
        self._logprobs_null = b',"logprobs":null' if logprobs else b""
        self._delta_tail = self._logprobs_null + b',"finish_reason":null}]' + self._end
        self._reasoning_key = b"{" + encode(reasoning_field) + b":"
        self._tools = [ToolCallTracker() for _ in range(n)]

    def start(self) -> bytes:
        """Return one opening chunk per choice, in index order."""
        return b"".join(self._delta(i, b'{"role":"assistant","content":""}') for i in range(self._n))

    def deltas(self, output: RequestOutput) -> bytes:
        """Return ``output``'s reasoning, content and tool-call chunks (see
        the class), or nothing."""
        frames = b""
        if output.reasoning:
            frames += self._delta(output.index, self._reasoning_key + encode(output.reasoning) + b"}")
        frames += self._content(output)
        for piece in output.tool_calls or ():
            frames += self._tool_call(output.index, piece)
        return frames

    def output(self, output: RequestOutput) -> bytes:
        """Return ``output``'s delta chunks, then its choice's ``delta: {}``
        finish chunk when ``output`` is that choice's last."""
        frames = self.deltas(output)
        if output.ends_choice:
            reason = encode(legacy_finish(output.finish_reason, self._legacy))
            tail = b"{}" + self._logprobs_null + b',"finish_reason":' + reason + b"}]" + self._end
            frames += self._choice_heads[output.index] + tail
        return frames

    def _delta(self, index: int, delta: bytes) -> bytes:
        """One chunk of choice ``index`` with the ``delta`` JSON object."""
        return self._choice_heads[index] + delta + self._delta_tail

    def _content(self, output: RequestOutput) -> bytes:
        """``output``'s content chunk, or nothing."""
        if not self._has_content(output):
            return b""
        delta = b'{"content":' + encode(output.text) + b"}"
        if not self._logprobs:
            return self._delta(output.index, delta)
        logprobs = encode(chat_logprobs(output.logprobs or ()))
        tail = b',"logprobs":' + logprobs + b',"finish_reason":null}]' + self._end
        return self._choice_heads[output.index] + delta + tail

    def _tool_call(self, index: int, piece: ToolCallDelta) -> bytes:
        """The chunks of one tool-call piece of choice ``index``: the call's
        header when the piece starts it, then its argument piece if any."""
        position, started = self._tools[index].add(piece)
        if self._legacy:
            return self._function_call(index, position, started, piece)
        frames = b""
        if started is not None:
            header = b"".join(
                (
                    b'{"tool_calls":[{"index":%d,"id":' % position,
                    encode(started.id),
                    b',"type":"function","function":{"name":',
                    encode(started.name),
                    b',"arguments":""}}]}',
                )
            )
            frames += self._delta(index, header)
        if piece.arguments:
            arguments = b'{"tool_calls":[{"index":%d,"function":{"arguments":' % position
            frames += self._delta(index, arguments + encode(piece.arguments) + b"}}]}")
        return frames

    def _function_call(self, index: int, position: int, started: ToolCall | None, piece: ToolCallDelta) -> bytes:
        """The legacy ``function_call`` chunks of one tool-call piece of
        choice ``index``; only the choice's first call (position 0) is sent,
        as a legacy answer holds one call."""
        if position != 0:
            return b""
        frames = b""
        if started is not None:
            header = b'{"function_call":{"name":' + encode(started.name) + b',"arguments":""}}'
            frames += self._delta(index, header)
        if piece.arguments:
            frames += self._delta(index, b'{"function_call":{"arguments":' + encode(piece.arguments) + b"}}")
        return frames


class CompletionChunkStream(_ChunkStream):
    """Builds the ``text_completion`` chunk frames of one streamed response.

    See :class:`_ChunkStream` for construction and order of use;
    ``alternatives`` is the legacy ``logprobs`` count and ``echo`` the
    prompt text to echo. Every chunk holds one choice ``{"text", "index",
    "logprobs", "finish_reason"}``; the only opening chunks are one per
    choice carrying ``echo`` (when set), and a choice's last text travels
    in the same chunk as its ``finish_reason``. When requested, ``logprobs`` is the legacy object for
    the chunk's tokens, with ``text_offset`` counting on from the choice's
    earlier chunks; otherwise it is null. Only ``text`` is sent: reasoning
    and tool-call pieces, which a raw prompt never asks for, have no place
    in a text completion.
    """

    _object = "text_completion"

    def __init__(
        self,
        request_id: str,
        created: int,
        model: str,
        include_usage: bool,
        *,
        n: int = 1,
        logprobs: bool = False,
        alternatives: int = 0,
        echo: str = "",
    ) -> None:
        super().__init__(request_id, created, model, include_usage, n=n, logprobs=logprobs)
        self._alternatives = alternatives
        self._echo = echo
        self._offsets = [0] * n
        self._text_head = self._head + b'[{"text":'
        self._index_parts = [b',"index":%d,"logprobs":' % i for i in range(n)]

    def start(self) -> bytes:
        """Return one chunk per choice with the echoed prompt (nothing
        without ``echo``)."""
        if not self._echo:
            return b""
        return b"".join(
            self._text_head + encode(self._echo) + self._index_parts[i] + b'null,"finish_reason":null}]' + self._end
            for i in range(self._n)
        )

    def deltas(self, output: RequestOutput) -> bytes:
        """Return ``output``'s chunk without a finish reason, or nothing."""
        if not self._has_content(output):
            return b""
        return self._chunk(output, b"null")

    def output(self, output: RequestOutput) -> bytes:
        """Return ``output``'s chunk; a choice's last output always gets one,
        carrying its ``finish_reason``."""
        if output.ends_choice:
            return self._chunk(output, encode(output.finish_reason))
        return self.deltas(output)

    def _chunk(self, output: RequestOutput, reason: bytes) -> bytes:
        """One chunk for ``output`` with ``finish_reason`` JSON ``reason``."""
        return b"".join(
            (
                self._text_head,
                encode(output.text),
                self._index_parts[output.index],
                self._logprobs_json(output),
                b',"finish_reason":',
                reason,
                b"}]",
                self._end,
            )
        )

    def _logprobs_json(self, output: RequestOutput) -> bytes:
        """The chunk's ``logprobs`` JSON; advances the choice's text offset."""
        if not self._logprobs:
            return b"null"
        index = output.index
        logprobs, self._offsets[index] = completion_logprobs(
            output.logprobs or (), self._alternatives, self._offsets[index]
        )
        return encode(logprobs)
