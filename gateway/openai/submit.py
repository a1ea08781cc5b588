"""Submitting an OpenAI chat or completions request: the one path from a body
to a worker's request stream and the builder of its answer.

The two endpoints differ only in their :class:`Endpoint` (:data:`CHAT`,
:data:`COMPLETIONS`): the id prefix, the field a context-length error
names, the body decoder and the answer's builder. :func:`submit` decodes the
body, resolves the model, checks its limits (``n``) and submits, giving an
:class:`OpenAIJob`; :func:`builder_of` gives the job's answer builder. Runs
on the gateway's event loop; reaches the workers only through
:class:`~gateway.core.backend.ModelBackend`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Union

from starlette.requests import Request

from gateway.core.backend import RequestStream
from gateway.core.errors import APIError, worker_error
from gateway.core.ids import new_id
from gateway.frontend.dropped_tools import dropped_headers
from gateway.frontend.request_flow import backend_of
from gateway.openai.builder import ChatBuilder, CompletionBuilder
from gateway.openai.checks import (
    check_limits,
    decode_chat_request,
    decode_completion_request,
    dropped_tools,
    echoed_prompt,
)
from gateway.openai.schema import ChatCompletionRequest, CompletionRequest
from gateway.openai.tool_checks import custom_tool_names, legacy_functions
from gateway.openai.translate import include_usage, to_generate_request
from shared.protocol import GenerateRequest, RequestOutput

Builder = Union[ChatBuilder, CompletionBuilder]
"""Either endpoint's answer builder."""

OpenAIRequest = Union[ChatCompletionRequest, CompletionRequest]
"""Either endpoint's decoded request."""


@dataclass(frozen=True)
class Endpoint:
    """What differs between chat and completions: the id prefix, the field a
    context-length error names, the body decoder and the builder of the
    answer."""

    id_prefix: str
    prompt_param: str
    decode: Callable[[bytes], OpenAIRequest]
    builder: Callable[..., Builder]


def _chat_builder(
    request: ChatCompletionRequest, generate: GenerateRequest, reasoning_field: str, **common: Any
) -> Builder:
    """The chat answer's builder."""
    return ChatBuilder(
        **common,
        reasoning_field=reasoning_field,
        legacy_functions=legacy_functions(request),
        custom_tools=custom_tool_names(request),
    )


def _completion_builder(
    request: CompletionRequest, generate: GenerateRequest, reasoning_field: str, **common: Any
) -> Builder:
    """The completions answer's builder (with ``best_of``, the answer
    returns the best ``n`` of the generated candidates)."""
    return CompletionBuilder(
        **common,
        alternatives=generate.sampling.top_logprobs,
        echo=echoed_prompt(request),
        returned=request.n or 1,
        keep_logprobs=request.logprobs is not None,
    )


CHAT = Endpoint(id_prefix="chatcmpl-", prompt_param="messages", decode=decode_chat_request, builder=_chat_builder)
"""``POST /v1/chat/completions``."""

COMPLETIONS = Endpoint(
    id_prefix="cmpl-", prompt_param="prompt", decode=decode_completion_request, builder=_completion_builder
)
"""``POST /v1/completions``."""


@dataclass(frozen=True)
class OpenAIJob:
    """One admitted request: the decoded body, what was submitted, the
    canonical model, the worker's request stream, the headers every answer
    carries and its endpoint."""

    request: OpenAIRequest
    generate: GenerateRequest
    model: str
    stream: RequestStream
    headers: dict[str, str]
    endpoint: Endpoint

    @property
    def request_id(self) -> str:
        """The answer's id (also the worker's request id)."""
        return self.generate.request_id

    def error_of(self, output: RequestOutput) -> APIError:
        """The client error for an ``error``/``abort`` output (a
        context-length error names the endpoint's prompt field)."""
        return worker_error(output, self.endpoint.prompt_param)


async def submit(request: Request, endpoint: Endpoint) -> OpenAIJob:
    """Decode the body, resolve the model, check its limits and submit.

    Raises:
        APIError: 400 invalid body or ``n`` above the model's limit, 404
        unknown model, 503 worker not ready or overloaded.
    """
    req = endpoint.decode(await request.body())
    backend = backend_of(request)
    model = backend.resolve(req.model)
    check_limits(req, model, backend.limits(model))
    generate = to_generate_request(req, new_id(endpoint.id_prefix))
    stream = await backend.submit(model, generate)
    dropped = dropped_tools(req) if isinstance(req, ChatCompletionRequest) else []
    return OpenAIJob(req, generate, model, stream, dropped_headers(dropped, request.url.path), endpoint)


def builder_of(job: OpenAIJob, reasoning_field: str) -> Builder:
    """The builder of ``job``'s answer (chat reasoning under ``reasoning_field``)."""
    generate = job.generate
    return job.endpoint.builder(
        job.request,
        generate,
        reasoning_field,
        request_id=generate.request_id,
        created=int(time.time()),
        model=job.model,
        include_usage=include_usage(job.request),
        error_of=job.error_of,
        n=generate.n,
        logprobs=generate.sampling.logprobs,
    )
