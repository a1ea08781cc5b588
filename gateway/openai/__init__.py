"""The OpenAI chat and completions front-end (``/v1/chat/completions``, ``/v1/completions``, ``/v1/models``)."""
