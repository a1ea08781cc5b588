"""The mlxd gateway: a Starlette app that authenticates, translates the
OpenAI protocol into the wire contract, streams SSE and supervises one
worker process per model. It never imports MLX and never blocks its loop."""
