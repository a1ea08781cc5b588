"""The OpenAI embeddings front-end (``POST /v1/embeddings``)."""
