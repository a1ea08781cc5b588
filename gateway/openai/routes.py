"""Starlette endpoints of the OpenAI-compatible API.

``chat_completions`` (POST /v1/chat/completions), ``completions``
(POST /v1/completions), ``list_models`` (GET /v1/models) and
``retrieve_model`` (GET /v1/models/{model:path}). They reach the workers
only through the :class:`~gateway.core.backend.ModelBackend` in
``request.app.state.backend`` and never block the event loop.

Generation flow: decode and validate the body, resolve the model, check
the model's limits (``n``), submit (all four: :mod:`gateway.openai.submit`),
then await the first output *before*
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

from starlette.requests import Request
from starlette.responses import Response

from gateway.core.errors import APIError, model_not_found
from gateway.frontend.answer_driver import answer
from gateway.frontend.error_shapes import openai_error_response
from gateway.frontend.request_flow import JSON_MEDIA_TYPE, backend_of
from gateway.openai import format as fmt
from gateway.openai.submit import CHAT, COMPLETIONS, Endpoint, builder_of, submit


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
    return await _generate(request, CHAT)


async def completions(request: Request) -> Response:
    """``POST /v1/completions``: a ``text_completion`` object, or an SSE
    stream of them when ``stream`` is true. Errors as for chat."""
    return await _generate(request, COMPLETIONS)


async def _generate(request: Request, endpoint: Endpoint) -> Response:
    """Validate, submit, and answer one generation request."""
    try:
        job = await submit(request, endpoint)
    except APIError as err:
        return openai_error_response(err)
    return await answer(
        request,
        job.stream,
        job.request_id,
        builder_of(job, _reasoning_field(request)),
        streaming=bool(job.request.stream),
        refuse=lambda output: openai_error_response(job.error_of(output)),
        body=lambda built: Response(built.body(), media_type=JSON_MEDIA_TYPE, headers=job.headers),
        headers=job.headers,
    )


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
