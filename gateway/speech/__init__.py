"""OpenAI's text-to-speech front-end: ``POST /v1/audio/speech`` and ``GET /v1/audio/voices``.

Belongs here: the request body (:mod:`~gateway.speech.schema`) and the
routes (:mod:`~gateway.speech.routes`), which submit a
:class:`~shared.protocol.SpeechRequest` to a speech worker and answer audio,
an audio stream or Server-Sent Events.

Its routes' part of the OpenAPI document: :mod:`~gateway.speech.openapi`.

Imports: :mod:`gateway.core`, :mod:`gateway.frontend`, :mod:`shared`;
never MLX. Runs on the gateway's event loop.
"""
