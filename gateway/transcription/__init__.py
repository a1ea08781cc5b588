"""OpenAI's speech-to-text endpoints: ``POST /v1/audio/transcriptions`` and
``POST /v1/audio/translations``, served by ``transcription`` workers.

Belongs here: the multipart form and its checks (:mod:`~gateway.transcription.schema`),
the answer formats json / text / srt / vtt / verbose_json and the
``transcript.text.*`` stream events (:mod:`~gateway.transcription.format`),
and the handlers (:mod:`~gateway.transcription.routes`).

Its routes' part of the OpenAPI document: :mod:`~gateway.transcription.openapi`.

Imports: :mod:`gateway.core`, :mod:`gateway.frontend`, :mod:`shared`.
Runs on the gateway's event loop; never decodes audio (the worker does).
"""
