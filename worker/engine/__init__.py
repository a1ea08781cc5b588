"""The worker's engine: the scheduler thread, the only thread that touches MLX.

Belongs here: the scheduler loop (:mod:`~worker.engine.scheduler`), its
admission of requests (:mod:`~worker.engine.admission`), mlx-lm's
batch engine with mlxd's decode step (:mod:`~worker.engine.batch_engine`),
the one-sequence engine for caches that cannot batch
(:mod:`~worker.engine.solo_cache`), prompt checkpoints
(:mod:`~worker.engine.checkpoints`), the step plan a tensor-parallel group
shares (:mod:`~worker.engine.step_plan`), MLX's memory limits
(:mod:`~worker.engine.mlx_memory`).

Imports: :mod:`worker.sampling`, :mod:`worker.speculation`,
:mod:`worker.caches`, the worker's contracts (:mod:`worker.messages`,
:mod:`worker.faults`), :mod:`shared`, MLX and mlx-lm. Runs on the scheduler
thread (constructors on the thread that starts it).
"""
