"""The OpenAI Responses front-end (``POST /v1/responses``), built on the OpenAI chat pieces."""
