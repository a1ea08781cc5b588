"""Vision-language models (``kind = "vision"``).

Belongs here: loading through mlx-vlm and the batch engine's view of the
model (:mod:`~worker.vision.model`, scheduler thread), a request's images
prepared for the model (:mod:`~worker.vision.inputs`) and decoded within
limits (:mod:`~worker.vision.images`), both on the input thread and MLX-free.

Imports: :mod:`worker.loading`, :mod:`worker.messages`, :mod:`shared`; MLX and
mlx-vlm in :mod:`~worker.vision.model` only.
"""
