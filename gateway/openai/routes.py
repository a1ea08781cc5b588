"""Starlette endpoints of the OpenAI-compatible API.

``chat_completions`` (POST /v1/chat/completions), ``completions``
(POST /v1/completions), ``list_models`` (GET /v1/models) and
``retrieve_model`` (GET /v1/models/{model:path}). They reach the workers
only through the :class:`~gateway.core.backend.ModelBackend` in
``request.app.state.backend`` and never block the event loop.

Generation flow: decode and validate the body, resolve the model, check
the model's limits (``n``), submit, then await the first output *before*
any header is sent, so a request the worker refuses (e.g. a prompt longer
than the context) is answered with a proper status even when ``stream`` is
true. The answer is built by :class:`~gateway.openai.builder.ChatBuilder`
or :class:`~gateway.openai.builder.CompletionBuilder` and driven by
:func:`gateway.frontend.answer_driver.answer` (shared with the other protocols): a
stream is sent as SSE chunks ending with ``data: [DONE]``; otherwise the
same builder is drained and each choice's text, reasoning and tool calls
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

import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Union

from starlette.requests import Request
from starlette.responses import Response

from gateway.core.backend import RequestStream
from gateway.core.errors import APIError, model_not_found, worker_error
from gateway.frontend.answer_driver import answer
from gateway.frontend.dropped_tools import dropped_headers
from gateway.frontend.error_shapes import openai_error_response
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, backend_of
from gateway.openai import format as fmt
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


# --- endpoint plumbing ---------------------------------------------------------


@dataclass(frozen=True)
class _Endpoint:
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


_CHAT = _Endpoint(id_prefix="chatcmpl-", prompt_param="messages", decode=decode_chat_request, builder=_chat_builder)
_COMPLETIONS = _Endpoint(
    id_prefix="cmpl-", prompt_param="prompt", decode=decode_completion_request, builder=_completion_builder
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
        req, generate, model, stream, headers = await _submit(request, endpoint)
    except APIError as err:
        return openai_error_response(err)

    def error_of(output: RequestOutput) -> APIError:
        return worker_error(output, endpoint.prompt_param)

    builder = endpoint.builder(
        req,
        generate,
        _reasoning_field(request),
        request_id=generate.request_id,
        created=int(time.time()),
        model=model,
        include_usage=include_usage(req),
        error_of=error_of,
        n=generate.n,
        logprobs=generate.sampling.logprobs,
    )
    return await answer(
        request,
        stream,
        generate.request_id,
        builder,
        streaming=bool(req.stream),
        refuse=lambda output: openai_error_response(error_of(output)),
        body=lambda built: Response(built.body(), media_type=JSON_MEDIA_TYPE, headers=headers),
        headers=headers,
    )


async def _submit(
    request: Request, endpoint: _Endpoint
) -> tuple[OpenAIRequest, GenerateRequest, str, RequestStream, dict[str, str]]:
    """Decode the body, resolve the model, check its limits and submit;
    return the request, what was submitted, the canonical model, its
    stream and the headers every answer carries.

    Raises:
        APIError: 400 invalid body or ``n`` above the model's limit, 404
        unknown model, 503 worker not ready or overloaded.
    """
    req = endpoint.decode(await request.body())
    backend = backend_of(request)
    model = backend.resolve(req.model)
    check_limits(req, model, backend.limits(model))
    generate = to_generate_request(req, endpoint.id_prefix + uuid.uuid4().hex)
    stream = await backend.submit(model, generate)
    dropped = dropped_tools(req) if isinstance(req, ChatCompletionRequest) else []
    return req, generate, model, stream, dropped_headers(dropped, request.url.path)


# --- models ---------------------------------------------------------------------------


async def list_models(request: Request) -> Response:
    """``GET /v1/models``: every configured model under its canonical name."""
    return Response(fmt.model_list_body(backend_of(request).models()), media_type=JSON_MEDIA_TYPE)


async def retrieve_model(request: Request) -> Response:
    """``GET /v1/models/{model}``: one model object (an alias answers with its
    canonical model), or 404 ``model_not_found``."""
    name = request.path_params.get("model", "")
    backend = backend_of(request)
    try:
        canonical = backend.resolve(name)
        info = next((m for m in backend.models() if m.name == canonical), None)
        if info is None:
            raise model_not_found(name)
    except APIError as err:
        return openai_error_response(err)
    return Response(fmt.model_body(info), media_type=JSON_MEDIA_TYPE)
