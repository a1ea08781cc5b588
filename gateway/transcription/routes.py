"""``POST /v1/audio/transcriptions`` and ``POST /v1/audio/translations``.

Reads the multipart form (Starlette's parser; the form, and any spooled
file part with it, is closed before the handler returns, so no temporary
file outlives the request), checks it (:mod:`gateway.transcription.schema`),
submits one :class:`~shared.protocol.TranscribeRequest` to the model's
worker (the pool refuses a model of another kind with a 400 naming both
kinds), and answers:

- not streamed: the whole transcript in the asked format
  (:mod:`gateway.transcription.format`) once the worker finished it;
- ``stream=true``: SSE ``data:`` frames, a ``transcript.text.delta`` event
  for each decoded window with text, then ``transcript.text.done``; an
  error after the stream started is an OpenAI error frame.

A worker's refusal (an empty, corrupt, unknown-format or too long file, a
language the model does not know, a translation asked of an English-only
model) is a 400 in OpenAI's error shape with ``param`` ``file`` where the
file is at fault. A client that leaves aborts the request in the worker.

Runs on the gateway's event loop; never decodes audio.
"""

from __future__ import annotations

from typing import AsyncIterator

from starlette.requests import Request
from starlette.responses import Response

from gateway.core.errors import APIError, bad_request, worker_error
from gateway.core.ids import new_id
from gateway.frontend import sse
from gateway.frontend.error_shapes import openai_error_frame, openai_error_response
from gateway.frontend.request_flow import backend_of, next_output, respond_after_first_output
from gateway.transcription.format import delta_event, done_event, render
from gateway.transcription.schema import AudioForm, check_form, fields_of, model_of
from shared.protocol import RequestOutput, TranscribeRequest

MAX_FORM_FIELDS = 64
"""Most form fields (``file`` included) one request may carry."""


async def create_transcription(request: Request) -> Response:
    """``POST /v1/audio/transcriptions``."""
    return await _serve(request, "transcribe")


async def create_translation(request: Request) -> Response:
    """``POST /v1/audio/translations``: English text of speech in any language."""
    return await _serve(request, "translate")


async def _serve(request: Request, task: str) -> Response:
    """Both endpoints (see the module docstring)."""
    backend = backend_of(request)
    try:
        content_type = request.headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data"):
            raise bad_request("the request body must be multipart/form-data with a 'file' part", param="file")
        async with request.form(max_files=2, max_fields=MAX_FORM_FIELDS) as form:
            values = fields_of(form)
            model = backend.resolve(model_of(values))
            body = await check_form(values, task, model, backend.limits(model).max_audio_bytes)
        job = TranscribeRequest(
            request_id=new_id("stt-"),
            audio=body.audio,
            task=task,  # type: ignore[arg-type]
            language=body.language,
            prompt=body.prompt,
            temperature=body.temperature,
            words="word" in body.granularities,
        )
        stream = await backend.submit(model, job)
    except APIError as err:
        return openai_error_response(err)
    except (ValueError, KeyError) as exc:  # a malformed multipart body
        return openai_error_response(bad_request(f"the multipart form could not be read: {exc}", param="file"))

    async def collect(first: RequestOutput) -> tuple[RequestOutput] | RequestOutput:
        output = first
        while output.finish_reason is None:
            output = await next_output(stream, job.request_id)
        return output if output.ends_request else (output,)

    return await respond_after_first_output(
        request,
        stream,
        job.request_id,
        refuse=lambda output: openai_error_response(worker_error(output, "file")),
        streamed=(lambda first: _frames(first, stream, job.request_id)) if body.stream else None,
        collect=collect,
        answer=lambda result: _answer(body, result[0]),
    )


def _answer(body: AudioForm, output: RequestOutput) -> Response:
    """The whole answer of a finished request."""
    if output.transcript is None:
        return openai_error_response(APIError(500, "The model worker returned no transcript", code="internal_error"))
    content, media_type = render(output.transcript, body.response_format, body.task, body.granularities)
    return Response(content, media_type=media_type)


async def _frames(first: RequestOutput, stream, request_id: str) -> AsyncIterator[bytes]:
    """SSE frames of a streamed transcription, from its first output on."""
    output = first
    while True:
        if output.ends_request:
            err = worker_error(output, "file")
            yield openai_error_frame(err.message, err.code, err.param) + sse.DONE
            return
        if output.finish_reason is not None:
            text = output.transcript.text if output.transcript is not None else ""
            yield sse.json_frame(done_event(text)) + sse.DONE
            return
        if output.text:
            yield sse.json_frame(delta_event(output.text))
        output = await next_output(stream, request_id)
