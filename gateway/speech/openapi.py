"""The text-to-speech front-end's part of the OpenAPI document: ``POST
/v1/audio/speech`` and ``GET /v1/audio/voices``, and the types they are
generated from.

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any

from gateway.frontend.openapi import JSON, OPENAI_ERRORS, PathBuilder, json_text
from gateway.frontend.sse import MEDIA_TYPE as SSE_MEDIA_TYPE
from gateway.speech import routes as speech_routes
from gateway.speech.schema import SpeechBody

BODIES: dict[str, Any] = {"speech_request": SpeechBody}
"""The request body the route decodes, by its key in the document's types."""

ANSWERS: dict[str, Any] = {
    "voice_list": speech_routes.VoiceList,
    "speech_audio_delta": speech_routes.SpeechAudioDelta,
    "speech_audio_done": speech_routes.SpeechAudioDone,
}
"""The answers the routes encode (the voice list, the SSE events' data), by key."""

DECODED = frozenset(BODIES)
"""The keys of this part's types that the server decodes."""


def paths(b: PathBuilder) -> dict[str, Any]:
    """``POST /v1/audio/speech`` (audio of each format, or SSE with
    ``stream_format: "sse"``) and ``GET /v1/audio/voices``."""
    audio = {"type": "string", "contentEncoding": "binary"}
    content: dict[str, Any] = {media: {"schema": audio} for media in speech_routes.MEDIA_TYPES.values()}
    payload = {"anyOf": [b.refs["speech_audio_delta"], b.refs["speech_audio_done"], b.refs["openai_error"]]}
    content[SSE_MEDIA_TYPE] = {"schema": b.sse_event(None, json_text(payload))}
    example = {"model": b.model, "input": "Good morning.", "voice": "af_heart", "response_format": "wav"}
    return {
        "/v1/audio/speech": {
            "post": {
                "operationId": "createSpeech",
                "summary": "Text to speech (OpenAI); needs a speech model",
                "tags": ["OpenAI"],
                "requestBody": {
                    "required": True,
                    "content": {
                        JSON: {
                            "schema": b.refs["speech_request"],
                            "examples": {
                                "whole": {"summary": "A wav file", "value": example},
                                "streamed": {
                                    "summary": "Audio as it is synthesised",
                                    "value": {**example, "stream_format": "audio"},
                                },
                            },
                        }
                    },
                },
                "responses": {
                    "200": {
                        "description": "The audio in `response_format` (whole, or streamed with "
                        "`stream_format: audio`), or with `stream_format: sse` `speech.audio.delta` "
                        "events and a last `speech.audio.done`",
                        "content": content,
                    },
                    **b.error_responses(OPENAI_ERRORS, False),
                },
            }
        },
        "/v1/audio/voices": {
            "get": {
                "operationId": "listVoices",
                "summary": "The voices of the speech models (`?model=` for one)",
                "tags": ["OpenAI"],
                "parameters": [
                    {
                        "name": "model",
                        "in": "query",
                        "required": False,
                        "description": "A speech model's name or alias",
                        "schema": {"type": "string", "minLength": 1},
                    }
                ],
                "responses": {
                    **b.ok("The voices, as `audio.voice` objects with their `model`", b.refs["voice_list"]),
                    **b.error_responses({s: OPENAI_ERRORS[s] for s in (400, 401, 404)}, False),
                },
            }
        },
    }
