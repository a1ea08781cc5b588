"""Vision-language models (``kind = "vision"``).

Belongs here: loading through mlx-vlm and the batch engine's view of the
model (:mod:`~worker.vision.model`, scheduler thread), a request's images
prepared for the model (:mod:`~worker.vision.inputs`) and decoded within
limits (:mod:`~worker.vision.images`; videos sampled and laid out,
:mod:`~worker.vision.video`; audio clips decoded and laid out,
:mod:`~worker.vision.audio`), all on the input thread and calling no MLX.

Imports: :mod:`worker.loading`, :mod:`worker.messages`, :mod:`shared`; MLX and
mlx-vlm's models in :mod:`~worker.vision.model` only; the input-thread
modules import mlx-vlm's NumPy frame sampler and mlx-audio's NumPy reader
and resampler (deferred, inside the functions that use them).
"""
