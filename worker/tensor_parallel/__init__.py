"""Tensor parallelism: one model over several processes of an MLX distributed group.

Belongs here: starting the group through ``mlx.launch``
(:mod:`~worker.tensor_parallel.launch`, its own small process) and the group
in lockstep: joining, sharding, sharing rank 0's step plan
(:mod:`~worker.tensor_parallel.lockstep`, scheduler thread).

Imports: :mod:`worker.engine` (the step plan and engine streams),
:mod:`worker.messages`, :mod:`worker.parent_watch`, :mod:`shared`, MLX.
"""
