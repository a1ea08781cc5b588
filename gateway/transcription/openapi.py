"""The speech-to-text front-end's part of the OpenAPI document: ``POST
/v1/audio/transcriptions`` and ``POST /v1/audio/translations`` (a multipart
form in; the answers are plain objects, described inline).

Assembled with the other parts by :mod:`gateway.openapi_document`.
"""

from __future__ import annotations

from typing import Any

from gateway.frontend.openapi import JSON, OPENAI_ERRORS, PathBuilder
from gateway.frontend.sse import MEDIA_TYPE as SSE_MEDIA_TYPE


def paths(b: PathBuilder) -> dict[str, Any]:
    """``/v1/audio/transcriptions`` and ``/v1/audio/translations``: a
    multipart form in, JSON, plain text or (transcriptions) an SSE stream
    out (:mod:`gateway.transcription`)."""
    number = {"type": "number"}
    segment = {
        "type": "object",
        "required": [
            "id",
            "seek",
            "start",
            "end",
            "text",
            "tokens",
            "temperature",
            "avg_logprob",
            "compression_ratio",
            "no_speech_prob",
        ],
        "properties": {
            "id": {"type": "integer"},
            "seek": {"type": "integer"},
            "start": number,
            "end": number,
            "text": {"type": "string"},
            "tokens": {"type": "array", "items": {"type": "integer"}},
            "temperature": number,
            "avg_logprob": number,
            "compression_ratio": number,
            "no_speech_prob": number,
        },
    }
    word = {
        "type": "object",
        "required": ["word", "start", "end"],
        "properties": {"word": {"type": "string"}, "start": number, "end": number},
    }
    usage = {
        "type": "object",
        "required": ["type", "seconds"],
        "properties": {"type": {"const": "duration"}, "seconds": number},
    }
    answer = {
        "type": "object",
        "required": ["text"],
        "properties": {
            "text": {"type": "string"},
            "task": {"enum": ["transcribe", "translate"]},
            "language": {"type": "string"},
            "duration": number,
            "segments": {"type": "array", "items": segment},
            "words": {"type": "array", "items": word},
            "usage": usage,
        },
    }
    text_field = {"type": "string"}

    def form(task: str) -> dict[str, Any]:
        properties: dict[str, Any] = {
            "file": {
                "type": "string",
                "contentMediaType": "application/octet-stream",
                "description": "The audio file: WAV, FLAC, MP3, OGG Vorbis or OGG Opus",
            },
            "model": {"type": "string", "minLength": 1},
            "prompt": text_field,
            "response_format": {"enum": ["json", "text", "srt", "verbose_json", "vtt"], "default": "json"},
            "temperature": {"type": "number", "minimum": 0, "maximum": 1, "default": 0},
        }
        if task == "transcribe":
            properties["language"] = text_field
            properties["timestamp_granularities[]"] = {"type": "array", "items": {"enum": ["word", "segment"]}}
            properties["stream"] = {"type": "boolean", "default": False}
        return {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {"type": "object", "required": ["file", "model"], "properties": properties}
                }
            },
        }

    def operation(task: str, operation_id: str, summary: str) -> dict[str, Any]:
        content: dict[str, Any] = {
            JSON: {"schema": answer},
            "text/plain": {"schema": {"type": "string"}},
            "application/x-subrip": {"schema": {"type": "string"}},
            "text/vtt": {"schema": {"type": "string"}},
        }
        if task == "transcribe":
            event = {
                "type": "object",
                "required": ["type"],
                "properties": {
                    "type": {"enum": ["transcript.text.delta", "transcript.text.done"]},
                    "delta": {"type": "string"},
                    "text": {"type": "string"},
                },
            }
            content[SSE_MEDIA_TYPE] = {"schema": b.openai_stream(event)}
        return {
            "operationId": operation_id,
            "summary": summary,
            "tags": ["OpenAI"],
            "requestBody": form(task),
            "responses": {
                "200": {
                    "description": "The transcript in `response_format` (or its stream events)",
                    "content": content,
                },
                **b.error_responses(OPENAI_ERRORS, False),
            },
        }

    return {
        "/v1/audio/transcriptions": {
            "post": operation(
                "transcribe", "createTranscription", "Transcribe audio (OpenAI); needs a transcription model"
            )
        },
        "/v1/audio/translations": {
            "post": operation(
                "translate",
                "createTranslation",
                "Translate audio into English text (OpenAI); needs a multilingual transcription model",
            )
        },
    }
