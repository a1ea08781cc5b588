"""Vision-language models (``kind = "vision"``).

Belongs here: loading through mlx-vlm and the batch engine's view of the
model (:mod:`~worker.vision.model`, scheduler thread; the caches a few
families' language models see through a per-call view,
:mod:`~worker.vision.cache_view`), a request's media
prepared for the model (:mod:`~worker.vision.inputs`): run through the
model's own processor (:mod:`~worker.vision.processing`), placed where
the chat template writes them (:mod:`~worker.vision.markup`), decoded
within limits (:mod:`~worker.vision.images`; videos sampled,
:mod:`~worker.vision.video`; audio clips decoded,
:mod:`~worker.vision.audio`), all on the input thread and calling no MLX
(the processor's own MLX conversion is left out there).

Imports: :mod:`worker.loading`, :mod:`worker.messages`, :mod:`shared`; MLX and
mlx-vlm's models in :mod:`~worker.vision.model` only; the input-thread
modules import mlx-vlm's NumPy frame sampler and mlx-audio's NumPy reader
and resampler (deferred, inside the functions that use them).
"""
