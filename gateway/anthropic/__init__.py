"""The Anthropic Messages front-end (``/v1/messages``, ``/v1/messages/count_tokens``)."""
