"""The worker's output thread: detokenizes, matches stop strings, and is the
only writer of the outputs socket.

It consumes, in order, the items the input and scheduler threads queue:
``Started`` (a request's choices begin), ``TokenStep`` and ``Terminal``
from the scheduler, and ready-made contract messages. Every ``TokenStep``
becomes at most one ``StepOutputs`` message. Because this thread alone
decides when a choice's terminal output is sent, each choice ends exactly
once, and a request that ends early (abort, error) gets one terminal output
for all its choices. Heartbeats go out whenever the queue is quiet for
``heartbeat_interval`` seconds and at least that often under load, and only
while every thread of the worker is alive (``healthy``): a worker with a
dead thread must look dead to the gateway.

Failures: an exception while turning one request's token into text (its
detokenizer or parser) ends that request with an ``internal`` error and
aborts it in the scheduler; the other requests go on. Any other exception
escapes :meth:`OutputLoop.run`: the worker then exits (see ``worker.main``).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import msgspec

from shared.protocol import (
    Heartbeat,
    RequestOutput,
    StepOutputs,
    TokenLogprob,
    ToolCallDelta,
    TopLogprob,
    WorkerStats,
)
from worker.faults import reached
from worker.messages import (
    Abort,
    Deferred,
    OutputPace,
    OutputSpec,
    Release,
    Started,
    Terminal,
    TokenLogprobs,
    TokenStep,
)
from worker.output.detok import TextStream, TokenDecoder

log = logging.getLogger("mlxd.worker.output")


@dataclass
class _Choice:
    """Text state of one choice of a running request: its detokenizer and
    stop-string matcher, its parser (None when its text is plain), and its
    running token counts."""

    stream: TextStream
    parser: Any = None
    completion_tokens: int = 0
    accepted_predictions: int = 0
    rejected_predictions: int = 0


def _parser(spec: OutputSpec | None) -> Any:
    """The output parser an admission's ``OutputSpec`` asks for, or None."""
    if spec is None or not (spec.tool_format or spec.reasoning_format):
        return None
    from worker.parsers import make_parser

    return make_parser(
        tool_format=spec.tool_format,
        reasoning_format=spec.reasoning_format,
        tools=spec.tools,
        thinking_open=spec.thinking_open,
        max_tool_calls=spec.max_tool_calls,
        end_on_repeat=spec.end_on_repeat,
    )


@dataclass
class _Request:
    """Output state of one running request."""

    prompt_tokens: int
    cached_tokens: int
    choices: dict[int, _Choice]
    queue_seconds: float | None = None
    disk_cached_tokens: int = 0


class Exit:
    """Sentinel: send nothing more and leave the loop."""


@dataclass
class FailAll:
    """Sentinel: end every running request with an ``internal`` error
    saying ``message``, then leave the loop (another thread of the worker
    died; the process exits next). ``done`` is set once the errors are
    sent."""

    message: str
    done: threading.Event = field(default_factory=threading.Event)


class OutputLoop:
    """Runs on the output thread; see the module docstring.

    ``send`` writes one contract message to the socket (called only from
    this thread). ``release`` hands the scheduler a command: a
    :class:`Release` of a choice this thread finished on a stop string, or
    an :class:`Abort` of a request it ended with an error. ``stats``
    returns the heartbeat's counters; ``healthy`` says whether every other
    thread of the worker is alive (no heartbeat otherwise). ``decoder`` is
    set once the model's tokenizer is loaded, before any request starts.
    ``pace`` is told of every :class:`TokenStep` this thread is done with
    (handled or dropped), so the scheduler keeps within a step or two of it.
    """

    def __init__(
        self,
        worker_id: str,
        send: Callable[[msgspec.Struct], None],
        release: Callable[[Release | Abort], None],
        stats: Callable[[], WorkerStats],
        heartbeat_interval: float = 0.5,
        healthy: Callable[[], bool] = lambda: True,
        pace: OutputPace | None = None,
    ) -> None:
        self.queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self.decoder: TokenDecoder | None = None
        self._worker_id = worker_id
        self._send = send
        self._release = release
        self._stats = stats
        self._healthy = healthy
        self._pace = pace
        self._interval = heartbeat_interval
        self._live: dict[str, _Request] = {}
        self._last_beat = 0.0
        self._beats = 0
        self._failing: FailAll | None = None

    def fail_now(self, item: FailAll) -> None:
        """Any thread: end every running request with ``item``'s error as
        soon as the current item is handled, ahead of whatever is still
        queued (a backlog of outputs a dying worker will never finish must
        not delay the errors: only the queued requests' starts are still
        read); ``item.done`` is set once the errors are sent."""
        self._failing = item
        self.queue.put(item)  # wakes the loop if it waits

    def run(self) -> None:
        """Process queued items until :class:`Exit` or :class:`FailAll`.

        Raises whatever escapes the handling of an item (see the module
        docstring); the caller must treat that as the death of the worker.
        """
        while True:
            try:
                item = self.queue.get(timeout=self._interval)
            except queue.Empty:
                item = None
            if isinstance(item, Exit):
                return
            if self._failing is not None:
                if isinstance(item, Started):
                    self._handle(item)
                item = self._skip_to(self._failing)
            if isinstance(item, FailAll):
                self._fail_all(item)
                return
            if item is not None:
                self._handle(item)
            if time.monotonic() - self._last_beat >= self._interval and self._healthy():
                self._beat()

    def _skip_to(self, fail: FailAll) -> FailAll:
        """Drop what is still queued but the requests' starts (so every
        running request gets its error), then return ``fail``."""
        while True:
            try:
                item = self.queue.get_nowait()
            except queue.Empty:
                return fail
            if isinstance(item, Started):
                self._handle(item)
            elif isinstance(item, TokenStep) and self._pace is not None:
                self._pace.handled()

    def _handle(self, item: object) -> None:
        if isinstance(item, TokenStep):
            reached("output")
            for request_id, waited in item.scheduled:
                if request_id in self._live:
                    self._live[request_id].queue_seconds = waited
            for request_id, index, drafted, accepted in item.drafts:
                request = self._live.get(request_id)
                choice = request.choices.get(index) if request else None
                if choice is not None:
                    choice.accepted_predictions += accepted
                    choice.rejected_predictions += drafted - accepted
            outputs = [o for o in (self._token_or_error(*t) for t in item.tokens) if o is not None]
            if outputs:
                self._send(StepOutputs(step=item.step, outputs=outputs))
            if self._pace is not None:
                self._pace.handled()  # after the releases this step's stops queued
        elif isinstance(item, Started):
            assert self.decoder is not None
            self._live[item.request_id] = _Request(
                item.prompt_tokens,
                item.cached_tokens,
                {i: _Choice(self.decoder.stream(item.stop), _parser(item.output)) for i in range(item.n)},
                disk_cached_tokens=item.disk_cached_tokens,
            )
        elif isinstance(item, Terminal):
            self._terminal(item)
        elif isinstance(item, Deferred):
            self._deferred(item)
        elif isinstance(item, msgspec.Struct):
            self._send(item)

    def _deferred(self, item: Deferred) -> None:
        """Send what ``item`` builds; when building fails, its request's
        terminal error instead (and abort it in the scheduler)."""
        try:
            message = item.build()
        except Exception:
            log.exception("request %s: could not build its output; ending it", item.request_id)
            self._release(Abort([item.request_id]))
            message = item.failed("the worker could not encode the output")
        if message is not None:
            self._send(message)

    def _token_or_error(
        self, request_id: str, index: int, token: int, finish: str | None, lp: TokenLogprobs | None
    ) -> RequestOutput | None:
        """:meth:`_token`, or, when it raises, the request's terminal
        ``internal`` error (the request is also aborted in the scheduler)."""
        try:
            return self._token(request_id, index, token, finish, lp)
        except Exception:
            request = self._live.pop(request_id, None)
            if request is None:
                raise  # not a request's own state: let the worker die
            log.exception("request %s: could not turn its tokens into text; ending it", request_id)
            self._release(Abort([request_id]))
            return self._error(request_id, request, "the worker could not decode the generated text")

    def _token(
        self, request_id: str, index: int, token: int, finish: str | None, lp: TokenLogprobs | None
    ) -> RequestOutput | None:
        request = self._live.get(request_id)
        choice = request.choices.get(index) if request else None
        if request is None or choice is None:
            return None  # already finished (stop string); late tokens are dropped
        choice.completion_tokens += 1
        stream = choice.stream
        if finish == "stop":
            text = stream.finish()  # the token is end-of-sequence: counted, not shown
        else:
            text = stream.add(token)
            if stream.stopped:
                finish = "stop"
                self._release(Release(request_id, index))
            elif finish == "length":
                text += stream.finish()
        reasoning, calls = "", None
        if choice.parser is not None:
            text, reasoning, calls, finish = self._parse(choice.parser, text, finish, request_id, index)
        if finish is None and not text and not reasoning and not calls and lp is None:
            return None
        if finish is not None:
            del request.choices[index]
            if not request.choices:
                del self._live[request_id]
        waited, request.queue_seconds = request.queue_seconds, None
        return RequestOutput(
            request_id=request_id,
            index=index,
            text=text,
            prompt_tokens=request.prompt_tokens,
            cached_tokens=request.cached_tokens,
            disk_cached_tokens=request.disk_cached_tokens,
            completion_tokens=choice.completion_tokens,
            accepted_prediction_tokens=choice.accepted_predictions,
            rejected_prediction_tokens=choice.rejected_predictions,
            finish_reason=finish,  # type: ignore[arg-type]
            logprobs=[self._logprob(token, lp)] if lp is not None else None,
            reasoning=reasoning,
            tool_calls=calls,
            stop_sequence=stream.matched if stream.stopped else None,
            queue_seconds=waited,
        )

    def _parse(
        self, parser: Any, text: str, finish: str | None, request_id: str, index: int
    ) -> tuple[str, str, list[ToolCallDelta] | None, str | None]:
        """Split ``text`` into content, reasoning and tool-call pieces; a
        parser that has seen its only allowed call ends the choice with
        ``tool_calls`` (and the scheduler drops it)."""
        delta = parser.feed(text) if text else None
        content = delta.content if delta else ""
        reasoning = delta.reasoning if delta else ""
        calls = list(delta.tool_calls) if delta else []
        if finish is None and getattr(parser, "done", False):
            finish = "tool_calls"
            self._release(Release(request_id, index))
        if finish is not None:
            tail = parser.finish()
            content, reasoning = content + tail.content, reasoning + tail.reasoning
            calls += tail.tool_calls
            if finish == "stop" and parser.saw_tool_call:
                finish = "tool_calls"
        return content, reasoning, calls or None, finish

    def _logprob(self, token: int, lp: TokenLogprobs) -> TokenLogprob:
        assert self.decoder is not None
        value, top = lp
        raw = self.decoder.raw(token)
        return TokenLogprob(
            token_id=token,
            token=raw.decode("utf-8", errors="replace"),
            raw=raw,
            logprob=value,
            top=[self._top(t, v) for t, v in top],
        )

    def _top(self, token: int, value: float) -> TopLogprob:
        assert self.decoder is not None
        raw = self.decoder.raw(token)
        return TopLogprob(token_id=token, token=raw.decode("utf-8", errors="replace"), raw=raw, logprob=value)

    def _terminal(self, item: Terminal) -> None:
        request = self._live.pop(item.request_id, None)
        if request is None:
            return  # every choice already finished: nothing more to say
        self._send(StepOutputs(step=-1, outputs=[self._end(item.request_id, request, item)]))

    @staticmethod
    def _end(request_id: str, request: _Request, item: Terminal) -> RequestOutput:
        """The one output that ends all of ``request``'s open choices."""
        return RequestOutput(
            request_id=request_id,
            prompt_tokens=request.prompt_tokens,
            cached_tokens=request.cached_tokens,
            disk_cached_tokens=request.disk_cached_tokens,
            completion_tokens=sum(c.completion_tokens for c in request.choices.values()),
            accepted_prediction_tokens=sum(c.accepted_predictions for c in request.choices.values()),
            rejected_prediction_tokens=sum(c.rejected_predictions for c in request.choices.values()),
            finish_reason=item.reason,  # type: ignore[arg-type]
            error=item.message,
            error_kind=item.error_kind,  # type: ignore[arg-type]
        )

    def _error(self, request_id: str, request: _Request, message: str) -> RequestOutput:
        """``request``'s terminal ``internal`` error."""
        return self._end(request_id, request, Terminal(request_id, "error", "internal", message))

    def _fail_all(self, item: FailAll) -> None:
        """End every running request with an error (see :class:`FailAll`)."""
        try:
            outputs = [self._error(rid, request, item.message) for rid, request in self._live.items()]
            self._live.clear()
            if outputs:
                self._send(StepOutputs(step=-1, outputs=outputs))
        finally:
            item.done.set()

    def _beat(self) -> None:
        """Send the next heartbeat, numbered (``heartbeat_seq``) after the
        one before it."""
        self._last_beat = time.monotonic()
        self._beats += 1
        stats = msgspec.structs.replace(self._stats(), heartbeat_seq=self._beats)
        self._send(Heartbeat(worker_id=self._worker_id, stats=stats))
