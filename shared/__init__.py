"""Code shared by the gateway and the worker: the wire contract, its codec,
ZeroMQ socket helpers, configuration and logging. Nothing here imports MLX."""
