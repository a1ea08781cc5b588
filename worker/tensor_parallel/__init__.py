"""Tensor parallelism: the launch over ``mlx.launch`` and the lockstep group."""
