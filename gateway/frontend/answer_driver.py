"""The one way a protocol front-end answers a generation: a builder, driven.

Every protocol family (OpenAI chat and completions, Responses, Anthropic
Messages, Ollama) has one *builder* per request (:class:`AnswerBuilder`):
it is told the request's outputs and returns, for each step, the batch of
things to send (SSE frames, stream events or NDJSON objects), and it keeps
the final body of a non-streamed answer. A non-streamed answer drains the
very same builder, so both paths agree by construction.

:class:`AnswerRun` drives a builder over one request's
:class:`~gateway.core.backend.RequestStream`: it reads outputs with
:func:`~gateway.frontend.request_flow.next_output`, skips (and logs) outputs of
choices out of range, counts open choices with
:class:`~shared.protocol.OpenChoices` (a choice ends with
``RequestOutput.ends_choice``, the request with ``ends_request``) and calls
the builder's ``start`` / ``add`` / ``finish`` / ``fail``. :func:`answer`
puts that run behind :func:`~gateway.frontend.request_flow.respond_after_first_output`
(errors before headers as proper statuses, keep-alives while a long prompt
prefills, abort in the worker when the client leaves), streaming or
collecting. :class:`TokenTally` is the one running count of a request's
tokens that every builder's usage is made from.

Runs on the event loop; no locks.
"""

from __future__ import annotations

import logging
from typing import Any, AsyncIterator, Callable, Generic, Mapping, Protocol, TypeVar

from starlette.requests import Request
from starlette.responses import Response

from gateway.core.backend import RequestStream
from gateway.frontend import sse
from gateway.frontend.request_flow import next_output, respond_after_first_output
from shared.protocol import OpenChoices, RequestOutput

log = logging.getLogger("mlxd.gateway.answer")

Batch = TypeVar("Batch", bytes, list)
"""What a builder returns for one step: bytes (frames) or a list (events,
objects); either way ``+`` joins two batches and ``batch[:0]`` is empty."""

_Builder = TypeVar("_Builder", bound="AnswerBuilder[Any]")


class AnswerBuilder(Protocol[Batch]):
    """One request's answer, from its first output to its end.

    ``choices`` is the request's ``n``. The driver calls :meth:`start` once
    with the first output (before passing it to :meth:`add`); :meth:`add`
    for every output of a choice in ``0 .. choices-1`` that does not end the
    request (a choice's last output included: it carries
    ``ends_choice``); then exactly one of :meth:`finish` (every choice
    ended) or :meth:`fail` (an ``error``/``abort`` output, of any index,
    ended the request). :meth:`frames` turns a batch into the bytes a
    streamed answer sends. Builders are used by one task; not thread-safe.
    """

    choices: int

    def start(self, first: RequestOutput) -> Batch:
        """What opens the answer."""
        ...

    def add(self, output: RequestOutput) -> Batch:
        """What ``output`` adds."""
        ...

    def finish(self) -> Batch:
        """What closes a successful answer (every choice ended)."""
        ...

    def fail(self, output: RequestOutput) -> Batch:
        """What closes an answer the ``error``/``abort`` ``output`` ended
        (whatever content it still carries, then the error)."""
        ...

    def frames(self, batch: Batch) -> bytes:
        """``batch`` as the bytes of a streamed answer."""
        ...


class AnswerRun(Generic[Batch]):
    """Drives ``builder`` over the request ``request_id`` read from
    ``stream``.

    :meth:`batches` yields the builder's batches step by step (never an
    empty one); once it is exhausted, :attr:`failed` holds the
    ``error``/``abort`` output that ended the request, or None when every
    choice finished. It never closes ``stream``: the caller owns it.
    """

    def __init__(self, builder: AnswerBuilder[Batch], stream: RequestStream, request_id: str) -> None:
        self.builder = builder
        self.failed: RequestOutput | None = None
        self._stream = stream
        self._request_id = request_id

    async def batches(self, first: RequestOutput) -> AsyncIterator[Batch]:
        """The whole answer from ``first`` on; the last batch holds the
        builder's ``finish`` or ``fail``."""
        builder = self.builder
        open_choices = OpenChoices(builder.choices)
        pending = builder.start(first)
        output = first
        while not output.ends_request:
            if 0 <= output.index < builder.choices:
                pending += builder.add(output)
                open_choices.close(output)
                if open_choices.done:
                    yield pending + builder.finish()
                    return
            else:
                log.error(
                    "request %s: output for choice %d of %d ignored", self._request_id, output.index, builder.choices
                )
            if pending:
                yield pending
                pending = pending[:0]
            output = await next_output(self._stream, self._request_id)
        self.failed = output
        yield pending + builder.fail(output)

    async def drain(self, first: RequestOutput) -> AnswerBuilder[Batch] | RequestOutput:
        """Run the request to its end, discarding the batches; return the
        builder (its final body complete) or the ``error``/``abort`` output
        that ended the request."""
        async for _ in self.batches(first):
            pass
        return self.builder if self.failed is None else self.failed

    async def stream_frames(self, first: RequestOutput) -> AsyncIterator[bytes]:
        """The bytes of a streamed answer. Closes the request stream in
        ``finally``, so a client that leaves (which closes or cancels this
        generator) aborts the request in the worker."""
        try:
            async for batch in self.batches(first):
                yield self.builder.frames(batch)
        finally:
            await self._stream.aclose()


async def answer(
    request: Request,
    stream: RequestStream,
    request_id: str,
    builder: _Builder,
    *,
    streaming: bool,
    refuse: Callable[[RequestOutput], Response],
    body: Callable[[_Builder], Response],
    headers: Mapping[str, str] | None = None,
    keepalive: bytes = sse.KEEPALIVE,
    media_type: str = sse.MEDIA_TYPE,
) -> Response:
    """Answer the admitted request ``request_id`` with ``builder``.

    Through :func:`~gateway.frontend.request_flow.respond_after_first_output`: a
    first output that ends the request is ``refuse(output)`` (an error
    status); with ``streaming`` the builder's frames are streamed (an
    :class:`~gateway.frontend.sse.SSEResponse` of ``media_type`` with ``headers``,
    ``keepalive`` frames while the first output is late); otherwise the
    builder is drained while the client is watched and the answer is
    ``body(builder)``, or ``refuse(output)`` when the request failed on
    the way. The request stream is always closed in the end, which aborts
    the request in the worker if it had not finished.
    """
    run: AnswerRun[Any] = AnswerRun(builder, stream, request_id)
    return await respond_after_first_output(
        request,
        stream,
        request_id,
        refuse=refuse,
        streamed=run.stream_frames if streaming else None,
        collect=run.drain,
        answer=body,
        stream_headers=headers,
        keepalive=keepalive,
        media_type=media_type,
    )


class TokenTally:
    """Running token counts of one request across its choices.

    Feed it every output of the request (:meth:`add`): ``prompt``,
    ``cached`` and ``disk_cached`` are the largest running values seen (the
    prompt counts once), ``completion`` the sum over choices of each
    choice's latest ``completion_tokens``; ``accepted`` and ``rejected``
    likewise of the choices' speculative draft tokens kept and thrown
    away (``accepted_prediction_tokens`` / ``rejected_prediction_tokens``).
    """

    def __init__(self) -> None:
        self.prompt = 0
        self.cached = 0
        self.disk_cached = 0
        self._completion: dict[int, int] = {}
        self._accepted: dict[int, int] = {}
        self._rejected: dict[int, int] = {}

    def add(self, output: RequestOutput) -> None:
        """Account for one output."""
        self.prompt = max(self.prompt, output.prompt_tokens)
        self.cached = max(self.cached, output.cached_tokens)
        self.disk_cached = max(self.disk_cached, output.disk_cached_tokens)
        seen = self._completion.get(output.index, 0)
        self._completion[output.index] = max(seen, output.completion_tokens)
        if output.accepted_prediction_tokens or output.rejected_prediction_tokens:
            i = output.index
            self._accepted[i] = max(self._accepted.get(i, 0), output.accepted_prediction_tokens)
            self._rejected[i] = max(self._rejected.get(i, 0), output.rejected_prediction_tokens)

    @property
    def accepted(self) -> int:
        """Speculative draft tokens kept, over all choices."""
        return sum(self._accepted.values())

    @property
    def rejected(self) -> int:
        """Speculative draft tokens thrown away, over all choices."""
        return sum(self._rejected.values())

    @property
    def completion(self) -> int:
        """Completion tokens of all choices."""
        return sum(self._completion.values())
