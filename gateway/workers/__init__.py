"""The model workers as the gateway sees them: the pool, each model's handle, processes, requests in flight, memory."""
