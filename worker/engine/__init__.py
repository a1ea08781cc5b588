"""The worker's engine: the scheduler thread, the batch engine, the solo cache, the step plan, MLX memory."""
