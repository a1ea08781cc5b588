"""The worker's input thread: requests to prompts (chat templates, model formats), MLX-free."""
