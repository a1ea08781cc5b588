"""Finding a model from its source and loading it.

Belongs here: sources and mlx-lm loading (:mod:`~worker.loading.loader`),
GGUF files converted to mlx-lm directories (:mod:`~worker.loading.gguf`,
:mod:`~worker.loading.gguf_convert`, :mod:`~worker.loading.gguf_tokenizer`),
content hashes of model directories (:mod:`~worker.loading.weights_digest`),
``python -m worker.loading.prepare`` (every configured model made ready
ahead of time) and ``python -m worker.loading.convert`` (conversion and
quantization through mlx-lm's and mlx-vlm's own converters, run by
``mlxd convert``).

Imports: :mod:`shared`, MLX and mlx-lm (mlx-vlm for converting vision
models); nothing else of the worker. Runs on the scheduler thread at load
(``prepare`` and ``convert``: their own processes).
"""
