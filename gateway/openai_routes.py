"""Starlette endpoints of the OpenAI-compatible API.

``chat_completions`` (POST /v1/chat/completions), ``completions``
(POST /v1/completions), ``list_models`` (GET /v1/models) and
``retrieve_model`` (GET /v1/models/{model:path}). They reach the workers
only through the :class:`~gateway.engine_api.Engine` in
``request.app.state.engine`` and never block the event loop.

Generation flow: decode and validate the body, resolve the model, check
the model's limits (``n``), submit, then await the first output *before*
any header is sent, so a request the worker refuses (e.g. a prompt longer
than the context) is answered with a proper status even when ``stream`` is
true (:func:`gateway.request_flow.respond_after_first_output`, shared with
the other protocols). After that, a stream is sent as SSE chunks ending with
``data: [DONE]``; otherwise each choice's text, reasoning and tool calls
are collected into one object. Chat reasoning goes under the configured
``server.reasoning_field`` (``request.app.state.config``; default
``reasoning_content`` when the app has no config). The outputs of the ``n``
choices arrive interleaved; the request is complete once every choice has
had its ``stop``/``length``/``tool_calls`` output, and
ends early at the first ``error``/``abort`` output (an error status, or a
mid-stream error frame). Whatever happens (client gone, error,
cancellation) the request stream is closed, which aborts the request in the
worker.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, Union

from starlette.requests import Request
from starlette.responses import Response

from gateway import openai_format as fmt
from gateway import sse
from gateway.dropped_tools import dropped_headers
from gateway.engine_api import RequestStream
from gateway.error_shapes import openai_error_frame, openai_error_response
from gateway.errors import APIError, model_not_found, stream_error_code, worker_error
from gateway.openai_checks import (
    check_limits,
    decode_chat_request,
    decode_completion_request,
    dropped_tools,
    echoed_prompt,
)
from gateway.openai_schema import ChatCompletionRequest, CompletionRequest
from gateway.openai_tool_checks import custom_tool_names, legacy_functions
from gateway.openai_translate import include_usage, to_generate_request
from gateway.request_flow import (
    JSON_MEDIA_TYPE,
    engine_of,
    next_output,
    respond_after_first_output,
)
from shared.protocol import GenerateRequest, OpenChoices, RequestOutput, TokenLogprob

log = logging.getLogger("mlxd.gateway.openai")

ChunkStream = Union[fmt.ChatChunkStream, fmt.CompletionChunkStream]
"""Either endpoint's stream-chunk builder."""

OpenAIRequest = Union[ChatCompletionRequest, CompletionRequest]
"""Either endpoint's decoded request."""


class _Progress:
    """Which of a request's ``n`` choices have finished, and its usage.

    :meth:`add` takes every output that does not end the request.
    """

    def __init__(self, request_id: str, n: int) -> None:
        self._request_id = request_id
        self._n = n
        self._choices = OpenChoices(n)
        self.tally = fmt.UsageTally()

    def add(self, output: RequestOutput) -> bool:
        """Account for ``output``; return False (and log) when its choice
        index is out of range, in which case the caller ignores it."""
        if not 0 <= output.index < self._n:
            log.error("request %s: output for choice %d of %d ignored", self._request_id, output.index, self._n)
            return False
        self.tally.add(output)
        self._choices.close(output)
        return True

    @property
    def done(self) -> bool:
        """Whether every choice has had its final (``stop``, ``length`` or
        ``tool_calls``) output."""
        return self._choices.done


# --- endpoint plumbing ---------------------------------------------------------


@dataclass(frozen=True)
class _Endpoint:
    """What differs between chat and completions: the id prefix, the field a
    context-length error names, the body decoder, and the builders of the
    stream chunks and of the whole response for a job."""

    id_prefix: str
    prompt_param: str
    decode: Callable[[bytes], OpenAIRequest]
    chunks: Callable[[_Job], ChunkStream]
    body: Callable[[_Job, list[fmt.ChoiceResult], fmt.Usage], bytes]


@dataclass(frozen=True)
class _Job:
    """One admitted generation request (``generate`` is what was submitted;
    ``reasoning_field`` names chat reasoning in the response)."""

    endpoint: _Endpoint
    request: OpenAIRequest
    generate: GenerateRequest
    created: int
    model: str
    stream: RequestStream
    reasoning_field: str = fmt.DEFAULT_REASONING_FIELD
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def request_id(self) -> str:
        """The response id (also the worker's request id)."""
        return self.generate.request_id

    @property
    def n(self) -> int:
        """The number of choices."""
        return self.generate.n

    @property
    def logprobs(self) -> bool:
        """Whether log-probabilities were requested."""
        return self.generate.sampling.logprobs


def _chunk_stream(job: _Job, builder: Callable[..., ChunkStream], **options: Any) -> ChunkStream:
    """``builder`` (a chunk-stream class) for ``job``: its id, timestamp,
    model, usage chunk, choices and log-probabilities, plus ``options``."""
    return builder(
        job.request_id,
        job.created,
        job.model,
        include_usage(job.request),
        n=job.n,
        logprobs=job.logprobs,
        **options,
    )


def _chat_chunks(job: _Job) -> ChunkStream:
    """The chat chunk builder for ``job``."""
    legacy = legacy_functions(job.request)  # type: ignore[arg-type]
    return _chunk_stream(job, fmt.ChatChunkStream, reasoning_field=job.reasoning_field, legacy_functions=legacy)


def _completion_chunks(job: _Job) -> ChunkStream:
    """The completions chunk builder for ``job``."""
    return _chunk_stream(
        job,
        fmt.CompletionChunkStream,
        alternatives=job.generate.sampling.top_logprobs,
        echo=echoed_prompt(job.request),  # type: ignore[arg-type]
    )


def _chat_body(job: _Job, choices: list[fmt.ChoiceResult], usage: fmt.Usage) -> bytes:
    """The ``chat.completion`` JSON for ``job``."""
    return fmt.chat_completion_body(
        request_id=job.request_id,
        created=job.created,
        model=job.model,
        choices=choices,
        usage=usage,
        reasoning_field=job.reasoning_field,
        legacy_functions=legacy_functions(job.request),  # type: ignore[arg-type]
        custom_tools=custom_tool_names(job.request),  # type: ignore[arg-type]
    )


def _best(request: CompletionRequest, choices: list[fmt.ChoiceResult]) -> list[fmt.ChoiceResult]:
    """The choices a completions answer returns: all of them, or with
    ``best_of`` the ``n`` candidates with the highest mean token
    log-probability, best first and numbered from 0 (their
    log-probabilities kept only when the request asked for them)."""
    n = request.n or 1
    if len(choices) <= n:
        return choices

    def mean_logprob(choice: fmt.ChoiceResult) -> float:
        tokens = choice.logprobs or ()
        return sum(t.logprob for t in tokens) / len(tokens) if tokens else float("-inf")

    best = sorted(choices, key=mean_logprob, reverse=True)[:n]
    keep = request.logprobs is not None
    return [
        dataclasses.replace(choice, index=i, logprobs=choice.logprobs if keep else None)
        for i, choice in enumerate(best)
    ]


def _completion_body(job: _Job, choices: list[fmt.ChoiceResult], usage: fmt.Usage) -> bytes:
    """The ``text_completion`` JSON for ``job`` (with ``best_of``, the best
    ``n`` candidates; usage counts them all, as all were generated)."""
    choices = _best(job.request, choices)  # type: ignore[arg-type]
    return fmt.text_completion_body(
        request_id=job.request_id,
        created=job.created,
        model=job.model,
        choices=choices,
        usage=usage,
        alternatives=job.generate.sampling.top_logprobs,
        echo=echoed_prompt(job.request),  # type: ignore[arg-type]
    )


_CHAT = _Endpoint(
    id_prefix="chatcmpl-",
    prompt_param="messages",
    decode=decode_chat_request,
    chunks=_chat_chunks,
    body=_chat_body,
)
_COMPLETIONS = _Endpoint(
    id_prefix="cmpl-",
    prompt_param="prompt",
    decode=decode_completion_request,
    chunks=_completion_chunks,
    body=_completion_body,
)


def _reasoning_field(request: Request) -> str:
    """The configured name of chat reasoning text (``server.reasoning_field``),
    or the default when the app was built without a config."""
    config = getattr(request.app.state, "config", None)
    if config is None:
        return fmt.DEFAULT_REASONING_FIELD
    return config.server.reasoning_field


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``: a ``chat.completion`` object, or an SSE
    stream of ``chat.completion.chunk`` when ``stream`` is true. Errors are
    OpenAI error JSON with the matching status."""
    return await _generate(request, _CHAT)


async def completions(request: Request) -> Response:
    """``POST /v1/completions``: a ``text_completion`` object, or an SSE
    stream of them when ``stream`` is true. Errors as for chat."""
    return await _generate(request, _COMPLETIONS)


async def _generate(request: Request, endpoint: _Endpoint) -> Response:
    """Validate, submit, and answer one generation request."""
    try:
        job = await _submit(request, endpoint)
    except APIError as err:
        return openai_error_response(err)
    return await respond_after_first_output(
        request,
        job.stream,
        job.request_id,
        refuse=lambda output: openai_error_response(worker_error(output, endpoint.prompt_param)),
        streamed=(lambda first: _events(job, job.endpoint.chunks(job), first)) if job.request.stream else None,
        collect=lambda first: _collect(job, first),
        answer=lambda collector: _answer(job, collector),
        stream_headers=job.headers,
    )


async def _submit(request: Request, endpoint: _Endpoint) -> _Job:
    """Decode the body, resolve the model, check its limits and submit.

    Raises:
        APIError: 400 invalid body or ``n`` above the model's limit, 404
        unknown model, 503 worker not ready or overloaded.
    """
    req = endpoint.decode(await request.body())
    engine = engine_of(request)
    model = engine.resolve(req.model)
    check_limits(req, model, engine.limits(model))
    generate = to_generate_request(req, endpoint.id_prefix + uuid.uuid4().hex)
    stream = await engine.submit(model, generate)
    dropped = dropped_tools(req) if isinstance(req, ChatCompletionRequest) else []
    headers = dropped_headers(dropped, request.url.path)
    return _Job(endpoint, req, generate, int(time.time()), model, stream, _reasoning_field(request), headers)


# --- non-streaming ---------------------------------------------------------------


class _Collector:
    """The text, reasoning, tool calls, sampled tokens (when
    log-probabilities were requested) and finish reason of each of a
    request's ``n`` choices."""

    def __init__(self, job: _Job) -> None:
        self.progress = _Progress(job.request_id, job.n)
        self._pieces: list[list[str]] = [[] for _ in range(job.n)]
        self._reasoning: list[list[str]] = [[] for _ in range(job.n)]
        self._tools = [fmt.ToolCallTracker() for _ in range(job.n)]
        self._tokens: list[list[TokenLogprob]] | None = [[] for _ in range(job.n)] if job.logprobs else None
        self._reasons: list[fmt.FinalReason] = ["stop"] * job.n

    def add(self, output: RequestOutput) -> None:
        """Take one output that does not end the request."""
        if not self.progress.add(output):
            return
        index = output.index
        if output.text:
            self._pieces[index].append(output.text)
        if output.reasoning:
            self._reasoning[index].append(output.reasoning)
        for piece in output.tool_calls or ():
            self._tools[index].add(piece)
        if self._tokens is not None and output.logprobs:
            self._tokens[index].extend(output.logprobs)
        if output.ends_choice:
            self._reasons[index] = output.finish_reason  # type: ignore[assignment]

    def results(self) -> list[fmt.ChoiceResult]:
        """Every choice, in index order (call once all have finished)."""
        return [
            fmt.ChoiceResult(
                index=i,
                text="".join(pieces),
                finish_reason=self._reasons[i],
                logprobs=None if self._tokens is None else self._tokens[i],
                reasoning="".join(self._reasoning[i]),
                tool_calls=tuple(self._tools[i].calls()),
            )
            for i, pieces in enumerate(self._pieces)
        ]


async def _collect(job: _Job, first: RequestOutput) -> _Collector | RequestOutput:
    """Read the request to its end; return the collected choices, or the
    ``error``/``abort`` output that ended it early."""
    collector = _Collector(job)
    output = first
    while not output.ends_request:
        collector.add(output)
        if collector.progress.done:
            return collector
        output = await next_output(job.stream, job.request_id)
    return output


def _answer(job: _Job, collector: _Collector) -> Response:
    """The one JSON object answering ``job``, from its collected choices."""
    body = job.endpoint.body(job, collector.results(), collector.progress.tally.usage())
    return Response(body, media_type=JSON_MEDIA_TYPE, headers=job.headers)


# --- streaming ---------------------------------------------------------------------


async def _events(job: _Job, chunks: ChunkStream, first: RequestOutput) -> AsyncIterator[bytes]:
    """Yield the SSE frames of one streamed response, ending with ``[DONE]``.

    Every choice's chunks as its outputs arrive; once all choices finished,
    the usage chunk (when asked) and ``[DONE]``; if the request ends early,
    an error frame and ``[DONE]``. Closes the request stream in ``finally``,
    so a disconnect (which cancels or closes this generator) aborts the
    request in the worker.
    """
    try:
        progress = _Progress(job.request_id, job.n)
        frames = chunks.start()
        output = first
        while not output.ends_request:
            if progress.add(output):
                frames += chunks.output(output)
            if progress.done:
                yield frames + chunks.final_usage(progress.tally.usage()) + sse.DONE
                return
            if frames:
                yield frames
                frames = b""
            output = await next_output(job.stream, job.request_id)
        yield frames + _error_frames(job, chunks, output) + sse.DONE
    finally:
        await job.stream.aclose()


def _error_frames(job: _Job, chunks: ChunkStream, last: RequestOutput) -> bytes:
    """Frames for an ``error``/``abort`` output: whatever it still carries
    (text, reasoning, tool-call pieces), then the error frame."""
    err = worker_error(last, job.endpoint.prompt_param)
    deltas = chunks.deltas(last) if 0 <= last.index < job.n else b""
    return deltas + openai_error_frame(err.message, stream_error_code(err, last))


# --- models ---------------------------------------------------------------------------


async def list_models(request: Request) -> Response:
    """``GET /v1/models``: every configured model under its canonical name."""
    return Response(fmt.model_list_body(engine_of(request).models()), media_type=JSON_MEDIA_TYPE)


async def retrieve_model(request: Request) -> Response:
    """``GET /v1/models/{model}``: one model object (an alias answers with its
    canonical model), or 404 ``model_not_found``."""
    name = request.path_params.get("model", "")
    engine = engine_of(request)
    try:
        canonical = engine.resolve(name)
        info = next((m for m in engine.models() if m.name == canonical), None)
        if info is None:
            raise model_not_found(name)
    except APIError as err:
        return openai_error_response(err)
    return Response(fmt.model_body(info), media_type=JSON_MEDIA_TYPE)
