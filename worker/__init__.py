"""The mlxd worker process: owns one model and does all MLX work on its
scheduler thread.

The top of the package is the process and its contracts:
:mod:`worker.__main__` and :mod:`worker.main` (the threads and sockets),
:mod:`worker.model_setup` (everything built around the model, from the
config), :mod:`worker.kind_requests` (the input thread's requests of
the kinds that do not generate): no package imports these.
:mod:`worker.messages` (what the threads hand each other),
:mod:`worker.faults` (fault injection) and :mod:`worker.parent_watch` (the
gateway watchdog) may be imported by any package.

The packages, each importing only those listed before it (and :mod:`shared`):

- :mod:`worker.parsers`: model output text into content, reasoning, tool calls.
- :mod:`worker.sampling`: samplers, logits processors, constrained decoding.
- :mod:`worker.speculation`: speculative decoding.
- :mod:`worker.caches`: the prefix cache, its disk tier, cache profiles.
- :mod:`worker.loading`: finding and loading models.
- :mod:`worker.batch_loop`: the scheduler loop of the kinds that do not
  generate.
- :mod:`worker.vision`, :mod:`worker.embeddings`, :mod:`worker.rerank`,
  :mod:`worker.speech`, :mod:`worker.transcription`: the other model kinds.
- :mod:`worker.prompting` and :mod:`worker.output`: the input and output
  threads, which never import MLX.
- :mod:`worker.engine`: the scheduler thread and the batch engine.
- :mod:`worker.tensor_parallel`: one model over an MLX distributed group.

The worker never imports :mod:`gateway`. ``tests/test_layering.py`` holds
these rules.
"""
