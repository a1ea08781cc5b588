"""Speech-to-text models (``kind = "transcription"``): Whisper through mlx-audio.

Belongs here: decoding an uploaded audio file into 16 kHz samples
(:mod:`~worker.transcription.audio`, numpy only, on the input thread),
loading a Whisper model in float32 (:mod:`~worker.transcription.model`),
one request's walk over its 30-second windows and the segments and words
it yields (:mod:`~worker.transcription.windows`), Whisper's timestamp
rules and the batched window decode (:mod:`~worker.transcription.decoding`),
and the transcription worker's round scheduler
(:mod:`~worker.transcription.scheduler`).

Imports: :mod:`worker.batch_loop`, :mod:`worker.messages`, :mod:`shared`, MLX and mlx-audio (only in
``model``, ``windows``, ``decoding`` and ``scheduler``, which run on the
scheduler thread); ``audio`` imports neither MLX nor mlx-audio.
"""
