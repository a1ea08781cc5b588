"""The worker's output thread: detokenization, stop strings, parsing, terminal events; MLX-free."""
