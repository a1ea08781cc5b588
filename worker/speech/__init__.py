"""Speech models (``kind = "speech"``): text to speech.

Belongs here: loading a text-to-speech model through mlx-audio and
synthesising one phoneme chunk (:mod:`~worker.speech.model`), text to
phoneme chunks (:mod:`~worker.speech.text`, input thread), encoding audio
into the response formats (:mod:`~worker.speech.encode`, output thread) and
the speech worker's scheduler thread, which interleaves requests chunk by
chunk (:mod:`~worker.speech.scheduler`).

Imports: :mod:`worker.loading`, :mod:`worker.batch_loop`, :mod:`worker.messages`, :mod:`shared`, MLX
and mlx-audio (the optional ``speech`` extra; imported inside functions).
MLX runs on the speech scheduler thread only; ``text`` and ``encode`` never
touch it.
"""
