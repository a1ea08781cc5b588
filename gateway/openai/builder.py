"""The builders of OpenAI chat and completions answers (streamed or whole).

:class:`ChatBuilder` and :class:`CompletionBuilder` are the
:class:`~gateway.frontend.answer_driver.AnswerBuilder` of ``/v1/chat/completions``
and ``/v1/completions``: driven by :class:`~gateway.frontend.answer_driver.AnswerRun`
they return the SSE ``data:`` frames of the stream (ending with ``data:
[DONE]``) and collect every choice, so that :meth:`~_Builder.body` is the
JSON of the non-streamed answer (built by :mod:`gateway.openai.format`).

Stream chunks are on the per-token path, so the builders build, once per
request, the constant bytes around a chunk's variable parts and emit each
frame as ``head + json(text) + tail``; only chunks that carry
log-probabilities encode an object. The JSON inside every frame is
byte-for-byte what encoding the equivalent object would give. Tool calls
are assembled by :class:`~gateway.frontend.tool_calls.ToolCallAssembler` (ids
``call_…``): a stream sends each call's first piece as ``{"index", "id",
"type": "function", "function": {"name", "arguments": ""}}`` and every
argument piece as ``{"index", "function": {"arguments"}}`` (one chunk
each). A request that fails mid-stream ends with whatever its last output
carried, an error frame ``{"error": {...}}`` and ``[DONE]``.

Event loop only; one builder per request.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Collection

from gateway.core.errors import APIError, stream_error_code
from gateway.frontend import sse
from gateway.frontend.answer_driver import TokenTally
from gateway.frontend.error_shapes import openai_error_frame
from gateway.frontend.request_flow import FinalReason
from gateway.frontend.sse import DATA_PREFIX, FRAME_END
from gateway.frontend.tool_calls import OPENAI_CALL_IDS, AssembledCall, ToolCallAssembler
from gateway.openai.format import (
    DEFAULT_REASONING_FIELD,
    SERVICE_TIER,
    SYSTEM_FINGERPRINT,
    ChoiceResult,
    Usage,
    chat_completion_body,
    encode,
    legacy_finish,
    text_completion_body,
    usage_of,
)
from gateway.openai.logprobs import chat_logprobs, completion_logprobs
from shared.protocol import RequestOutput, TokenLogprob, ToolCallDelta

ErrorOf = Callable[[RequestOutput], APIError]
"""The endpoint's client error for an ``error``/``abort`` output."""


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


class _Builder:
    """Shared part of the two builders.

    Built from the response ``request_id``, ``created`` timestamp, ``model``,
    whether ``include_usage`` was requested, ``error_of`` (the endpoint's
    error for a failing output), the number of choices ``n`` and whether
    ``logprobs`` were requested. ``include_usage`` adds ``"usage":null`` to
    every chunk and a final usage chunk (``choices: []``) before
    ``[DONE]``. Collects each choice's text, reasoning, tool calls, sampled
    tokens (when log-probabilities were requested) and finish reason.
    """

    _object = ""

    def __init__(
        self,
        request_id: str,
        created: int,
        model: str,
        include_usage: bool,
        error_of: ErrorOf,
        *,
        n: int = 1,
        logprobs: bool = False,
    ) -> None:
        self.choices = n
        self.tally = TokenTally()
        self._request_id = request_id
        self._created = created
        self._model = model
        self._error_of = error_of
        self._head = DATA_PREFIX + _head(request_id, self._object, created, model)
        self._end = (b',"usage":null}' if include_usage else b"}") + FRAME_END
        self._include_usage = include_usage
        self._logprobs = logprobs
        self._text: list[list[str]] = [[] for _ in range(n)]
        self._reasoning: list[list[str]] = [[] for _ in range(n)]
        self._tools = [ToolCallAssembler(OPENAI_CALL_IDS) for _ in range(n)]
        self._tokens: list[list[TokenLogprob]] | None = [[] for _ in range(n)] if logprobs else None
        self._reasons: list[FinalReason] = ["stop"] * n

    # --- the AnswerBuilder contract ------------------------------------------------------

    def start(self, first: RequestOutput) -> bytes:
        """The frames that open the stream (none by default)."""
        return b""

    def add(self, output: RequestOutput) -> bytes:
        """Collect ``output`` and return its frames (a choice's last output
        includes its finish)."""
        self.tally.add(output)
        index = output.index
        if output.text:
            self._text[index].append(output.text)
        if output.reasoning:
            self._reasoning[index].append(output.reasoning)
        if self._tokens is not None and output.logprobs:
            self._tokens[index].extend(output.logprobs)
        if output.ends_choice:
            self._reasons[index] = output.finish_reason  # type: ignore[assignment]
        return self._output(output)

    def finish(self) -> bytes:
        """The usage chunk (when asked for) and ``[DONE]``."""
        return self.final_usage(self.usage()) + sse.DONE

    def fail(self, output: RequestOutput) -> bytes:
        """Whatever the failing ``output`` still carries (text, reasoning,
        tool-call pieces; when its choice is in range), the error frame and
        ``[DONE]``."""
        err = self._error_of(output)
        deltas = self.deltas(output) if 0 <= output.index < self.choices else b""
        return deltas + openai_error_frame(err.message, stream_error_code(err, output)) + sse.DONE

    def frames(self, batch: bytes) -> bytes:
        """The frames are already bytes."""
        return batch

    # --- the whole answer -------------------------------------------------------------------

    def usage(self) -> Usage:
        """The usage of everything added so far."""
        return usage_of(self.tally)

    def results(self) -> list[ChoiceResult]:
        """Every choice, in index order (complete once all have finished)."""
        return [
            ChoiceResult(
                index=i,
                text="".join(pieces),
                finish_reason=self._reasons[i],
                logprobs=None if self._tokens is None else self._tokens[i],
                reasoning="".join(self._reasoning[i]),
                tool_calls=tuple(c.as_tool_call() for c in self._tools[i].calls()),
            )
            for i, pieces in enumerate(self._text)
        ]

    def body(self) -> bytes:
        """The JSON of the non-streamed answer."""
        raise NotImplementedError

    # --- chunks -----------------------------------------------------------------------------

    def deltas(self, output: RequestOutput) -> bytes:
        """The chunks of what ``output`` carries, without any finish reason
        (nothing when it carries nothing)."""
        raise NotImplementedError

    def _output(self, output: RequestOutput) -> bytes:
        """The frames of one output of a choice."""
        raise NotImplementedError

    def _has_content(self, output: RequestOutput) -> bool:
        """Whether ``output`` has text, or tokens whose logprobs were asked."""
        return bool(output.text) or (self._logprobs and bool(output.logprobs))

    def usage_chunk(self, counts: Usage) -> bytes:
        """The usage chunk frame (``choices: []``)."""
        return self._head + b'[],"usage":' + encode(counts) + b"}" + FRAME_END

    def final_usage(self, counts: Usage) -> bytes:
        """The usage chunk when ``include_usage`` was set, else nothing."""
        return self.usage_chunk(counts) if self._include_usage else b""


class ChatBuilder(_Builder):
    """Builds one ``chat.completion`` answer: its ``chat.completion.chunk``
    frames and its whole body.

    See :class:`_Builder` for construction; ``reasoning_field`` names the
    reasoning (delta), ``custom_tools`` are the tools whose calls the whole
    message lists as custom tool calls. Every chunk holds one choice
    ``{"index", "delta", "finish_reason"}``, plus ``logprobs`` (null where
    it has no tokens to carry) only when log-probabilities were requested,
    exactly as in ``wire-formats.md``. :meth:`start` gives each choice its
    ``delta: {"role": "assistant", "content": ""}`` chunk. An output then
    gives, in this order and each only when present: a
    ``{"<reasoning_field>": text}`` chunk; a ``{"content": text}`` chunk
    (carrying the output's ``logprobs`` when requested, even with empty
    text); one ``{"tool_calls": [...]}`` chunk per tool-call header and per
    argument piece (indexes per choice); and, for a choice's last output, a
    ``delta: {}`` chunk with its ``finish_reason``. With
    ``legacy_functions`` a call streams as ``{"function_call": {"name",
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
        error_of: ErrorOf,
        *,
        n: int = 1,
        logprobs: bool = False,
        reasoning_field: str = DEFAULT_REASONING_FIELD,
        legacy_functions: bool = False,
        custom_tools: Collection[str] = (),
    ) -> None:
        super().__init__(request_id, created, model, include_usage, error_of, n=n, logprobs=logprobs)
        self._legacy = legacy_functions
        self._reasoning_field = reasoning_field
        self._custom_tools = custom_tools
        self._choice_heads = [self._head + b'[{"index":%d,"delta":' % i for i in range(n)]
        self._logprobs_null = b',"logprobs":null' if logprobs else b""
        self._delta_tail = self._logprobs_null + b',"finish_reason":null}]' + self._end
        self._reasoning_key = b"{" + encode(reasoning_field) + b":"

    def start(self, first: RequestOutput) -> bytes:
        """One opening chunk per choice, in index order."""
        return b"".join(self._delta(i, b'{"role":"assistant","content":""}') for i in range(self.choices))

    def body(self) -> bytes:
        """The ``chat.completion`` JSON."""
        return chat_completion_body(
            request_id=self._request_id,
            created=self._created,
            model=self._model,
            choices=self.results(),
            usage=self.usage(),
            reasoning_field=self._reasoning_field,
            legacy_functions=self._legacy,
            custom_tools=self._custom_tools,
        )

    def deltas(self, output: RequestOutput) -> bytes:
        """``output``'s reasoning, content and tool-call chunks (see the
        class), or nothing. Tool-call pieces are assembled here."""
        frames = b""
        if output.reasoning:
            frames += self._delta(output.index, self._reasoning_key + encode(output.reasoning) + b"}")
        frames += self._content(output)
        for piece in output.tool_calls or ():
            frames += self._tool_call(output.index, piece)
        return frames

    def _output(self, output: RequestOutput) -> bytes:
        """``output``'s delta chunks, then its choice's ``delta: {}`` finish
        chunk when ``output`` is that choice's last."""
        frames = self.deltas(output)
        if output.ends_choice:
            reason = encode(legacy_finish(output.finish_reason or "stop", self._legacy))
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
        call, started = self._tools[index].add(piece)
        if self._legacy:
            return self._function_call(index, call, started, piece)
        frames = b""
        if started:
            header = b"".join(
                (
                    b'{"tool_calls":[{"index":%d,"id":' % call.position,
                    encode(call.id),
                    b',"type":"function","function":{"name":',
                    encode(call.name),
                    b',"arguments":""}}]}',
                )
            )
            frames += self._delta(index, header)
        if piece.arguments:
            arguments = b'{"tool_calls":[{"index":%d,"function":{"arguments":' % call.position
            frames += self._delta(index, arguments + encode(piece.arguments) + b"}}]}")
        return frames

    def _function_call(self, index: int, call: AssembledCall, started: bool, piece: ToolCallDelta) -> bytes:
        """The legacy ``function_call`` chunks of one tool-call piece of
        choice ``index``; only the choice's first call (position 0) is sent,
        as a legacy answer holds one call."""
        if call.position != 0:
            return b""
        frames = b""
        if started:
            header = b'{"function_call":{"name":' + encode(call.name) + b',"arguments":""}}'
            frames += self._delta(index, header)
        if piece.arguments:
            frames += self._delta(index, b'{"function_call":{"arguments":' + encode(piece.arguments) + b"}}")
        return frames


class CompletionBuilder(_Builder):
    """Builds one ``text_completion`` answer: its chunk frames and its
    whole body.

    See :class:`_Builder` for construction; ``alternatives`` is the legacy
    ``logprobs`` count, ``echo`` the prompt text to echo, ``returned`` the
    number of choices the whole answer returns (``n``; fewer than the
    generated ``n`` with ``best_of``) and ``keep_logprobs`` whether the
    whole answer shows log-probabilities (with ``best_of`` they are
    sampled to rank the candidates even when not asked for). Every chunk
    holds one choice ``{"text", "index", "logprobs", "finish_reason"}``;
    the only opening chunks are one per choice carrying ``echo`` (when
    set), and a choice's last text travels in the same chunk as its
    ``finish_reason``. When requested, ``logprobs`` is the legacy object
    for the chunk's tokens, with ``text_offset`` counting on from the
    choice's earlier chunks; otherwise it is null. Only ``text`` is sent:
    reasoning and tool-call pieces, which a raw prompt never asks for, have
    no place in a text completion.
    """

    _object = "text_completion"

    def __init__(
        self,
        request_id: str,
        created: int,
        model: str,
        include_usage: bool,
        error_of: ErrorOf,
        *,
        n: int = 1,
        logprobs: bool = False,
        alternatives: int = 0,
        echo: str = "",
        returned: int | None = None,
        keep_logprobs: bool = True,
    ) -> None:
        super().__init__(request_id, created, model, include_usage, error_of, n=n, logprobs=logprobs)
        self._alternatives = alternatives
        self._echo = echo
        self._returned = n if returned is None else returned
        self._keep_logprobs = keep_logprobs
        self._offsets = [0] * n
        self._text_head = self._head + b'[{"text":'
        self._index_parts = [b',"index":%d,"logprobs":' % i for i in range(n)]

    def start(self, first: RequestOutput) -> bytes:
        """One chunk per choice with the echoed prompt (nothing without
        ``echo``)."""
        if not self._echo:
            return b""
        return b"".join(
            self._text_head + encode(self._echo) + self._index_parts[i] + b'null,"finish_reason":null}]' + self._end
            for i in range(self.choices)
        )

    def body(self) -> bytes:
        """The ``text_completion`` JSON (with ``best_of``, the best
        candidates; usage counts them all, as all were generated)."""
        return text_completion_body(
            request_id=self._request_id,
            created=self._created,
            model=self._model,
            choices=self._best(self.results()),
            usage=self.usage(),
            alternatives=self._alternatives,
            echo=self._echo,
        )

    def _best(self, choices: list[ChoiceResult]) -> list[ChoiceResult]:
        """The choices the answer returns: all of them, or with ``best_of``
        the ``returned`` candidates with the highest mean token
        log-probability, best first and numbered from 0 (their
        log-probabilities kept only with ``keep_logprobs``)."""
        if len(choices) <= self._returned:
            return choices

        def mean_logprob(choice: ChoiceResult) -> float:
            tokens = choice.logprobs or ()
            return sum(t.logprob for t in tokens) / len(tokens) if tokens else float("-inf")

        best = sorted(choices, key=mean_logprob, reverse=True)[: self._returned]
        return [
            dataclasses.replace(choice, index=i, logprobs=choice.logprobs if self._keep_logprobs else None)
            for i, choice in enumerate(best)
        ]

    def deltas(self, output: RequestOutput) -> bytes:
        """``output``'s chunk without a finish reason, or nothing."""
        if not self._has_content(output):
            return b""
        return self._chunk(output, b"null")

    def _output(self, output: RequestOutput) -> bytes:
        """``output``'s chunk; a choice's last output always gets one,
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
